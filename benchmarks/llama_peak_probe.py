"""Diagnostic for issue 27 item 4: what makes the peak of llama (8 layers, full size) under a strategy, per executor.

    python3 benchmarks/llama_peak_probe.py [strategy] [executor ...]   # GPU machine; default: memory nvfuser inductor

For each executor: ``trace_lab.inspect`` (one first call, checked against eager, one measured run), every part's
predicted and measured peak above its inputs, and ``Report.explain_peak()`` of the forward and of the backward: the
buffers alive on each one's peak line by kind and source line. Printed side by side, the executors' breakdowns show which
buffers one executor keeps on the peak line that the other does not."""
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import trace_lab  # noqa: E402
from examples import workloads  # noqa: E402

strategy = sys.argv[1] if len(sys.argv) > 1 else "memory"
executors = sys.argv[2:] or ["nvfuser", "inductor"]
device = "cuda" if torch.cuda.is_available() else "cpu"
for executor in executors:
    model, (x,) = workloads.make_llama(8)(device, "full" if device == "cuda" else "small")
    started = time.perf_counter()
    report = trace_lab.inspect(model, x, fusion=strategy, executor=executor, runs=1)
    print(f"== {strategy} + {executor} ({device}): matches eager {report.ok}, {time.perf_counter() - started:.1f} s")
    for m in report.memory:
        print(f"   {m['kind']}: predicted {m['predicted_peak_above_inputs_bytes'] / 2**20:.2f} MiB, measured "
              f"{(m['measured_peak_above_inputs_bytes'] or 0) / 2**20:.2f} MiB above inputs")
    for kind in ("forward", "backward"):
        print(str(report.explain_peak(kind)))
    del model, x, report
    if device == "cuda":
        torch.cuda.empty_cache()
