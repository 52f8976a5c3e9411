"""Issue 26 item 5: a graph over ~100 ops is readable at fit.

The views' graphs (``before_after_data``, what the report's view model, the static Graph tab and the live
widget draw) of a large program are an overview: blocks of lines, one node each, repeated layers one
block each (:mod:`trace_lab.report.graph_overview`). Checked on the 8-layer decoder's backward (fusion
dataflow, eager executor, CPU; 1054 ops as captured, 346 lines after fusion), which drew a strip at
scale 0.07 before: at most 60 nodes, and dot's SVG fits a 900 x 600 pane at scale >= 0.5 (a side-by-side
half pane, 450 x 560, at >= 0.3); the blocks cover the program in order, the repeated layers are found,
the peak's block is marked; opening a block (``line_range``) draws its ops, down to the peak op; the
widget opens a clicked block in its pane and goes back. Small graphs are unchanged.
"""
from __future__ import annotations

import re
import shutil

import pytest

import trace_lab
from examples import workloads
from trace_lab.report.graph import before_after_data, digraph, graph_data
from trace_lab.report.graph_overview import OVERVIEW_NODES

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="needs the graphviz `dot` binary")


@pytest.fixture(scope="module")
def llama8():
    fn, args = workloads.get("llama8").make("cpu", "small")
    jfn = trace_lab.jit(fn, executor="eager", fusion="dataflow")
    jfn(*args).sum().backward()
    bws = trace_lab.last_backward_traces(jfn)
    return bws[0], bws[-1]


def _count(data: dict) -> int:
    return len(data["nodes"]) + sum(len(c["nodes"]) for c in data["clusters"])


def _fit(svg: str, w: float, h: float) -> float:
    vb = [float(v) for v in re.search(r'viewBox="([^"]+)"', svg).group(1).split()]
    return min(w / vb[2], h / vb[3])


def test_the_views_draw_a_large_backward_as_a_small_overview_of_blocks(llama8):
    first, last = llama8
    assert len(first.ops) > 1000 and len(last.ops) > 300
    before, after = before_after_data(first, last)
    peak = last.liveness().peak_line.node
    for data, trace in ((before, first), (after, last)):
        assert data.get("overview") is True and _count(data) <= OVERVIEW_NODES
        blocks = data["blocks"]
        ranges = [tuple(b["range"]) for b in blocks]
        assert ranges[0][0] == 0 and ranges[-1][1] == len(trace.ops)
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), "blocks must cover the lines in order"
        ids = {n[0] for n in data["nodes"]}
        assert {b["id"] for b in blocks} <= ids
        assert sum("repeat" in b["label"] for b in blocks) >= 4, "the decoder's repeated layers were not found"
        assert any("overview" in note for note in data["notes"])
    # the block holding the peak line is the marked one
    pos = last.ops.index(peak)
    (hot,) = [b for b in after["blocks"] if b["range"][0] <= pos < b["range"][1]]
    assert after["peak_node_id"] == hot["id"]


@needs_dot
def test_the_overview_is_readable_at_fit(llama8):
    from trace_lab.report.dot_render import render_svg

    first, last = llama8
    before, after = before_after_data(first, last)
    for data in (before, after):
        svg = render_svg(digraph(data))
        assert svg is not None
        assert _fit(svg, 900, 600) >= 0.5, "the overview is not readable in a 900 x 600 pane"
        assert _fit(svg, 450, 560) >= 0.3, "the overview is not readable in half a pane (side by side)"
        # the detailed picture of the same stage was the unreadable strip
        detail = render_svg(digraph(graph_data(last if data is after else first)))
        assert detail is not None and _fit(detail, 900, 600) < 0.3


