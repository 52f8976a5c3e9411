"""The ``sort_waits`` pass: issue collectives early, wait for them late.

Thunder #277 (and its PR "Fix sort_waits to move wait closer to its consumer"):
all-gathers issued far ahead of their use, each ``wait`` right after its
collective, or gathers issued in parameter order rather than use order, leave
communication and compute serialised. This pass reorders a Trace so that

* every ``wait_tensor`` (with the view ops hanging off it) sits just before the
  first op that consumes its result;
* all-gathers whose inputs are program inputs (parameter shards) are issued in
  the order their results are consumed, as early as allowed;
* at most ``max_inflight`` all-gathers are issued and not yet waited for
  (``None``: unlimited, every gather at the top); a gather is issued right after
  the wait that brings the count below the limit. ZeRO-3 uses this to bound the
  gathered parameters alive at once. Its default (``"auto"``) is one layer's
  gathers: the most all-gathers whose results are first read inside one
  numbered layer (``layers.3``, as :func:`~trace_lab.passes.layers.layer_of`
  names it), at least 2, and 2 in a program without numbered layers. So the next
  layer's weights travel while this layer computes, as FSDP2 prefetches the next
  module; on 2 x H200 (8 Llama layers of 7 weights, seq 1024) a limit of 2 hid
  78.7% of the all-gather time and 7 hid 91.1% at the same peak
  (``benchmarks/results/2026-11-28-h200x2-d2b12d6-fsdp.txt``). ZeRO-2 defaults to
  unlimited (it keeps every gathered parameter for the backward anyway). Set it
  with ``trace_lab.jit(..., max_inflight_gathers=N)``.

Every other op keeps its relative order; other collectives (reduce-scatters)
stay where they were issued and only their waits move. The pass is a no-op on a
program without collectives.
"""
from __future__ import annotations

from collections import deque

import torch.fx as fx

from .registry import register_pass
from .collectives import getitems_of, is_all_gather, is_collective, is_wait, ops_with_getitems, rebuild, wait_chain
from .layers import layer_of

__all__ = ["sort_waits_pass", "sort_waits_order", "default_max_inflight", "gathers_per_layer"]

# ZeRO-3's in-flight limit where the program has no numbered layers (and the least "auto" chooses)
LEAST_AUTO_INFLIGHT = 2


def default_max_inflight(options, gm: fx.GraphModule | None = None) -> int | None:
    """The in-flight limit ``options`` (a checked Options) ask for. ``"auto"``: unlimited but for ZeRO-3, where
    it is one layer's gathers in ``gm`` (:func:`gathers_per_layer`, at least 2; 2 without ``gm`` or layers)."""
    value = options.max_inflight_gathers
    if value != "auto":
        return value
    if options.fsdp != "zero3":
        return None
    per_layer = gathers_per_layer(gm) if gm is not None else None
    return max(LEAST_AUTO_INFLIGHT, per_layer or 0)


def gathers_per_layer(gm: fx.GraphModule) -> int | None:
    """The most hoistable all-gathers whose results are first read inside one numbered layer of ``gm``
    (None when no gather's first reader is in one)."""
    _, _, hoistable, consumer, wait_of = _gathers_and_consumers(gm)
    counts: dict[str, int] = {}
    for g in hoistable:
        layer = layer_of(consumer[wait_of[g]])
        if layer is not None:
            counts[layer] = counts.get(layer, 0) + 1
    return max(counts.values()) if counts else None


def _gathers_and_consumers(gm: fx.GraphModule):
    """(waits on collectives, each wait's chain (:func:`wait_chain`), hoistable all-gathers in the order their
    results are read, each wait's first consumer, each collective's wait). A gather is hoistable when it reads
    program inputs only."""
    units = ops_with_getitems(gm)
    pos = {n: i for i, n in enumerate(gm.graph.nodes)}
    waits = [n for n in units if is_wait(n) and is_collective(n.args[0])]
    chain_of = {w: wait_chain(w) for w in waits}
    in_chain = {m for c in chain_of.values() for m in c}
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")

    def first_consumer(w):
        users = [u for m in chain_of[w] for u in m.users if u not in in_chain]
        return min(users, key=pos.__getitem__) if users else output

    consumer = {w: first_consumer(w) for w in waits}
    wait_of = {w.args[0]: w for w in waits}
    hoistable = [g for g in units if is_all_gather(g) and g in wait_of
                 and all(a.op == "placeholder" for a in g.all_input_nodes)]
    hoistable.sort(key=lambda g: (pos[consumer[wait_of[g]]], pos[g]))
    return waits, chain_of, hoistable, consumer, wait_of


def sort_waits_order(gm: fx.GraphModule, max_inflight: int | None = None) -> tuple[list[fx.Node], dict]:
    """The new order of ``gm``'s body nodes and facts about it (see the module docstring)."""
    units = ops_with_getitems(gm)
    pos = {n: i for i, n in enumerate(gm.graph.nodes)}
    waits, chain_of, hoistable, consumer, wait_of = _gathers_and_consumers(gm)
    in_chain = {m for c in chain_of.values() for m in c}
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    hoisted = set(hoistable)
    base = [n for n in units if n not in in_chain and n not in hoisted]
    due: dict[fx.Node, list[fx.Node]] = {}
    for w in sorted(waits, key=lambda w: pos[consumer[w]]):
        due.setdefault(consumer[w], []).append(w)

    order: list[fx.Node] = []
    emitted: set[fx.Node] = set()
    pending = deque(hoistable)
    inflight = 0
    peak_inflight = 0

    def emit(n):
        order.append(n)
        emitted.add(n)
        for gi in getitems_of(n):
            order.append(gi)
            emitted.add(gi)

    def issue(force: fx.Node | None = None):
        """Issue pending gathers in order while the limit allows (always up to ``force``)."""
        nonlocal inflight, peak_inflight
        while pending:
            forcing = force is not None and force in pending
            if not forcing and max_inflight is not None and inflight >= max_inflight:
                break
            emit(pending.popleft())
            inflight += 1
            peak_inflight = max(peak_inflight, inflight)

    def emit_waits_for(x):
        nonlocal inflight
        for w in due.get(x, []):
            c = w.args[0]
            if c in hoisted and c not in emitted:
                issue(force=c)
            for m in chain_of[w]:
                emit(m)
            if c in hoisted:
                inflight -= 1
            issue()

    issue()
    for x in base:
        emit_waits_for(x)
        emit(x)
        issue()
    emit_waits_for(output)
    while pending:  # gathers nobody waits for (should not happen): keep them
        emit(pending.popleft())
    moved = sum(1 for w in waits if order.index(w) != order.index(w.args[0]) + 1)
    info = {"waits": len(waits), "waits_not_right_after_collective": moved, "gathers_hoisted": len(hoistable),
            "max_inflight_gathers": max_inflight, "peak_inflight_gathers": peak_inflight}
    return order, info


@register_pass("sort_waits")
def sort_waits_pass(trace, ctx):
    if not any(is_wait(n) for n in trace.graph.nodes):
        return trace
    order, info = sort_waits_order(trace.gm, default_max_inflight(ctx.options, trace.gm))
    gm = rebuild(trace.gm, order)
    gm.recompile()
    return trace.derive(gm, "sort_waits", info={**trace.info, "sort_waits": info})
