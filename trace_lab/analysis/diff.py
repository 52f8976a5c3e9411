"""Diff of two stages of one program: what a pass changed, and why the peak moved (issue 17 item 2).

Ops are matched by their fx name, which passes keep: a fused region's inner ops carry the
names they had as top-level ops, so every op of stage *a* is found in stage *b* either
on its own line or inside a region. From the matching:

* ``fused``   - region of *b* -> the ops that joined it (they were on their own line or in
  another region in *a*); ``unfused``: ops on their own line in *b* that were in a region;
* ``removed`` / ``added`` - ops only in *a* / only in *b* (e.g. recomputed ops a
  checkpointing pass adds, copies a pass drops);
* ``moved``   - ops whose order relative to the others changed (a schedule pass, a region that
  hoists an op): the common ops outside a longest common subsequence of the two orders, so six
  hoisted adds are six moved ops, not every op whose index shifted behind them;
* ``memory``  - per common op, live bytes after its line in *a* and in *b* (an op inside a
  region reads its region's line) and the delta;
* the **peak** of each side (line, live bytes) with the values alive there, and the reason
  the peak moved: values alive at *b*'s peak that were not alive at *a*'s (bytes each, largest
  first), and the reverse.

Values are counted per storage (views of one buffer once), with the liveness model's
figures for the lines.

Across sources (two traces whose ``info['source']`` differs: torch.compile's program from
``trace_lab.from_compile``, Thunder's, trace_lab's own), fx names say nothing: each capture names its
nodes itself, and ``mul_2`` of one is not ``mul_2`` of the other. There ops and values are matched by
:func:`op_keys`: the op (its aten name; ``view``/``_unsafe_view`` as ``reshape``, ``t``/``transpose``
as ``permute``), the user's source line that made it, and its occurrence among the ops with both in
program order. What the two programs compute differently (another decomposition) is added / removed. ``str(diff)`` is a readable summary; ``to_dict()`` plain data.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
import torch.fx as fx

from ..ir.fx_util import is_getitem, tensor_values
from .handover import storage_root

__all__ = ["diff_traces", "TraceDiff", "OpMemory", "alive_during", "op_keys"]

# ops two captures write differently for the same value: compared under one name across sources
_SAME_OP = {"view": "reshape", "_unsafe_view": "reshape", "t": "permute", "transpose": "permute"}


@dataclass(frozen=True)
class OpMemory:
    name: str
    live_after_a: int
    live_after_b: int

    @property
    def delta(self) -> int:
        return self.live_after_b - self.live_after_a


@dataclass
class TraceDiff:
    a: str
    b: str
    fused: dict[str, list[str]] = field(default_factory=dict)
    unfused: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    memory: list[OpMemory] = field(default_factory=list)
    peak_a: dict = field(default_factory=dict)
    peak_b: dict = field(default_factory=dict)
    alive_only_at_b_peak: list[tuple[str, int]] = field(default_factory=list)
    alive_only_at_a_peak: list[tuple[str, int]] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["memory"] = [dict(asdict(m), delta=m.delta) for m in self.memory]
        return d

    def __str__(self) -> str:
        from ..ir.printer import format_bytes

        out = [f"diff: {self.a}  ->  {self.b}"]
        for region, ops in self.fused.items():
            out.append(f"  fused into {region}: {', '.join(ops)}")
        for label, names in (("unfused", self.unfused), ("removed", self.removed), ("added", self.added),
                             ("moved", self.moved)):
            if names:
                out.append(f"  {label} ({len(names)}): {', '.join(names[:20])}{' ...' if len(names) > 20 else ''}")
        pa, pb = self.peak_a, self.peak_b
        out.append(f"  peak: {format_bytes(pa['bytes'])} at {pa['line']}  ->  {format_bytes(pb['bytes'])} at {pb['line']} "
                   f"({'+' if pb['bytes'] >= pa['bytes'] else '-'}{format_bytes(abs(pb['bytes'] - pa['bytes']))})")
        if self.alive_only_at_b_peak:
            out.append("  alive at the new peak, not at the old: " + ", ".join(
                f"{n} {format_bytes(b)}" for n, b in self.alive_only_at_b_peak[:10]))
        if self.alive_only_at_a_peak:
            out.append("  alive at the old peak, not at the new: " + ", ".join(
                f"{n} {format_bytes(b)}" for n, b in self.alive_only_at_a_peak[:10]))
        changed = sorted((m for m in self.memory if m.delta), key=lambda m: -abs(m.delta))
        if changed:
            out.append("  live bytes after the line, largest changes: " + ", ".join(
                f"{m.name} {'+' if m.delta > 0 else '-'}{format_bytes(abs(m.delta))}" for m in changed[:10]))
        return "\n".join(out)


def _ops_in_order(trace):
    """(line index, op node, its region node or None) for every op, a region's inner ops in place."""
    for i, n in enumerate(trace.ops):
        if n.op == "call_module":
            sub = trace.gm.get_submodule(n.target)
            for m in sub.graph.nodes:
                if m.op == "call_function" and not is_getitem(m):
                    yield i, m, n
        else:
            yield i, n, None


