"""Device diagnostics for the nvFuser executor (issue 4), one batch per GPU session.

    source .device/setup.sh && PYTHONPATH=$PWD python3 benchmarks/nvfuser_probe.py --out DIR [--only NAME ...]

Probes (each guarded: one failing never loses the others; results appended to
``DIR/nvfuser-probe.jsonl`` as they finish):

* ``outer``   - nvFuser alone: ``arange[None, :] - arange[:, None] <= 0`` (the causal mask)
  built from one input broadcast along two axes vs from two inputs; compared with torch.
* ``verify``  - llama2 / llama2_ckpt (small, f32) fwd+bwd with every nvFuser segment
  re-run through torch (``NvFuserExecutor(verify=True)``), per fusion strategy.
* ``adam``    - Adam.step over 200 x 65,536 f32 (bench.py's configuration) per strategy and
  region cap: first call (compile) and steady step time, in a subprocess each.
* ``llama8``  - the 8-layer decoder at full size under nvFuser (memory strategy): outputs and
  gradients against eager; on failure re-run with CUDA_LAUNCH_BLOCKING=1 to name the kernel.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _log(out: Path, record: dict) -> None:
    print(json.dumps(record)[:2000], flush=True)
    with open(out / "nvfuser-probe.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


def probe_outer(out: Path) -> None:
    import torch
    from nvfuser_direct import DataType, FusionDefinition

    n = 16
    pos = torch.arange(n, device="cuda")
    want = (pos[None, :] - pos[:, None]) <= 0
    for variant in ("one input", "two inputs"):
        fd = FusionDefinition()
        with fd:
            a = fd.define_tensor(sizes=[n], strides=[1], dtype=DataType.Int, static_sizes=True)
            b = a if variant == "one input" else fd.define_tensor(sizes=[n], strides=[1], dtype=DataType.Int,
                                                                  static_sizes=True)
            row = fd.ops.broadcast_in_dim(a, [1, n], [1])
            col = fd.ops.broadcast_in_dim(b, [n, 1], [0])
            fd.add_output(fd.ops.le(fd.ops.sub(row, col), fd.define_scalar(0, DataType.Int)))
        ins = [pos] if variant == "one input" else [pos, pos]
        got = fd.execute(ins)[0]
        _log(out, {"probe": "outer", "variant": variant, "correct": bool(torch.equal(got, want)),
                   "wrong_elements": int((got != want).sum())})


VARIANTS = {"default": {}, "contiguous": {"contiguous_inputs": True}, "no-index-math": {"index_math": False},
            "both": {"contiguous_inputs": True, "index_math": False}}


def probe_verify(out: Path) -> None:
    """Per executor variant: segments that disagree with torch, and the whole run against eager."""
    from examples.workloads import WORKLOADS
    from trace_lab.run import compare
    from trace_lab.executors.nvfuser import NvFuserExecutor
    from trace_lab.run.jit import jit

    for variant, options in VARIANTS.items():
        for name, strategy in (("llama2", "memory"), ("llama8", "memory"), ("llama2_ckpt", "horizontal")):
            try:
                ref, (xr,) = WORKLOADS[name].make("cuda", "small")
                o = ref(xr)
                o.float().sum().backward()
                eager = compare.snapshot(o, ref, (xr,))
                model, (x,) = WORKLOADS[name].make("cuda", "small")
                jfn = jit(model, fusion=strategy, executor="nvfuser")
                ex = jfn._executors["nvfuser"] = NvFuserExecutor(verify=True, **options)
                o = jfn(x)
                o.float().sum().backward()
                cmp = compare.compare_runs(compare.snapshot(o, model, (x,)), eager)
                mm = ex.mismatches
                _log(out, {"probe": "verify", "variant": variant, "workload": name, "strategy": strategy,
                           "matches_eager": cmp.ok, "problems": cmp.problems[:3], "mismatching_segments": len(mm),
                           "first": [{k: v for k, v in m.items() if k != "definition"} for m in mm[:2]],
                           "definition": mm[0]["definition"][:5000] if mm else None})
            except Exception as e:  # noqa: BLE001
                _log(out, {"probe": "verify", "variant": variant, "workload": name,
                           "crashed": f"{type(e).__name__}: {e}"[:600], "traceback": traceback.format_exc()[-1500:]})


def probe_adam(out: Path) -> None:
    configs = [("dataflow", None), ("memory", None), ("horizontal", 350), ("horizontal", 1400), ("horizontal", 3500)]
    for strategy, cap in configs:
        cfg = {"bench": "adam", "iters": 20, "system": "trace_lab", "strategy": strategy, "cache": True}
        if cap:
            cfg["extra"] = {"max_region_ops": cap}
        started = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), "_one", json.dumps(cfg)],
                               capture_output=True, text=True, timeout=90, cwd=ROOT,
                               env=dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1"))
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            r = json.loads(line[-1][7:]) if line else {"error": (p.stderr or p.stdout)[-800:]}
        except subprocess.TimeoutExpired:
            r = {"error": "timed out after 90 s"}
        r.pop("iter_ms", None)
        _log(out, {"probe": "adam", "strategy": strategy, "max_region_ops": cap,
                   "wall_s": round(time.perf_counter() - started, 1), **r})


def _llama8_child() -> None:
    import torch

    from examples.workloads import WORKLOADS
    from trace_lab.run import compare
    from trace_lab.run.jit import jit

    wl = WORKLOADS["llama8"]
    model, (x,) = wl.make("cuda", "full")
    ref, (xr,) = wl.make("cuda", "full")
    out = ref(xr)
    out.float().sum().backward()
    eager = compare.snapshot(out, ref, (xr,))
    jfn = jit(model, fusion="memory", executor="nvfuser")
    from trace_lab.executors.nvfuser import NvFuserExecutor

    jfn._executors["nvfuser"] = NvFuserExecutor(**VARIANTS[os.environ.get("PROBE_VARIANT", "default")])
    t0 = time.perf_counter()
    got_out = jfn(x)
    got_out.float().sum().backward()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    cmp = compare.compare_runs(compare.snapshot(got_out, model, (x,)), eager)
    regions = [r for p in jfn.programs for part in p.parts for r in part.compiled.region_table()]
    print("RESULT " + json.dumps({"ok": cmp.ok, "problems": cmp.problems[:4], "first_iter_s": round(first, 2),
                                  "regions": len(regions),
                                  "fallbacks": [s["fallback"] for r in regions for s in r["segments"]
                                                if "fallback" in s][:4]}), flush=True)


def probe_llama8(out: Path) -> None:
    for variant in ("default", "both"):
        _llama8_variant(out, variant)


def _llama8_variant(out: Path, variant: str) -> None:
    for blocking in ("0", "1"):
        env = dict(os.environ, CUDA_LAUNCH_BLOCKING=blocking, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1",
                   PROBE_VARIANT=variant)
        try:
            p = subprocess.run([sys.executable, __file__, "_llama8"], capture_output=True, text=True, timeout=110,
                               cwd=ROOT, env=env)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            r = json.loads(line[-1][7:]) if line else {"ok": False, "error": (p.stderr or p.stdout)[-3000:]}
        except subprocess.TimeoutExpired:
            r = {"ok": False, "error": "timed out after 110 s"}
        _log(out, {"probe": "llama8", "variant": variant, "CUDA_LAUNCH_BLOCKING": blocking, **r})
        if r.get("ok") or "error" not in r:
            return


PROBES = {"outer": probe_outer, "verify": probe_verify, "adam": probe_adam, "llama8": probe_llama8}


def main(argv=None) -> int:
    if argv is None and sys.argv[1:2] == ["_llama8"]:
        _llama8_child()
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", nargs="*", default=list(PROBES), choices=list(PROBES))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only:
        started = time.perf_counter()
        try:
            PROBES[name](args.out)
        except Exception as e:  # noqa: BLE001 - a diagnostic run records the failure and goes on
            _log(args.out, {"probe": name, "crashed": f"{type(e).__name__}: {e}"[:1000],
                            "traceback": traceback.format_exc()[-3000:]})
        print(f"-- {name}: {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
