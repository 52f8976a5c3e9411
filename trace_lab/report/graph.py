"""Dataflow graphs of a Trace, as Graphviz DOT (through the ``graphviz`` package).

Design: :func:`trace_graph` first builds a small *model* of the picture (nodes,
edges, clusters) from the fx graph and the trace's liveness, then emits DOT.
One node per op (name, op, output dtype/shape), one per program input
(input / parameter / tangent / saved activation / constant), one per program
output; an edge per value read, labelled with the value's bytes. A fused region
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

Large programs: above ``max_nodes`` the graph collapses fused regions, then
keeps only a window of lines around the peak, and says so in a note node and in
``digraph.notes``. Building the model is linear in the trace size; layout time
is bounded by the node cap (and by :func:`render_svg`'s timeout).
"""
from __future__ import annotations

import html
import re
import textwrap
from dataclasses import dataclass, field

import graphviz
import torch
import torch.fx as fx

from ..printer import format_bytes, source_line, target_name, type_comment
from ..trace import Trace, is_getitem, tensor_values

__all__ = ["TraceDigraph", "trace_graph", "before_after", "input_kind", "is_recomputed", "live_at_peak",
           "dot_escape", "DEFAULT_MAX_NODES"]

DEFAULT_MAX_NODES = 300
REGION_COLORS = ["#fde68a", "#bfdbfe", "#bbf7d0", "#fbcfe8", "#ddd6fe", "#fed7aa", "#a5f3fc", "#d9f99d"]
INPUT_STYLE = {  # kind -> (shape, fill)
    "input": ("ellipse", "#dbeafe"),
    "parameter": ("ellipse", "#fef3c7"),
    "tangent": ("ellipse", "#ede9fe"),
    "saved": ("ellipse", "#e0f2fe"),
    "constant": ("ellipse", "#f3f4f6"),
}
PEAK_COLOR = "#dc2626"
PEAK_FILL = "#fecaca"


class TraceDigraph(graphviz.Digraph):
    """A ``graphviz.Digraph`` that also says what it shows and what it left out."""

    notes: list[str]
    value_ids: dict[str, str]  # trace value name -> DOT node id
    shown_range: tuple[int, int] | None  # slice of trace.ops shown, None = all
    collapsed: bool
    peak_node_id: str | None  # the peak op's node id, or its region's cluster id
    live_at_peak_ids: set[str]


# -- escaping ----------------------------------------------------------------------------
def dot_escape(s) -> str:
    """Text safe inside an HTML-like DOT label and inside a quoted DOT string.

    HTML entities for ``& < > " '`` (so no raw markup survives into DOT, SVG or
    HTML), backslashes doubled (no escString expansion), newlines as entities.
    """
    s = html.escape(str(s), quote=True)
    return s.replace("\\", "\\\\").replace("\n", "&#10;").replace("\r", "")


def _html_label(lines: list[tuple[str, str]]) -> str:
    """HTML-like label from (text, style) rows; style in {'', 'b', 'i', 'small'}."""
    rows = []
    for text, style in lines:
        t = dot_escape(text)
        if style == "b":
            t = f"<B>{t}</B>"
        elif style == "i":
            t = f"<I>{t}</I>"
        elif style == "small":
            t = f'<FONT POINT-SIZE="9">{t}</FONT>'
        rows.append(t)
    return "<" + "<BR/>".join(rows) + ">"


def _safe_id(prefix: str, name: str) -> str:
    return prefix + re.sub(r"[^A-Za-z0-9_]", "_", str(name))


def _cluster_id(region_name: str) -> str:
    return _safe_id("cluster_", region_name)


# -- facts about nodes (shared with other views) -------------------------------------------
def _short_type(val) -> str:
    if isinstance(val, torch.Tensor):
        return type_comment(val).split(" ", 1)[1]
    if isinstance(val, (list, tuple)):
        return ", ".join(_short_type(v) for v in val)
    return type_comment(val)


