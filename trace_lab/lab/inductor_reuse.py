"""Inductor's buffer reuse in the liveness model of a ``from_compile`` kernels trace.

Inductor's output code hands buffers on (``buf3 = buf0; del buf0  # reuse``,
:class:`trace_lab.capture.inductor_program.BufferReuse`), two ways:

* **in place** (``config.inplace_buffers``; the kernel's ``in_out_ptr`` argument): a kernel writes its output
  over an input buffer that dies at that kernel, so the output allocates nothing. The model says so with the
  region records the liveness model already reads for a region output sharing an input's buffer
  (:class:`~trace_lab.analysis.region_record.RegionRecord` ``aliases``: ``("input", j)``), joined to the trace
  by op id (``Trace.with_regions``), as an executor's compiled records are. A chain through the kernel's own
  inner buffers (``buf9 = buf6`` then ``buf11 = buf9``, both in one kernel) is followed to the input it starts
  from; a chain that starts at a buffer the kernel allocates itself changes nothing (fresh either way).
* **planned** (``allow_buffer_reuse``: a new buffer takes a freed one of the same storage size): the same bytes
  are freed and allocated, only later: the old buffer stays allocated from its last use to the new buffer's
  kernel instead of being freed there. That changes the peak only when a line in between is within the old
  buffer's bytes of the peak (Inductor reuses only where its own estimate says the peak does not grow). It is
  not modelled; :func:`planned_reuse_warnings` says where it would raise the model's peak.

Values are matched between the trace and Inductor's post-grad graph by their ``meta['val']`` (every stage
copies the node's meta, so a value and the post-grad node it came from share the fake tensor), and buffers by
the post-grad value they hold with views followed to their base (Inductor names a buffer by the node it was
realised for, which may be a view of the value: ``expand_2`` for ``div_1``).
"""
from __future__ import annotations

import dataclasses

import torch.fx as fx

from ..analysis.buffers import alias_sources
from ..analysis.region_record import plan_record
from ..analysis.storage import tensor_bytes
from ..ir.fx_util import is_getitem, tensor_values
from ..ir.printer import format_bytes
from ..ir.trace import Trace

__all__ = ["with_inplace_reuse", "planned_reuse_warnings"]


def _base(node: fx.Node) -> fx.Node:
    """The value whose storage ``node`` refers to: views, getitems of aliasing ops followed back."""
    seen = set()
    while node not in seen:
        seen.add(node)
        if is_getitem(node):
            srcs = alias_sources(node.args[0]) if node.args[0].op == "call_function" else []
            src = srcs[node.args[1]] if node.args[1] < len(srcs) else None
        elif node.op == "call_function":
            srcs = alias_sources(node)
            src = srcs[0] if srcs else None
        else:
            src = None
        if not isinstance(src, fx.Node):
            return node
        node = src
    return node


class _PostGrad:
    """Inductor's post-grad graph: base per node name, the post-grad node of a trace value (its fake tensor)."""

    def __init__(self, gm: fx.GraphModule):
        self.by_name = {n.name: n for n in gm.graph.nodes}
        self.by_val: dict[int, fx.Node] = {}
        for n in gm.graph.nodes:
            val = n.meta.get("val")
            if n.op != "output" and not isinstance(val, (list, tuple)) and val is not None:
                self.by_val.setdefault(id(val), n)

    def base_of_name(self, name: str | None) -> str | None:
        node = self.by_name.get(name) if name else None
        return _base(node).name if node is not None else None

    def base_of_value(self, val) -> str | None:
        node = self.by_val.get(id(val)) if val is not None else None
        return _base(node).name if node is not None else None


def _region_sides(trace: Trace, node: fx.Node, pg: _PostGrad):
    """(bases of the region's inputs, bases of its outputs, post-grad names of its inner values)."""
    sub = trace.gm.get_submodule(node.target)
    ins = [pg.base_of_value(a.meta.get("val")) if isinstance(a, fx.Node) else None for a in node.args]
    outs = [pg.base_of_value(v) for v in tensor_values(node.meta.get("val"))]
    inner = {pg.base_of_value(m.meta.get("val")) for m in sub.graph.nodes if m.op not in ("placeholder", "output")
             and not isinstance(m.meta.get("val"), (list, tuple))}
    return ins, outs, inner - {None} - set(ins)  # an inner view of an input is the input's storage


