"""Partition: group a Trace's ops into units and put the units in an order.

A fusion strategy decides only two things: which ops run together (a *unit*:
one op, or a group that becomes a fused region) and in what order the units
run. This module holds the op graph and the two groupings that Thunder's
``thunder/executors/data_dependent_partition.py`` makes:

* :func:`dataflow_groups` - merge a fusible group with a fusible consumer
  (vertical merging only) unless the merge would close a cycle through another
  group, repeated until nothing merges;
* :func:`horizontal_order` - then Kahn's algorithm with a FIFO ready queue in
  which the current fusible group pulls in *every* ready fusible group, the
  step that makes the fewest, largest fusions and stretches lifetimes.

:func:`topological_order` orders groups by Kahn's algorithm keyed on each
group's first original position (the original order wherever it is free).
Which op is fusible is asked of ``can_fuse`` (the executor) and nothing else.
Inside a unit ops keep their original relative order, which is always a valid
execution order.

Random ops (``torch.Tag.nondeterministic_seeded``: dropout, rand, randn, bernoulli,
...) read and advance the global generator, a dependency the dataflow does not
show. :class:`OpGraph` adds an ordering edge from each random op (or region holding
one) to the next, so every grouping and every order below (and the scheduler's in
:mod:`.schedule`, which reads the same edges) draws random numbers in program
order: the compiled program reproduces eager's random stream from the same seed.
"""
from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass

import torch
import torch.fx as fx

from ..ir.trace import is_getitem

__all__ = ["Unit", "OpGraph", "singleton_units", "dataflow_groups", "dataflow_merge", "topological_order", "horizontal_order",
           "units_from_groups", "draws_random"]


@dataclass(frozen=True, eq=False)
class Unit:
    """Ops that run as one step: a fused region when ``fused``, else one plain op.

    Compared and hashed by identity: the scheduler keys its caches on unit objects."""

    nodes: tuple  # op nodes (fx.Node), in execution order
    fused: bool

    def __repr__(self) -> str:
        return f"Unit({'+'.join(n.name for n in self.nodes)}{', fused' if self.fused else ''})"


def producer(value: fx.Node) -> fx.Node:
    """The op that computes a value (a getitem's value is computed by its tuple's op)."""
    return value.args[0] if is_getitem(value) else value


@functools.lru_cache(maxsize=None)
def _seeded(target: torch._ops.OpOverload) -> bool:
    """``target`` is tagged nondeterministic_seeded (an op's tags are built anew on every read: 25 us)."""
    return torch.Tag.nondeterministic_seeded in target.tags


def draws_random(node: fx.Node, gm: fx.GraphModule | None = None) -> bool:
    """Does ``node`` draw from a random generator (a seeded-nondeterministic aten op, or a
    fused region of ``gm`` holding one)?"""
    if node.op == "call_function":
        target = node.target
        return isinstance(target, torch._ops.OpOverload) and _seeded(target)
    if node.op == "call_module" and gm is not None:
        sub = gm.get_submodule(node.target)
        return any(draws_random(n, sub) for n in sub.graph.nodes)
    return False


class OpGraph:
    """The ops of a Trace (getitems folded into their producer), their data edges, and an
    ordering edge from each random op to the next (see the module docstring)."""

    def __init__(self, trace, can_fuse):
        self.trace = trace
        self.ops: list[fx.Node] = trace.ops
        self.pos = {n: i for i, n in enumerate(self.ops)}
        self.fusible = {n: bool(can_fuse(n)) for n in self.ops}
        self.preds: dict[fx.Node, list[fx.Node]] = {}
        self.succs: dict[fx.Node, list[fx.Node]] = {n: [] for n in self.ops}
        last_random = None
        for n in self.ops:
            ps = []
            for a in n.all_input_nodes:
                p = producer(a)
                if p in self.pos and p not in ps:
                    ps.append(p)
            if draws_random(n, trace.gm):
                if last_random is not None and last_random not in ps:
                    ps.append(last_random)
                last_random = n
            self.preds[n] = ps
            for p in ps:
                self.succs[p].append(n)


def singleton_units(graph: OpGraph, fused_if_fusible: bool) -> list[Unit]:
    return [Unit((n,), fused_if_fusible and graph.fusible[n]) for n in graph.ops]