def _op_name(target) -> str:
    name = getattr(target, "_opname", None) or getattr(target, "__name__", None) or str(target)
    name = str(name).rsplit(".", 1)[-1]
    return _SAME_OP.get(name, name)


def op_keys(trace) -> dict[fx.Node, str]:
    """Every op node (a region's inner ones too) -> 'op @ source line #k', the same for the same op of the same
    source line in another capture's program (module docstring)."""
    from ..ir.printer import source_line

    counts: dict[tuple[str, str], int] = {}
    keys: dict[fx.Node, str] = {}
    for _, n, _ in _ops_in_order(trace):
        base = (_op_name(n.target), source_line(n) or "?")
        counts[base] = counts.get(base, 0) + 1
        keys[n] = f"{base[0]} @ {base[1]} #{counts[base]}"
    return keys


def _placement(trace, keys: dict | None = None) -> dict[str, tuple[int, str | None]]:
    """Key of every op (its fx name, or ``keys[node]``) -> (its line index in ``trace.ops``, the region it is in
    or None)."""
    return {(keys[m] if keys is not None else m.name): (i, trace.name(r) if r is not None else None)
            for i, m, r in _ops_in_order(trace)}


def _storage_bytes(node: fx.Node) -> int:
    vals = [v for v in tensor_values(node.meta.get("val")) if isinstance(v, torch.Tensor)]
    return sum(v.untyped_storage().nbytes() for v in vals)


def _value_key(trace, node: fx.Node, keys: dict | None = None) -> str:
    """A name for a value that is the same in every stage: a region's output is named after the op
    inside the region that makes it (its fx name, which passes keep; with ``keys``, its op key)."""
    def key(n: fx.Node) -> str:
        if keys is None:
            return n.name
        if is_getitem(n) and n.args[0] in keys:  # an element of a multi-output op
            return f"{keys[n.args[0]]}[{n.args[1]}]"
        return keys.get(n, trace.name(n))  # an input: by its name

    region = node.args[0] if is_getitem(node) else node
    if isinstance(region, fx.Node) and region.op == "call_module":
        sub = trace.gm.get_submodule(region.target)
        spec = next(m for m in reversed(sub.graph.nodes) if m.op == "output").args[0]
        outs = list(spec) if isinstance(spec, (list, tuple)) else [spec]
        inner = outs[node.args[1]] if is_getitem(node) else outs[0]
        return key(inner) if isinstance(inner, fx.Node) else key(node)
    return key(node)


