"""Diagnostic (issue 27 items 1-2): what a CUDA-graph step runs on the device beside the program's kernels.

    python3 benchmarks/replay_profile.py [strategy] [executor]          # llama 8 layers (default dataflow inductor)
    python3 benchmarks/replay_profile.py horizontal nvfuser --workload adam --max-region-ops 112

``--workload llama`` (default): llama 8 layers, full size, forward + backward + zero_grad per step, as
benchmarks/bench.py steps it. ``--workload adam``: ``Adam.step`` over 200 parameters of 65,536 floats
(``foreach=False``), as bench.py's adam bench. For trace_lab (``cuda_graphs=True``; ``--max-region-ops`` caps a
horizontal region) and torch.compile(mode="reduce-overhead"): compile and warm up, time 20 steps (CUDA events),
then profile 5 steps with torch.profiler and print the device time per step by kernel name (top 25, with
launches per step), so the rows trace_lab has and reduce-overhead has not are the replay's extra work; then each
trace_lab program's GraphedRun summary (what its last replay copied). Needs CUDA (graphs are CUDA's)."""
import argparse
import collections
import os
import sys

sys.path.insert(0, os.getcwd())
import torch
from torch.profiler import ProfilerActivity, profile

import trace_lab
from examples import workloads

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("strategy", nargs="?", default="dataflow")
ap.add_argument("executor", nargs="?", default="inductor")
ap.add_argument("--workload", choices=["llama", "adam"], default="llama")
ap.add_argument("--max-region-ops", type=int, default=None, help="trace_lab's max_region_ops (horizontal's cap)")
ap.add_argument("--steps", type=int, default=5, help="profiled steps (default 5)")
ap.add_argument("--rows", type=int, default=25, help="kernel rows printed per run (default 25)")
ap.add_argument("--dump-kernels", metavar="SUBSTRING", default=None,
                help="after both runs, copy each Triton kernel source file in Inductor's cache whose kernel name "
                     "holds one of the comma-separated SUBSTRINGs into --dump-dir (to compare the two programs' versions of a kernel)")
ap.add_argument("--dump-dir", default="kernel_sources")
args = ap.parse_args()
if not torch.cuda.is_available():
    sys.exit("replay_profile.py profiles CUDA-graph replays: it needs a CUDA device")


def make_step(make_compiled):
    """(compiled callable, one step) for the chosen workload, built from the same seed each time."""
    torch.manual_seed(0)
    if args.workload == "adam":
        fn, fn_args = workloads.make_adam_step("cuda", "full")
        compiled = make_compiled(fn)
        return compiled, (lambda: compiled(*fn_args))
    model, (x,) = workloads.make_llama(8)("cuda", "full")
    compiled = make_compiled(model)

    def step():
        out = compiled(x)
        out.float().sum().backward()
        model.zero_grad(set_to_none=True)
    return compiled, step


def kernel_table(prof, steps: int) -> list[tuple[str, float, float]]:
    """(kernel name, device ms per step, launches per step), longest first: the profile's CUDA events by name."""
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            by_name[e.name][0] += 1
            by_name[e.name][1] += e.device_time
    return sorted(((n, t / steps / 1e3, c / steps) for n, (c, t) in by_name.items()), key=lambda r: -r[1])


def run(name, make_compiled):
    compiled, step = make_step(make_compiled)
    for _ in range(4):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        step()
    end.record()
    torch.cuda.synchronize()
    print(f"\n== {name}: {start.elapsed_time(end) / 20:.3f} ms per step (20 steps, CUDA events)")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    rows = kernel_table(prof, args.steps)
    print(f"device time per step {sum(r[1] for r in rows):.3f} ms in {sum(r[2] for r in rows):.0f} "
          "launches (kernels and copies)")
    for kname, ms, launches in rows[:args.rows]:
        print(f"  {ms:8.3f} ms  {launches:5.0f}x  {kname[:110]}")
    return compiled


extra = {"max_region_ops": args.max_region_ops} if args.max_region_ops else {}
label = f"trace_lab {args.workload} {args.strategy} + {args.executor}" + (
    f" max_region_ops={args.max_region_ops}" if extra else "") + ", cuda_graphs"
jfn = run(label, lambda f: trace_lab.jit(f, fusion=args.strategy, executor=args.executor, cuda_graphs=True, **extra))
for record in jfn.compilations():
    print(f"{record.label}: {record.graphs.summary() if record.graphs is not None else record.all_notes()}")
run(f"torch.compile(mode='reduce-overhead') {args.workload}", lambda f: torch.compile(f, mode="reduce-overhead"))


if args.dump_kernels:
    import re
    import shutil

    from torch._inductor.runtime.cache_dir_utils import cache_dir

    os.makedirs(args.dump_dir, exist_ok=True)
    wanted = [w for w in args.dump_kernels.split(",") if w]
    pattern = re.compile(r"^def (triton_\w*)\(", re.M)
    copied = 0
    for root, _, files in os.walk(cache_dir()):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(root, f)
            try:
                text = open(path, encoding="utf-8", errors="replace").read()
            except OSError:
                continue
            for kname in (k for k in pattern.findall(text) if any(w in k for w in wanted)):
                shutil.copy(path, os.path.join(args.dump_dir, f"{kname}-{f}"))
                copied += 1
    print(f"\n{copied} kernel source files naming {args.dump_kernels!r} copied to {args.dump_dir} "
          f"(from {cache_dir()})")