def test_opening_a_block_draws_its_ops(llama8):
    _, last = llama8
    peak = last.liveness().peak_line.node
    pos = last.ops.index(peak)
    data = graph_data(last, overview=None)
    for _ in range(6):  # open the block holding the peak line until its ops are drawn
        if not data.get("overview"):
            break
        (hot,) = [b for b in data["blocks"] if b["range"][0] <= pos < b["range"][1]]
        lo, hi = hot["range"]
        assert hi - lo < (data["shown_range"] or [0, len(last.ops)])[1] - (data["shown_range"] or [0, 0])[0]
        data = graph_data(last, line_range=(lo, hi), overview=None)
    assert not data.get("overview") and _count(data) <= OVERVIEW_NODES + 1  # + the note
    lo, hi = data["shown_range"]
    assert lo <= pos < hi
    from trace_lab.analysis.region_record import region_record
    from trace_lab.report.graph_model import _safe_id

    drawn = set(data["fx_names"])
    ids = {n[0] for n in data["nodes"]} | {c["id"] for c in data["clusters"]}
    for op in last.ops[lo:hi]:  # every op of the block's lines: its node, or its fused region's node / cluster
        if op.op == "call_module":
            name = region_record(last, op).name
            assert _safe_id("r_", name) in ids or _safe_id("cluster_", name) in ids, name
        else:
            assert op.name in drawn, f"an opened block must show every op of its lines: {op.name}"
    assert data["peak_node_id"] is not None


@needs_dot
def test_the_widget_opens_a_clicked_block_and_goes_back(llama8):
    from trace_lab.notebook.graph_widget import GraphView

    first, last = llama8
    before, after = before_after_data(first, last)
    view = GraphView()
    view.show({"before": before, "after": after}, (first, last))
    overview_svg, before_svg = view.panes[1]["svg"], view.panes[0]["svg"]
    block = after["blocks"][1]
    assert f"<title>{block['id']}</title>" in overview_svg  # what the front end reads on a click
    lo, hi = block["range"]
    view._on_msg(view, {"open": {"side": "after", "start": lo, "stop": hi}}, [])  # what a click sends
    pane = view.panes[1]
    assert pane.get("back") and pane["svg"] != overview_svg and pane["svg"].count("<g id=\"node") >= 2
    assert view.panes[0]["svg"] == before_svg  # the other pane stays
    view._on_msg(view, {"back": "after"}, [])
    assert view.panes[1]["svg"] == overview_svg and not view.panes[1].get("back")


def test_small_graphs_are_drawn_in_full():
    import torch

    def f(x, w):
        return torch.relu(x @ w) * 2 + 1

    x, w = torch.randn(8, 8), torch.randn(8, 8, requires_grad=True)
    jfn = trace_lab.jit(f, executor="eager", fusion="dataflow")
    jfn(x, w).sum().backward()
    t0, t1 = trace_lab.last_traces(jfn)[0], trace_lab.last_traces(jfn)[-1]
    before, after = before_after_data(t0, t1)
    assert not before.get("overview") and not after.get("overview")
    assert before["shown_range"] is None and any(n[0].startswith("n_") for n in before["nodes"])


@needs_dot
@pytest.mark.browser
def test_the_static_reports_graph_shows_legible_labels_at_fit(tmp_path):
    """``Report.save_html`` of a 400-op chain in Chromium: at fit the overview's block labels are drawn
    at least 8 px tall (the detailed strip drew them under 1 px)."""
    pytest.importorskip("playwright.sync_api")
    import os

    import torch
    from playwright.sync_api import sync_playwright

    if not os.path.exists("/usr/bin/chromium"):
        pytest.skip("needs /usr/bin/chromium")

    def chain(x):
        for _ in range(200):
            x = torch.sin(x) * 1.01
        return x

    report = trace_lab.inspect(chain, torch.randn(8, 8), fusion="none", executor="eager", runs=0)
    path = tmp_path / "chain.html"
    report.save_html(str(path))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                    args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(path.as_uri())
            page.locator(".tl-tabs > label", has_text="Graph").first.click()
            graph = page.locator(".tl-graph").first
            graph.locator("svg g.node").first.wait_for(timeout=30_000)
            page.wait_for_timeout(300)
            nodes = graph.evaluate("""g => Array.from(g.querySelectorAll('svg g.node')).filter(n =>
                n.querySelector('text')).map(n => [(n.querySelector('title') || {}).textContent || '',
                n.querySelector('text').getBoundingClientRect().height])""")
        finally:
            browser.close()
    heights = sorted(h for _, h in nodes)
    assert heights and heights[len(heights) // 2] >= 8, f"node labels drawn {heights[len(heights) // 2]:.1f} px tall at fit"
    assert any(name.startswith("blk_") for name, _ in nodes), "the static graph is not the overview"