def _op_name(node: fx.Node) -> str:
    if node.op == "call_module":
        return str(node.target)
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return t._opname  # the overload is in the tooltip
    return target_name(t).rsplit(".", 1)[-1] if not isinstance(t, str) else t


def _nbytes(val, rounding: int) -> int:
    from ..analysis.liveness import tensor_bytes

    return sum(tensor_bytes(t, rounding) for t in tensor_values(val) if t is not None)


def input_kind(trace: Trace, node: fx.Node) -> str:
    """'input', 'parameter', 'tangent', 'saved' (backward input from the forward) or 'constant'."""
    if node.op == "get_attr":
        return "constant"
    desc = str(node.meta.get("desc", ""))
    name = trace.name(node)
    if "Tangent" in desc or name.startswith("tangent"):
        return "tangent"
    if "Param" in desc or "Buffer" in desc:
        return "parameter"
    if trace.kind == "backward" and "desc" not in node.meta and node.meta.get("partitioner_tag") == "is_forward":
        return "saved"
    tm = node.meta.get("tensor_meta")
    val = node.meta.get("val")
    if getattr(tm, "requires_grad", False) or getattr(val, "requires_grad", False):
        return "parameter"
    return "input"


def is_recomputed(trace: Trace, node: fx.Node) -> bool:
    """An op of a backward that recomputes a forward value (checkpointing or the partitioner)."""
    if trace.kind != "backward":
        return False
    return node.meta.get("recompute") is not None or node.meta.get("partitioner_tag") == "is_forward"


def live_at_peak(trace: Trace, materialized_regions: bool | None = None) -> tuple[fx.Node | None, set[fx.Node]]:
    """(peak op, outer values live while it runs), from ``trace.liveness()``.

    Values live during a line are those produced up to and including it that
    were not dropped by an earlier line (inputs are never dropped).
    """
    live = trace.liveness(materialized_regions)
    values = {n for n in trace.inputs if tensor_values(n.meta.get("val"))}
    if live.peak_index < 0:
        return None, values
    for k, ln in enumerate(live.lines[: live.peak_index + 1]):
        n = ln.node
        if isinstance(n.meta.get("val"), (list, tuple)) and not is_getitem(n):
            values.update(u for u in n.users if is_getitem(u))
        else:
            values.add(n)
        if k < live.peak_index:  # the caller holds inputs: they stay live
            values.difference_update(d for d in ln.dead_nodes if d.op != "placeholder")
    return live.peak_line.node, values


# -- the model -----------------------------------------------------------------------------
@dataclass
class _Node:
    id: str
    label: str  # HTML-like label, already escaped
    attrs: dict
    cluster: str | None = None


@dataclass
class _Model:
    nodes: dict[str, _Node] = field(default_factory=dict)
    edges: dict[tuple[str, str], str] = field(default_factory=dict)
    clusters: dict[str, dict] = field(default_factory=dict)  # name -> attrs (label, color)
    value_ids: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    peak_id: str | None = None
    live_ids: set[str] = field(default_factory=set)


