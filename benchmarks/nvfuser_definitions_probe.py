"""Diagnostic for issue 27 item 3 (nvFuser's first iteration): which nvFuser definitions a llama step builds.

    python3 benchmarks/nvfuser_definitions_probe.py [strategy] [layers]   # GPU machine: real nvFuser, full size
    python3 benchmarks/nvfuser_definitions_probe.py memory 8               # CPU: the tests' nvfuser_direct stand-in, small

Runs one first call (forward + backward, bf16) with ``executor="nvfuser"`` and prints every definition the executor
built (a cache miss: each one an nvFuser compile on the GPU, about 1 s on an H200), largest first, with its op count
and most common ops. Segments made mostly of permutes are the weights' transposes handed on to matmuls
(2026-11-29: 4 of llama8's 22 definitions under the memory strategy on the stand-in). On the CPU the stand-in
evaluates definitions with torch; only the counts and the ops mean anything there.
"""
import collections
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
from tests.nvfuser_cpu import nvfuser_device  # noqa: E402

import trace_lab  # noqa: E402
import trace_lab.executors.nvfuser as nv  # noqa: E402
from examples import workloads  # noqa: E402

strategy = sys.argv[1] if len(sys.argv) > 1 else "memory"
layers = int(sys.argv[2]) if len(sys.argv) > 2 else 8
device = nvfuser_device()

built = []
real_definition = nv.NvFuserExecutor._definition


def counting(self, seg, strides=None, in_place=True):
    d, hit = real_definition(self, seg, strides, in_place)
    if not hit:
        built.append([str(n.target).replace("aten.", "") for n in seg.ops])
    return d, hit


nv.NvFuserExecutor._definition = counting
model, (x,) = workloads.make_llama(layers)(device, "full" if device == "cuda" else "small")
model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
jfn = trace_lab.jit(model, fusion=strategy, executor="nvfuser")
started = time.perf_counter()
jfn(x).float().sum().backward()
if device == "cuda":
    torch.cuda.synchronize()
print(f"{strategy} + nvFuser, llama {layers} layers ({device}): first call {time.perf_counter() - started:.2f} s, "
      f"{len(built)} definitions built")
for ops in sorted(built, key=len, reverse=True):
    top = ", ".join(f"{op} x{k}" for op, k in collections.Counter(ops).most_common(5))
    print(f"  {len(ops):4d} ops: {top}")
