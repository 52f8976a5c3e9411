"""Fusion strategies on every example workload: regions, predicted and measured peak, eager check.

For each workload of examples/workloads.py and each fusion strategy (none, dataflow,
horizontal, memory) it runs ``trace_lab.inspect`` with the chosen executor (default:
Inductor, which compiles every region) and prints/writes one row per program part:
number of fused regions, unique region signatures and fusion-cache hits, seconds
spent compiling regions, predicted peak above inputs (liveness model), measured peak
(CUDA: max_memory_allocated; CPU: profiler allocator events), whether outputs and
gradients match eager, the steady-state time of a call, and the workspace that
compiled regions allocate inside their call (counted by the model on their lines).

    python benchmarks/fusion_table.py                      # CPU, small sizes
    python benchmarks/fusion_table.py --device cuda --size full
    python benchmarks/fusion_table.py --workloads memory_peak,llama2 --strategies memory

JSON goes to benchmarks/results/<date>-<device>-fusion.json (or --out).
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

STRATEGIES = ("none", "dataflow", "horizontal", "memory")


def rows_for(report, name: str, size: str, strategy: str) -> list[dict]:
    measured = {(m["program"], m["kind"]): m for m in report.memory}
    rows = []
    for p in report.programs:
        for kind in ("forward", "inference", "backward"):
            if kind not in p:
                continue
            part = p[kind]
            regions = part["regions"]
            m = measured.get((p["index"], kind), {})
            rows.append({
                "workload": name, "size": size, "strategy": strategy, "program": p["index"], "kind": kind,
                "ops": part["stages"][-1]["ops"], "regions": part["stages"][-1]["regions"],
                "compiled_regions": len(regions), "unique_signatures": len({r["signature"] for r in regions}),
                "cache_hits": sum(1 for r in regions if r["cache_hit"]),
                "region_compile_seconds": round(sum(r["compile_seconds"] for r in regions), 3),
                # scratch bytes compiled regions allocate inside their call (measured at compile time)
                "regions_with_workspace": sum(1 for r in regions if r.get("workspace_bytes")),
                "max_region_workspace_bytes": max((r.get("workspace_bytes") or 0 for r in regions), default=0),
                "region_workspace": {r["name"]: r["workspace_bytes"] for r in regions if r.get("workspace_bytes")},
                "regions_output_bytes_differ": [r["name"] for r in regions if r.get("planned_output_bytes") is not None
                                                and r.get("model_output_bytes") != r["planned_output_bytes"]],
                "predicted": m.get("predicted_peak_above_inputs_bytes",
                                   part["stages"][-1]["predicted_peak_above_inputs_bytes"]),
                "measured": m.get("measured_peak_above_inputs_bytes"), "method": m.get("method"),
                "matches_eager": report.ok, "max_abs_diff": (report.comparison or {}).get("max_abs_diff"),
                "steady_seconds": report.steady_seconds,
                "notes": [n for n in part.get("notes", []) if n.startswith("memory strategy")],
            })
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--size", default="small", choices=["small", "full"])
    p.add_argument("--executor", default="inductor")
    p.add_argument("--runs", type=int, default=3, help="timed calls per configuration (0: no timing)")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--out", default=None)
    a = p.parse_args()
    rows = []
    for name in a.workloads.split(","):
        for strategy in a.strategies.split(","):
            fn, args = WORKLOADS[name].make(a.device, a.size)
            try:
                report = trace_lab.inspect(fn, *args, fusion=strategy, executor=a.executor, runs=a.runs, name=name)
            except Exception as e:  # noqa: BLE001 - one failing configuration must not hide the rest
                rows.append({"workload": name, "size": a.size, "strategy": strategy,
                             "error": f"{type(e).__name__}: {e}"})
                print(f"{name} {strategy}: ERROR {type(e).__name__}: {e}", flush=True)
                continue
            for row in rows_for(report, name, a.size, strategy):
                rows.append(row)
                meas = row["measured"]
                print(f"{name:20s} {strategy:10s} #{row['program']} {row['kind']:9s} "
                      f"{row['regions']:4d} regions ({row['unique_signatures']:3d} unique, {row['cache_hits']:3d} hits, "
                      f"{row['region_compile_seconds']:6.2f} s)  predicted {format_bytes(row['predicted']):>11s}  "
                      f"measured {format_bytes(meas) if meas is not None else 'n/a':>11s}  "
                      f"eager-match={row['matches_eager']}  workspace: {row['regions_with_workspace']} regions, "
                      f"max {format_bytes(row['max_region_workspace_bytes'])}"
                      + (f"  output layout differs from the plan: {','.join(row['regions_output_bytes_differ'])}"
                         if row['regions_output_bytes_differ'] else ""), flush=True)
            del fn, args, report
            if a.device == "cuda":
                torch.cuda.empty_cache()
    write_results("fusion", a.device, rows, a.out, executor=a.executor, size=a.size)


if __name__ == "__main__":
    main()
