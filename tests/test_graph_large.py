"""Large programs: the 8-layer decoder's backward gives a bounded graph that says what it left out."""
from __future__ import annotations

import re
import shutil

import pytest

import trace_lab
from examples import workloads
from trace_lab.report.graph import DEFAULT_MAX_NODES, before_after, trace_graph
from trace_lab.report.render import graph_html, render_svg
from trace_lab.report.graph_export import save_graphs

from _graph_programs import fuse_consecutive, is_pointwise, read_dot, small_fused_program, small_program


@pytest.fixture(scope="module")
def llama8_backward():
    fn, args = workloads.get("llama8").make("cpu", "small")
    jfn = trace_lab.jit(fn, executor="eager")
    jfn(*args).sum().backward()
    (bw,) = trace_lab.last_backward_traces(jfn)[-1:]
    assert len(bw.ops) > 3 * DEFAULT_MAX_NODES  # really too big to draw whole
    return bw


def test_llama8_backward_window_around_peak(llama8_backward):
    bw = llama8_backward
    g = trace_graph(bw)
    dot = read_dot(g.source)
    assert len(dot["nodes"]) <= DEFAULT_MAX_NODES + 1  # + the note node
    lo, hi = g.shown_range
    n = len(bw.ops)
    assert 0 < hi - lo < n
    peak_pos = bw.ops.index(bw.liveness().peak_line.node)
    assert lo <= peak_pos < hi and g.peak_node_id in dot["nodes"]
    # every op of the window drawn, none outside it
    shown = {f"n_{op.name}" for op in bw.ops[lo:hi]}
    left_out = {f"n_{op.name}" for op in bw.ops[:lo] + bw.ops[hi:]}
    assert shown <= set(dot["nodes"]) and not (left_out & set(dot["nodes"]))
    assert any(f"{lo} lines before and {n - hi} after left out" in note for note in g.notes)
    assert "notes" in dot["nodes"] and "left out of this picture" in g.source
    stubs = [k for k in dot["nodes"] if k.startswith("ext_")]
    assert any(f"{len(stubs)} values made by lines not shown" in note for note in g.notes) or not stubs


def test_llama8_backward_fused_collapses_regions_first(llama8_backward):
    fused = fuse_consecutive(llama8_backward, is_pointwise)
    regions = [op for op in fused.ops if op.op == "call_module"]
    assert regions
    g = trace_graph(fused, max_nodes=10_000)  # fits: drawn expanded
    assert not g.collapsed and len(read_dot(g.source)["clusters"]) == len(regions)
    g = trace_graph(fused, max_nodes=len(fused.ops) + len(fused.inputs) + 80)
    assert g.collapsed and any(f"{len(regions)} fused regions collapsed" in note for note in g.notes)
    assert not read_dot(g.source)["clusters"]
    before, after = before_after(llama8_backward, fused)
    assert before.shown_range is not None and after.shown_range is not None
    common = set(read_dot(before.source)["nodes"]) & set(read_dot(after.source)["nodes"])
    assert len(common) > 50  # same values, same ids, in comparable windows


def test_llama8_backward_giant_region_drawn_open_through_a_window(llama8_backward):
    fused = fuse_consecutive(llama8_backward, lambda n: True)
    sizes = [len(fused.gm.get_submodule(op.target).graph.nodes) for op in fused.ops if op.op == "call_module"]
    assert max(sizes) > DEFAULT_MAX_NODES  # one region too big to draw, or to hide in a node
    g = trace_graph(fused)
    dot = read_dot(g.source)
    assert not g.collapsed and any("drawn open" in note for note in g.notes)
    assert len(dot["nodes"]) <= DEFAULT_MAX_NODES + 1 and dot["clusters"]
    assert re.search(r"fusion\d+ · \d+ ops \(\d+ shown\)", g.source)  # the window cut through a region
    assert any("counting the ops inside fused regions" in note for note in g.notes)


@pytest.mark.dot
@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz `dot` is not on PATH")
def test_llama8_backward_lays_out_with_dot(llama8_backward):
    svg = render_svg(trace_graph(llama8_backward), timeout=60)  # a hang guard, not a timing assertion
    assert svg is not None and svg.count('class="node"') > 100


def test_save_graphs_from_traces(tmp_path):
    paths = save_graphs([small_program(), small_fused_program()], tmp_path / "out", use_dot=False)
    names = sorted(p.split("/")[-1] for p in paths)
    assert names == ["0_forward_0_as_captured.dot", "0_forward_0_as_captured.html", "0_forward_memory.svg",
                     "1_forward_0_fusion.dot", "1_forward_0_fusion.html", "1_forward_memory.svg"]
    html = (tmp_path / "out" / "1_forward_0_fusion.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "renderSVGElement" in html
    assert "cluster_fusion0" in (tmp_path / "out" / "1_forward_0_fusion.dot").read_text()


def test_save_graphs_from_report(tmp_path):
    import torch

    def f(x):
        return (torch.relu(x) * 2).sum()

    report = trace_lab.inspect(f, torch.randn(8, 8, requires_grad=True), executor="eager", runs=1,
                               name='<script>alert("x")</script>')
    paths = save_graphs(report, tmp_path)
    names = [p.split("/")[-1] for p in paths]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", n) for n in names)
    kinds = {n.split("_p0_")[1].split("_")[0] for n in names}
    assert kinds == {"forward", "backward"}
    drawn = ".svg" if shutil.which("dot") else ".html"  # laid out by dot, or in the browser
    stages = [len(r.stages) for r in report.compilations]
    expected = sum(min(n, 2) for n in stages)  # first and last stage of each part
    assert len(stages) == 2 and sum(n.endswith(drawn) and "_memory" not in n for n in names) == expected
    with pytest.raises(TypeError, match="a Report, a Trace or a list of Traces"):
        save_graphs([1, 2], tmp_path)


def test_graph_html_of_large_graph_is_self_contained(llama8_backward):
    page = graph_html(trace_graph(llama8_backward), use_dot=False, include_js=False)
    assert "left out of this picture" in page and "tl-graph-notes" in page
