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
:func:`~trace_lab.report.dot_render.render_svg`'s timeout. :func:`graph_view_html` lays out the
before/after graphs of one program side by side (rendered by :mod:`.dot_render`).

Graphs are data first: :func:`graph_data` is the picture as plain data (what a Report's
view model keeps, :mod:`.view_model`), and :func:`digraph` makes the DOT from it on demand.
"""
from __future__ import annotations

import html as _html
import textwrap
import uuid

import graphviz

from ..ir.printer import format_bytes
from ..ir.trace import Trace
from .dot_render import dot_available, graph_assets_html, graph_html, viz_loader_html
from .graph_overview import OVERVIEW_NODES
from .graph_model import (DEFAULT_MAX_NODES, PEAK_COLOR, _cluster_id, _html_label, _plan, _safe_id, dot_escape,
                          input_kind, is_recomputed, live_at_peak)

__all__ = ["TraceDigraph", "trace_graph", "graph_data", "digraph", "before_after", "before_after_data",
           "graph_view_html", "graph_pair_html", "input_kind", "is_recomputed", "live_at_peak",
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
        if dot_available():
            return super()._repr_mimebundle_(include, exclude, **kwargs)
        return {"text/html": graph_html(self, use_dot=False)}


# -- public API ------------------------------------------------------------------------------
def trace_graph(trace: Trace, *, highlight_peak: bool = True, collapse_regions: bool | None = None,
                line_range: tuple[int, int] | None = None, max_nodes: int = DEFAULT_MAX_NODES,
                materialized_regions: bool | None = None, rankdir: str = "TB",
                title: str | None = None, _focus: set[str] | None = None,
                overview: bool | None = False) -> TraceDigraph:
    """The dataflow graph of ``trace`` as a :class:`TraceDigraph` (a ``graphviz.Digraph``).

    ``collapse_regions``: True draws each fused region as one node, False as a
    cluster of its ops, None decides by size. ``line_range=(start, stop)`` keeps
    ``trace.ops[start:stop]``. Above ``max_nodes`` nodes, regions are collapsed
    (unless forced open, or one is too large to hide in a node) and then a
    window of lines around the peak line is kept (a window can cut through an
    open region); what was left out is listed in ``.notes`` and in a note node.
    ``materialized_regions`` selects the liveness model (True: the executor runs
    regions op by op, as the eager executor does). ``overview`` as in :func:`graph_data`. The picture is
    :func:`graph_data`, drawn
    by :func:`digraph`.
    """
    return digraph(graph_data(trace, highlight_peak=highlight_peak, collapse_regions=collapse_regions,
                              line_range=line_range, max_nodes=max_nodes, materialized_regions=materialized_regions,
                              rankdir=rankdir, title=title, _focus=_focus, overview=overview))


def graph_data(trace: Trace, *, highlight_peak: bool = True, collapse_regions: bool | None = None,
               line_range: tuple[int, int] | None = None, max_nodes: int = DEFAULT_MAX_NODES,
               materialized_regions: bool | None = None, rankdir: str = "TB",
               title: str | None = None, _focus: set[str] | None = None, overview: bool | None = False) -> dict:
    """The graph :func:`trace_graph` draws, as plain data (JSON-ready): graph, node and edge attributes,
    nodes (``[id, label, attrs]``, labels already escaped), clusters (fused regions: id, attributes,
    nodes), edges (``[src, dst, label]``), the notes on what was left out, and what the picture shows
    (``value_ids``, ``shown_range``, ``collapsed``, ``peak_node_id``, ``live_at_peak_ids``, ``fx_names``;
    ``kind``, ``stage``, ``ops`` of the trace). :func:`digraph` makes the DOT from it.

    ``overview``: False draws the detailed picture; True the overview of :mod:`.graph_overview` (the lines
    as at most a dozen blocks, one node each; ``blocks`` lists them); None (what the report's views use)
    the detailed picture while it has at most ``OVERVIEW_NODES`` nodes (collapsing fused regions if that
    is enough), else the overview, so that the picture stays readable when fitted into a pane."""
    if not isinstance(trace, Trace):
        raise TypeError(f"trace_graph needs a trace_lab Trace, got {type(trace).__name__}")
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be at least 1, got {max_nodes}")
    if overview is None and line_range is not None and int(line_range[1]) - int(line_range[0]) <= 1:
        overview = False  # one line: nothing smaller to open
    if overview is True:
        return _overview(trace, line_range, materialized_regions, highlight_peak, rankdir, title)
    plan = _plan(trace, materialized_regions, collapse_regions, line_range, max_nodes, highlight_peak, _focus)
    if overview is None and len(plan.model.nodes) > OVERVIEW_NODES:
        n_regions = sum(1 for n in trace.ops if n.op == "call_module")
        if collapse_regions is None and not plan.collapsed and n_regions:
            collapsed = _plan(trace, materialized_regions, True, line_range, max_nodes, highlight_peak, _focus)
            if len(collapsed.model.nodes) <= OVERVIEW_NODES:
                collapsed.notes.insert(0, f"fused regions collapsed to one node each, so that the picture stays "
                                          f"readable at fit (pass collapse_regions=False to open them)")
                plan = collapsed
        if len(plan.model.nodes) > OVERVIEW_NODES:
            return _overview(trace, line_range, materialized_regions, highlight_peak, rankdir, title)
    model, notes = plan.model, plan.notes
    live = trace.liveness(materialized_regions)
    head = title or f"{trace.kind} · stage '{trace.stage}' · {len(trace.ops)} ops"
    # the peak as everywhere in the report: above the program's inputs
    peak = (f"peak {format_bytes(live.peak_above_inputs_bytes)} above inputs at {live.peak_line.name}"
            if live.peak_line else f"peak {format_bytes(live.peak_above_inputs_bytes)} above inputs at entry")
    legend = "red outline: live at the peak · dashed: recomputed · clusters: fused regions" if highlight_peak \
        else "dashed: recomputed · clusters: fused regions"
    nodes = []
    if notes:
        rows = [("left out of this picture", "b")]
        rows += [(line, "small") for n in notes for line in textwrap.wrap(n, 80)]
        nodes.append(["notes", _html_label(rows), {"shape": "note", "style": "filled", "fillcolor": "#fff7ed",
                                                   "color": "#c2410c"}])
    nodes += [[nid, node.label, dict(node.attrs)] for nid, node in model.nodes.items() if node.cluster is None]
    clusters = []
    for cname, info in model.clusters.items():
        hot = info["peak"] and highlight_peak
        clusters.append({"id": _cluster_id(cname),
                         "attrs": {"label": _html_label([(info["label"], "b")]), "style": "filled,rounded",
                                   "fillcolor": info["color"], "color": PEAK_COLOR if hot else "#6b7280",
                                   "penwidth": "2.5" if hot else "1"},
                         "nodes": [[nid, node.label, dict(node.attrs)] for nid, node in model.nodes.items()
                                   if node.cluster == cname]})
    return {
        "name": _safe_id("trace_", f"{trace.kind}_{trace.stage}"), "kind": trace.kind, "stage": trace.stage,
        "ops": len(trace.ops),
        "attrs": _graph_attrs(head, peak, legend, rankdir),
        "node_attrs": {"fontname": "Helvetica", "fontsize": "10", "margin": "0.06,0.03", "height": "0.3"},
        "edge_attrs": {"fontname": "Helvetica", "fontsize": "8", "color": "#6b7280", "fontcolor": "#374151",
                       "arrowsize": "0.6"},
        "nodes": nodes, "clusters": clusters,
        "edges": [[src, dst, dot_escape(format_bytes(sum(values.values())))]
                  for (src, dst), values in model.edges.items()],
        "notes": list(notes), "value_ids": dict(model.value_ids),
        "shown_range": list(plan.shown_range) if plan.shown_range is not None else None,
        "collapsed": plan.collapsed, "peak_node_id": model.peak_id,
        "live_at_peak_ids": sorted(model.live_ids), "fx_names": sorted(model.fx_names),
    }


def _graph_attrs(head: str, peak: str, legend: str, rankdir: str) -> dict:
    return {"rankdir": rankdir, "newrank": "true", "fontname": "Helvetica", "fontsize": "11", "labelloc": "t",
            "label": _html_label([(head, "b"), (peak, "small"), (legend, "small")])}


def _overview(trace: Trace, line_range, materialized_regions, highlight_peak: bool, rankdir: str,
              title: str | None) -> dict:
    """:func:`graph_data` of the overview (:mod:`.graph_overview`): one node per block of lines."""
    from .graph_overview import overview_data

    if line_range is not None:
        lo, hi = max(0, int(line_range[0])), min(len(trace.ops), int(line_range[1]))
        if lo >= hi:
            raise ValueError(f"line_range={tuple(line_range)!r} selects no op; the trace has {len(trace.ops)} ops "
                             "(line_range is a slice (start, stop) of trace.ops)")
        line_range = (lo, hi) if (lo, hi) != (0, len(trace.ops)) else None
    nodes, edges, notes, extra = overview_data(trace, line_range, materialized_regions, highlight_peak)
    live = trace.liveness(materialized_regions)
    span = f" · lines {line_range[0]}-{line_range[1] - 1}" if line_range else ""
    head = title or f"{trace.kind} · stage '{trace.stage}' · {len(trace.ops)} ops{span} · overview"
    peak = (f"peak {format_bytes(live.peak_above_inputs_bytes)} above inputs at {live.peak_line.name}"
            if live.peak_line else f"peak {format_bytes(live.peak_above_inputs_bytes)} above inputs at entry")
    legend = ("one node per block of lines (a fused region is one line) · edges: bytes handed on · "
              "red: the block holding the peak line · click a block to open it")
    note = ["notes", _html_label([("overview", "b")] + [(line, "small") for n in notes
                                                         for line in textwrap.wrap(n, 60)]),
            {"shape": "note", "style": "filled", "fillcolor": "#fff7ed", "color": "#c2410c"}]
    return {
        "name": _safe_id("trace_", f"{trace.kind}_{trace.stage}"), "kind": trace.kind, "stage": trace.stage,
        "ops": len(trace.ops), "attrs": {**_graph_attrs(head, peak, legend, rankdir), "ranksep": "0.3",
                                         "nodesep": "0.25"},
        "node_attrs": {"fontname": "Helvetica", "fontsize": "12", "margin": "0.08,0.04", "height": "0.3"},
        "edge_attrs": {"fontname": "Helvetica", "fontsize": "10", "color": "#6b7280", "fontcolor": "#374151",
                       "arrowsize": "0.7"},
        "nodes": [note] + nodes, "clusters": [], "edges": edges, "notes": list(notes), "value_ids": {},
        "shown_range": list(line_range) if line_range else None, "collapsed": True,
        "peak_node_id": extra["peak_node_id"], "live_at_peak_ids": [], "fx_names": [],
        "overview": True, "blocks": extra["blocks"],
    }


def digraph(data: dict) -> TraceDigraph:
    """The :class:`TraceDigraph` (DOT) of :func:`graph_data`'s data."""
    g = TraceDigraph(name=data["name"])
    g.notes, g.value_ids, g.collapsed = list(data["notes"]), dict(data["value_ids"]), data["collapsed"]
    g.shown_range = tuple(data["shown_range"]) if data["shown_range"] is not None else None
    g.fx_names = set(data["fx_names"])
    g.peak_node_id, g.live_at_peak_ids = data["peak_node_id"], set(data["live_at_peak_ids"])
    g.attr(**data["attrs"])
    g.attr("node", **data["node_attrs"])
    g.attr("edge", **data["edge_attrs"])
    for nid, label, attrs in data["nodes"]:
        g.node(nid, label, **attrs)
    for cluster in data["clusters"]:
        with g.subgraph(name=cluster["id"]) as c:
            c.attr(**cluster["attrs"])
            for nid, label, attrs in cluster["nodes"]:
                c.node(nid, label, **attrs)
    for src, dst, label in data["edges"]:
        g.edge(src, dst, label=label)
    return g


def before_after(trace_before: Trace, trace_after: Trace, **options) -> tuple[TraceDigraph, TraceDigraph]:
    """Graphs of two stages of one program, laid out to be compared.

    Same options (rankdir, node cap); a value keeps its node id in both when its
    fx node kept its name. If the first graph had to be cut to a window of
    lines, the second is cut to the lines that hold the same fx nodes.
    """
    options.setdefault("overview", False)
    before, after = before_after_data(trace_before, trace_after, **options)
    return digraph(before), digraph(after)


def before_after_data(trace_before: Trace, trace_after: Trace, **options) -> tuple[dict, dict]:
    """:func:`before_after` as :func:`graph_data` (plain data); ``overview`` defaults to None here (the report's
    views: a picture too large to read at fit is drawn as its overview, each stage on its own)."""
    options.setdefault("overview", None)
    before = graph_data(trace_before, **options)
    focus = set(before["fx_names"]) if before["shown_range"] is not None and options.get("line_range") is None \
        and not before.get("overview") else None
    after = graph_data(trace_after, _focus=focus, **options)
    return before, after


def graph_view_html(trace_before, trace_after, *, height: str = "600px", use_dot: bool | None = None,
                    include_js: bool = True, compress: bool = False, shared_assets: bool = True,
                    **graph_options) -> str:
    """Before/after graphs of one program, side by side, with a toggle (side by side / before / after).

    The renderer is included once when a graph needs it and ``include_js``; ``compress`` as in
    :func:`.dot_render.graph_html`. :func:`graph_pair_html` draws the same from graph data."""
    before, after = before_after_data(trace_before, trace_after, **graph_options)
    return graph_pair_html(before, after, height=height, use_dot=use_dot, include_js=include_js, compress=compress,
                           shared_assets=shared_assets)


def graph_pair_html(before: dict, after: dict, *, height: str = "600px", use_dot: bool | None = None,
                    include_js: bool = True, compress: bool = False, shared_assets: bool = True) -> str:
    """:func:`graph_view_html` from two :func:`graph_data` graphs (e.g. a report's view model); with
    ``shared_assets`` the graphs' CSS and scripts come once, before both panes (False: the page has them)."""
    vid = "tlgv-" + uuid.uuid4().hex[:12]
    panes = []
    for side, data in (("before", before), ("after", after)):
        title = f"{side}: {data['kind']} · {data['stage']} · {data['ops']} ops"
        panes.append(f"<div class='tl-gv-pane tl-gv-{side}'><h4>{_html.escape(title)}</h4>"
                     f"{graph_html(digraph(data), height=height, include_js=False, use_dot=use_dot, compress=compress, shared_assets=False)}"
                     "</div>")
    needs_viz = any("data-tl-viz" in p for p in panes)
    loader = viz_loader_html(compressed=compress) if needs_viz and include_js else ""
    radios, labels = [], []
    for mode, text in (("both", "side by side"), ("before", "before only"), ("after", "after only")):
        rid = f"{vid}-{mode}"
        radios.append(f"<input type='radio' name='{vid}' id='{rid}' class='tl-gv-{mode}-r'"
                      + (" checked" if mode == "both" else "") + ">")
        labels.append(f"<label for='{rid}'>{text}</label>")
    css = (f"#{vid} input{{display:none}}"
           f"#{vid} .tl-gv-before-r:checked~.tl-gv-panes .tl-gv-after{{display:none}}"
           f"#{vid} .tl-gv-after-r:checked~.tl-gv-panes .tl-gv-before{{display:none}}"
           f"#{vid} .tl-gv-both-r:checked~.tl-gv-bar label[for='{vid}-both'],"
           f"#{vid} .tl-gv-before-r:checked~.tl-gv-bar label[for='{vid}-before'],"
           f"#{vid} .tl-gv-after-r:checked~.tl-gv-bar label[for='{vid}-after']{{font-weight:600;"
           "text-decoration:underline}")
    refit = (f"<script>document.querySelectorAll('#{vid} input').forEach(function(r){{r.addEventListener('change',"
             f"function(){{document.querySelectorAll('#{vid} .tl-graph').forEach(function(g){{"
             "if(g.__tlFit){g.__tlFit();}});});});</script>")
    assets = graph_assets_html() if shared_assets else ""
    return (f"<div class='tl-gv' id='{vid}'><style>{css}</style>{assets}{loader}{''.join(radios)}"
            f"<div class='tl-gv-bar'>{''.join(labels)}</div><div class='tl-gv-panes'>{''.join(panes)}</div>"
            f"{refit}</div>")


def __getattr__(name):
    """The renderer's entry points (:mod:`.dot_render`) are reachable from here too."""
    if name in ("render_svg", "graph_html", "dot_available"):
        from . import dot_render

        return getattr(dot_render, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
