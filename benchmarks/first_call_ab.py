"""Diagnostic for issue 27 item 3: one change's effect on the first call (forward + backward, llama, full size on a GPU, small on a CPU),
A/B in fresh processes with cold Inductor and Triton caches, alternating A and B.

    python3 benchmarks/first_call_ab.py --env TORCH_WARM_POOL=0 TORCH_WARM_POOL=1 [--rounds 2] [--executor inductor]
    python3 benchmarks/first_call_ab.py --options cover_regions=True cover_regions=False --fusion layers --rounds 3

Each ``--env`` value is one variant (VAR=VALUE, set in its processes); each ``--options`` value is one variant of
jit options (name=value[,name=value...], values read as Python literals; ``-`` for none). Prints every run and the
median per variant, with the wall time of each part's compile from the CompilationRecords (how much of the call is
compiling)."""
import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import torch, trace_lab
from examples import workloads
dev = "cuda" if torch.cuda.is_available() else "cpu"
size = "full" if dev == "cuda" else "small"
model, (x,) = workloads.make_llama(int(sys.argv[3]))(dev, size)
jfn = trace_lab.jit(model, fusion=sys.argv[1], executor=sys.argv[2], **json.loads(sys.argv[4]))
t0 = time.perf_counter()
out = jfn(x)
fw = time.perf_counter() - t0
out.float().sum().backward()
if dev == "cuda":
    torch.cuda.synchronize()
first = time.perf_counter() - t0
ref_model, _ = workloads.make_llama(int(sys.argv[3]))(dev, size)
ref = ref_model(x)
ok = ((out.float() - ref.float()).norm() / ref.float().norm()).item() < 2e-2  # relative norm, bf16
parts = {r.kind: round(r.timings()["wall"], 2) for r in jfn.compilations()}
print("RESULT " + json.dumps({"first_s": first, "forward_s": fw, "parts_wall_s": parts, "matches_eager": bool(ok)}))
"""


def _options(text: str) -> dict:
    """'cover_regions=False,fusion_cache=True' -> {'cover_regions': False, 'fusion_cache': True}; '-' -> {}."""
    if text.strip() in ("", "-"):
        return {}
    pairs = [item.split("=", 1) for item in text.split(",")]
    if any(len(p) != 2 for p in pairs):
        raise SystemExit(f"--options: give name=value[,name=value...] per variant, got {text!r}")
    return {k.strip(): ast.literal_eval(v.strip()) for k, v in pairs}


def main():
    ap = argparse.ArgumentParser()
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--env", nargs="+", help="variants, VAR=VALUE each")
    what.add_argument("--options", nargs="+", help="variants, jit options name=value[,name=value...] each ('-': none)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--fusion", default="dataflow")
    ap.add_argument("--executor", default="inductor")
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args()
    variants = args.env or args.options
    results = {v: [] for v in variants}
    for r in range(args.rounds):
        for v in variants:
            env_vars, options = (dict([v.split("=", 1)]), {}) if args.env else ({}, _options(v))
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, **env_vars, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
                           TRITON_CACHE_DIR=os.path.join(cache, "triton"))
                t0 = time.perf_counter()
                p = subprocess.run([sys.executable, "-c", CHILD, args.fusion, args.executor, str(args.layers),
                                    json.dumps(options)], env=env, capture_output=True, text=True)
                line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
                if line is None:
                    print(f"round {r} {v}: failed rc={p.returncode}\n{p.stderr[-3000:]}", flush=True)
                    continue
                res = json.loads(line[7:])
                res["process_s"] = time.perf_counter() - t0
                results[v].append(res)
                print(f"round {r} {v}: {json.dumps(res)}", flush=True)
    for v, runs in results.items():
        if runs:
            f = [x["first_s"] for x in runs]
            print(f"{v}: first call median {statistics.median(f):.2f} s (range {min(f):.2f}-{max(f):.2f}, {len(f)} runs)")


if __name__ == "__main__":
    main()