class _Groups:
    """Mutable group DAG used while merging (ids are ints; dead ids are dropped)."""

    def __init__(self, graph: OpGraph):
        self.graph = graph
        self.members: dict[int, list[fx.Node]] = {}
        self.fusible: dict[int, bool] = {}
        self.start: dict[int, int] = {}
        self.parents: dict[int, set[int]] = {}
        self.children: dict[int, set[int]] = {}
        gid = {}
        for i, n in enumerate(graph.ops):
            gid[n] = i
            self.members[i] = [n]
            self.fusible[i] = graph.fusible[n]
            self.start[i] = i
        for n in graph.ops:
            self.parents[gid[n]] = {gid[p] for p in graph.preds[n]}
            self.children[gid[n]] = {gid[s] for s in graph.succs[n]}

    def sorted_ids(self, ids) -> list[int]:
        return sorted(ids, key=self.start.__getitem__)

    def creates_cycle(self, a: int, b: int) -> bool:
        """Would merging producer ``a`` with its consumer ``b`` close a cycle?

        It does exactly when ``b`` is reachable from ``a`` through some other group.
        """
        if self.parents[b] == {a}:
            return False
        seen = set()
        stack = [c for c in self.children[a] if c != b]
        while stack:
            cur = stack.pop()
            if cur == b:
                return True
            if cur in seen:
                continue
            seen.add(cur)
            stack.extend(self.children[cur])
        return False

    def merge(self, a: int, b: int) -> int:
        pos = self.graph.pos
        self.members[a] = sorted(self.members[a] + self.members.pop(b), key=pos.__getitem__)
        self.start[a] = min(self.start[a], self.start.pop(b))
        for p in self.parents.pop(b):
            self.children[p].discard(b)
            if p != a:
                self.children[p].add(a)
                self.parents[a].add(p)
        for c in self.children.pop(b):
            self.parents[c].discard(b)
            if c != a:
                self.parents[c].add(a)
                self.children[a].add(c)
        self.parents[a].discard(a)
        self.children[a].discard(a)
        self.fusible.pop(b)
        return a


def dataflow_groups(graph: OpGraph) -> _Groups:
    """Thunder's dataflow merge: fusible producer/consumer pairs, acyclic, to a fixed point."""
    return dataflow_merge(_Groups(graph))


def dataflow_merge(groups: _Groups, among=None) -> _Groups:
    """:func:`dataflow_groups`' merge on ``groups`` as they are, only between groups in ``among`` (a set of ids,
    kept up to date as groups merge; None: every group)."""
    def allowed(g: int) -> bool:
        return groups.fusible[g] and (among is None or g in among)

    changed = True
    while changed:
        changed = False
        for g in groups.sorted_ids(list(groups.members)):
            if g not in groups.members or not allowed(g):
                continue
            merged = True
            while merged:
                merged = False
                for c in groups.sorted_ids(groups.children[g]):
                    if allowed(c) and not groups.creates_cycle(g, c):
                        groups.merge(g, c)
                        if among is not None:
                            among.discard(c)
                        changed = merged = True
                        break
    return groups


def _units(groups: _Groups, ids) -> list[Unit]:
    return [Unit(tuple(groups.members[g]), groups.fusible[g]) for g in ids]


def topological_order(groups: _Groups) -> list[Unit]:
    """Kahn's algorithm, always taking the ready group that came first originally."""
    indeg = {g: len(ps) for g, ps in groups.parents.items()}
    heap = [(groups.start[g], g) for g, d in indeg.items() if d == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, g = heapq.heappop(heap)
        order.append(g)
        for c in groups.children[g]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(heap, (groups.start[c], c))
    assert len(order) == len(indeg), "group graph has a cycle"
    return _units(groups, order)


def horizontal_order(groups: _Groups, max_ops: int | None = None) -> list[Unit]:
    """Thunder's horizontal merge: FIFO Kahn pass; a fusible group pulls every ready fusible one.

    ``max_ops`` (not in Thunder) bounds a region's size: a ready fusible group that would
    take the current region past it stays queued for the next region. Same-shaped work
    (Adam's per-parameter updates) then forms equal regions that share one compiled kernel.
    """
    pos = groups.graph.pos
    remaining = {g: len(ps) for g, ps in groups.parents.items()}
    queue = groups.sorted_ids(g for g, d in remaining.items() if d == 0)
    units: list[Unit] = []
    while queue:
        cur = queue.pop(0)
        members: list[fx.Node] = []

        def take(g: int) -> None:
            members.extend(groups.members[g])
            for c in groups.sorted_ids(groups.children[g]):
                remaining[c] -= 1
                if remaining[c] == 0:
                    queue.append(c)

        take(cur)
        if groups.fusible[cur]:
            i = 0
            while i < len(queue):  # the queue grows while we scan it: newly ready groups join too
                g = queue[i]
                if groups.fusible[g] and (max_ops is None or len(members) + len(groups.members[g]) <= max_ops):
                    take(queue.pop(i))
                else:
                    i += 1
        units.append(Unit(tuple(sorted(members, key=pos.__getitem__)), groups.fusible[cur]))
    return units


def units_from_groups(groups: _Groups) -> list[Unit]:
    """The groups as units (no particular order)."""
    return _units(groups, list(groups.members))
