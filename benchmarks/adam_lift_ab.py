"""A/B for issue 27: Adam.step (200 x 65,536 f32, foreach=False) under dataflow + nvFuser, with the segments' 0-d
inputs lifted to [1]-shaped tensors (``nvfuser_region.lifted_inputs``, the default) and without (patched to lift
nothing), both in one process, timed round by round so host drift falls on both alike.

    PYTHONPATH=$PWD python3 benchmarks/adam_lift_ab.py [--rounds 5] [--iters 30]   # GPU machine

Prints each round's steady ms per step for both, the medians, and the kernels of one step (torch.profiler)."""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import trace_lab  # noqa: E402
import trace_lab.executors.nvfuser as nv  # noqa: E402
import trace_lab.executors.nvfuser_region as nvr  # noqa: E402
from examples import workloads  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--iters", type=int, default=30)
args = ap.parse_args()
real_lift = nv.lifted_inputs


def build(lift: bool):
    nv.lifted_inputs = nvr.lifted_inputs = real_lift if lift else (lambda seg, in_place=True: (0, ()))
    fn, _ = workloads.make_adam_step("cuda", "full")
    jfn = trace_lab.jit(fn, fusion="dataflow", executor="nvfuser")
    t0 = time.perf_counter()
    for _ in range(3):
        jfn()
    torch.cuda.synchronize()
    print(f"lift={lift}: first 3 calls {time.perf_counter() - t0:.1f} s", flush=True)
    return jfn


def steady(jfn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        jfn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / args.iters


def kernels(jfn) -> int:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        jfn()
        torch.cuda.synchronize()
    return sum(e.count for e in prof.key_averages() if e.device_type.name == "CUDA")


runs = {True: build(True), False: build(False)}  # lifted_inputs is read when a definition is built (per-executor caches)
times = {True: [], False: []}
for r in range(args.rounds):
    for lift in (True, False):
        times[lift].append(steady(runs[lift]))
    print(f"round {r + 1}: lifted {times[True][-1]:.3f} ms, not lifted {times[False][-1]:.3f} ms", flush=True)
for lift in (True, False):
    t = times[lift]
    print(f"lift={lift}: median {statistics.median(t):.3f} ms ({min(t):.3f}-{max(t):.3f}), "
          f"{kernels(runs[lift])} kernels a step")
