"""DOT structure of trace graphs, on hand-made programs whose graphs are worked out by hand.

See tests/_graph_programs.py for the program and its sizes. Liveness by hand
(CPU, no rounding; inputs x 128 B + w 512 B = 640 B held throughout):

unfused:  relu +128 (768) | mm +256, a dies (hw 1024, live 896) | mul +256 (1152)
          | add +256 (hw 1408), b and c die -> peak 1408 at add;
          live while add runs: x, w, b, c, d (a died after mm).
fused:    relu (768) | mm (hw 1024, live 896) | fusion0 allocates only d: hw 1152
          -> peak 1152 at fusion0; live: x, w, b, d (c stays in registers).
"""
from __future__ import annotations

import graphviz
import pytest

from trace_lab.report.graph import TraceDigraph, before_after, dot_escape, live_at_peak, trace_graph

from _graph_programs import read_dot, red_outlined, small_fused_program, small_program, split_program

UNFUSED_EDGES = {
    ("in_x", "n_relu"): "128 B",
    ("n_relu", "n_mm"): "128 B",
    ("in_w", "n_mm"): "512 B",
    ("n_mm", "n_mul"): "256 B",
    ("n_mul", "n_add"): "256 B",
    ("n_mm", "n_add"): "256 B",
    ("n_add", "out_0"): "256 B",
}


def test_one_node_per_op_and_edges_carry_bytes():
    g = trace_graph(small_program())
    assert isinstance(g, graphviz.Digraph) and isinstance(g, TraceDigraph)
    dot = read_dot(g.source)
    assert set(dot["nodes"]) == {"in_x", "in_w", "n_relu", "n_mm", "n_mul", "n_add", "out_0"}
    assert dot["edges"] == UNFUSED_EDGES
    assert dot["clusters"] == {}
    assert g.notes == []
    # labels: value name, op name, dtype and shape
    assert "t1 = mm" in dot["nodes"]["n_mm"] and "f32[4, 16]" in dot["nodes"]["n_mm"]
    assert "t0 = relu" in dot["nodes"]["n_relu"] and "f32[4, 8]" in dot["nodes"]["n_relu"]


def test_multi_output_op_is_one_node_and_edges_sum_logical_bytes():
    # split's outputs are views of x (storage 128 B each) but carry 4*3*4 = 48 B and 4*5*4 = 80 B
    dot = read_dot(trace_graph(split_program()).source)
    assert set(dot["nodes"]) == {"in_x", "n_split", "n_cat", "out_0"}
    assert "t0, t1 = split_with_sizes" in dot["nodes"]["n_split"]
    assert "f32[4, 3], f32[4, 5]" in dot["nodes"]["n_split"]
    assert dot["edges"] == {("in_x", "n_split"): "128 B", ("n_split", "n_cat"): "128 B", ("n_cat", "out_0"): "128 B"}


def test_inputs_parameters_outputs_are_distinct():
    t = small_program()
    t.inputs[1].meta["val"].requires_grad_(True)  # w becomes a parameter
    dot = read_dot(trace_graph(t).source)
    x, w, op, out = (dot["nodes"][k] for k in ("in_x", "in_w", "n_mm", "out_0"))
    assert "shape=ellipse" in x and "<I>input</I>" in x
    assert "shape=ellipse" in w and "<I>parameter</I>" in w
    assert 'fillcolor="#dbeafe"' in x and 'fillcolor="#fef3c7"' in w
    assert "shape=box" in op
    assert "shape=invhouse" in out and "output 0" in out


def test_peak_highlight_matches_liveness():
    t = small_program()
    live = t.liveness()
    assert live.peak_bytes == 1408 and live.peak_line.node.name == "add"
    g = trace_graph(t)
    dot = read_dot(g.source)
    assert red_outlined(dot) == {"in_x", "in_w", "n_mm", "n_mul", "n_add"}
    assert g.peak_node_id == "n_add"
    assert "peripheries=2" in dot["nodes"]["n_add"]
    assert sum("peripheries=2" in a for a in dot["nodes"].values()) == 1
    peak_node, values = live_at_peak(t)
    assert {t.name(v) for v in values} == {"x", "w", "t1", "t2", "t3"}


def test_no_highlight_when_asked():
    dot = read_dot(trace_graph(small_program(), highlight_peak=False).source)
    assert red_outlined(dot) == set()
    assert not any("peripheries" in a for a in dot["nodes"].values())


def test_fused_region_is_a_cluster_wired_to_outer_values():
    t = small_fused_program()
    g = trace_graph(t, collapse_regions=False)
    dot = read_dot(g.source)
    assert dot["clusters"] == {"cluster_fusion0": {"n_mul", "n_add"}}
    assert dot["edges"] == UNFUSED_EDGES  # same values flow, now through the region
    (d,) = [u for u in t.ops[-1].users]  # the getitem that carries d out of the region
    assert f"{t.name(d)} = add" in dot["nodes"]["n_add"]  # the region output keeps its outer name
    # peak: the region's line (1152 B), only outputs allocated; c is not live
    assert t.liveness().peak_bytes == 1152
    assert g.peak_node_id == "cluster_fusion0"
    assert red_outlined(dot) == {"in_x", "in_w", "n_mm", "n_add"}
    assert 'color="#dc2626"' in g.source.split("subgraph cluster_fusion0 {")[1].split("\n")[1]