class _Builder:
    def __init__(self, trace: Trace, materialized_regions, collapse: bool, window: tuple[int, int] | None,
                 highlight: bool = True):
        self.trace = trace
        self.collapse = collapse
        ops = trace.ops
        self.window = window
        lo, hi = window if window else (0, len(ops))
        self.shown = set(ops[lo:hi])
        self.live = trace.liveness(materialized_regions)
        self.rounding = self.live.rounding
        self.peak_node, self.live_values = live_at_peak(trace, materialized_regions) if highlight else (None, set())
        self.m = _Model()
        self.loc: dict[fx.Node, str | None] = {}  # outer value -> DOT id (None: not shown)
        self.used_ids: set[str] = set()
        self.external: dict[fx.Node, str] = {}

    def _new_id(self, prefix: str, name: str, fallback: str = "") -> str:
        base = _safe_id(prefix, name)
        nid = base if base not in self.used_ids else _safe_id(prefix, f"{fallback}_{name}")
        k = 1
        while nid in self.used_ids:
            nid = f"{base}_{k}"
            k += 1
        self.used_ids.add(nid)
        return nid

    def add_node(self, nid: str, rows, cluster=None, **attrs) -> None:
        self.m.nodes[nid] = _Node(nid, _html_label(rows), attrs, cluster)

    def add_edge(self, src: str | None, dst: str, val) -> None:
        if src is None:
            return
        key = (src, dst)
        if key not in self.m.edges:
            self.m.edges[key] = format_bytes(_nbytes(val, self.rounding))

    # values -----------------------------------------------------------------------------
    def source_of(self, v: fx.Node) -> str | None:
        """DOT id that provides outer value ``v`` (a stub if its producer is not shown)."""
        if v in self.loc:
            return self.loc[v]
        producer = v.args[0] if is_getitem(v) else v
        if producer.op in ("placeholder", "get_attr"):
            return self.add_input(producer)
        if producer in self.shown:
            return None  # shown producers are registered before their users
        if v not in self.external:
            nid = self._new_id("ext_", v.name)
            self.external[v] = nid
            rows = [(self.trace.name(v), "b"), (_short_type(v.meta.get("val")), "small"),
                    ("from a line not shown", "i")]
            self.add_node(nid, rows, shape="box", style="dashed", color="#9ca3af", fontcolor="#6b7280")
            self.mark_live(v, nid)
        return self.external[v]

    def add_input(self, node: fx.Node) -> str:
        if node in self.loc:
            return self.loc[node]
        kind = input_kind(self.trace, node)
        shape, fill = INPUT_STYLE[kind]
        nid = self._new_id("in_", self.trace.name(node))
        val = node.meta.get("val")
        rows = [(self.trace.name(node), "b"), (_short_type(val), "small"), (kind, "i")]
        self.add_node(nid, rows, shape=shape, style="filled", fillcolor=fill,
                      tooltip=dot_escape(f"{kind} {self.trace.name(node)}: {type_comment(val)}, "
                                         f"{format_bytes(_nbytes(val, self.rounding))}"))
        self.loc[node] = nid
        self.m.value_ids[self.trace.name(node)] = nid
        self.mark_live(node, nid)
        return nid

    def mark_live(self, value: fx.Node, nid: str) -> None:
        if value in self.live_values:
            self.m.live_ids.add(nid)
            attrs = self.m.nodes[nid].attrs
            attrs["color"] = PEAK_COLOR
            attrs["penwidth"] = "2.5"

    # ops -------------------------------------------------------------------------------
    def op_rows(self, node: fx.Node, trace: Trace, outer_name: str | None, recomputed: bool, peak: bool):
        val = node.meta.get("val")
        head = f"{outer_name} = {_op_name(node)}" if outer_name else _op_name(node)
        rows = [(head, "b"), (_short_type(val), "small")]
        if recomputed:
            rows.append(("recomputed", "i"))
        if peak:
            rows.append((f"peak: {format_bytes(self.live.peak_bytes)} live", "i"))
        return rows

    def op_attrs(self, node: fx.Node, trace: Trace, recomputed: bool, peak: bool) -> dict:
        src = source_line(node)
        tip = f"{target_name(node.target) if node.op != 'call_module' else node.target}: {type_comment(node.meta.get('val'))}"
        if src:
            tip += f"\n{src}"
        attrs = {"shape": "box", "style": "rounded,filled" + (",dashed" if recomputed else ""),
                 "fillcolor": PEAK_FILL if peak else ("#f3f4f6" if recomputed else "white"),
                 "tooltip": dot_escape(tip)}
        if peak:
            attrs["peripheries"] = "2"
        return attrs

    def add_op(self, node: fx.Node) -> None:
        trace = self.trace
        multi = isinstance(node.meta.get("val"), (list, tuple))
        getitems = {u.args[1]: u for u in node.users if is_getitem(u)} if multi else {}
        if multi:
            outer_name = ", ".join(trace.name(getitems[i]) if i in getitems else "_"
                                   for i in range(len(node.meta["val"])))
        else:
            outer_name = trace.name(node)
        nid = self._new_id("n_", node.name)
        rec = is_recomputed(trace, node)
        peak = node is self.peak_node
        self.add_node(nid, self.op_rows(node, trace, outer_name, rec, peak), **self.op_attrs(node, trace, rec, peak))
        if peak:
            self.m.peak_id = nid
        for a in node.all_input_nodes:
            self.add_edge(self.source_of(a), nid, a.meta.get("val"))
        produced = list(getitems.values()) if multi else [node]
        for v in produced:
            self.loc[v] = nid
            self.m.value_ids[trace.name(v)] = nid
            self.mark_live(v, nid)

    def add_region(self, node: fx.Node, color: str) -> None:
        trace = self.trace
        sub = trace.gm.get_submodule(node.target)
        inner = Trace(sub, "region")
        info = node.meta.get("region") or {}
        rname = str(info.get("name", node.target))
        getitems = {u.args[1]: u for u in node.users if is_getitem(u)}
        outs = list(inner.output_node.args[0])
        peak = node is self.peak_node
        n_ops = len(inner.ops)
        if self.collapse:
            nid = self._new_id("r_", rname)
            names = ", ".join(trace.name(getitems[i]) if i in getitems else "_" for i in range(len(outs)))
            ops = info.get("ops") or [_op_name(n) for n in inner.ops]
            shown_ops = ", ".join(ops[:4]) + (f", ... (+{len(ops) - 4})" if len(ops) > 4 else "")
            rows = [(f"{names} = {rname}", "b"), (f"{n_ops} ops: {shown_ops}", "small")]
            types = [_short_type(v) for v in node.meta.get("val")]
            rows.append((", ".join(types[:3]) + (" ..." if len(types) > 3 else ""), "small"))
            if peak:
                rows.append((f"peak: {format_bytes(self.live.peak_bytes)} live", "i"))
            self.add_node(nid, rows, shape="box3d", style="filled", fillcolor=PEAK_FILL if peak else color,
                          tooltip=dot_escape(f"fused region {rname} ({n_ops} ops)"),
                          **({"peripheries": "2"} if peak else {}))
            if peak:
                self.m.peak_id = nid
            for a in node.all_input_nodes:
                self.add_edge(self.source_of(a), nid, a.meta.get("val"))
            for i, g in getitems.items():
                self.loc[g] = nid
                self.m.value_ids[trace.name(g)] = nid
                self.mark_live(g, nid)
            return
        # expanded: a cluster of the inner ops, wired to the outer graph
        self.m.clusters[rname] = {"label": f"{rname} · {n_ops} ops" + (
            f" · peak {format_bytes(self.live.peak_bytes)}" if peak else ""), "color": color, "peak": peak}
        placeholders = inner.inputs
        inner_loc: dict[fx.Node, str | None] = {}
        for ph, outer_arg in zip(placeholders, node.args):
            inner_loc[ph] = self.source_of(outer_arg) if isinstance(outer_arg, fx.Node) else None
        out_index = {}
        for i, o in enumerate(outs):
            if isinstance(o, fx.Node) and i in getitems:
                out_index.setdefault(o.args[0] if is_getitem(o) else o, []).append(getitems[i])
        for n in inner.ops:
            visible = out_index.get(n, [])
            outer_name = ", ".join(trace.name(g) for g in visible) or None
            nid = self._new_id("n_", n.name, rname)
            rec = is_recomputed(trace, n)
            self.add_node(nid, self.op_rows(n, inner, outer_name, rec, False), cluster=rname,
                          **self.op_attrs(n, inner, rec, False))
            inner_loc[n] = nid
            for a in n.all_input_nodes:
                src = inner_loc.get(a.args[0] if is_getitem(a) else a)
                self.add_edge(src, nid, a.meta.get("val"))
        for i, g in getitems.items():
            o = outs[i]
            if isinstance(o, fx.Node) and is_getitem(o):
                o = o.args[0]
            nid = inner_loc.get(o) if isinstance(o, fx.Node) else None
            self.loc[g] = nid
            if nid:
                self.m.value_ids[trace.name(g)] = nid
                self.mark_live(g, nid)
        if peak:
            self.m.peak_id = _cluster_id(rname)

    def add_outputs(self) -> None:
        out = self.trace.output_node.args[0]
        flat = list(out) if isinstance(out, (list, tuple)) else [out]
        for i, v in enumerate(flat):
            if not isinstance(v, fx.Node):
                continue
            producer = v.args[0] if is_getitem(v) else v
            if producer.op not in ("placeholder", "get_attr") and producer not in self.shown:
                continue
            src = self.source_of(v)
            nid = self._new_id("out_", str(i))
            self.add_node(nid, [(f"output {i}", "b"), (self.trace.name(v), "small")], shape="invhouse",
                          style="filled", fillcolor="#dcfce7")
            self.add_edge(src, nid, v.meta.get("val"))

    def build(self) -> _Model:
        trace = self.trace
        if self.window is None:
            for n in trace.inputs:
                self.add_input(n)
        colors = iter(REGION_COLORS * (1 + len(trace.ops) // len(REGION_COLORS)))
        for n in trace.ops:
            color = next(colors) if n.op == "call_module" else None
            if n not in self.shown:
                continue
            if n.op == "call_module":
                self.add_region(n, color)
            else:
                self.add_op(n)
        self.add_outputs()
        return self.m


# -- public API ------------------------------------------------------------------------------
def _window_around(trace: Trace, center: int, size: int) -> tuple[int, int]:
    n = len(trace.ops)
    size = max(1, min(size, n))
    lo = max(0, min(center - size // 2, n - size))
    return lo, lo + size


def _peak_position(trace: Trace, materialized_regions) -> int:
    live = trace.liveness(materialized_regions)
    if live.peak_line is None:
        return 0
    ops = trace.ops
    pos = {n: i for i, n in enumerate(ops)}
    return pos.get(live.peak_line.node, 0)


def _plan(trace: Trace, materialized_regions, collapse_regions, line_range, max_nodes, highlight):
    """Choose collapse / window so that the graph stays under ``max_nodes``; returns (model, notes)."""
    notes: list[str] = []
    ops = trace.ops
    n_regions = sum(1 for n in ops if n.op == "call_module")
    if line_range is not None:
        lo, hi = line_range
        lo, hi = max(0, int(lo)), min(len(ops), int(hi))
        if lo >= hi:
            raise ValueError(f"line_range={line_range!r} selects no op; the trace has {len(ops)} ops "
                             "(line_range is a slice (start, stop) of trace.ops)")
        line_range = (lo, hi)
    collapse = bool(collapse_regions)
    model = _Builder(trace, materialized_regions, collapse, line_range, highlight).build()
    if len(model.nodes) > max_nodes and collapse_regions is None and n_regions:
        collapse = True
        model = _Builder(trace, materialized_regions, True, line_range, highlight).build()
        notes.append(f"{n_regions} fused regions collapsed to one node each "
                     f"(the expanded graph exceeds max_nodes={max_nodes}; pass collapse_regions=False to expand)")
    if len(model.nodes) > max_nodes and line_range is None:
        center = _peak_position(trace, materialized_regions)
        size = max(1, int(len(ops) * max_nodes / len(model.nodes)))
        while True:
            window = _window_around(trace, center, size)
            model = _Builder(trace, materialized_regions, collapse, window, highlight).build()
            if len(model.nodes) <= max_nodes or size == 1:
                break
            size = max(1, int(size * 0.8))
        line_range = window
        lo, hi = window
        notes.append(f"showing ops {lo}-{hi - 1} of {len(ops)} (a window around the peak line); "
                     f"{lo} ops before and {len(ops) - hi} after left out, with the inputs and outputs they "
                     f"alone use; pass line_range=(start, stop) or a larger max_nodes to choose")
    elif line_range is not None and line_range != (0, len(ops)):
        lo, hi = line_range
        notes.append(f"showing ops {lo}-{hi - 1} of {len(ops)}; {lo} ops before and {len(ops) - hi} after left out")
    ext = sum(1 for nid in model.nodes if nid.startswith("ext_"))
    if ext:
        notes.append(f"{ext} values made by lines not shown appear as dashed stubs")
    return model, collapse, line_range, notes


def trace_graph(trace: Trace, *, highlight_peak: bool = True, collapse_regions: bool | None = None,
                line_range: tuple[int, int] | None = None, max_nodes: int = DEFAULT_MAX_NODES,
                materialized_regions: bool | None = None, rankdir: str = "TB",
                title: str | None = None) -> TraceDigraph:
    """The dataflow graph of ``trace`` as a :class:`TraceDigraph` (a ``graphviz.Digraph``).

    ``collapse_regions``: True draws each fused region as one node, False as a
    cluster of its ops, None decides by size. ``line_range=(start, stop)`` keeps
    ``trace.ops[start:stop]``. Above ``max_nodes`` nodes regions are collapsed
    (if not forced open) and a window around the peak line is kept; what was
    left out is listed in ``.notes`` and in a note node.
    """
    if not isinstance(trace, Trace):
        raise TypeError(f"trace_graph needs a trace_lab Trace, got {type(trace).__name__}")
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be at least 1, got {max_nodes}")
    model, collapsed, shown, notes = _plan(trace, materialized_regions, collapse_regions, line_range, max_nodes,
                                                   highlight_peak)
    live = trace.liveness(materialized_regions)
    g = TraceDigraph(name=_safe_id("trace_", f"{trace.kind}_{trace.stage}"))
    g.notes, g.value_ids, g.shown_range, g.collapsed = notes, model.value_ids, shown, collapsed
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
    for (src, dst), label in model.edges.items():
        g.edge(src, dst, label=dot_escape(label))
    return g


def before_after(trace_before: Trace, trace_after: Trace, **options) -> tuple[TraceDigraph, TraceDigraph]:
    """Graphs of two stages of one program, laid out to be compared.

    Same rankdir and node cap; a value keeps its node id in both when its fx
    node kept its name. If the first graph had to be cut to a window of lines,
    the second shows the lines holding the same values.
    """
    before = trace_graph(trace_before, **options)
    opts = dict(options)
    if before.shown_range is not None and options.get("line_range") is None:
        lo, hi = before.shown_range
        keep = {n.name for n in trace_before.ops[lo:hi]}
        idx = [i for i, n in enumerate(trace_after.ops) if n.name in keep or _region_holds(trace_after, n, keep)]
        if idx:
            opts["line_range"] = (min(idx), max(idx) + 1)
    after = trace_graph(trace_after, **opts)
    return before, after


def _region_holds(trace: Trace, node: fx.Node, names: set[str]) -> bool:
    if node.op != "call_module":
        return False
    sub = trace.gm.get_submodule(node.target)
    return any(n.name in names for n in sub.graph.nodes if n.op not in ("placeholder", "output"))


def __getattr__(name):
    """Rendering (:mod:`.render`) and export (:mod:`.graph_export`) are reachable from here too."""
    if name in ("render_svg", "graph_html", "graph_view_html", "dot_available"):
        from . import render

        return getattr(render, name)
    if name == "save_graphs":
        from .graph_export import save_graphs

        return save_graphs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
