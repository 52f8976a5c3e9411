"""Predicted vs measured peak memory for every example workload (issue: foundation).

Runs each workload of examples/workloads.py through ``trace_lab.inspect`` with the
eager executor (fusion none), and prints/writes, per program part, the predicted
peak above inputs (liveness model) and the measured one (CUDA:
max_memory_allocated; CPU: profiler allocator events), plus the check against
eager. Usage: python benchmarks/memory_check.py [--device cuda] [--size small|full|both]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import trace_lab  # noqa: E402
from benchmarks._results import write_results  # noqa: E402
from examples.workloads import WORKLOADS  # noqa: E402
from trace_lab.ir.printer import format_bytes  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--size", default="small", choices=["small", "full", "both"])
    p.add_argument("--executor", default="eager")
    p.add_argument("--out", default=None)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    a = p.parse_args()
    sizes = ["small", "full"] if a.size == "both" else [a.size]
    rows = []
    for size in sizes:
        for name in a.workloads.split(","):
            fn, args = WORKLOADS[name].make(a.device, size)
            try:
                r = trace_lab.inspect(fn, *args, executor=a.executor, runs=1, name=name)
            except Exception as e:  # noqa: BLE001 - one failing workload must not hide the rest
                rows.append({"workload": name, "size": size, "error": f"{type(e).__name__}: {e}"})
                print(f"{name} {size}: ERROR {e}", flush=True)
                continue
            for m in r.memory:
                row = {"workload": name, "size": size, "program": m["program"], "kind": m["kind"],
                       "predicted": m["predicted_peak_above_inputs_bytes"],
                       "measured": m["measured_peak_above_inputs_bytes"], "method": m["method"],
                       "matches_eager": r.ok, "max_abs_diff": (r.comparison or {}).get("max_abs_diff")}
                rows.append(row)
                pred, meas = row["predicted"], row["measured"]
                rel = (meas - pred) / max(pred, 1) if meas is not None else float("nan")
                print(f"{name:20s} {size:5s} #{m['program']} {m['kind']:9s} predicted {format_bytes(pred):>11s} "
                      f"measured {format_bytes(meas) if meas is not None else 'n/a':>11s} ({rel:+.2%}) "
                      f"eager-match={r.ok}", flush=True)
            del fn, args, r
            if a.device == "cuda":
                torch.cuda.empty_cache()
    write_results("memory-check", a.device, rows, a.out, executor=a.executor)


if __name__ == "__main__":
    main()
