"""The view model (issue 16 item 2): the printer's line records, the JSON round trip, the --nproc path.

A Report's views read only ``report.view`` and its plain fields. These tests check that
the records agree with the live Trace they were printed from (text, memory, peak,
regions), that a report reloaded from JSON renders the same HTML and text as the
original (one forward+backward program with fused regions, and a function with a
graph break: two programs), and that a multi-process run's report is rebuilt from the
model a worker sent back, with the worker's own trace text.
"""
from __future__ import annotations

import html
import json
import re

import pytest
import torch

import trace_lab
from trace_lab.ir.fx_util import is_getitem
from trace_lab.ir.printer import format_trace, trace_lines
from trace_lab.report import html as H
from trace_lab.report.report import Report

EVIL = "<script>alert('x')</script>"


def _fn(x, w):
    y = torch.relu(x @ w) * 2 + 1  # <img src=x onerror=alert(1)>
    return torch.tanh(y).sum(dim=0) - 0.5


def _broken(x):
    y = torch.relu(x) * 2
    print("", end="")  # a graph break: two programs
    return (y.sin() + 1).sum()


def _inputs():
    torch.manual_seed(0)
    return torch.randn(6, 6, requires_grad=True), torch.randn(6, 6, requires_grad=True)


@pytest.fixture(scope="module")
def fwd_bwd():
    _fn.__name__ = EVIL
    try:
        return trace_lab.inspect(_fn, *_inputs(), executor="eager", fusion="horizontal", runs=1)
    finally:
        _fn.__name__ = "_fn"


@pytest.fixture(scope="module")
def two_programs():
    return trace_lab.inspect(_broken, torch.randn(5, 5, requires_grad=True), executor="eager", fusion="dataflow",
                             runs=1)


def _live_parts(report):
    """{label: [Trace...]} straight from the compilation records (what the model was built from)."""
    return {r.label: list(r.stages) for r in report.compilations if r.stages}


def _same_ids(page: str) -> str:
    """Element ids are random per rendering (two outputs of one report must not share them)."""
    return re.sub(r"\b(tl|tlz|tlgv-|tlg-)[0-9a-f]{10,12}\b", r"\1X", page)


def _views(report) -> dict:
    """The report's HTML (whole and per tab) and text."""
    runs = [(report.name, report)]
    out = {"page": H.report_html(report), "traces": H.traces_html(report), "graphs": H.graphs_html(report),
           "memory": H.memory_html(runs), "summary": H.summary_html(report)}
    return {**{k: _same_ids(v) for k, v in out.items()}, "text": str(report)}


# -- records from the printer -----------------------------------------------------------------
@pytest.mark.parametrize("which", ["fwd_bwd", "two_programs"])
def test_records_are_the_printed_trace_with_its_memory(which, request):
    report = request.getfixturevalue(which)
    live = _live_parts(report)
    assert [p.label for p in report.view.parts] == list(live)
    regions_seen = 0
    for part in report.view.parts:
        for stage, trace in zip(part.stages, live[part.label], strict=True):
            assert stage.text == str(trace) == format_trace(trace)  # records joined: the printer's text
            assert (stage.kind, stage.stage, stage.n_ops) == (trace.kind, trace.stage, len(trace.ops))
            liveness = trace.liveness()
            mem = stage.op_lines
            # one memory record per op, in order, with the liveness figures of that op
            assert [ln.fx_name for ln in mem] == [lm.node.name for lm in liveness.lines]
            assert [(ln.live_after, ln.high_water, ln.allocated, ln.freed) for ln in mem] == \
                [(lm.live_after, lm.high_water, lm.allocated, lm.freed) for lm in liveness.lines]
            assert [trace.ops[ln.op].name for ln in mem] == [ln.fx_name for ln in mem]
            assert stage.curve() == liveness.curve()
            peaks = [ln.fx_name for ln in stage.lines if ln.peak]
            assert peaks == ([liveness.peak_line.node.name] if liveness.peak_line else [])
            # a fused region's line is followed by exactly its ops, commented out and marked with the region
            for i, ln in enumerate(stage.lines):
                if ln.role == "op" and ln.region is not None:
                    sub = trace.gm.get_submodule(ln.region)
                    n_inner = sum(1 for n in sub.graph.nodes if n.op in ("call_function", "call_module",
                                                                         "call_method")
                                  and not is_getitem(n))
                    inner = stage.lines[i + 1:i + 1 + n_inner]
                    assert all(r.role == "region_op" and r.region == ln.region and r.text.startswith("    # ")
                               for r in inner)
                    regions_seen += 1
            # every source comment names the line of this test file that produced the next op
            assert all("test_view_model.py:" in ln.source for ln in stage.lines if ln.role == "source")
    if which == "fwd_bwd":
        assert regions_seen > 0  # horizontal fusion made regions: that path is covered


def test_unannotated_records_carry_no_memory(fwd_bwd):
    trace = _live_parts(fwd_bwd)["forward #0"][-1]
    lines = trace_lines(trace, annotate=False)
    assert not any(ln.has_memory or ln.peak for ln in lines)
    assert "\n".join(ln.text for ln in lines) + "\n" == trace.python_source(annotate=False)
    assert "| live" not in trace.python_source(annotate=False)


