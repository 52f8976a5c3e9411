"""Diagnostic: does nvfuser_direct compile distinct FusionDefinitions faster from Python threads?

Builds N distinct definitions (bf16 [4096, 1024] pointwise chains + a row reduction) and
compiles them by executing once, first one after another, then from 8 threads. On the
2026-11-23 H100 threads gave no speed-up (results/2026-11-23-h100-nvfuser-compile-probe.txt),
so trace_lab compiles definitions sequentially. Run on the GPU machine:
    python3 benchmarks/nvfuser_compile_probe.py
"""
import time, sys
from concurrent.futures import ThreadPoolExecutor
import torch
import nvfuser_direct as nvf
from nvfuser_direct import DataType

def make(k, salt):
    fd = nvf.FusionDefinition()
    with fd:
        t = fd.define_tensor(sizes=[4096, 1024], strides=[1024, 1], dtype=DataType.BFloat16, static_sizes=True)
        v = fd.ops.cast(t, DataType.Float)
        for j in range(k + 3):
            v = fd.ops.mul(v, fd.define_scalar(1.0 + 0.01 * (j + salt), dtype=DataType.Double))
            v = fd.ops.tanh(v) if j % 2 else fd.ops.exp(fd.ops.neg(fd.ops.abs(v)))
        s = fd.ops.sum(v, dims=[1], keepdim=False)
        b = fd.ops.broadcast_in_dim(s, shape=[4096, 1024], broadcast_dims=[0])
        fd.add_output(fd.ops.cast(fd.ops.div(v, b), DataType.BFloat16))
    return fd

print(torch.cuda.get_device_name(), "nvfuser_direct", getattr(nvf, "__version__", "?"), flush=True)
x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
fd0 = make(0, 99); fd0.execute([x]); torch.cuda.synchronize()  # initialise
for n in (8, 16):
    fds = [make(k, 0 + n) for k in range(n)]
    t0 = time.perf_counter()
    for fd in fds:
        fd.execute([x])
    torch.cuda.synchronize()
    seq = time.perf_counter() - t0
    fds = [make(k, 1000 + n) for k in range(n)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda fd: fd.execute([x]), fds))
    torch.cuda.synchronize()
    par = time.perf_counter() - t0
    print(f"{n} definitions: sequential {seq:.2f} s, 8 threads {par:.2f} s, speed-up {seq / par:.2f}x", flush=True)