def with_inplace_reuse(trace: Trace, gm: fx.GraphModule, reuses, notes: list[str]) -> Trace:
    """``trace`` (a kernels stage) joined to region records in which every kernel output Inductor writes over a
    dying input shares that input's buffer; what cannot be placed is said in ``notes``."""
    if not reuses:
        return trace
    pg = _PostGrad(gm)
    old_of = {r.new: r for r in reuses if r.inplace}  # new buffer -> its in-place reuse
    regions = [n for n in trace.ops if n.op == "call_module"]
    sides = {n: _region_sides(trace, n, pg) for n in regions}
    aliases = {n: list(plan_record(n).aliases or [None] * len(tensor_values(n.meta.get("val")))) for n in regions}
    changed: dict[fx.Node, list[str]] = {}
    for r in reuses:
        if not r.inplace:
            continue
        new_base = pg.base_of_name(r.new_node)
        owner = next(((n, k) for n in regions for k, b in enumerate(sides[n][1])
                      if b is not None and b == new_base and aliases[n][k] is None), None)
        if owner is None:
            # the new buffer is no region output (a kernel's inner buffer, handed on again by a later reuse in
            # the chain, or named by no node): only a chain ending at an output matters
            if r.new_node is None and _external_root(r, old_of, pg, None) is not None:
                notes.append(f"in-place reuse {r.new} = {r.old} of an output Inductor names by no node: not modelled")
            continue
        node, k = owner
        ins, _, inner = sides[node]
        root = _external_root(r, old_of, pg, inner)
        if root is None:
            continue  # the chain starts at a buffer the kernel allocates itself: fresh in the model too
        j = next((j for j, b in enumerate(ins) if b == root), None)
        if j is None:
            notes.append(f"in-place reuse {r.new} = {r.old} in {node.target}: {root} is not an input of the kernel "
                         "in the trace; not modelled")
            continue
        aliases[node][k] = ("input", j)
        changed.setdefault(node, []).append(f"{r.new} = {r.old}")
    if not changed:
        return trace
    records = {n.name: dataclasses.replace(plan_record(n), aliases=tuple(aliases[n]), compiled=True,
                                           executor="inductor", details={"inplace_reuse": changed[n]})
               for n in changed}
    return trace.with_regions(records)


def _external_root(r, old_of: dict, pg: _PostGrad, inner: set | None) -> str | None:
    """Base of the value the in-place chain ending at ``r`` starts from, outside the kernel (``inner``: the
    kernel's own values; None: any value named by a node); None when it starts at the kernel's own buffer."""
    seen = set()
    while r is not None and r.old not in seen:
        seen.add(r.old)
        base = pg.base_of_name(r.old_node)
        if base is not None and (inner is None or base not in inner):
            return base
        r = old_of.get(r.old)  # an inner buffer that took an earlier one in turn
    return None


def planned_reuse_warnings(trace: Trace, gm: fx.GraphModule, reuses) -> list[str]:
    """Planned reuses (not modelled) that would raise the trace's predicted peak: the old buffer, kept from its
    last use to the new buffer's kernel, on top of a line in between that is within its bytes of the peak."""
    planned = [r for r in reuses or () if not r.inplace and r.old_node and r.new_node]
    if not planned:
        return []
    pg = _PostGrad(gm)
    live = trace.liveness()
    freed_at: dict[str, int] = {}
    made_at: dict[str, int] = {}
    for i, line in enumerate(live.lines):
        for d in line.dead_nodes:
            b = pg.base_of_value(d.meta.get("val"))
            if b is not None:
                freed_at[b] = i
        node = line.node
        made = [pg.base_of_value(v) for v in tensor_values(node.meta.get("val"))]
        for b in made:
            if b is not None:
                made_at.setdefault(b, i)
    out = []
    for r in planned:
        old, new = pg.base_of_name(r.old_node), pg.base_of_name(r.new_node)
        if old not in freed_at or new not in made_at:
            continue
        start, end = freed_at[old], made_at[new]
        between = live.lines[start + 1:end]
        if not between:
            continue
        val = pg.by_name[old].meta.get("val")
        size = tensor_bytes(val, live.rounding) if val is not None and hasattr(val, "untyped_storage") else 0
        high = max(ln.high_water for ln in between) + size
        if high > live.peak_bytes:
            out.append(f"{trace.kind}: Inductor keeps {r.old} ({old}, {format_bytes(size)}) from line "
                       f"{live.lines[start].name} to reuse it as {r.new} ({new}); the model frees it there (not "
                       f"modelled): its peak is {format_bytes(high - live.peak_bytes)} low")
    return out
