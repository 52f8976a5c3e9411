"""The model of one picture: a window of a trace's drawable lines turned into nodes, edges and clusters.

Design. :class:`_Flat` lists the program's drawable lines (outer ops, with an open fused
region's inner ops inline), so that a window may cut through a large region;
:class:`_Builder` turns a window of those lines into a :class:`_Model` (nodes with escaped
HTML-like labels, edges with the values they carry, clusters for open regions, dashed stubs
for values made outside the window, what is live at the peak). Linear in the size of the
trace; what to draw is :func:`.graph_model._plan`'s choice, the DOT is :mod:`.graph`'s.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch.fx as fx

from ..analysis.region_record import region_record
from ..ir.printer import format_bytes, source_line, target_name, type_comment
from ..ir.trace import Trace, is_getitem
from .graph_facts import (INPUT_STYLE, PEAK_COLOR, PEAK_FILL, REGION_COLORS, _cluster_id, _html_label, _nbytes,
                          _op_name, _safe_id, _short_type, dot_escape, input_kind, is_recomputed, live_at_peak)


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
    edges: dict[tuple[str, str], dict] = field(default_factory=dict)  # (src, dst) -> {value node: bytes}
    clusters: dict[str, dict] = field(default_factory=dict)  # name -> attrs (label, color)
    value_ids: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    peak_id: str | None = None
    live_ids: set[str] = field(default_factory=set)
    fx_names: set[str] = field(default_factory=set)  # fx nodes drawn (ops, region inner ops)


class _Flat:
    """The program as drawable lines: outer ops, with an open region's inner ops inline.

    ``entries[k] = (outer op, inner op or None)``; windows are slices of it, so a
    window can cut through a large fused region.
    """

    def __init__(self, trace: Trace, collapse: bool):
        self.inner: dict[fx.Node, Trace] = {}
        self.entries: list[tuple[fx.Node, fx.Node | None]] = []
        self.first: dict[fx.Node, int] = {}  # outer op -> its first entry
        for n in trace.ops:
            self.first[n] = len(self.entries)
            if n.op == "call_module":
                self.inner[n] = Trace(trace.gm.get_submodule(n.target), "region", op_scratch=trace.op_scratch)
                if not collapse and self.inner[n].ops:
                    self.entries.extend((n, m) for m in self.inner[n].ops)
                    continue
            self.entries.append((n, None))

    def span(self, op: fx.Node) -> tuple[int, int]:
        lo = self.first[op]
        hi = lo + 1
        while hi < len(self.entries) and self.entries[hi][0] is op:
            hi += 1
        return lo, hi

    def largest_region(self) -> int:
        return max((len(t.ops) for t in self.inner.values()), default=0)


class _Builder:
    def __init__(self, trace: Trace, flat: _Flat, collapse: bool, window: tuple[int, int] | None,
                 materialized_regions, highlight: bool = True):
        self.trace = trace
        self.flat = flat
        self.collapse = collapse
        self.window = window
        lo, hi = window if window else (0, len(flat.entries))
        self.shown_inner: dict[fx.Node, set] = {}
        self.shown: set[fx.Node] = set()
        for outer, inner in flat.entries[lo:hi]:
            self.shown.add(outer)
            if inner is not None:
                self.shown_inner.setdefault(outer, set()).add(inner)
        self.live = trace.liveness(materialized_regions)
        self.peak_node, self.live_values = live_at_peak(trace, materialized_regions) if highlight else (None, set())
        self.m = _Model()
        self.loc: dict[fx.Node, str] = {}  # outer value -> DOT id
        self.used_ids: set[str] = set()
        self.stubs: dict[object, str] = {}

    def _new_id(self, prefix: str, name: str, fallback: str = "") -> str:
        base = _safe_id(prefix, name)
        nid = base if base not in self.used_ids else _safe_id(prefix, f"{fallback}_{name}")
        k = 1
        while nid in self.used_ids:
            nid = f"{base}_{k}"
            k += 1
        self.used_ids.add(nid)
        return nid

    def add_node(self, nid: str, rows, cluster=None, fx_name: str | None = None, **attrs) -> None:
        self.m.nodes[nid] = _Node(nid, _html_label(rows), attrs, cluster)
        if fx_name is not None:
            self.m.fx_names.add(fx_name)

    def add_edge(self, src: str | None, dst: str, value: fx.Node) -> None:
        """One edge per (producer, consumer); its label sums the distinct values it carries."""
        if src is not None:
            self.m.edges.setdefault((src, dst), {})[value] = _nbytes(value.meta.get("val"))

    # values -----------------------------------------------------------------------------
    def source_of(self, v: fx.Node) -> str:
        """DOT id that provides outer value ``v``: its node, an input, or a stub if not shown."""
        if v in self.loc:
            return self.loc[v]
        producer = v.args[0] if is_getitem(v) else v
        if producer.op in ("placeholder", "get_attr"):
            return self.add_input(producer)
        return self.stub(v, self.trace.name(v), v.meta.get("val"), live_value=v)

    def stub(self, key, name: str, val, live_value: fx.Node | None = None) -> str:
        """A dashed stand-in for a value made by a line outside the picture."""
        if key not in self.stubs:
            nid = self._new_id("ext_", key.name if isinstance(key, fx.Node) else "_".join(k.name for k in key))
            self.stubs[key] = nid
            self.add_node(nid, [(name, "b"), (_short_type(val), "small"), ("from a line not shown", "i")],
                          shape="box", style="dashed", color="#9ca3af", fontcolor="#6b7280")
            if live_value is not None:
                self.mark_live(live_value, nid)
        return self.stubs[key]

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
                                         f"{format_bytes(_nbytes(val))}"))
        self.provide(node, nid)
        return nid

    def provide(self, value: fx.Node, nid: str) -> None:
        self.loc[value] = nid
        self.m.value_ids[self.trace.name(value)] = nid
        self.mark_live(value, nid)

    def mark_live(self, value: fx.Node, nid: str) -> None:
        if value in self.live_values:
            self.m.live_ids.add(nid)
            attrs = self.m.nodes[nid].attrs
            attrs["color"] = PEAK_COLOR
            attrs["penwidth"] = "2.5"

    # ops -------------------------------------------------------------------------------
    def op_rows(self, node: fx.Node, outer_name: str | None, recomputed: bool, peak: bool):
        head = f"{outer_name} = {_op_name(node)}" if outer_name else _op_name(node)
        rows = [(head, "b"), (_short_type(node.meta.get("val")), "small")]
        if recomputed:
            rows.append(("recomputed", "i"))
        if peak:
            rows.append((f"peak: {format_bytes(self.live.peak_above_inputs_bytes)} above inputs", "i"))
        return rows

    def op_attrs(self, node: fx.Node, recomputed: bool, peak: bool) -> dict:
        tip = f"{target_name(node.target) if node.op != 'call_module' else node.target}: " \
              f"{type_comment(node.meta.get('val'))}"
        src = source_line(node)
        if src:
            tip += f"\n{src}"
        attrs = {"shape": "box", "style": "rounded,filled" + (",dashed" if recomputed else ""),
                 "fillcolor": PEAK_FILL if peak else ("#f3f4f6" if recomputed else "white"),
                 "tooltip": dot_escape(tip)}
        if peak:
            attrs["peripheries"] = "2"
        return attrs

    def _outer_names(self, node: fx.Node) -> tuple[str, dict]:
        getitems = {u.args[1]: u for u in node.users if is_getitem(u)}
        names = ", ".join(self.trace.name(getitems[i]) if i in getitems else "_" for i in range(len(node.meta["val"])))
        return names, getitems

    def add_op(self, node: fx.Node) -> None:
        multi = isinstance(node.meta.get("val"), (list, tuple))
        outer_name, getitems = self._outer_names(node) if multi else (self.trace.name(node), {})
        nid = self._new_id("n_", node.name)
        rec = is_recomputed(self.trace, node)
        peak = node is self.peak_node
        self.add_node(nid, self.op_rows(node, outer_name, rec, peak), fx_name=node.name,
                      **self.op_attrs(node, rec, peak))
        if peak:
            self.m.peak_id = nid
        for a in node.all_input_nodes:
            self.add_edge(self.source_of(a), nid, a)
        for v in (list(getitems.values()) if multi else [node]):
            self.provide(v, nid)

    def add_collapsed_region(self, node: fx.Node, rname: str, color: str) -> None:
        inner = self.flat.inner[node]
        names, getitems = self._outer_names(node)
        peak = node is self.peak_node
        nid = self._new_id("r_", rname)
        ops = region_record(self.trace, node).ops or [_op_name(n) for n in inner.ops]
        listed = ", ".join(map(str, ops[:4])) + (f", ... (+{len(ops) - 4})" if len(ops) > 4 else "")
        types = [_short_type(v) for v in node.meta.get("val")]
        rows = [(f"{names} = {rname}", "b"), (f"{len(inner.ops)} ops: {listed}", "small"),
                (", ".join(types[:3]) + (" ..." if len(types) > 3 else ""), "small")]
        if peak:
            rows.append((f"peak: {format_bytes(self.live.peak_above_inputs_bytes)} above inputs", "i"))
        ends = self.ends_text(node)
        if ends:
            rows.append((f"ends: {ends}", "small"))
        self.add_node(nid, rows, shape="box3d", style="filled", fillcolor=PEAK_FILL if peak else color,
                      tooltip=dot_escape(f"fused region {rname} ({len(inner.ops)} ops)" + self.ends_detail(node)),
                      **({"peripheries": "2"} if peak else {}))
        self.m.fx_names.update(n.name for n in inner.ops)
        if peak:
            self.m.peak_id = nid
        for a in node.all_input_nodes:
            self.add_edge(self.source_of(a), nid, a)
        for g in getitems.values():
            self.provide(g, nid)

    def ends_text(self, node: fx.Node) -> str:
        """'executor x2, cycle': why the region ends (the fusion pass's reasons, as the trace line says)."""
        from ..ir.printer import region_end_kinds

        rows = (self.trace.info.get("region_ends") or {}).get(str(node.target))
        return region_end_kinds(rows) if rows else ""

    def ends_detail(self, node: fx.Node) -> str:
        """The reasons one per line, for a tooltip."""
        rows = (self.trace.info.get("region_ends") or {}).get(str(node.target)) or []
        return "".join(f"\nends at {r.get('name', r['node'])}: [{r['kind']}] {r['reason']}" for r in rows[:6])

    def add_open_region(self, node: fx.Node, rname: str, color: str) -> None:
        """A cluster of the region's inner ops (those in the window), wired to the outer graph."""
        inner = self.flat.inner[node]
        getitems = {u.args[1]: u for u in node.users if is_getitem(u)}
        outs = [o.args[0] if isinstance(o, fx.Node) and is_getitem(o) else o for o in inner.output_node.args[0]]
        shown = self.shown_inner.get(node, set())
        peak = node is self.peak_node
        label = f"{rname} · {len(inner.ops)} ops"
        if len(shown) < len(inner.ops):
            label += f" ({len(shown)} shown)"
        if peak:
            label += f" · peak {format_bytes(self.live.peak_above_inputs_bytes)} above inputs"
        if self.ends_text(node):
            label += f" · ends: {self.ends_text(node)}"
        self.m.clusters[rname] = {"label": label, "color": color, "peak": peak}
        outer_arg = dict(zip(inner.inputs, node.args))
        visible: dict[fx.Node, list] = {}
        for i, o in enumerate(outs):
            if isinstance(o, fx.Node) and i in getitems:
                visible.setdefault(o, []).append(getitems[i])
        inner_loc: dict[fx.Node, str] = {}

        def source(a: fx.Node) -> str | None:
            p = a.args[0] if is_getitem(a) else a
            if p.op == "placeholder":
                arg = outer_arg.get(p)
                return self.source_of(arg) if isinstance(arg, fx.Node) else None
            if p in inner_loc:
                return inner_loc[p]
            return self.stub((node, a), self.trace.names.get(a) or f"{rname}: {inner.name(a)}", a.meta.get("val"))

        for n in inner.ops:
            if n not in shown:
                continue
            # a region output shows its outer name; a temporary its name if the Trace gives it one
            outer_name = ", ".join(self.trace.name(g) for g in visible.get(n, [])) or self.trace.names.get(n)
            nid = self._new_id("n_", n.name, rname)
            rec = is_recomputed(self.trace, n)
            self.add_node(nid, self.op_rows(n, outer_name, rec, False), cluster=rname, fx_name=n.name,
                          **self.op_attrs(n, rec, False))
            inner_loc[n] = nid
            for a in n.all_input_nodes:
                self.add_edge(source(a), nid, a)
        for i, g in getitems.items():
            o = outs[i]
            if isinstance(o, fx.Node) and o in inner_loc:
                self.provide(g, inner_loc[o])
            elif isinstance(o, fx.Node) and o.op == "placeholder" and isinstance(outer_arg.get(o), fx.Node):
                self.provide(g, self.source_of(outer_arg[o]))
        if peak:
            self.m.peak_id = _cluster_id(rname)

    def add_outputs(self) -> None:
        out = self.trace.output_node.args[0]
        for i, v in enumerate(list(out) if isinstance(out, (list, tuple)) else [out]):
            if not isinstance(v, fx.Node):
                continue
            producer = v.args[0] if is_getitem(v) else v
            if v not in self.loc and producer.op not in ("placeholder", "get_attr"):
                continue  # made by a line not shown
            src = self.source_of(v)
            nid = self._new_id("out_", str(i))
            self.add_node(nid, [(f"output {i}", "b"), (self.trace.name(v), "small")], shape="invhouse",
                          style="filled", fillcolor="#dcfce7")
            self.add_edge(src, nid, v)

    def build(self) -> _Model:
        trace = self.trace
        if self.window is None:
            for n in trace.inputs:
                self.add_input(n)
        k = 0
        for n in trace.ops:
            if n.op == "call_module":
                color = REGION_COLORS[k % len(REGION_COLORS)]
                k += 1
            if n not in self.shown:
                continue
            if n.op != "call_module":
                self.add_op(n)
                continue
            rname = region_record(trace, n).name
            if self.collapse or not self.flat.inner[n].ops:
                self.add_collapsed_region(n, rname, color)
            else:
                self.add_open_region(n, rname, color)
        self.add_outputs()
        return self.m
