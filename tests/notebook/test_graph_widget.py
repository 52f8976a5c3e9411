"""The Graph tab's widget (trace_lab.notebook.graph_widget.GraphView): what the kernel sends its front end.

The front end (pan, zoom, side by side, click) is driven in a real browser by tests/notebook/test_browser.py;
here: the panes carry dot's SVG of the before/after graphs with the report's one peak, names from user code
arrive escaped, and the window of a large graph moves by half a window, clamped to the program.
"""
from __future__ import annotations

import shutil

import pytest
import torch

import trace_lab
from trace_lab.notebook.graph_widget import GraphView
from trace_lab.ir.printer import format_bytes
from trace_lab.report.html import report_parts

pytestmark = pytest.mark.skipif(shutil.which("dot") is None, reason="needs the graphviz `dot` binary")


def _part(report, label="forward #0"):
    return next(p for p in report_parts(report) if p.label == label)


def test_panes_are_dots_svgs_with_the_peak_above_inputs_and_escaped_source():
    def f(x, w):
        a = torch.relu(x @ w)
        return torch.where(a < 1, a * 2, a - 1) + 1  # a '<' in the source line the tooltips quote

    x, w = torch.randn(16, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True)
    report = trace_lab.inspect(f, x, w, fusion="dataflow", executor="eager", runs=0)
    part = _part(report)
    view = GraphView()
    view.show(part.graphs)
    assert [p["side"] for p in view.panes] == ["before", "after"]
    for pane in view.panes:
        assert pane["svg"].lstrip().startswith(("<?xml", "<!DOCTYPE", "<svg")) and "</svg>" in pane["svg"]
        assert "<script" not in pane["svg"]
        assert "a &lt; 1" in pane["svg"] and "a < 1" not in pane["svg"]  # escaped in the tooltip
    after = view.panes[1]["svg"]
    stage = part.stages[-1]  # the Trace tab's figure: the stage's peak above its entry (the inputs)
    assert f"peak {format_bytes(stage.peak_bytes - stage.entry_bytes)} above inputs" in after
    assert view.window == {}  # a small graph: no window to move


def test_a_large_graphs_window_moves_by_half_a_window_and_stops_at_the_ends():
    def chain(x):
        for _ in range(260):
            x = torch.sin(x) * 1.01
        return x

    x = torch.randn(8, 8)
    jfn = trace_lab.jit(chain, fusion="none", executor="eager")
    jfn(x)
    trace = trace_lab.last_traces(jfn)[-1]
    from trace_lab.report.graph import before_after_data

    before, after = before_after_data(trace, trace, overview=False)  # the detailed picture, windowed
    assert before["shown_range"] is not None, "the chain should be over the node cap"
    view = GraphView()
    view.show({"before": before, "after": after}, (trace, trace))
    first, last, total = view.window["first"], view.window["last"], view.window["total"]
    width = last - first + 1
    assert total == len(trace.ops) and 0 < width < total
    view._on_msg(view, {"move": 1}, [])  # what the "later lines" button sends
    assert view.window["first"] == min(first + width // 2, total - width)
    for _ in range(2 * total // max(1, width // 2)):
        view.move_window(1)
    assert view.window["last"] == total - 1  # clamped at the end
    for _ in range(2 * total // max(1, width // 2)):
        view.move_window(-1)
    assert view.window["first"] == 0
    assert all("<svg" in p["svg"] for p in view.panes)
