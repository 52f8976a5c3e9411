"""Diagnostic for issue 27 item 4: what the forward keeps for the backward, trace_lab against torch.compile, counted
the same way for both: every tensor AOTAutograd's CompiledFunction saves (``saved_tensors_hooks``), one count per
storage, parameters apart; then memory after the forward and the backward's own peak (CUDA).

    python3 benchmarks/saved_tensors_probe.py [layers] [size] [config ...]   # default 8 full torch.compile dataflow-inductor
"""
import collections
import os
import sys

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import trace_lab  # noqa: E402
from examples import workloads  # noqa: E402

layers = int(sys.argv[1]) if len(sys.argv) > 1 else 8
size = sys.argv[2] if len(sys.argv) > 2 else "full"
configs = sys.argv[3:] or ["torch.compile", "dataflow-inductor"]
device = "cuda" if torch.cuda.is_available() else "cpu"
MiB = 2 ** 20


def probe(name):
    dtype = getattr(torch, os.environ["PROBE_DTYPE"]) if os.environ.get("PROBE_DTYPE") else None  # e.g. bfloat16
    model, (x,) = workloads.make_llama(layers)(device, size, dtype)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    if name == "torch.compile":
        fn = torch.compile(model)
    else:
        strategy, executor = name.split("-")
        fn = trace_lab.jit(model, fusion=strategy, executor=executor)
    for _ in range(2):  # compile and settle
        fn(x).float().sum().backward()
        model.zero_grad(set_to_none=True)
    saved = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            saved[ptr] = (tuple(t.shape), str(t.dtype).replace("torch.", ""), t.untyped_storage().nbytes())
        return t

    if device == "cuda":
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(x).float().sum()
    line = f"{name}: saved for backward {sum(b for *_, b in saved.values()) / MiB:.1f} MiB in {len(saved)} storages"
    if device == "cuda":
        torch.cuda.synchronize()
        after_fw, fw_peak = torch.cuda.memory_allocated() - start, torch.cuda.max_memory_allocated() - start
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        bw_peak = torch.cuda.max_memory_allocated() - start
        line += (f"; after forward {after_fw / MiB:.1f} MiB, forward peak {fw_peak / MiB:.1f} MiB, "
                 f"backward peak {bw_peak / MiB:.1f} MiB (above the step's start)")
    else:
        loss.backward()
    print(line)
    by = collections.Counter((shape, dtype, b) for shape, dtype, b in saved.values())
    for (shape, dtype, b), k in sorted(by.items(), key=lambda kv: -kv[0][2] * kv[1])[:12]:
        print(f"    {k:3d} x {dtype}{list(shape)} ({b / MiB:.2f} MiB each)")
    model.zero_grad(set_to_none=True)
    return saved


for c in configs:
    probe(c)
