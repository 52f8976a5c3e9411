"""Schedule: predicted peak of an ordered list of units, a min-peak ordering, peak-guarded merging.

:class:`MemoryModel` prices a unit (one op, or a fused region) the way
:mod:`trace_lab.analysis.liveness` prices the Trace that :mod:`.regions` would
build from it: a unit allocates the buffers of the values it hands to later
units (all outputs for a plain op; for a region, only values read outside it,
views sharing their base), a buffer dies after the last unit that touches it,
inputs and returned values never die, and a region run op by op
(``materialized``, the eager executor) adds its inner peak, a plain op adds the scratch
it holds inside its call (:mod:`trace_lab.analysis.op_scratch`). So the peak the
model predicts for an order is the peak the built Trace will report (a test
checks this on every workload).

:func:`min_peak_order` orders units to lower the high-water mark: a greedy
choice among ready units (lowest resulting running peak, then most net bytes
freed, then original position), refined by a depth-first search over Kahn
orderings that prunes every branch whose running peak already reaches the best
complete order found, stopped after a fixed number of expansions (nvFuser PR
#4973 does this for segment order, with a time limit instead). The result is
never worse than the order it started from.

:func:`merge_pass` then merges fusible units, nearest first: unit ``i`` with a
later fusible unit ``j`` (units in between that depend on ``i`` move after the
merged unit, the others before it; the merge is refused when ``j`` depends on
one of the movers, which would be a cycle), and keeps a merge only when the
high-water mark of the stretch i..j does not rise. Everything outside the
stretch is unchanged (the same units ran before and after it), so the program's
peak cannot rise either; and holding the stretch to its own peak, rather than
the program's, stops far-apart ops being pulled together wherever the program
is below its peak, which is how horizontal fusion stretches lifetimes.
"""
from __future__ import annotations

import heapq

from collections import Counter
from dataclasses import dataclass

import torch.fx as fx

from ..analysis.buffers import Buffers, reads, released_at_first_line
from ..analysis.liveness import line_transient
from ..ir.trace import is_getitem
from .partition import OpGraph, Unit, producer

__all__ = ["MemoryModel", "UnitCost", "min_peak_order", "merge_pass", "kept_apart"]


@dataclass(frozen=True)
class UnitCost:
    alloc: int  # bytes the unit allocates
    extra: int  # transient bytes while it runs (inner peak of a materialized region)
    touched: tuple  # buffer ids the unit reads or produces (a buffer dies after its last toucher)


def _values(node: fx.Node) -> list[fx.Node]:
    if isinstance(node.meta.get("val"), (list, tuple)):
        return [u for u in node.users if is_getitem(u)]
    return [node]


