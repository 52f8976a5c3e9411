"""Diagnostic (device only): which allocations and nvFuser kernels a batched Adam step makes, with and without
``donate_inplace``, and each batched group's nvFuser definition (its shapes, and any broadcast op that would make
nvFuser's SegmentInplaceUpdate pass split an aliased result into a copy kernel of its own). Session 44 found
predict's 4 stacks measured as 5 on the H200 (``results/2026-11-30-h200-d740580-batched-stacks-diag.txt``)."""
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.test_nvfuser_gpu import _adam_two_shapes as adam  # noqa: E402  (the GPU test's optimizer)
from trace_lab import jit  # noqa: E402
from trace_lab.executors import nvfuser_batch  # noqa: E402

runners = []
_call = nvfuser_batch.BatchedRunner.__call__
nvfuser_batch.BatchedRunner.__call__ = lambda self, ins: runners.append(self) or _call(self, ins)

for donate in (True, False):
    opt = adam()
    jfn = jit(opt.step, fusion="horizontal", executor="nvfuser", donate_inplace=donate)
    jfn()
    with jfn.measuring():
        jfn()
    print("donate", donate, "measured", jfn.measurements[-1].measured_peak_above_inputs)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    jfn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    for e in snap["device_traces"][0]:
        if e["action"] in ("alloc", "free_completed") and e["size"] >= 4000:
            fr = [f"{f['filename'].split('/')[-1]}:{f['line']}:{f['name']}" for f in e["frames"] if "trace_lab" in f["filename"] or "<generated" in f["filename"] or "nvfuser" in f["filename"]][:3]
            print(" ", e["action"], e["size"], fr)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        jfn(); torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15))
    for d in runners[-1].definitions:
        print(d.fd)
    for r in jfn.compilations():
        for n in r.all_notes():
            if "batched" in n or "place" in n:
                print("  note:", n[:300])
