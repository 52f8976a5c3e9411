"""Diagnostic (issue 27 item 3): where the lab's own fusion pass spends a first call's seconds.

    python3 benchmarks/fusion_pass_profile.py [--workload adam|llama8] [--fusion dataflow] [--executor eager] [--no-profile]

Runs one first call of the workload (Adam.step over 200 x 65,536 floats, or llama 8 layers; full size on a GPU,
Adam full and llama small on the CPU) with the fusion pass (``PASSES["fusion"]``) under cProfile and prints its
wall time per program and the profile's top functions by own time and by cumulative time. The executor defaults
to ``eager`` so no compiler's time is mixed in: the pass plans regions the same way for any executor whose
``can_fuse`` agrees. Result of 2026-11-28 (CPU, Adam): results/2026-11-28-cpu-*-adam-fusion-pass-profile.txt."""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import trace_lab  # noqa: E402
from examples import workloads  # noqa: E402
from trace_lab.passes import PASSES, _load_passes  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--workload", choices=["adam", "llama8"], default="adam")
ap.add_argument("--fusion", default="dataflow")
ap.add_argument("--executor", default="eager")
ap.add_argument("--top", type=int, default=30)
ap.add_argument("--no-profile", dest="profile", action="store_false",
                help="time the pass and the first call at full speed, without cProfile (which slows the pass ~2x)")
args = ap.parse_args()
device = "cuda" if torch.cuda.is_available() else "cpu"
if args.workload == "adam":
    fn, fn_args = workloads.make_adam_step(device, "full")
    run = (lambda jfn: jfn(*fn_args))
else:
    model, (x,) = workloads.make_llama(8)(device, "full" if device == "cuda" else "small")
    fn, run = model, (lambda jfn: jfn(x).float().sum().backward())

prof = cProfile.Profile()
_load_passes()
fusion = PASSES["fusion"]


def profiled_fusion(trace, ctx):
    start = time.perf_counter()
    if args.profile:
        prof.enable()
    try:
        return fusion(trace, ctx)
    finally:
        prof.disable()
        print(f"fusion pass ({args.fusion}) on a program of {len(list(trace.gm.graph.nodes))} nodes: "
              f"{time.perf_counter() - start:.2f} s{' under cProfile' if args.profile else ''}", flush=True)


PASSES["fusion"] = profiled_fusion
jfn = trace_lab.jit(fn, fusion=args.fusion, executor=args.executor)
start = time.perf_counter()
run(jfn)
print(f"first call ({args.workload}, {args.fusion}, {args.executor}, {device}): {time.perf_counter() - start:.2f} s")
for key in ("tottime", "cumulative") if args.profile else ():
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats(key).print_stats(args.top)
    print(out.getvalue())
