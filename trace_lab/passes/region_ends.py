"""Why each fused region ends (issue 17 item 3): for every strategy, a reason at each boundary.

After a strategy has chosen its units, every fused region is looked at across each of
its data edges (an op feeding it, an op reading it) that leads to another unit, and the
boundary gets the first reason that holds:

* ``collective`` - the neighbour is a collective or its wait (FSDP's all-gathers);
* ``executor``   - the executor cannot fuse the neighbour (its own words: nvFuser's
  ``fusible_reason``, Inductor's table in :mod:`trace_lab.executors.inductor_ops`);
* ``cycle``      - merging the two would close a cycle: a unit between them depends on one
  and feeds the other (the check every strategy makes, :func:`.schedule._try_merge`);
* ``layer``      - ``layers``: the neighbour belongs to another layer, or to none (one region per layer), or is a
  value the layers share;
* ``cap``        - ``horizontal`` with ``max_region_ops``: the merged region would exceed it;
* ``memory``     - the ``memory`` strategy priced the merge as it does (:func:`.schedule.merge_pass`:
  the high-water mark of the stretch of units the merge reorders must not rise) and it rises by
  the bytes given (or, when it would not, the merge pass never paired them within its window), or the
  memory guard keeps the two apart (compiled as one region they took more than planned);
``horizontal`` and ``memory`` also merge regions that share no edge (siblings), so for
them each region is also looked at beside the next fused region in the order (side
``next``).

* ``strategy``   - the strategy does not merge this kind of neighbour (``dataflow`` merges
  producer/consumer chains only as Thunder's partitioner does; any other case).

The result is plain data per unit: ``[{"node", "op", "side", "kind", "reason"}]`` (``node``:
the neighbour's fx name); the fusion pass stores it in the new stage's
``info["region_ends"]`` keyed by region name, with ``name``: what the new stage prints
for the neighbour (its value's name, or ``"<op> in fusionK"`` for an op now inside a region).
"""
from __future__ import annotations

import torch.fx as fx

from .collectives import is_collective, is_wait
from .layers import layer_keys, layer_of
from .partition import OpGraph
from .schedule import MemoryModel, _Profile, _try_merge, kept_apart

__all__ = ["region_ends", "format_region_ends"]


def _op(node: fx.Node) -> str:
    from ..ir.printer import target_name

    return target_name(node.target) if node.op == "call_function" else node.op


def region_ends(trace, units, strategy: str, can_fuse, fuse_reason, materialized: bool,
                max_region_ops: int | None = None, keep_apart: frozenset = frozenset()) -> list[list[dict]]:
    """Per unit of ``units`` (the strategy's final order), the reasons at its boundaries ([] for a unit
    that is not a fused region)."""
    graph = OpGraph(trace, can_fuse)
    unit_of = {n: k for k, u in enumerate(units) for n in u.nodes}
    profile = _Profile(MemoryModel(trace, graph, materialized), list(units)) if strategy == "memory" else None
    out: list[list[dict]] = [[] for _ in units]
    layer = layer_keys(graph) if strategy == "layers" else None

    def why(k: int, j: int, m: fx.Node) -> tuple[str, str]:
        if is_collective(m) or is_wait(m):
            return "collective", "a collective or its wait: it runs on its own"
        if not graph.fusible[m]:
            return "executor", fuse_reason(m) or "the executor does not fuse it"
        if layer is not None and layer[m] is None and layer_of(m) is not None:
            return "layer", ("a value the layers share (computed from no input): it runs once, outside every "
                             "layer, op by op (fusion=layers: one region per layer, equal across its repeats)")
        if layer is not None and layer[m] != layer[units[k].nodes[0]]:
            own = layer[units[k].nodes[0]]
            return "layer", ((f"an op of {layer[m]}" if layer[m] else "an op outside every layer")
                             + (f", this region is {own}" if own else ", this region is outside every layer")
                             + " (fusion=layers: one region per layer)")
        i, jj = min(k, j), max(k, j)
        merged = _try_merge(graph, units, i, jj)
        if merged is None:
            return "cycle", "merging would close a cycle: an op between them depends on one and feeds the other"
        if strategy == "horizontal" and max_region_ops and len(units[k].nodes) + len(units[j].nodes) > max_region_ops:
            return "cap", f"the merged region would exceed max_region_ops={max_region_ops}"
        if profile is not None and kept_apart(units[k], units[j], keep_apart):
            return "memory", ("kept apart by the memory guard: compiled as one region these ops took more memory "
                              "than planned")
        if profile is not None:  # the memory strategy's own rule: the stretch i..j keeps its high-water mark
            stretch_peak = profile.window(merged, i, jj)[0]
            delta = stretch_peak - max(profile.hws[i:jj + 1])
            if delta > 0:
                return "memory", (f"merging raises the predicted high-water mark of the ops between them by "
                                  f"{delta:,} B")
            return "memory", "the merge pass did not pair them (outside its window of nearest partners)"
        return "strategy", f"the {strategy} strategy does not merge these units"

    for k, u in enumerate(units):
        if not u.fused:
            continue
        members = set(u.nodes)
        seen: set = set()
        for n in u.nodes:
            for side, neighbours in (("input", graph.preds[n]), ("output", graph.succs[n])):
                for m in neighbours:
                    j = unit_of.get(m)
                    if m in members or j is None or (m, side) in seen:
                        continue
                    seen.add((m, side))
                    kind, reason = why(k, j, m)
                    out[k].append({"node": m.name, "op": _op(m), "side": side, "kind": kind, "reason": reason})
        nxt = next((j for j in range(k + 1, len(units)) if units[j].fused), None)
        if nxt is not None and strategy in ("horizontal", "memory"):  # strategies that also merge siblings
            kind, reason = why(k, nxt, units[nxt].nodes[0])
            first = units[nxt].nodes[0]
            out[k].append({"node": first.name, "op": _op(first), "side": "next", "kind": kind, "reason": reason})
    return out


def format_region_ends(ends: dict[str, list[dict]]) -> str:
    """Text: one block per region, one line per boundary."""
    lines = []
    for region, rows in ends.items():
        lines.append(f"{region} ends at:")
        for e in rows:
            where = {"input": "feeding it", "output": "reading it", "next": "next region"}[e["side"]]
            lines.append(f"  {e.get('name', e['node'])} ({e['op']}, {where}): [{e['kind']}] {e['reason']}")
    return "\n".join(lines) if lines else "no fused regions"