def alive_during(trace, live, index: int, keys: dict | None = None) -> dict[str, tuple[str, int]]:
    """Values alive while line ``index`` runs (its inputs and its outputs; -1: at entry) above the
    caller-held inputs (the peak's own measure): handed-over inputs and op results, one per storage:
    key (the value's fx name, the same in every stage; with ``keys`` (:func:`op_keys`), its op key) ->
    (display name, bytes)."""
    owned = getattr(trace, "owned_inputs", None) or {}
    alive: dict[fx.Node, None] = {p: None for i, p in enumerate(trace.inputs) if i in owned}
    for i, (n, ln) in enumerate(zip(trace.ops, live.lines)):
        if i > index:
            break
        getitems = [u for u in n.users if is_getitem(u)]
        for v in getitems or [n]:
            alive[v] = None
        if i == index:
            break  # while the line runs, what it frees afterwards is still alive
        for dead in ln.dead_nodes:
            alive.pop(dead, None)
    by_root: dict[fx.Node, fx.Node] = {}
    held = {p for i, p in enumerate(trace.inputs) if i not in owned}
    for v in alive:
        r = storage_root(v)
        if r not in held:  # a view of a caller-held input adds nothing
            by_root.setdefault(r, v)
    return {_value_key(trace, v, keys): (f"{trace.name(v)} [{_value_key(trace, v, keys)}]", _storage_bytes(r))
            for r, v in by_root.items() if _storage_bytes(r)}


def _peak(trace, live) -> dict:
    line = live.peak_line
    return {"line": f"{live.peak_index}: {line.name}" if line is not None else "entry", "index": live.peak_index,
            "bytes": live.peak_above_inputs_bytes}


def _moved(order_a: list[str], order_b: list[str]) -> list[str]:
    """The ops of ``order_a`` outside a longest common subsequence of the two orders (both list the same
    ops): a longest increasing run of their positions in ``order_b``, found in n log n."""
    from bisect import bisect_left

    where_b = {n: k for k, n in enumerate(order_b)}
    pos = [where_b[n] for n in order_a]
    tails: list[int] = []  # tails[k]: the smallest end position of an increasing run of length k + 1
    tail_at: list[int] = []  # its index in order_a
    back = [-1] * len(pos)
    for i, p in enumerate(pos):
        k = bisect_left(tails, p)
        back[i] = tail_at[k - 1] if k else -1
        if k == len(tails):
            tails.append(p)
            tail_at.append(i)
        else:
            tails[k], tail_at[k] = p, i
    kept, i = set(), tail_at[-1] if tail_at else -1
    while i >= 0:
        kept.add(i)
        i = back[i]
    return [n for i, n in enumerate(order_a) if i not in kept]


def diff_traces(a, b) -> TraceDiff:
    """What changed from stage ``a`` to stage ``b`` of one program (two Traces), or between two captures'
    programs of one call (``info['source']`` differs: ops matched by :func:`op_keys`)."""
    across = a.info.get("source") != b.info.get("source")
    ka, kb = (op_keys(a), op_keys(b)) if across else (None, None)
    pa, pb = _placement(a, ka), _placement(b, kb)
    la, lb = a.liveness(), b.liveness()
    def label(t) -> str:
        return f"{t.kind} '{t.stage}'" + (f" ({t.info.get('source') or 'trace_lab'})" if across else "")

    d = TraceDiff(a=label(a), b=label(b))
    for name, (_, region) in pb.items():
        if region is not None and name in pa and pa[name][1] != region:
            d.fused.setdefault(region, []).append(name)
    d.unfused = [n for n, (_, r) in pb.items() if r is None and n in pa and pa[n][1] is not None]
    d.removed = [n for n in pa if n not in pb]
    d.added = [n for n in pb if n not in pa]
    common = [n for n in pa if n in pb]
    d.moved = _moved(common, [n for n in pb if n in pa])  # pb lists ops in b's order
    d.memory = [OpMemory(n, la.lines[pa[n][0]].live_after - la.entry_bytes, lb.lines[pb[n][0]].live_after - lb.entry_bytes)
                for n in common]
    d.peak_a, d.peak_b = _peak(a, la), _peak(b, lb)
    alive_a, alive_b = alive_during(a, la, la.peak_index, ka), alive_during(b, lb, lb.peak_index, kb)
    d.alive_only_at_b_peak = sorted((v for k, v in alive_b.items() if k not in alive_a), key=lambda x: -x[1])
    d.alive_only_at_a_peak = sorted((v for k, v in alive_a.items() if k not in alive_b), key=lambda x: -x[1])
    return d
