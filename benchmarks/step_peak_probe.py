"""Diagnostic for the missed peak target (issue 14): one training step's peak above start on CPU (torch.profiler memory
events), llama 2 layers d=256 T=128 B=2 f32, for eager, torch.compile and trace_lab STRATEGY-EXECUTOR configs, with
trace_lab's predicted forward/backward peaks.    python3 benchmarks/step_peak_probe.py eager torch.compile dataflow-inductor"""
import sys, os, gc
sys.path.insert(0, os.getcwd())
import torch
import trace_lab
from examples.workloads import LlamaStack
from torch.profiler import profile, ProfilerActivity

def make():
    torch.manual_seed(0)
    m = LlamaStack(layers=2, dim=256, heads=4)
    x = torch.randn(2, 128, 256)
    return m, x

def step_peak(f, m, x):
    # warm
    for _ in range(2):
        f(x).float().sum().backward(); m.zero_grad(set_to_none=True)
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = f(x); out.float().sum().backward(); del out
        m.zero_grad(set_to_none=True)
    ev = sorted([e for e in prof.events() if e.cpu_memory_usage != 0], key=lambda e: e.time_range.start)
    cur = peak = 0
    for e in ev:
        cur += e.cpu_memory_usage; peak = max(peak, cur)
    return peak / 2**20

res = {}
for name in sys.argv[1:]:
    m, x = make()
    if name == "eager": f = m
    elif name == "torch.compile": f = torch.compile(m)
    else:
        strat, ex = name.split("-")
        f = trace_lab.jit(m, fusion=strat, executor=ex)
    res[name] = step_peak(f, m, x)
    print(name, f"{res[name]:.2f} MiB", flush=True)
    if name not in ("eager", "torch.compile"):
        for kind, tr in (("fw", trace_lab.last_traces(f)[-1]), ("bw", trace_lab.last_backward_traces(f)[-1])):
            lv = tr.liveness()
            print("  ", kind, "predicted peak above inputs", f"{lv.peak_above_inputs_bytes/2**20:.2f} MiB", flush=True)