class MemoryModel:
    """Buffers of a Trace and what each unit allocates, touches and frees.

    Built from the liveness model's own primitives (:mod:`trace_lab.analysis.buffers`): the
    same buffers, storage groups, aliasing, held and handed-over inputs and reads, and the
    same transient bytes per line (:func:`~trace_lab.analysis.liveness.line_transient`)."""

    def __init__(self, trace, graph: OpGraph, materialized: bool):
        self.graph = graph
        self.materialized = materialized
        self.op_scratch = getattr(trace, "op_scratch", None)  # the run stage's records (read only)
        buffers = Buffers(trace)
        self.rounding = buffers.rounding
        self.buffers = buffers
        self.nbytes: list[int] = buffers.nbytes
        self.slots = buffers.slots  # op -> buffer id per output slot (None: not a tensor)
        self.created = buffers.created  # op -> buffers it creates
        # a unit reads a value's buffers; a value is one buffer (its first tensor's) for ordering
        self.value_bid: dict[fx.Node, int] = {v: bids[0] for v, bids in buffers.values.items()
                                              if bids and bids[0] is not None}
        self.returned = set(trace.output_node.all_input_nodes)
        # held inputs and constants never die; neither do the buffers of returned values
        self.pinned: set[int] = set(buffers.held)
        for v in self.returned:
            self.pinned.update(b for b in buffers.values.get(v, ()) if b is not None)
        # handed-over inputs nothing reads are released with the argument list, after the first unit
        released = {b for v in released_at_first_line(trace) for b in buffers.values.get(v, ()) if b is not None}
        self._cache: dict[Unit, UnitCost] = {}

        # per op: (value, bid, ops reading it) it produces; (producer op, bid) of what it reads
        self._out: dict[fx.Node, list] = {}
        self._in: dict[fx.Node, list] = {}
        touched = set()
        for n in graph.ops:
            self._out[n] = [(v, self.value_bid.get(v), {producer(u) for u in v.users}) for v in _values(n)]
            self._in[n] = [(producer(a), b) for a in reads(n) for b in buffers.values.get(a, ()) if b is not None]
            touched.update(b for _, b in self._in[n])
        released -= touched | self.pinned  # a buffer another input in its group keeps alive is not released
        self.released_first = sum(self.nbytes[b] for b in released)
        self._op_costs = {n: self._op_cost(n) for n in graph.ops}

    # -- pricing units --------------------------------------------------------------------
    def cost(self, unit: Unit) -> UnitCost:
        c = self._cache.get(unit)
        if c is None:
            c = self._region_cost(unit) if unit.fused else self._op_costs[unit.nodes[0]]
            self._cache[unit] = c
        return c

    def _op_cost(self, n: fx.Node) -> UnitCost:
        touched = {b for _, b in self._in[n]} | {b for b in self.slots.get(n, []) if b is not None}
        alloc = sum(self.nbytes[b] for b in self.created.get(n, []))
        # a region fused earlier (run op by op, or its compiled workspace), a plain op's scratch
        extra = line_transient(n, self.rounding, self.materialized, alloc, self.buffers.record(n),
                               self.op_scratch)
        return UnitCost(alloc, extra, tuple(sorted(touched)))

    def _region_cost(self, unit: Unit) -> UnitCost:
        inside = set(unit.nodes)
        escaping = set()
        for n in unit.nodes:
            for v, bid, readers in self._out[n]:
                if bid is not None and (v in self.returned or not readers <= inside):
                    escaping.add(bid)
        created = [b for n in unit.nodes for b in self.created.get(n, [])]
        alloc = sum(self.nbytes[b] for b in created if b in escaping)
        touched = set(escaping)
        for n in unit.nodes:
            for p, bid in self._in[n]:
                if p not in inside:
                    touched.add(bid)
        extra = 0
        if self.materialized:
            freeable = set(created) - escaping - self.pinned
            inner_peak = _simulate([self._op_costs[n] for n in unit.nodes], self.nbytes, self.pinned, freeable)[0]
            extra = max(0, inner_peak - alloc)
        return UnitCost(alloc, extra, tuple(sorted(touched)))

    # -- pricing orders --------------------------------------------------------------------
    def peak(self, order) -> int:
        """Predicted peak above inputs of running ``order`` (a list of units)."""
        return _simulate([self.cost(u) for u in order], self.nbytes, self.pinned,
                         released_first=self.released_first)[0]


def _simulate(costs, nbytes, pinned, freeable=None, keep_profile: bool = False, released_first: int = 0):
    remaining = Counter()
    for c in costs:
        remaining.update(c.touched)
    live = peak = 0
    hws, before = [], []
    release = released_first  # handed-over inputs nothing reads: gone after the first unit
    for c in costs:
        if keep_profile:
            before.append(live)
        hw = live + c.alloc + c.extra
        hws.append(hw)
        if hw > peak:
            peak = hw
        live += c.alloc
        for b in c.touched:
            remaining[b] -= 1
            if remaining[b] == 0 and b not in pinned and (freeable is None or b in freeable):
                live -= nbytes[b]
        live -= release
        release = 0
    return peak, hws, before


# -- ordering ------------------------------------------------------------------------------
def _unit_edges(graph: OpGraph, units):
    unit_of = {n: i for i, u in enumerate(units) for n in u.nodes}
    preds = [set() for _ in units]
    succs = [set() for _ in units]
    for i, u in enumerate(units):
        for n in u.nodes:
            for p in graph.preds[n]:
                j = unit_of[p]
                if j != i:
                    preds[i].add(j)
                    succs[j].add(i)
    return preds, succs