def test_fused_region_collapsed_to_one_node():
    g = trace_graph(small_fused_program(), collapse_regions=True)
    dot = read_dot(g.source)
    assert set(dot["nodes"]) == {"in_x", "in_w", "n_relu", "n_mm", "r_fusion0", "out_0"}
    assert dot["edges"] == {("in_x", "n_relu"): "128 B", ("n_relu", "n_mm"): "128 B", ("in_w", "n_mm"): "512 B",
                            ("n_mm", "r_fusion0"): "256 B", ("r_fusion0", "out_0"): "256 B"}
    assert "2 ops: mul, add" in dot["nodes"]["r_fusion0"]
    assert g.peak_node_id == "r_fusion0" and "r_fusion0" in red_outlined(dot)


def test_materialized_regions_move_the_peak_accounting():
    # eager executor: the region's inner c is materialised; hw = 896 + 256 (d) + 256 (c) = 1408
    t = small_fused_program()
    assert t.liveness(True).peak_bytes == 1408
    g = trace_graph(t, materialized_regions=True, collapse_regions=False)
    assert g.peak_node_id == "cluster_fusion0"
    # the peak figure shown is the materialised one, above the inputs (x + w = 640 B, see the module
    # docstring) as everywhere in the report
    assert t.liveness(True).peak_above_inputs_bytes == 1408 - 640
    assert "768 B above inputs" in g.source and "1.38 KiB" not in g.source


def test_recomputed_ops_marked_only_in_backward():
    bw = read_dot(trace_graph(small_program(kind="backward", recompute={"relu"})).source)
    assert "dashed" in bw["nodes"]["n_relu"] and "recomputed" in bw["nodes"]["n_relu"]
    assert "dashed" not in bw["nodes"]["n_mm"] and "recomputed" not in bw["nodes"]["n_mm"]
    fw = read_dot(trace_graph(small_program(kind="forward", recompute={"relu"})).source)
    assert "recomputed" not in fw["nodes"]["n_relu"]
    inner = read_dot(trace_graph(small_fused_program(kind="backward", recompute={"mul"}),
                                 collapse_regions=False).source)
    assert "recomputed" in inner["nodes"]["n_mul"] and "recomputed" not in inner["nodes"]["n_add"]


def test_line_range_keeps_a_slice_and_says_what_was_left_out():
    g = trace_graph(small_program(), line_range=(2, 4))
    dot = read_dot(g.source)
    # mul and add shown; mm's value comes in as a stub; x, w, relu left out
    assert {"n_mul", "n_add", "out_0"} <= set(dot["nodes"])
    assert not {"n_relu", "n_mm", "in_x", "in_w"} & set(dot["nodes"])
    stubs = [k for k in dot["nodes"] if k.startswith("ext_")]
    assert stubs == ["ext_mm"] and dot["edges"][("ext_mm", "n_mul")] == "256 B"
    assert any("lines 2-3 of 4" in n for n in g.notes) and "notes" in dot["nodes"]
    assert g.shown_range == (2, 4)
    with pytest.raises(ValueError, match="selects no op"):
        trace_graph(small_program(), line_range=(3, 3))


def test_max_nodes_collapses_then_windows():
    t = small_fused_program()
    g = trace_graph(t, max_nodes=6)  # expanded has 7 nodes, collapsed 6
    assert g.collapsed and any("collapsed" in n for n in g.notes)
    assert "r_fusion0" in read_dot(g.source)["nodes"]
    g2 = trace_graph(small_program(), max_nodes=3)
    assert g2.shown_range is not None and any("window around the peak" in n for n in g2.notes)
    lo, hi = g2.shown_range
    assert lo <= 3 < hi  # the window holds the peak line (add, op 3)


def test_window_can_cut_through_an_open_region():
    # drawable lines: relu, mm, fusion0/mul, fusion0/add; one line fits: add, around the peak (fusion0)
    g = trace_graph(small_fused_program(), collapse_regions=False, max_nodes=3)
    dot = read_dot(g.source)
    assert dot["clusters"] == {"cluster_fusion0": {"n_add"}}
    assert dot["edges"] == {("ext_mm", "n_add"): "256 B", ("ext_fusion0_mul", "n_add"): "256 B",
                            ("n_add", "out_0"): "256 B"}
    assert "f32[4, 16]" in dot["nodes"]["ext_fusion0_mul"] and "not shown" in dot["nodes"]["ext_fusion0_mul"]
    assert "(1 shown)" in g.source and g.shown_range == (2, 3)
    assert any("lines 3-3 of 4 (counting the ops inside fused regions)" in n for n in g.notes)
    assert g.peak_node_id == "cluster_fusion0" and "n_add" in red_outlined(dot)


def test_before_after_share_ids_and_layout():
    before, after = before_after(small_program(), small_fused_program(), collapse_regions=False)
    b, a = read_dot(before.source), read_dot(after.source)
    assert set(b["nodes"]) == set(a["nodes"])  # same values, same ids
    assert "cluster_fusion0" in a["clusters"] and not b["clusters"]
    assert "rankdir=TB" in before.source and "rankdir=TB" in after.source


def test_user_names_are_escaped_everywhere():
    evil = '<script>alert("x")</script>'
    t = small_program(input_names=(evil, "w'\"\\N"))
    t.ops[0].meta["stack_trace"] = f'  File "/tmp/{evil}.py", line 3, in f\n    y = relu({evil})\n'
    g = trace_graph(t, title=f"fn {evil}")
    src = g.source
    assert "<script" not in src and 'alert("x")' not in src
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in src
    assert "\\N" not in src.replace("\\\\", "")  # a backslash never starts a DOT escape
    assert dot_escape("a\\b\n<c>") == "a\\\\b&#10;&lt;c&gt;"


def test_bad_input_is_explained():
    with pytest.raises(TypeError, match="needs a trace_lab Trace"):
        trace_graph("not a trace")
    with pytest.raises(ValueError, match="max_nodes"):
        trace_graph(small_program(), max_nodes=0)
