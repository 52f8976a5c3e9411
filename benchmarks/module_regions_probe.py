"""Probe (issue 27 item 3): would ``fusion="layers"`` compile fewer regions, and so shorten the first call, if each
module outside the repeated layers (a Llama stack's final ``norm``) were one region too?

    python3 benchmarks/module_regions_probe.py [--layers 8] [--repeat 2]          # GPU machine: Inductor on CUDA

Today the ``layers`` strategy (trace_lab/passes/layers.py) groups the ops outside every numbered layer as
``dataflow`` groups them: the final RMSNorm's backward is two regions there (its weight gradient, a sum over
batch and time, and its input gradient, sums over features), siblings with no edge between them, so two
compiles. The ``modules`` mode treats each such top-level module as one more "layer" (the probe patches
``layers.layer_of``; no option of the lab does this), so its ops join one region where no cycle closes.

Each mode runs in a fresh process with Inductor's and Triton's caches empty, modes interleaved: the first call
(forward + backward), the fused regions and the compiled ones per direction, and whether the output and the
gradients match eager's (``run/compare.py``'s tolerance)."""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cold_run import run_cold  # noqa: E402

MODES = ("today", "modules")


def one(mode: str, layers: int) -> dict:
    sys.path.insert(0, os.getcwd())
    import torch

    import trace_lab
    from examples import workloads
    from trace_lab.passes import layers as layers_pass
    from trace_lab.run.compare import _close

    if mode == "modules":
        numbered = layers_pass.layer_of

        def layer_or_module(node):  # a top-level module outside the layers (L['self'].norm) counts as one
            key = numbered(node)
            path = layers_pass._module_path(node)
            if key is not None or not path:
                return key
            parts = path.split(".")
            return ".".join(parts[:2]) if len(parts) >= 2 else None
        layers_pass.layer_of = layer_or_module
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    size = "full" if dev == "cuda" else "small"
    model, (x,) = workloads.make_llama(layers)(dev, size)
    ref, _ = workloads.make_llama(layers)(dev, size)
    start = time.perf_counter()
    jfn = trace_lab.jit(model, fusion="layers", executor="inductor")
    out = jfn(x)
    out.float().sum().backward()
    if dev == "cuda":
        torch.cuda.synchronize()
    first = time.perf_counter() - start
    expected = ref(x)
    expected.float().sum().backward()
    ok = _close(out, expected, 1.0) is None and all(
        _close(p.grad, q.grad, 1.0) is None for p, q in zip(model.parameters(), ref.parameters()))
    parts = {}
    for record in jfn.compilations():
        regions = list((getattr(record.compiled, "regions", None) or {}).values())
        parts[record.label] = {"regions": len(regions), "compiled": sum(not r.cache_hit for r in regions)}
    return {"mode": mode, "device": dev, "first_call_s": round(first, 2), "matches_eager": ok, "parts": parts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2, help="fresh processes per mode (default 2)")
    ap.add_argument("--_one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._one:
        print("RESULT " + json.dumps(one(args._one, args.layers)), flush=True)
        return
    print(f"llama {args.layers} layers, fusion=layers, executor=inductor; first call = forward + backward; "
          f"each run a fresh process, caches empty, modes interleaved, {args.repeat} rounds", flush=True)
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for round_ in range(args.repeat):
        for mode in MODES:
            r, why = run_cold([__file__, "--_one", mode, "--layers", str(args.layers)])
            if r is None:
                print(f"  round {round_ + 1} {mode:<8} failed: {why}")
                continue
            parts = "; ".join(f"{k}: {v['regions']} regions, {v['compiled']} compiled" for k, v in r["parts"].items())
            print(f"  round {round_ + 1} {mode:<8} {r['first_call_s']:7.2f} s  matches eager: {r['matches_eager']}  "
                  f"({parts})", flush=True)
            if r["matches_eager"]:
                times[mode].append(r["first_call_s"])
    for mode, ts in times.items():
        if ts:
            print(f"{mode:<8} median {statistics.median(ts):.2f} s ({min(ts):.2f}-{max(ts):.2f}, {len(ts)} runs)")


if __name__ == "__main__":
    main()