class _State:
    """Incremental running state of a partial schedule (apply / undo)."""

    def __init__(self, model: MemoryModel, units, preds, succs):
        self.costs = [model.cost(u) for u in units]
        self.first = [min(model.graph.pos[n] for n in u.nodes) for u in units]
        self.nbytes, self.pinned = model.nbytes, model.pinned
        self.succs = succs
        self.remaining = Counter()
        for c in self.costs:
            self.remaining.update(c.touched)
        self.indeg = [len(p) for p in preds]
        self.ready = {i for i, d in enumerate(self.indeg) if d == 0}
        self.live = self.peak = 0
        self.applied = 0
        self.released_first = model.released_first
        self.high = [c.alloc + c.extra for c in self.costs]
        # net[i] = alloc - bytes unit i would free now (its freeable buffers no other pending
        # unit touches), kept up to date as buffers' remaining counts pass through 1
        self.readers: dict = {}
        for i, c in enumerate(self.costs):
            for b in c.touched:
                if b not in self.pinned:
                    self.readers.setdefault(b, []).append(i)
        self.net = [c.alloc for c in self.costs]
        for b, users in self.readers.items():
            if self.remaining[b] == 1:
                for u in users:
                    self.net[u] -= self.nbytes[b]

    def _count(self, b, delta: int) -> None:
        """remaining[b] += delta (+-1), moving b's bytes in or out of its readers' net."""
        old = self.remaining[b]
        new = self.remaining[b] = old + delta
        if (old == 1) != (new == 1):
            users = self.readers.get(b)
            if users:
                nb = self.nbytes[b] if new == 1 else -self.nbytes[b]
                net = self.net
                for u in users:
                    net[u] -= nb

    def key(self, i: int):
        return (max(self.peak, self.live + self.high[i]), self.net[i], self.first[i])

    def choices(self, limit: int | None = None) -> list[int]:
        if limit is None:
            return sorted(self.ready, key=self.key)
        if limit == 1:  # same element as sorted(...)[0]: min keeps the first of equal keys
            return [min(self.ready, key=self.key)] if self.ready else []
        return heapq.nsmallest(limit, self.ready, key=self.key)  # == sorted(...)[:limit]

    def apply(self, i: int):
        c = self.costs[i]
        record = (i, self.live, self.peak)
        self.peak = max(self.peak, self.live + c.alloc + c.extra)
        self.live += c.alloc
        for b in c.touched:
            self._count(b, -1)
            if self.remaining[b] == 0 and b not in self.pinned:
                self.live -= self.nbytes[b]
        if self.applied == 0:
            self.live -= self.released_first
        self.applied += 1
        self.ready.discard(i)
        for s in self.succs[i]:
            self.indeg[s] -= 1
            if self.indeg[s] == 0:
                self.ready.add(s)
        return record

    def undo(self, record) -> None:
        i, self.live, self.peak = record
        self.applied -= 1
        for b in self.costs[i].touched:
            self._count(b, +1)
        for s in self.succs[i]:
            if self.indeg[s] == 0:
                self.ready.discard(s)
            self.indeg[s] += 1
        self.ready.add(i)


def min_peak_order(model: MemoryModel, order, budget: int = 4000, branch: int = 4):
    """A valid order of the same units whose predicted peak is <= that of ``order``."""
    units = list(order)
    if len(units) < 2:
        return units
    preds, succs = _unit_edges(model.graph, units)
    best = list(range(len(units)))
    best_peak = model.peak(units)

    state = _State(model, units, preds, succs)
    greedy = []
    while state.ready:
        i = state.choices(1)[0]
        state.apply(i)
        greedy.append(i)
    if state.peak < best_peak:
        best, best_peak = greedy, state.peak

    state = _State(model, units, preds, succs)
    stack = [[state.choices(branch), 0]]
    path: list = []
    expansions = 0
    while stack and expansions < budget:
        frame = stack[-1]
        if frame[1] >= len(frame[0]):
            stack.pop()
            if path:
                state.undo(path.pop())
            continue
        i = frame[0][frame[1]]
        frame[1] += 1
        record = state.apply(i)
        expansions += 1
        if state.peak >= best_peak:  # this branch cannot beat the best complete order
            state.undo(record)
            continue
        path.append(record)
        if len(path) == len(units):
            best, best_peak = [r[0] for r in path], state.peak
            state.undo(path.pop())
            continue
        stack.append([state.choices(branch), 0])
    return [units[i] for i in best]


# -- merging --------------------------------------------------------------------------------
def _try_merge(graph: OpGraph, order, i: int, j: int):
    """The units i..j with i and j merged, or None when the merge would make a cycle."""
    unit_of = {n: k for k in range(i, j + 1) for n in order[k].nodes}

    def preds(k):
        return {unit_of.get(p) for n in order[k].nodes for p in graph.preds[n]} - {None, k}

    moved = {i}  # i and the units between that depend on it: they must run after the merge
    for k in range(i + 1, j):
        if preds(k) & moved:
            moved.add(k)
    if preds(j) & (moved - {i}):
        return None
    pos = graph.pos
    merged = Unit(tuple(sorted(order[i].nodes + order[j].nodes, key=pos.__getitem__)), True)
    before = [order[k] for k in range(i + 1, j) if k not in moved]
    after = [order[k] for k in range(i + 1, j) if k in moved]
    return before + [merged] + after


