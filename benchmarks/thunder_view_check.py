"""Thunder's traces in the lab on a GPU: predicted vs measured peak of Thunder's own programs.

For each workload: ``thunder.jit`` with Thunder's default executors (nvFuser where it imports),
one forward+backward, then ``trace_lab.from_thunder(jfn, *args)``: the lab's liveness model on
Thunder's last forward and backward traces (its fusions as regions, each fusion's workspace
measured alone) against ``torch.cuda.max_memory_allocated`` around Thunder's own compiled
forward and backward, outputs and gradients against eager. Thunder's own estimate
(``thunder.examine.memory_calculation.get_alloc_memory``, the figure of Thunder #677) is
recorded beside it. Writes benchmarks/results/<date>-<device>-thunder-view-<commit>.json and the
standalone HTML report of each workload next to it.

    python3 benchmarks/thunder_view_check.py [--workloads memory_peak,llama2] [--size full]
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks._results import RESULTS, git_commit, write_results  # noqa: E402


def thunder_estimate(trace) -> int | None:
    """Thunder's own peak estimate of a trace (None when its estimator fails on it)."""
    try:
        from thunder.examine.memory_calculation import get_alloc_memory

        peak, _ = get_alloc_memory(trace)
        return int(peak)
    except Exception:  # noqa: BLE001 - the estimator is the thing being compared; a failure is recorded
        return None


def run(name: str, size: str, device: str, prefix: str) -> dict:
    import thunder

    import trace_lab
    from examples.workloads import get

    wl = get(name)
    fn, args = wl.make(device, size)
    jf = thunder.jit(fn)
    t0 = time.perf_counter()
    out = jf(*args)
    if wl.backward:
        out.float().sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
    first = time.perf_counter() - t0
    report = trace_lab.from_thunder(jf, *args, name=name)
    row = {"workload": name, "size": size, "first_call_seconds": first, "executors": report.executor_reasons,
           "eager_check": report.comparison, "warnings": report.warnings, "parts": []}
    thunder_traces = {"forward": thunder.last_traces(jf), "backward": thunder.last_backward_traces(jf)}
    for m in report.memory:
        stage = report.traces(m["kind"])[-1]
        row["parts"].append({
            "kind": m["kind"], "predicted_peak_above_inputs_bytes": m["predicted_peak_above_inputs_bytes"],
            "measured_peak_above_inputs_bytes": m["measured_peak_above_inputs_bytes"], "method": m["method"],
            # Thunder's estimator counts the program's inputs: compare it with the high-water mark
            "predicted_high_water_bytes": stage.liveness().peak_bytes, "inputs_bytes": stage.liveness().entry_bytes,
            "regions": [str(n.target) for n in stage.ops if n.op == "call_module"], "ops": len(stage.ops),
            "thunder_estimate_bytes": thunder_estimate(thunder_traces[m["kind"]][-1]),
        })
    print(report)
    html = os.path.join(RESULTS, f"{prefix}-{name}.html")
    try:
        report.save_html(html)
        row["html"] = os.path.basename(html)
    except Exception as e:  # noqa: BLE001 - the figures above are the result; the page is extra
        row["html_error"] = f"{type(e).__name__}: {e}"
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="memory_peak,llama2")
    ap.add_argument("--size", default="full", choices=("small", "full"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    meta = git_commit()
    label = args.device
    if args.device == "cuda":
        gpu = torch.cuda.get_device_name()
        label = next((g.lower() for g in ("H100", "H200", "A100") if g in gpu), "cuda")
    kind = f"thunder-view-{meta['commit']}"
    prefix = f"{datetime.date.today()}-{label}-{kind}"
    rows = []
    for name in args.workloads.split(","):
        try:
            rows.append(run(name, args.size, args.device, prefix))
        except Exception as e:  # noqa: BLE001 - one workload that fails is recorded, the others still run
            import traceback

            traceback.print_exc()
            rows.append({"workload": name, "size": args.size, "error": f"{type(e).__name__}: {e}"})
    import thunder

    write_results(kind, label, rows, thunder=thunder.__version__, **meta)
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
