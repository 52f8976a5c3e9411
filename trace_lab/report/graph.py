"""Dataflow graphs of a Trace, as Graphviz DOT (through the ``graphviz`` package).

Design: :func:`trace_graph` first builds a small *model* of the picture (nodes,
edges, clusters) from the fx graph and the trace's liveness, then emits DOT.
One node per op (name, op, output dtype/shape), one per program input
(input / parameter / tangent / saved activation / constant), one per program
output; an edge per (producer, consumer), labelled with the logical bytes
(numel x itemsize) of the values it carries. A fused region
(a ``call_module`` node, see HELPERS.md) becomes a coloured cluster holding its
inner ops, whose placeholders and outputs are wired straight to the outer
producers and consumers, or one collapsed node. Values live while the peak line
runs (from ``trace.liveness()``) get a red outline; the peak op is filled red;
ops recomputed in a backward are dashed.

Node ids are derived from fx node names (``n_<fx name>``, inputs ``in_<name>``),
so the same value has the same id before and after a pass that copies nodes
(as fusion does): :func:`before_after` relies on that to make the two pictures
comparable. Every label that can come from user code is HTML-escaped and
emitted either in an HTML-like label or as an escaped quoted string.

Large programs: above ``max_nodes`` the graph collapses fused regions (unless
one is too large to hide in a node), then keeps only a window of lines around
the peak (a window may cut through an open region), and says so in a note node
and in ``digraph.notes``. The model (:mod:`.graph_model`) is built in time
linear in the trace; layout time is bounded by the node cap and by
:func:`~trace_lab.report.render.render_svg`'s timeout.
"""
from __future__ import annotations

import textwrap

import graphviz

from ..printer import format_bytes
from ..trace import Trace
from .graph_model import (DEFAULT_MAX_NODES, PEAK_COLOR, _cluster_id, _html_label, _plan, _safe_id, dot_escape,
                          input_kind, is_recomputed, live_at_peak)

__all__ = ["TraceDigraph", "trace_graph", "before_after", "input_kind", "is_recomputed", "live_at_peak",
           "dot_escape", "DEFAULT_MAX_NODES"]


class TraceDigraph(graphviz.Digraph):
    """A ``graphviz.Digraph`` that also says what it shows and what it left out."""

    notes: list[str]
    value_ids: dict[str, str]  # trace value name -> DOT node id
    shown_range: tuple[int, int] | None  # slice of trace.ops shown, None = all
    collapsed: bool
    peak_node_id: str | None  # the peak op's node id, or its region's cluster id
    live_at_peak_ids: set[str]
    fx_names: set[str]  # names of the fx nodes drawn (ops and the ops inside regions)

    def _repr_mimebundle_(self, include=None, exclude=None, **kwargs):
        """Notebook display: graphviz's own (needs ``dot``), else the in-browser WebAssembly renderer."""
        from .render import dot_available, graph_html

        if dot_available():
            return super()._repr_mimebundle_(include, exclude, **kwargs)
        return {"text/html": graph_html(self, use_dot=False)}


# -- public API ------------------------------------------------------------------------------
def trace_graph(trace: Trace, *, highlight_peak: bool = True, collapse_regions: bool | None = None,
                line_range: tuple[int, int] | None = None, max_nodes: int = DEFAULT_MAX_NODES,
                materialized_regions: bool | None = None, rankdir: str = "TB",
                title: str | None = None, _focus: set[str] | None = None) -> TraceDigraph:
    """The dataflow graph of ``trace`` as a :class:`TraceDigraph` (a ``graphviz.Digraph``).

    ``collapse_regions``: True draws each fused region as one node, False as a
    cluster of its ops, None decides by size. ``line_range=(start, stop)`` keeps
    ``trace.ops[start:stop]``. Above ``max_nodes`` nodes, regions are collapsed
    (unless forced open, or one is too large to hide in a node) and then a
    window of lines around the peak line is kept (a window can cut through an
    open region); what was left out is listed in ``.notes`` and in a note node.
    ``materialized_regions`` selects the liveness model (True: the executor runs
    regions op by op, as the eager executor does).
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"trace_graph needs a trace_lab Trace, got {type(trace).__name__}")
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be at least 1, got {max_nodes}")
    plan = _plan(trace, materialized_regions, collapse_regions, line_range, max_nodes, highlight_peak, _focus)
    model, notes = plan.model, plan.notes
    live = trace.liveness(materialized_regions)
    g = TraceDigraph(name=_safe_id("trace_", f"{trace.kind}_{trace.stage}"))
    g.notes, g.value_ids, g.shown_range, g.collapsed = notes, model.value_ids, plan.shown_range, plan.collapsed
    g.fx_names = set(model.fx_names)
    g.peak_node_id, g.live_at_peak_ids = model.peak_id, set(model.live_ids)
    head = title or f"{trace.kind} · stage '{trace.stage}' · {len(trace.ops)} ops"
    peak = (f"peak {format_bytes(live.peak_bytes)} at {live.peak_line.name}" if live.peak_line
            else f"peak {format_bytes(live.peak_bytes)} at entry")
    legend = "red outline: live at the peak · dashed: recomputed · clusters: fused regions" if highlight_peak \
        else "dashed: recomputed · clusters: fused regions"
    g.attr(rankdir=rankdir, newrank="true", fontname="Helvetica", fontsize="11", labelloc="t",
           label=_html_label([(head, "b"), (peak, "small"), (legend, "small")]))
    g.attr("node", fontname="Helvetica", fontsize="10", margin="0.06,0.03", height="0.3")
    g.attr("edge", fontname="Helvetica", fontsize="8", color="#6b7280", fontcolor="#374151", arrowsize="0.6")
    if notes:
        rows = [("left out of this picture", "b")]
        rows += [(line, "small") for n in notes for line in textwrap.wrap(n, 80)]
        g.node("notes", _html_label(rows),
               shape="note", style="filled", fillcolor="#fff7ed", color="#c2410c")
    for nid, node in model.nodes.items():
        if node.cluster is None:
            g.node(nid, node.label, **node.attrs)
    for cname, info in model.clusters.items():
        with g.subgraph(name=_cluster_id(cname)) as c:
            c.attr(label=_html_label([(info["label"], "b")]), style="filled,rounded", fillcolor=info["color"],
                   color=PEAK_COLOR if (info["peak"] and highlight_peak) else "#6b7280",
                   penwidth="2.5" if (info["peak"] and highlight_peak) else "1")
            for nid, node in model.nodes.items():
                if node.cluster == cname:
                    c.node(nid, node.label, **node.attrs)
    for (src, dst), values in model.edges.items():
        g.edge(src, dst, label=dot_escape(format_bytes(sum(values.values()))))
    return g


def before_after(trace_before: Trace, trace_after: Trace, **options) -> tuple[TraceDigraph, TraceDigraph]:
    """Graphs of two stages of one program, laid out to be compared.

    Same options (rankdir, node cap); a value keeps its node id in both when its
    fx node kept its name. If the first graph had to be cut to a window of
    lines, the second is cut to the lines that hold the same fx nodes.
    """
    before = trace_graph(trace_before, **options)
    focus = before.fx_names if before.shown_range is not None and options.get("line_range") is None else None
    after = trace_graph(trace_after, _focus=focus, **options)
    return before, after


def __getattr__(name):
    """Rendering (:mod:`.render`) and export (:mod:`.graph_export`) are reachable from here too."""
    if name in ("render_svg", "graph_html", "graph_view_html", "dot_available"):
        from . import render

        return getattr(render, name)
    if name == "save_graphs":
        from .graph_export import save_graphs

        return save_graphs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