def merge_pass(model: MemoryModel, order, window: int = 24, partners: int = 6, sweeps: int = 4,
               apart: frozenset = frozenset()):
    """Merge fusible units (nearest partner first) wherever the predicted peak does not rise; never two units
    that both hold ops named in ``apart`` (the memory guard's: compiled together they measured more)."""
    order = list(order)
    for _ in range(sweeps):
        merged_any = False
        prof = _Profile(model, order)
        i = 0
        while i < len(order):
            if order[i].fused and _merge_at(model, order, i, prof, window, partners, apart):
                merged_any = True
                continue  # order[i] changed: look at it again
            i += 1
        if not merged_any:
            break
    return order


class _Profile:
    """High water per position, live bytes before it, last toucher of each buffer; kept up to
    date as windows of the order are replaced (everything outside a window is unchanged:
    the same units ran before it and after it, so the same buffers are live)."""

    def __init__(self, model: MemoryModel, order):
        self.model, self.order = model, order
        costs = [model.cost(u) for u in order]
        _, self.hws, self.before = _simulate(costs, model.nbytes, model.pinned, keep_profile=True,
                                             released_first=model.released_first)
        self.last: dict[int, Unit] = {}
        for u, c in zip(order, costs):
            for b in c.touched:
                self.last[b] = u
        self._reindex()

    def _reindex(self, start: int = 0) -> None:
        if start == 0:
            self.pos = {u: k for k, u in enumerate(self.order)}
            return
        pos, order = self.pos, self.order
        for k in range(start, len(order)):  # positions before the window did not move
            pos[order[k]] = k

    def window(self, new, i: int, j: int):
        """(peak, high waters, live-befores) of running ``new`` in place of positions i..j."""
        model, pos, last = self.model, self.pos, self.last
        costs = [model.cost(u) for u in new]
        counts: dict[int, int] = {}
        for c in costs:
            for b in c.touched:
                counts[b] = counts.get(b, 0) + 1
        live, peak, hws, before = self.before[i], 0, [], []
        release = model.released_first if i == 0 else 0  # gone after the program's first unit
        for c in costs:
            before.append(live)
            hw = live + c.alloc + c.extra
            hws.append(hw)
            peak = max(peak, hw)
            live += c.alloc
            for b in c.touched:
                counts[b] -= 1
                if counts[b] == 0 and pos[last[b]] <= j and b not in model.pinned:
                    live -= model.nbytes[b]
            live -= release
            release = 0
        return peak, hws, before

    def replace(self, new, i: int, j: int, hws, before) -> None:
        old = self.order[i:j + 1]
        for u in old:
            for b in self.model.cost(u).touched:
                if self.last.get(b) in old and self.pos[self.last[b]] <= j:
                    del self.last[b]
        for u in new:
            for b in self.model.cost(u).touched:
                if b not in self.last or self.last[b] in old or self.pos.get(self.last[b], -1) < i:
                    self.last[b] = u
        self.order[i:j + 1] = new
        self.hws[i:j + 1] = hws
        self.before[i:j + 1] = before
        kept = set(new)
        for u in old:
            if u not in kept:
                self.pos.pop(u, None)
        self._reindex(i)


def kept_apart(a: Unit, b: Unit, apart) -> bool:
    """Do both units hold ops the memory guard keeps apart?"""
    return bool(apart) and any(n.name in apart for n in a.nodes) and any(n.name in apart for n in b.nodes)


def _merge_at(model, order, i, prof: _Profile, window, partners, apart=frozenset()) -> bool:
    tried = 0
    for j in range(i + 1, min(len(order), i + window + 1)):
        if not order[j].fused or kept_apart(order[i], order[j], apart):
            continue
        tried += 1
        new = _try_merge(model.graph, order, i, j)
        if new is not None:
            wpeak, hws, before = prof.window(new, i, j)
            if wpeak <= max(prof.hws[i:j + 1]):  # the stretch it reorders peaks no higher
                prof.replace(new, i, j, hws, before)
                return True
        if tried >= partners:
            break
    return False
