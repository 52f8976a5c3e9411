"""Issue 29: one compilation record per program part, made by the run stage, read by every view.

A Report keeps its run's CompilationRecords (stages, executor and why, compiled program, notes, CUDA
graphs, timings), never the JitFunction; the notebook's Diff picker and Regions tools read them; a
report loaded from JSON has none, and a report saved before the records existed still loads.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import trace_lab
from trace_lab.notebook.diff_picker import _live_stages
from trace_lab.notebook.region_tools import _live_part
from trace_lab.report import Report

SAVED_BEFORE = Path(__file__).parent / "data" / "report_saved_at_fca9092.json"  # saved by trace_lab at fca9092


def _report(**options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    return trace_lab.inspect(model, torch.randn(4, 16), runs=1, **options)


def test_a_report_keeps_the_compilation_records_and_no_jitted_function():
    report = _report(fusion="dataflow", executor="eager")
    assert report.comparison["ok"] and report.comparison["checked"]["grads"] == 4, report.comparison
    assert not hasattr(report, "jfn")
    assert [r.label for r in report.compilations] == ["forward #0", "backward #0"]
    for record in report.compilations:
        assert record.executor == "eager" and record.fusion == "dataflow", record
        assert report.traces(record.kind, 0) == record.stages and record.stages[0].stage == "as captured"
        assert report.compilation(record.kind, 0) is record
        timings = record.timings()
        assert [stage for stage, _ in timings["passes"]] == [t.stage for t in record.stages]
        assert timings["wall"] >= sum(seconds for _, seconds in timings["passes"]) > 0
        # the summary the views show is read from the record
        summary = report.programs[0][record.kind]
        assert summary["notes"] == record.all_notes() and summary["executor"] == "eager"
        assert [s["stage"] for s in summary["stages"]] == [t.stage for t in record.stages]


def test_the_summary_splits_compile_time_by_stage_and_region():
    """Issue 27 item 3: per part, capture, each pass, op scratch, the executor with its regions (compiled, cache
    hits, the slowest), in the Summary and in the saved data, from the compilation record."""
    report = _report(fusion="dataflow", executor="inductor")
    rows = dict(report.summary_rows())
    for record in report.compilations:
        timings = report.programs[0][record.kind]["timings"]
        assert timings == json.loads(json.dumps(record.timings()))
        regions = record.compiled.regions.values()
        assert [r[0] for r in timings["regions"]] == [r.name for r in regions] and regions
        compiled = [r for r in regions if not r.cache_hit]
        assert sum(r[1] for r in timings["regions"]) == pytest.approx(sum(r.compile_seconds for r in regions))
        row = rows[f"compile {record.kind} #0"]
        capture = (f"AOTAutograd {record.capture_seconds:.3f} s" if record.kind == "forward"
                   else "AOTAutograd in the forward's")
        assert capture in row and "op scratch" in row, row
        assert f"{len(compiled)} region" in row and f"wall {record.compile_wall_seconds:.3f} s" in row, row
        if compiled:
            slowest = max(compiled, key=lambda r: r.compile_seconds)
            assert f"slowest {slowest.name} {slowest.compile_seconds:.3f} s" in row, row


def test_the_notebook_tools_read_the_records():
    report = _report(fusion="dataflow", executor="inductor")
    forward = report.compilation("forward", 0)
    assert _live_stages(report, "forward #0") == forward.stages
    part = next(p for p in report.view.parts if p.label == "forward #0")
    assert _live_part(report, part) is forward and forward.compiled.regions  # the Regions tab's code and repro
    loaded = Report.from_dict(json.loads(json.dumps(report.to_dict())))
    assert loaded.compilations is None and _live_stages(loaded, "forward #0") == [] and _live_part(loaded, part) is None


def test_a_report_saved_before_the_records_still_loads_and_renders():
    data = json.loads(SAVED_BEFORE.read_text())
    report = trace_lab.load_report(SAVED_BEFORE)
    assert report.to_dict() == data
    assert report.compilations is None and report.name == data["name"]
    stages = report.traces("forward")
    assert stages and str(stages[-1]).startswith("# trace_lab: forward program") and any(ln.role == "op" for ln in stages[-1].lines)
    page = report._repr_html_()
    assert "Summary" in page and data["name"] in page
    assert "forward" in str(report)


def test_the_forward_row_carries_the_capture_time_and_the_backward_row_points_to_it(monkeypatch):
    """Session 23 (2026-11-27): every part's "capture" read 0.00 s (it timed the making of a record, not AOTAutograd),
    while Dynamo and AOTAutograd took a third of llama's first call. The capture runs once per program, before the
    forward's compiler: a partition made 0.3 s slower shows as 0.3 s more on the forward and nothing on the backward."""
    import time

    from trace_lab.capture.session import CaptureSession

    original = CaptureSession._partition_fn

    def slow_partition_fn(self, partition):
        inner = original(self, partition)

        def slow(*args, **kwargs):
            time.sleep(0.3)
            return inner(*args, **kwargs)

        return slow

    monkeypatch.setattr(CaptureSession, "_partition_fn", slow_partition_fn)
    report = _report(fusion="dataflow", executor="eager")
    forward, backward = report.compilation("forward", 0), report.compilation("backward", 0)
    assert forward.capture_seconds >= 0.3 and backward.capture_seconds == 0.0
    assert forward.capture_seconds < report.first_run_seconds  # a share of the first call, not more
    rows = dict(report.summary_rows())
    assert f"AOTAutograd {forward.capture_seconds:.3f} s" in rows["compile forward #0"]
    assert "AOTAutograd in the forward's" in rows["compile backward #0"]
