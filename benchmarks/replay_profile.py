"""Diagnostic (issue 27 item 2): what a CUDA-graph step runs on the device beside the program's kernels.

    python3 benchmarks/replay_profile.py [strategy] [executor]   # on the GPU machine (default dataflow inductor)

llama 8 layers, full size, forward + backward + zero_grad per step, as benchmarks/bench.py steps it. For trace_lab
(``cuda_graphs=True``) and torch.compile(mode="reduce-overhead"): compile and warm up, time 20 steps (CUDA
events), then profile 5 steps with torch.profiler and print the device time per step by kernel name (top 25,
with launches per step), so the rows trace_lab has and reduce-overhead has not are the replay's extra work;
then each trace_lab program's GraphedRun summary (what its last replay copied)."""
import collections
import os
import sys

sys.path.insert(0, os.getcwd())
import torch
from torch.profiler import ProfilerActivity, profile

import trace_lab
from examples import workloads

strategy = sys.argv[1] if len(sys.argv) > 1 else "dataflow"
executor = sys.argv[2] if len(sys.argv) > 2 else "inductor"
STEPS = 5


def run(name, make_compiled):
    torch.manual_seed(0)
    model, (x,) = workloads.make_llama(8)("cuda", "full")
    compiled = make_compiled(model)

    def step():
        out = compiled(x)
        out.float().sum().backward()
        model.zero_grad(set_to_none=True)

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
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            by_name[e.name][0] += 1
            by_name[e.name][1] += e.device_time
    total = sum(t for _, t in by_name.values())
    print(f"device time per step {total / STEPS / 1e3:.3f} ms in {sum(c for c, _ in by_name.values()) / STEPS:.0f} "
          "launches (kernels and copies)")
    for kname, (count, t) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"  {t / STEPS / 1e3:8.3f} ms  {count / STEPS:5.0f}x  {kname[:110]}")
    return compiled


jfn = run(f"trace_lab {strategy} + {executor}, cuda_graphs",
          lambda m: trace_lab.jit(m, fusion=strategy, executor=executor, cuda_graphs=True))
for record in jfn.compilations():
    print(f"{record.label}: {record.graphs.summary() if record.graphs is not None else record.all_notes()}")
run("torch.compile(mode='reduce-overhead')", lambda m: torch.compile(m, mode="reduce-overhead"))
