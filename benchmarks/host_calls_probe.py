"""Diagnostic for issue 27 item 1: the aten calls a training step makes outside nvFuser's segments, by op.

    python3 benchmarks/host_calls_probe.py [strategy] [layers]   # GPU machine: real nvFuser, llama at full size
    python3 benchmarks/host_calls_probe.py dataflow 8             # CPU: the tests' nvfuser_direct stand-in, small

Compiles llama (bf16, forward + backward) with ``executor="nvfuser"``, runs three steps, then profiles one step
(``torch.profiler``, CPU activity) and counts the top-level aten calls outside every ``FusionDefinition`` call
(each segment call is wrapped in a ``record_function`` range): each one a dispatcher round trip of host time
(2-5 us on the GPU machines' hosts) that torch.compile's generated code mostly does not make. Also prints the
segment calls a step. The counts are exact on either device (the stand-in plans the same segments); only the GPU
gives their time (``nvfuser_execute_probe.py``). Session 48's table in BENCHMARKS.md comes from this script.
"""
import collections
import os
import sys

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
from tests.nvfuser_cpu import nvfuser_device  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import trace_lab  # noqa: E402
import trace_lab.executors.nvfuser as nv  # noqa: E402
from examples import workloads  # noqa: E402

strategy = sys.argv[1] if len(sys.argv) > 1 else "dataflow"
layers = int(sys.argv[2]) if len(sys.argv) > 2 else 8
device = nvfuser_device()
if device == "cpu":
    torch.set_num_threads(1)

model, (x,) = workloads.make_llama(layers)(device, "full" if device == "cuda" else "small")
model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
jfn = trace_lab.jit(model, fusion=strategy, executor="nvfuser")


def step():
    jfn(x).float().sum().backward()
    model.zero_grad(set_to_none=True)


for _ in range(3):
    step()
real_call = nv._SegmentRunner.__call__


def ranged_call(self, ins):
    with torch.profiler.record_function("nvfuser_segment"):
        return real_call(self, ins)


nv._SegmentRunner.__call__ = ranged_call
with profile(activities=[ProfilerActivity.CPU]) as prof:
    step()
    if device == "cuda":
        torch.cuda.synchronize()
nv._SegmentRunner.__call__ = real_call


def inside_segment(e) -> bool:
    p = e.cpu_parent
    while p is not None:
        if p.name == "nvfuser_segment":
            return True
        p = p.cpu_parent
    return False


events = prof.events()
calls = collections.Counter(
    e.name for e in events
    if e.name.startswith("aten::") and not inside_segment(e)
    and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")))
segments = sum(1 for e in events if e.name == "nvfuser_segment")
print(f"llama {layers} layers, {strategy} + nvFuser on {device}, one training step: {segments} segment calls, "
      f"{sum(calls.values())} top-level aten calls outside them")
for name, n in calls.most_common():
    print(f"{n:6d}  {name}")