# -- JSON round trip ---------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["fwd_bwd", "two_programs"])
def test_report_reloaded_from_json_renders_the_same(which, request, tmp_path):
    report = request.getfixturevalue(which)
    data = json.loads(json.dumps(report.to_dict()))
    again = Report.from_dict(data)
    assert again.compilations is None and again.to_dict() == data
    assert _views(again) == _views(report)
    saved = trace_lab.load_report(report.save_json(tmp_path / "r.json"))
    assert type(saved) is Report and _views(saved) == _views(report)
    # the stages the views and the "see all" hint point to: the same text, without the Traces
    for kind in ("forward", "backward"):
        for program in range(len(report.programs)):
            assert [str(s) for s in again.traces(kind, program)] == [str(t) for t in report.traces(kind, program)]
    assert again.predicted_peak("backward") == report.predicted_peak("backward")


def test_reloaded_report_escapes_user_names(fwd_bwd):
    again = Report.from_dict(json.loads(json.dumps(fwd_bwd.to_dict())))
    page = H.standalone_page(again)
    assert EVIL not in page and html.escape(EVIL) in page
    assert "<img src=x" not in page  # the source comment of the function's first line


def test_reloaded_report_saves_the_same_graph_files(two_programs, tmp_path):
    from trace_lab.report.graph_export import save_graphs

    again = Report.from_dict(json.loads(json.dumps(two_programs.to_dict())))
    first = save_graphs(two_programs, tmp_path / "a", use_dot=False)
    second = save_graphs(again, tmp_path / "b", use_dot=False)
    names = [p.rsplit("/", 1)[1] for p in first]
    assert names == [p.rsplit("/", 1)[1] for p in second] and len(names) == 4 * 5  # per part: 2 graphs (.dot, .html) + memory
    for name in names:
        if not name.endswith(".html"):  # .dot and the memory plot; the pages' element ids are random
            assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text(), name
    # the live Traces drawn again give the same DOT as the model's graph data
    live = _live_parts(two_programs)["backward #1"]
    dot = (tmp_path / "a" / f"{_slug(two_programs.name)}_p1_backward_1_{_slug(live[-1].stage)}.dot").read_text()
    assert dot == trace_lab.report.graph.before_after(live[0], live[-1])[1].source


def _slug(s):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_.")


def test_two_programs_have_four_parts_and_their_graphs(two_programs):
    labels = [p.label for p in two_programs.view.parts]
    assert labels == ["forward #0", "backward #0", "forward #1", "backward #1"]
    for part in two_programs.view.parts:
        assert set(part.graphs) == {"before", "after"}
        dot = trace_lab.report.graph.digraph(part.graphs["after"]).source
        assert dot.startswith("digraph") and f"stage '{part.stages[-1].stage}'" in html.unescape(dot)


# -- the --nproc path --------------------------------------------------------------------------
def _rank_target():
    import trace_lab.distributed as tld

    report = trace_lab.inspect(_fn, *_inputs(), executor="eager", fusion="horizontal", runs=0)
    texts = {label: [str(t) for t in traces] for label, traces in _live_parts(report).items()}
    return {"report": report.to_dict(), "texts": texts,
            "rank_summary": {"rank": tld.current().rank, "first_run_seconds": report.first_run_seconds}}


def test_multi_process_report_is_built_from_the_workers_view_model(tmp_path):
    import trace_lab.distributed as tld
    from trace_lab.report.distributed_report import DistributedReport

    run = tld.run_distributed(_rank_target, nproc=2, device="cpu", timeout_s=240)
    values = run.values
    report = DistributedReport.from_ranks(values, {"nproc": 2, "backend": "gloo", "device": "cpu", "fsdp": None})
    texts = values[0]["texts"]
    assert [p.label for p in report.view.parts] == list(texts) == ["forward #0", "backward #0"]
    for label, stage_texts in texts.items():
        assert [str(s) for s in report.stored_traces(label)] == stage_texts  # rank 0's own printed text
    visible = html.unescape(re.sub(r"<[^>]+>", "", H.traces_html(report)))
    for stage_texts in texts.values():
        assert all(line in visible for line in stage_texts[-1].splitlines())
    graphs = H.graphs_html(report)
    assert "graph view failed" not in graphs and graphs.count("tl-gv-pane tl-gv-before") == 2  # both parts
    assert [t["kind"] for t in report.timeline["programs"]] == ["forward", "backward"]
    assert re.search(r"timeline \(rank 0, estimated", str(report))
    # and it reloads as what it was
    saved = trace_lab.load_report(report.save_json(tmp_path / "d.json"))
    assert type(saved) is DistributedReport and saved.ranks == report.ranks
    assert "<svg" in _views(saved)["summary"] and _views(saved) == _views(report)  # timeline plots included


def test_two_saved_reports_are_compared_from_their_files(fwd_bwd, two_programs, tmp_path):
    """A saved report reloads into the Compare table exactly as the live one: two runs compared from disk."""
    from trace_lab.report.table import best_rows, report_row

    live = [fwd_bwd, two_programs]
    loaded = [trace_lab.load_report(r.save_json(tmp_path / f"r{i}.json")) for i, r in enumerate(live)]
    rows_live = [report_row(r, f"run {i}") for i, r in enumerate(live)]
    rows_loaded = [report_row(r, f"run {i}") for i, r in enumerate(loaded)]
    assert rows_loaded == rows_live
    assert best_rows(rows_loaded) == best_rows(rows_live)
    # the rows carry the runs' own options and figures
    assert rows_loaded[0]["fusion"] == "horizontal" and rows_loaded[1]["fusion"] == "dataflow"
    assert all(r["peak_predicted"] and r["kernels"] for r in rows_loaded)
