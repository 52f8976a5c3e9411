"""Batching a segment's identical independent updates into one nvFuser definition (``batch_updates``).

nvFuser does not fuse independent computations: a horizontal region of N parameter updates (Adam's step over N
parameters) ran as N kernels, about 23 us of host time each (``benchmarks/nvfuser_horizontal_probe.py``), where
torch.compile's Inductor runs multi-tensor (foreach) kernels. This module is the lab's answer. A segment's ops
fall into connected components (ops joined by the values they pass; inputs do not join them). Components with
one structure (same ops, wiring, constants, shapes and dtypes, the same shared inputs) form a group, and a group
runs as one definition over its members' inputs stacked along a new leading dim and flattened: ``[N, |S|]`` for a
value of the component's shape ``S`` (``|S|`` its elements), ``[N, 1]`` for a 0-d one beside them, so the component's
elementwise ops broadcast as before and every group is one two-dim pattern to nvFuser. Its outputs are the values
the segment's ``copy_``\\ s write, each written over the stack of the input it updates (``alias_input``, with the
executor's ``donate_inplace``; fresh without), and one ``torch._foreach_copy_`` per call puts each member's slice in
place. The size-1 dim of a ``[N, 1]`` stack is a broadcast dim to nvFuser (an input of static size 1), so a value
of it meets the ``[N, |S|]`` ones as it is (``Segment.ones_broadcast``): the squeeze and broadcast op the builder
otherwise makes can let nvFuser's SegmentInplaceUpdate pass move every result on its path into a copy kernel of
its own with a stack-sized intermediate (on the H200 at 1694aeb, Adam's parameters: a fifth stack where ``predict``
priced four, ``results/2026-11-30-h200-*``; the stand-in counts such writes, ``split_writes``).

Only where that is exact and cheap to prove: every op elementwise (aten's ``pointwise`` tag, ``prims.fma``, the
copies, a dtype cast) on tensors of the component's one shape or 0-d; an input written is read by its own
component only, never after its ``copy_``; an input several components read (shared: handed over as it is, dense)
is written by none. Every component is an *update*: it writes a program input through ``copy_`` (an
optimizer's parameters and state), and the segment has no outputs. A visible output would be a slice that keeps
its whole stack alive; independent forward paths whose outputs are written over dying intermediates (notebook
01's ten paths) would add their size again to the peak the notebook teaches (horizontal fusion's 11 matrices,
torch.compile's figure, became 30 on the GPU check at 249a3d7, when such outputs were batched too). Both stay
unbatched. All reads happen when the inputs are stacked and all writes at the end, which is the order a
component's own ops imply. The price: the stacks are the region's workspace (measured as any region's; Adam's
update holds four stacks, parameters, gradients and both moments, where fresh results made it seven) and
each update's data crosses memory twice more (stacked in, copied back), a time-for-memory trade, taken only
while the stacks of a segment stay under :data:`MAX_STACK_BYTES` (1 GiB): larger updates are not host-bound.
:func:`batched_update_program` asks the same of a whole captured program, for ``fusion="auto"``;
:func:`stack_workspace` prices a plan's stacks before anything compiles (``predict``).
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
import torch.fx as fx

from ..analysis.storage import round_up
from .nvfuser_ops import fusible_reason
from .nvfuser_region import Segment

__all__ = ["BatchGroup", "BatchPlan", "batch_plan", "batched_update_program", "BatchedRunner", "MAX_STACK_BYTES"]

# A segment whose stacks would hold more runs unbatched: its updates are large enough for their kernels, not the
# host, to set the pace (an optimizer step over a large model's weights), and the stacks would be its size again.
MAX_STACK_BYTES = 1 << 30

_COPY_ = torch.ops.aten.copy_.default
_ELEMENTWISE = {torch.ops.aten.copy.default, _COPY_, torch.ops.aten._to_copy.default}


def _val(n):
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _elementwise(n: fx.Node) -> bool:
    t = n.target
    if n.op != "call_function" or _val(n) is None or any(u.target is operator.getitem for u in n.users):
        return False
    if t is torch.ops.aten._to_copy.default:
        return set(n.kwargs) <= {"dtype"}
    return t in _ELEMENTWISE or str(t) == "prims.fma.default" or torch.Tag.pointwise in getattr(t, "tags", ())


@dataclass(eq=False)  # (compared by identity: a component is its ops)
class _Component:
    ops: list          # in segment order
    inputs: list       # the segment inputs it reads, in order of first read
    writes: list       # (value node, input it is written into) of its copy_s, in op order
    shape: tuple


@dataclass
class BatchGroup:
    """One definition's worth: ``seg`` (its own fx graph, stacked shapes), ``n`` members, and how the runner
    feeds and empties it: ``inputs`` per definition input ``("stack", [segment input positions], view shape or
    None)`` or ``("shared", position, view shape or None)``; ``outputs`` per segment output ``(view shape,
    [segment input position each member's slice is copied into])``. ``seg.in_place`` pairs an output with the
    stack it may be written over (:func:`_group_segment`), which the executor takes with ``donate_inplace``."""
    seg: Segment
    n: int
    inputs: list
    outputs: list


@dataclass
class BatchPlan:
    groups: list

    @property
    def updates(self) -> int:
        return sum(g.n for g in self.groups)


def _components(seg: Segment) -> list | None:
    parent = {n: n for n in seg.ops}

    def find(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in seg.ops:
        for a in n.all_input_nodes:
            if a in parent:
                parent[find(a)] = find(n)
    comps: dict = {}
    for n in seg.ops:
        comps.setdefault(find(n), []).append(n)
    inputs = set(seg.inputs)
    out = []
    for ops in comps.values():
        reads = list(dict.fromkeys(a for n in ops for a in n.all_input_nodes if a in inputs))
        shapes = {tuple(v.shape) for v in map(_val, reads + ops) if v is not None and v.dim() > 0}
        if len(shapes) > 1:
            return None
        writes = [(c.args[1], c.args[0]) for c in ops if c.target is _COPY_]
        out.append(_Component(ops, reads, writes, shapes.pop() if shapes else ()))
    return out


def _checked(seg: Segment, comps: list) -> bool:
    """Whether batching ``comps`` keeps the segment's meaning (module docstring)."""
    if not all(_elementwise(n) for n in seg.ops):
        return False
    owner: dict = {}
    for c in comps:
        for x in c.inputs:
            owner.setdefault(x, []).append(c)
    vals = [_val(x) for x in seg.inputs]
    if any(v is None for v in vals) or len({v.device for v in vals}) > 1:  # (a host scalar beside CUDA tensors)
        return False
    for c in comps:
        written = [x for _, x in c.writes]
        if len(set(written)) != len(written):
            return False
        for value, x in c.writes:
            vv, xv = _val(value), _val(x)
            if not isinstance(value, fx.Node) or len(owner.get(x, ())) != 1 or owner[x][0] is not c or vv is None \
                    or xv is None or tuple(vv.shape) != tuple(xv.shape) or vv.dtype != xv.dtype:
                return False
        after = set()
        for n in c.ops:  # nothing reads an input after its copy_ (it would see the new value)
            if any(a in after for a in n.all_input_nodes if not (n.target is _COPY_ and a is n.args[0])):
                return False
            if n.target is _COPY_:
                after.add(n.args[0])
    return True


def _signature(c: _Component, shared: dict) -> tuple:
    index = {}
    parts = []
    for x in c.inputs:
        v = _val(x)
        parts.append(("shared", shared[x]) if x in shared else ("in", str(v.dtype) if v is not None else "-",
                                                                tuple(v.shape) if v is not None else None))
        index[x] = len(index)

    def describe(a):
        if isinstance(a, fx.Node):
            return ("%", index[a])
        if isinstance(a, (list, tuple)):
            return (type(a).__name__, tuple(describe(b) for b in a))
        return (type(a).__name__, repr(a))

    for n in c.ops:
        index[n] = len(index)
        v = _val(n)
        parts.append((str(n.target), describe(n.args), tuple(sorted((k, describe(w)) for k, w in n.kwargs.items())),
                      str(v.dtype), tuple(v.shape)))
    parts.append(("writes", tuple((index[v], index[x]) for v, x in c.writes)))
    return tuple(parts)


def _group_segment(members: list, shared: dict, position: dict) -> tuple[Segment, list, list]:
    """The batched segment of ``members`` (one structure) on its own fx graph, with fake values of the stacked
    shapes, and the runner's feeding (``inputs``) and emptying (``outputs``) lists (:class:`BatchGroup`)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    rep, n = members[0], len(members)
    inner = (math.prod(rep.shape),) if rep.shape else ()  # a member's elements in one dim (module docstring)
    mode = FakeTensorMode()
    g = fx.Graph()
    env: dict = {}
    inputs, feed = [], []
    for j, x in enumerate(rep.inputs):
        v = _val(x)
        if x in shared:
            shape = inner if v.dim() else ()
            feed.append(("shared", shared[x], None if v.dim() < 2 else shape))
        else:
            shape = (n, *inner) if v.dim() else (n,) + (1,) * len(inner)
            feed.append(("stack", [position[m.inputs[j]] for m in members], None if v.dim() == 1 else shape))
        p = g.placeholder(f"in{j}")
        with mode:
            p.meta["val"] = torch.empty(shape, dtype=v.dtype, device=v.device)
        env[x] = p
        inputs.append(p)
    ops = []

    def fake(a):
        return a.meta["val"]

    for node in rep.ops:
        if node.target is _COPY_:  # what reads it reads the value written
            env[node] = env[node.args[1]]
            continue
        args = fx.node.map_arg(node.args, env.__getitem__)
        kwargs = fx.node.map_arg(node.kwargs, env.__getitem__)
        new = g.call_function(node.target, args, kwargs)
        with mode:
            new.meta["val"] = node.target(*fx.node.map_arg(args, fake), **fx.node.map_arg(kwargs, fake))
        env[node] = new
        ops.append(new)
    outputs, empty = [], []
    for j, (value, x) in enumerate(rep.writes):
        outputs.append(env[value])
        empty.append(((n, *_val(x).shape), [position[m.writes[j][1]] for m in members]))
    in_place = _over_stacks(outputs, [env[x] for _, x in rep.writes], (n, *inner))
    return Segment(ops, inputs, outputs, in_place=in_place, ones_broadcast=True), feed, empty


def _over_stacks(outputs: list, stacks: list, full: tuple) -> dict:
    """Output -> the stacked input it may be written over (``fd.add_output(out, alias_input=stack)``): the stack of
    the input its members' ``copy_`` writes (of its dtype and shape: :func:`_checked` batches no ``copy_`` that
    casts or broadcasts), where that output is written once and the stack has the group's ``full`` shape. The
    stacks are the runner's own and die with the call, and every op of a batched group is elementwise at the full
    shape, so element i of a full stack is read before it is written (what ``plan_in_place`` relies on too). A
    ``[N, 1]`` stack of 0-d members (Adam's step counts) is read broadcast over a member's elements: written over,
    it would be written while other elements still read it, so nvFuser splits such a definition into more kernels
    (on the H200, Adam's two groups ran as five kernels with the step counts written over, three without:
    ``results/2026-11-30-h200-*``). Its results, N elements each, are fresh."""
    return {o: x for o, x in zip(outputs, stacks)
            if outputs.count(o) == 1 and o is not x and tuple(x.meta["val"].shape) == full}


def _nbytes(n) -> int:
    v = _val(n)
    return v.numel() * v.element_size() if v is not None else 0


def _stack_bytes(comps: list, shared: dict) -> int:
    """What the stacks of one call hold at once: every update's stacked inputs and its written values."""
    return sum(_nbytes(x) for c in comps for x in c.inputs if x not in shared) + \
        sum(_nbytes(v) for c in comps for v, _ in c.writes)


def _groups(seg: Segment) -> tuple[list, dict] | None:
    """(the groups of identical components, the shared inputs by position) where ``seg`` batches, else None."""
    if not seg.ops or not seg.copies or seg.outputs:  # (a segment with copy_s has no in-place outputs)
        return None
    comps = _components(seg)
    if comps is None or len(comps) < 2 or not _checked(seg, comps):
        return None
    readers: dict = {}
    for c in comps:
        for x in c.inputs:
            readers[x] = readers.get(x, 0) + 1
    position = {x: i for i, x in enumerate(seg.inputs)}
    shared = {x: position[x] for x, k in readers.items() if k > 1}
    groups: dict = {}
    for c in comps:
        groups.setdefault(_signature(c, shared), []).append(c)
    if all(len(m) == 1 for m in groups.values()) or _stack_bytes(comps, shared) > MAX_STACK_BYTES:
        return None
    return list(groups.values()), shared


def batch_plan(seg: Segment) -> BatchPlan | None:
    """How to run ``seg`` as one definition per group of identical components, or None where that does not
    hold (module docstring) or gains nothing (no group of two or more)."""
    found = _groups(seg)
    if found is None:
        return None
    groups, shared = found
    position = {x: i for i, x in enumerate(seg.inputs)}
    batched = []
    for m in groups:
        g_seg, feed, empty = _group_segment(m, shared, position)
        batched.append(BatchGroup(g_seg, len(m), feed, empty))
    return BatchPlan(batched)


def stack_workspace(plan: BatchPlan, values: list, rounding: int = 1, write_over: bool = True) -> int:
    """The bytes a :class:`BatchedRunner` call of ``plan`` holds at its peak beyond the segment's inputs, known
    before anything compiles (``predict`` prices batched regions with it): per group, its stacked inputs (one
    allocation each; a shared input only where it is not dense) and its fresh stacked results, while the results of
    the groups before it wait for the one copy at the end. ``write_over`` (the executor's ``donate_inplace``): a
    result written over its input stack (``seg.in_place``) takes no allocation, and that stack, not the other
    stacks of its group, is what waits. ``values``: the segment inputs' tensors (meta will do)."""
    def size(v) -> int:
        return v.numel() * v.element_size()

    held = peak = 0
    for g in plan.groups:
        stacks, made = {}, 0
        for j, (kind, which, _) in enumerate(g.inputs):
            if kind == "stack":
                stacks[j] = round_up(sum(size(values[i]) for i in which), rounding)
                made += stacks[j]
            elif not values[which].is_contiguous():
                made += round_up(size(values[which]), rounding)
        over = g.seg.in_place if write_over else {}
        kept = fresh = 0
        for o, (_, into) in zip(g.seg.outputs, g.outputs):
            if o in over:
                kept += stacks[g.seg.inputs.index(over[o])]
            else:
                fresh += round_up(sum(size(values[i]) for i in into), rounding)
        peak = max(peak, held + made + fresh)
        held += fresh + kept
    return peak


def batched_update_program(gm: fx.GraphModule, constants: frozenset | set = frozenset()) -> tuple[int, int]:
    """(updates, groups) where the whole program ``gm`` is one segment of updates that batch (an optimizer
    step: every op fusible and elementwise, every result written into an input, identical updates, stacks
    under the limit), else (0, 0). ``constants``: the nodes constant folding computes ahead (its ``foldable``),
    which reach the regions as inputs (Adam's 0-d ``full`` per parameter, and lerp's ``abs(w) >= 0.5`` of it).
    ``fusion="auto"`` asks it to pick horizontal regions for such a program (run/jit.py): dataflow keeps each
    update a region of its own, one definition call each."""
    nodes = gm.graph.nodes
    output = next(n for n in reversed(nodes) if n.op == "output")
    if output.all_input_nodes or not any(n.target is _COPY_ for n in nodes):
        return 0, 0  # (cheap first: a program that returns values, a training step's forward, is not updates)
    ops = [n for n in nodes if n.op == "call_function" and n not in constants]
    # fusible as the executor splits (NvFuserExecutor's default: integer and bool results stay in torch)
    if any(fusible_reason(n, index_math=False) is not None for n in ops):
        return 0, 0
    inside = set(ops)
    inputs = list(dict.fromkeys(a for n in ops for a in n.all_input_nodes if a not in inside))
    found = _groups(Segment(ops, inputs, [], [n for n in ops if n.target is _COPY_]))
    return (sum(len(m) for m in found[0]), len(found[0])) if found else (0, 0)


def _dense_stack(members: list) -> torch.Tensor:
    """``torch.stack(members)`` laid out contiguously whatever the members' layout, in one allocation (what
    :func:`stack_workspace` prices): the definition reads every stack flat."""
    first = members[0]
    out = torch.empty((len(members), *first.shape), dtype=first.dtype, device=first.device)
    return torch.stack(members, out=out)


class BatchedRunner:
    """Runs a batched segment (:func:`batch_plan`): per group, stack the members' inputs, execute its
    definition (which may write results over their input stacks: its ``places``); then one
    ``torch._foreach_copy_`` writes every member's slices into place. Returns the segment's outputs: none
    (:func:`batch_plan` batches segments without). ``definitions``: per group, the executor's built definition
    (``fd``, ``places`` as :func:`.nvfuser_region.output_places` gives them, and the inputs it takes lifted)."""

    def __init__(self, plan: BatchPlan, definitions: list):
        self.plan = plan
        self.definitions = definitions

    def __call__(self, ins):
        dests, srcs = [], []
        stack, foreach_copy = torch.stack, torch._foreach_copy_
        for group, d in zip(self.plan.groups, self.definitions):
            given = []
            for kind, which, view in group.inputs:
                if kind == "shared":  # defined dense (as stacks are): any layout it comes in
                    t = ins[which].contiguous()
                else:
                    members = [ins[i] for i in which]
                    # (torch.stack keeps the layout of channels_last members: such stacks are made dense at once)
                    t = stack(members) if members[0].is_contiguous() else _dense_stack(members)
                given.append(t if view is None else t.reshape(view))
            for i in d.lifted:  # a shared 0-d input beside results written over stacks: [1] * rank, no broadcast op
                given[i] = given[i].view(*d.lift_shape)
            res = d.fd.execute(given)
            for (kind, i, shape), (view, into) in zip(d.places, group.outputs):
                dests.extend([ins[k] for k in into])
                out = res[i] if kind == "out" else given[i] if shape is None else given[i].view(shape)
                srcs.extend(out.view(view).unbind(0))
        foreach_copy(dests, srcs)
        return []
