"""Shared command line of the example scripts: inspect one workload and print the report."""
from __future__ import annotations

import argparse


def main(default: str) -> None:
    import trace_lab
    from .workloads import get

    p = argparse.ArgumentParser(description=f"Inspect a trace_lab example (default {default}).")
    p.add_argument("--workload", default=default)
    p.add_argument("--device", default="cuda" if __import__("torch").cuda.is_available() else "cpu")
    p.add_argument("--size", default="small", choices=["small", "full"])
    p.add_argument("--fusion", default="none", choices=list(trace_lab.FUSION_STRATEGIES))
    p.add_argument("--executor", default="auto")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--print-trace", action="store_true")
    a = p.parse_args()
    fn, args = get(a.workload).make(a.device, a.size)
    report = trace_lab.inspect(fn, *args, fusion=a.fusion, executor=a.executor, runs=a.runs, name=a.workload)
    print(report)
    if a.print_trace:
        for t in (report.traces("forward")[-1:] + report.traces("backward")[-1:]):
            print(t)
