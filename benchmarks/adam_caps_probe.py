"""Issue 27 (Adam.step under nvFuser): what the horizontal region's cap trades, first call against steady step.

    PYTHONPATH=$PWD python3 benchmarks/adam_caps_probe.py [--caps dataflow 112 350 700] [--graphs]
                                                          [--rounds 5] [--iters 20] [--budget 300]   # GPU machine
    (on a CPU: a dry run through the tests' nvfuser_direct stand-in: the configurations and their checks only)

Each configuration is ``dataflow`` or ``horizontal`` with ``max_region_ops=N`` (``none``: uncapped), on its own
Adam.step of bench.py's adam bench (200 parameters of 65,536 f32, ``foreach=False``). For each, in one process:
the first call's seconds (the lab's passes and nvFuser's compiles), the definitions built, nvFuser calls and
kernels of a step (torch.profiler), a check of 3 steps against eager (every parameter and state), then the
steady ms of a step, timed round by round over all configurations so host drift falls on each alike.
Since 0-d inputs are lifted (d19c88e) an update is one pointwise kernel, so a region of many updates needs far
fewer nvFuser calls (67 / 15 / 1 a step for caps 112 / 448 / none on the stand-in: fewer ``execute`` calls,
which bound the step without graphs); whether nvFuser compiles a large one fast enough is what this measures.
A configuration is built only while less than ``--budget`` seconds have passed (a compile cannot be stopped).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
from tests.nvfuser_cpu import nvfuser_device  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import trace_lab  # noqa: E402
import trace_lab.executors.nvfuser as nv  # noqa: E402
from examples import workloads  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--caps", nargs="+", default=["dataflow", "112", "350", "700"],
                help="dataflow, N (horizontal, max_region_ops=N) or none (horizontal, uncapped)")
ap.add_argument("--graphs", action="store_true", help="cuda_graphs=True for every configuration")
ap.add_argument("--params", type=int, default=200)
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--budget", type=float, default=300.0, help="seconds after which no further configuration is built")
args = ap.parse_args()
DEVICE = nvfuser_device()
for cap in args.caps:
    if cap not in ("dataflow", "none") and not (cap.isdigit() and int(cap) > 0):
        sys.exit(f"--caps: {cap!r} is not dataflow, none or a positive number of ops")

built, calls = [], [0]
real_definition, real_call = nv.NvFuserExecutor._definition, nv._SegmentRunner.__call__


def recording(self, seg, strides=None, in_place=True):
    d, hit = real_definition(self, seg, strides, in_place)
    if not hit:
        built.append(d)
    return d, hit


def counting(self, ins):
    calls[0] += 1
    return real_call(self, ins)


nv.NvFuserExecutor._definition, nv._SegmentRunner.__call__ = recording, counting


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def state(opt):
    return [t.detach().clone() for g in opt.param_groups for p in g["params"] for t in (p, *opt.state[p].values())]


def options(cap: str) -> dict:
    opts = {"fusion": "dataflow"} if cap == "dataflow" else {"fusion": "horizontal"}
    if cap not in ("dataflow", "none"):
        opts["max_region_ops"] = int(cap)
    return {**opts, "executor": "nvfuser", **({"cuda_graphs": True} if args.graphs else {})}


def kernels_of(step) -> int:
    if DEVICE != "cuda":
        return 0
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        sync()
    return sum(e.count for e in prof.key_averages() if e.device_type.name == "CUDA")


started, runs = time.perf_counter(), {}
for cap in args.caps:
    if time.perf_counter() - started > args.budget:
        print(f"{cap:>8}: not built, the budget ({args.budget:.0f} s) has passed", flush=True)
        continue
    fn, _ = workloads.make_adam_step(DEVICE, "full", n_params=args.params)
    ref, _ = workloads.make_adam_step(DEVICE, "full", n_params=args.params)
    jfn = trace_lab.jit(fn, **options(cap))
    del built[:]
    t0 = time.perf_counter()
    jfn()
    sync()
    first = time.perf_counter() - t0
    n_built = len(built)
    jfn()
    calls[0] = 0
    jfn()
    n_calls = calls[0]
    for _ in range(3):
        ref()
    diff = max((a.double() - b.double()).abs().max().item() for a, b in zip(state(fn.__self__), state(ref.__self__)))
    ok = all(torch.allclose(a, b, rtol=1.3e-6, atol=1e-5) for a, b in zip(state(fn.__self__), state(ref.__self__)))
    runs[cap] = jfn
    print(f"{cap:>8}: first call {first:6.1f} s, {n_built} definitions built, {n_calls} nvFuser calls a step, "
          f"{kernels_of(jfn)} kernels a step, matches eager: {'yes' if ok else 'NO'} (max abs diff {diff:.2e})",
          flush=True)

times = {cap: [] for cap in runs}
for r in range(args.rounds):
    for cap, jfn in runs.items():
        sync()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            jfn()
        sync()
        times[cap].append((time.perf_counter() - t0) * 1e3 / args.iters)
    print(f"round {r + 1}: " + ", ".join(f"{cap} {t[-1]:.3f} ms" for cap, t in times.items()), flush=True)
for cap, t in times.items():
    print(f"{cap:>8}: steady {statistics.median(t):.3f} ms ({min(t):.3f}-{max(t):.3f}) over {len(t)} rounds of "
          f"{args.iters} steps{' (graphs)' if args.graphs else ''}")
