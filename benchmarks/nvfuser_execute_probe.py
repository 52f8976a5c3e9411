"""Diagnostic for issue 27 item 1 (nvFuser's steady step is host-bound): host time of each nvFuser call in a step.

    python3 benchmarks/nvfuser_execute_probe.py [strategy] [layers]   # GPU machine: real nvFuser, llama at full size

Compiles llama (bf16, forward + backward) with ``executor="nvfuser"``, warms up, then times every
``FusionDefinition.execute`` of 10 steps on the host (no synchronisation: what the host spends launching), per
definition: calls per step, microseconds per call, its op count and most common ops. Also prints the floor, one
single-op definition executed 2,000 times, and the step's host time against the sum of its executes: what is left
is the lab's own program, the torch ops between regions and autograd.
"""
import collections
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import trace_lab  # noqa: E402
import trace_lab.executors.nvfuser as nv  # noqa: E402
from examples import workloads  # noqa: E402

strategy = sys.argv[1] if len(sys.argv) > 1 else "memory"
layers = int(sys.argv[2]) if len(sys.argv) > 2 else 8
if not torch.cuda.is_available():
    sys.exit("nvfuser_execute_probe: needs a GPU (it times nvFuser's own host path)")

from nvfuser_direct import DataType, FusionDefinition  # noqa: E402

with FusionDefinition() as fd:
    a = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16)
    fd.add_output(fd.ops.add(a, a))
t = torch.randn(4 * 512 * 1024, device="cuda", dtype=torch.bfloat16)
for _ in range(20):
    fd.execute([t])
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(2000):
    fd.execute([t])
floor = (time.perf_counter() - t0) / 2000
t0 = time.perf_counter()
for _ in range(2000):
    fd.fec.execute([t], device=0, _enable_options=[], _disable_options=[])
floor_fec = (time.perf_counter() - t0) / 2000
t0 = time.perf_counter()
for _ in range(2000):
    t + t
floor_torch = (time.perf_counter() - t0) / 2000
torch.cuda.synchronize()
print(f"floor: one add definition {floor * 1e6:.1f} us a call through execute, {floor_fec * 1e6:.1f} us through "
      f"fd.fec.execute; torch's t + t {floor_torch * 1e6:.1f} us")

model, (x,) = workloads.make_llama(layers)("cuda", "full")
model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
jfn = trace_lab.jit(model, fusion=strategy, executor="nvfuser")


def step():
    jfn(x).float().sum().backward()
    model.zero_grad(set_to_none=True)


for _ in range(4):
    step()
torch.cuda.synchronize()
spent: dict[int, list] = collections.defaultdict(list)
ops_of: dict[int, list] = {}
real_call = nv._SegmentRunner.__call__


class Timed:
    def __init__(self, fd, key):
        self.fd, self.key = fd, key

    def execute(self, ins):
        s = time.perf_counter()
        r = self.fd.execute(ins)
        spent[self.key].append(time.perf_counter() - s)
        return r


def timed_call(self, ins):
    d = self.definition
    key = id(d)
    ops_of.setdefault(key, [str(n.target).replace("aten.", "") for n in self.seg.ops])
    fd = d.fd
    d.fd = Timed(fd, key)
    try:
        return real_call(self, ins)
    finally:
        d.fd = fd


def host_per_step(n=10) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    seconds = (time.perf_counter() - t0) / n
    torch.cuda.synchronize()
    return seconds


plain = host_per_step()
nv._SegmentRunner.__call__ = timed_call
timed = host_per_step()
nv._SegmentRunner.__call__ = real_call
total = sum(sum(v) for v in spent.values()) / 10
calls = sum(len(v) for v in spent.values()) / 10
print(f"{strategy} + nvFuser, llama {layers} layers: host {plain * 1e3:.2f} ms a step ({timed * 1e3:.2f} ms timed); "
      f"{calls:.0f} executes a step take {total * 1e3:.2f} ms of it ({total / calls * 1e6:.1f} us each); "
      f"{len(spent)} definitions")
rows = sorted(spent.items(), key=lambda kv: -sum(kv[1]))
print(f"{'calls/step':>10} {'us/call':>8} {'ms/step':>8}  ops")
for key, v in rows:
    ops = ops_of[key]
    top = ", ".join(f"{op} x{k}" for op, k in collections.Counter(ops).most_common(4))
    print(f"{len(v) / 10:10.1f} {sum(v) / len(v) * 1e6:8.1f} {sum(v) / 10 * 1e3:8.2f}  {len(ops)} ops: {top}")
