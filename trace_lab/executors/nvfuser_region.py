"""Splitting a fused region into nvFuser segments and torch steps, and running them.

A region (the ``fusionN`` submodule a fusion pass made) is walked in order.
Ops the op table accepts gather into the open *segment*; an op it rejects runs
through torch. Such an op is hoisted before the open segment when it does not
read it (legal: it comes later in the order and the segment's ops cannot read
it), so that the region splits only where data really flows through a torch op.
A segment of layout ops alone (views, permutes, and clones that lay a permuted or
expanded value out densely: no arithmetic) stays in torch, where views cost nothing
and a clone is one copy kernel: nvFuser spent 50-100 us of host time a call on such
a segment (an attention head's transposes, several kernels) and about 1 s compiling
each one on its first call (H200, `benchmarks/nvfuser_execute_probe.py`). Each
remaining segment becomes one FusionDefinition.
A segment's views of its inputs that none of its ops reads (a weight's transpose handed to a matmul, an
identity ``expand``) are torch steps after it (:func:`_passed_input_views`): through nvFuser each was a fresh
copy in nvFuser's layout, and a region downstream, compiled for the view's recorded layout, then ran op by op
(llama, memory strategy, on the CPU stand-in: the attention region of every layer after the first).
Likewise a segment's views of its own result where that result leaves anyway, as an output or through another
view (a weight gradient handed out as a 2-D view and that view's transpose): torch steps after it
(:func:`_detach_shared_views`), so nvFuser writes the result once instead of once a view.
The region program's view steps fold as the main program's do (:mod:`..runtime.fast_views`): after a
first call that checks each view's layout, one stride reinterpretation each (llama 8L, memory strategy,
CPU stand-in: 237 view steps a training step, each a dispatcher round trip before).

In place (``donate_inplace``): a segment may write an output over a region input that
dies in it (:func:`plan_in_place`), as ``fd.add_output(out, alias_input=x)``. Only
where it is safe without looking at nvFuser's schedule: every op of the segment is
elementwise in flat order at the input's size (pointwise ops, casts, views of dense
tensors, expands of smaller ones; no reduction, no permute), so flat element i of the
output reads flat element i of the input only; the two have one dtype and a dense
layout (the output reshaped to the input's shape where they differ); and nothing
after the segment reads the input. The segment's runner returns the input tensor in the
output's place, so the region program and the liveness model see the output in the
input's storage. An input read through a torch step's view as well is read in another element order, and
an input whose view the region returns is returned: neither is written over (:func:`_view_roots`). Views that
only pass a segment's values out (a weight's transpose handed to a
matmul, a gradient's 2-D view and transpose) would make a segment look otherwise: where they alone
stand in the way of writing over a dying input, they run as torch steps right after the segment
(free there), and the segment pairs (:func:`_detach_edge_views`; SwiGLU's backward writes both
gradients over its dying inputs so, as Inductor's kernel does). Several pairs in one segment rely on
nvFuser reading a fusion's inputs before it writes over them (within one kernel each element is read
before it is written; nvFuser's SegmentInplaceUpdate pass puts a write it cannot order so into a copy
kernel of its own). That pass also splits off every written-over output next to a broadcast op, so a segment
that writes over inputs takes its 0-d inputs as ``[1] * rank`` tensors with broadcast dims
(:func:`lifted_inputs`): no broadcast op, and Adam's update is one kernel instead of four. A lifted input a
``copy_`` writes (the step count) is returned fresh and copied back by the runner (:func:`written_back`): as an
aliased output it cost a no-op segment of its own, and with one such segment nvFuser segments the whole definition.
nvFuser does not fuse independent updates into one kernel, so a region of N updates is N kernels (plus the
copy-back), not one, unless the executor batches them (:mod:`.nvfuser_batch`: one stacked definition a group of
identical updates).
"""
from __future__ import annotations

import hashlib
import operator
import re
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from ..analysis.buffers import alias_sources
from ..runtime.interpreter import as_reshape
from ..runtime.wide_copy import wide_clone, word_for
from . import nvfuser_ops
from .nvfuser_ops import METADATA_OPS, Builder, fusible_reason, table_entry

__all__ = ["Segment", "split_region", "plan_in_place", "segment_signature", "build_definition", "lifted_inputs",
           "RegionProgram", "torch_target"]


def torch_target(n: fx.Node):
    """The callable a torch step runs: ``view`` (and ``_unsafe_view``) as ``reshape``, since a value an nvFuser
    segment produced may be laid out differently from eager's (same values); a contiguous ``clone`` of a value
    whose recorded innermost dim is contiguous (an attention head's transpose) in 16- or 8-byte words
    (:mod:`..runtime.wide_copy`: torch's copy kernel moves one element at a time)."""
    if n.target is torch.ops.aten.clone.default and n.kwargs.get("memory_format") is torch.contiguous_format \
            and isinstance(n.args[0], fx.Node):
        word = word_for(n.args[0].meta.get("val"))
        if word is not None:
            return wide_clone(word)
    return as_reshape(n.target)


def _is_getitem(n: fx.Node) -> bool:
    return n.op == "call_function" and n.target is operator.getitem


@dataclass
class Segment:
    ops: list[fx.Node]  # compute nodes in order (getitems excluded)
    inputs: list[fx.Node] = field(default_factory=list)
    outputs: list[fx.Node] = field(default_factory=list)  # values read after the segment (not copy_)
    copies: list[fx.Node] = field(default_factory=list)  # copy_ nodes: value after = their dest input
    in_place: dict = field(default_factory=dict)  # output node -> the input node it is written over (plan_in_place)
    # every size-1 dim of its values is one nvFuser holds as a broadcast dim (a batched group's: its [N, 1] stacks
    # of 0-d members are inputs of static size 1), so they meet wider values without a broadcast op (Builder)
    ones_broadcast: bool = False

    def produced(self) -> set[fx.Node]:
        out = set(self.ops)
        for n in self.ops:
            out.update(u for u in n.users if _is_getitem(u))
        return out


def _layout_only(ops) -> bool:
    """Whether ``ops`` only lay values out: views and permutes, and clones (a dense copy of a permute or an
    expand). Such a segment runs through torch (module docstring)."""
    return all(n.target in METADATA_OPS or n.target is torch.ops.aten.clone.default for n in ops)


def _passed_input_views(ops: list) -> set:
    """The segment's metadata ops (views, permutes, expands) that only view its inputs and pass the result out:
    each reads values made before the segment (or another such view) and no other op of the segment reads it.
    nvFuser would write each of them out as a fresh copy, in its own layout rather than the view's one the
    capture recorded, so the region reading it downstream finds other strides than it was compiled for and
    runs op by op (llama, memory strategy: an attention layer's value heads, an identity ``expand`` of an
    input). As torch steps after the segment they stay views and copy nothing (module docstring)."""
    inside = set(ops)
    if any(n.target is torch.ops.aten.copy_.default for n in ops):
        return set()
    views: set = set()
    for n in ops:
        if n.target in METADATA_OPS and all(a not in inside or a in views for a in n.all_input_nodes):
            views.add(n)
    passed: set = set()
    for n in reversed(ops):
        if n in views and all(u not in inside or u in passed for u in n.users):
            passed.add(n)
    return passed


def split_region(gm: fx.GraphModule, reason=fusible_reason):
    """(steps, notes): steps are ('torch', node) or ('fuse', Segment) in a legal order.

    ``reason(node)`` is the executor's fusibility answer (None: fusible)."""
    steps: list[tuple[str, object]] = []
    notes: list[str] = []
    seg: list[fx.Node] = []
    seg_values: set[fx.Node] = set()

    def close():
        nonlocal seg, seg_values
        if seg:
            passed = _passed_input_views(seg)
            rest = [n for n in seg if n not in passed]
            if _layout_only(rest):
                steps.extend(("torch", n) for n in seg)
            else:
                steps.append(("fuse", Segment(rest)))
                steps.extend(("torch", n) for n in seg if n in passed)
        seg, seg_values = [], set()

    for n in gm.graph.nodes:
        if n.op != "call_function" or _is_getitem(n):
            continue
        why = reason(n)
        if why is None:
            seg.append(n)
            seg_values.add(n)
            seg_values.update(u for u in n.users if _is_getitem(u))
            continue
        notes.append(f"split at {n.name}: {why}")
        if any(a in seg_values for a in n.all_input_nodes):
            close()
        steps.append(("torch", n))
    close()
    _wire(gm, steps)
    if _detach_shared_views(steps):
        _wire(gm, steps)
    return steps, notes


def _wire(gm: fx.GraphModule, steps) -> None:
    """Fill each segment's inputs (read, produced elsewhere) and outputs (read elsewhere)."""
    for kind, seg in steps:
        if kind != "fuse":
            continue
        produced = seg.produced()
        ins: dict[fx.Node, None] = {}
        for n in seg.ops:
            for a in n.all_input_nodes:
                if a not in produced:
                    ins[a] = None
        seg.inputs = list(ins)
        outs: dict[fx.Node, None] = {}
        for v in produced:
            if not _is_getitem(v) and isinstance(v.meta.get("val"), (list, tuple)):
                continue  # a multi-output op is read through its getitems
            if any(u not in produced for u in v.users):
                outs[v] = None
        order = {n: i for i, n in enumerate(gm.graph.nodes)}
        seg.copies = [n for n in seg.ops if n.target is torch.ops.aten.copy_.default]
        seg.outputs = sorted((v for v in outs if v not in seg.copies), key=order.__getitem__)


_VIEWS = frozenset({torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.reshape.default,
                    torch.ops.aten.alias.default, torch.ops.aten.squeeze.dim, torch.ops.aten.squeeze.default,
                    torch.ops.aten.unsqueeze.default})


def _dense(val) -> bool:
    return isinstance(val, torch.Tensor) and val.is_contiguous() and int(val.storage_offset()) == 0


def _flat_elementwise(n: fx.Node, numel: int) -> bool:
    """Does op ``n`` compute flat element i of its ``numel``-element output from flat element i of each of its
    inputs that has ``numel`` elements (inputs with fewer are broadcast; one that views the input written over, a
    torch step's ``slice`` of it, is refused apart: :func:`_view_roots`)?
    Pointwise ops and dtype conversions do; so do views of dense tensors, and ``expand``."""
    val = n.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.numel() != numel:
        return False
    if n.target is torch.ops.aten.expand.default:
        return True
    if n.target in _VIEWS:
        src = n.args[0].meta.get("val") if isinstance(n.args[0], fx.Node) else None
        return _dense(src) and val.is_contiguous()
    if n.target in METADATA_OPS:  # permutes, slices, ...: another element order
        return False
    if n.target in (torch.ops.aten._to_copy.default, torch.ops.aten.clone.default):
        return all(k in ("dtype", "memory_format") for k in n.kwargs) and \
            n.kwargs.get("memory_format") in (None, torch.contiguous_format, torch.preserve_format)
    return torch.Tag.pointwise in getattr(n.target, "tags", ())


def _view_roots(steps) -> dict:
    """Each torch step whose result shares an argument's storage (a view, ``slice``, ``select``, ``split``'s items:
    :func:`..analysis.buffers.alias_sources`, the memory model's own rule) -> the value whose storage it shares,
    through chains."""
    root: dict[fx.Node, fx.Node] = {}
    for kind, item in steps:
        if kind != "torch":
            continue
        sources = alias_sources(item)
        if isinstance(item.meta.get("val"), (list, tuple)):  # several results: each read through its getitem
            pairs = [(u, sources[u.args[1]]) for u in item.users
                     if _is_getitem(u) and isinstance(u.args[1], int) and u.args[1] < len(sources)]
        else:
            pairs = [(item, sources[0])] if sources else []
        for value, src in pairs:
            if isinstance(src, fx.Node):
                root[value] = root.get(src, src)
    return root


def _last_reads(steps, root: dict | None = None) -> dict:
    """Value -> the last step that reads it, where reading a torch step's view of it reads it too (``root``:
    :func:`_view_roots` of ``steps``, made here if not given)."""
    root = _view_roots(steps) if root is None else root
    last: dict[fx.Node, int] = {}
    for i, (kind, item) in enumerate(steps):
        for r in (item.inputs if kind == "fuse" else item.all_input_nodes):
            last[r] = i
            if r in root:
                last[root[r]] = i
    return last


def _dying_inputs(seg: Segment, i: int, writable: set, returned: set, last: dict) -> list[fx.Node]:
    """The inputs segment ``steps[i]`` may write over: given up by the caller, not returned, read by no later step,
    dense (:func:`plan_in_place`'s candidates; whether the segment's ops allow it is asked apart)."""
    return [x for x in seg.inputs if x in writable and x not in returned and last.get(x) == i
            and _dense(x.meta.get("val"))]


def _edge_views(seg: Segment) -> list[fx.Node]:
    """The segment's metadata ops (views, permutes, expands) no other op of it reads: each only passes a value
    out, so torch can take it after the segment (a view costs nothing there). A chain of them counts whole."""
    ops = set(seg.ops)
    edge: set = set()
    for n in reversed(seg.ops):
        if n.target in METADATA_OPS and n not in seg.copies and all(u not in ops or u in edge for u in n.users):
            edge.add(n)
    return [n for n in seg.ops if n in edge]


def _edge_inputs(edge: list[fx.Node]) -> set:
    """The values ``edge`` ops read (an input an edge view reads is read after the segment: never written over)."""
    return {a for n in edge for a in n.all_input_nodes}


def _segments_last_first(steps):
    """(index, segment) of each fused segment without ``copy_``s, the last first: ops moved to torch steps right
    after one leave the indices of those before it as they were."""
    for i in range(len(steps) - 1, -1, -1):
        kind, seg = steps[i]
        if kind == "fuse" and not seg.copies:
            yield i, seg


def _move_after(steps, i: int, seg: Segment, ops: list) -> None:
    """Take ``ops`` out of ``seg`` (``steps[i]``) and run them as torch steps right after it, in their order."""
    moving = set(ops)
    seg.ops = [n for n in seg.ops if n not in moving]
    steps[i + 1:i + 1] = [("torch", n) for n in ops]


def _detach_edge_views(gm: fx.GraphModule, steps, writable: set, returned: set) -> None:
    """Where only a segment's edge views (:func:`_edge_views`: permutes of weights passed on to a matmul, views of
    its results) keep a dying ``writable`` input from being written over, they become torch steps right after
    the segment (legal: they read the segment's inputs or results, and only later steps read them). The segment
    is then elementwise in flat order, and :func:`plan_in_place` may pair. Segments this does not help keep their
    ops (each split costs a step of host time)."""
    last = _last_reads(steps)
    moved = False
    for i, seg in _segments_last_first(steps):
        edge = _edge_views(seg)
        edge_set = set(edge)
        rest = [n for n in seg.ops if n not in edge_set]
        if not edge or _layout_only(rest):  # nothing would be left for nvFuser
            continue
        read_after = _edge_inputs(edge)
        dying = [x for x in _dying_inputs(seg, i, writable, returned, last) if x not in read_after]
        if any(not all(_flat_elementwise(n, x.meta["val"].numel()) for n in seg.ops)
               and all(_flat_elementwise(n, x.meta["val"].numel()) for n in rest) for x in dying):
            _move_after(steps, i, seg, edge)
            moved = True
    if moved:
        _wire(gm, steps)


def _detach_shared_views(steps) -> bool:
    """Move out the edge views (:func:`_edge_views`) of a value a segment makes that leaves the segment anyway:
    its source is an output, or the source of another output's view. nvFuser writes every output, a view
    included, as a tensor of its own, so a linear's weight gradient handed out as a 2-D view and as that view's
    transpose (for the next matmul) was written twice, the second time as a transposing copy. As torch steps
    after the segment they are views of the one output (free; :mod:`..runtime.fast_views` folds them), in the
    strides the capture recorded for them. Views whose source leaves only through them stay: moving them
    would write the same bytes. True when a segment changed (its inputs and outputs need :func:`_wire`)."""
    moved = False
    for i, seg in _segments_last_first(steps):
        edge = _edge_views(seg)
        edge_set = set(edge)
        produced = seg.produced()

        def source(n):
            while n in edge_set:
                n = n.args[0]
            return n

        leaving = set(seg.outputs)
        by_source: dict = {}
        for o in seg.outputs:
            by_source.setdefault(source(o), []).append(o)
        shared = {s for s, outs in by_source.items() if s in produced and (s in leaving or len(outs) > 1)}
        out = [n for n in edge if source(n) in shared]
        if not out or _layout_only([n for n in seg.ops if n not in set(out)]):
            continue
        _move_after(steps, i, seg, out)
        moved = True
    return moved


def plan_in_place(gm: fx.GraphModule, steps, writable: set) -> set:
    """Fill each segment's ``in_place`` (output -> input it is written over) from ``writable``, the region's
    placeholders its caller gives up to it; returns the placeholders written over. A pair needs: the input read
    by this segment and by no later step (nor through a torch step's view of it), not a region output (nor a
    returned view's source), not a ``copy_`` destination, not read by the segment through a view too, dense; the
    output of the same dtype and number of elements, dense; every op of the segment elementwise in flat order at
    that size (:func:`_flat_elementwise`: no reduction, no permute), so that writing flat element i of the output
    over the input's reads nothing but element i (module docstring). Where only the segment's edge views stand in the
    way, they move to torch steps after it first (:func:`_detach_edge_views`: ``steps`` changes)."""
    out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    returned = set(out_node.all_input_nodes)
    if writable:
        _detach_edge_views(gm, steps, writable, returned)
    root = _view_roots(steps)
    returned |= {root[r] for r in returned if r in root}  # a returned view returns its source's storage
    last = _last_reads(steps, root)
    written: set = set()
    for i, (kind, seg) in enumerate(steps):
        if kind != "fuse" or seg.copies:
            continue
        for x in _dying_inputs(seg, i, writable, returned, last):
            xv = x.meta["val"]
            if not all(_flat_elementwise(n, xv.numel()) for n in seg.ops):
                continue
            if any(root.get(a) is x for a in seg.inputs):  # it also reads x through a torch view (another order)
                continue
            same = [o for o in seg.outputs if o not in seg.in_place and _dense(o.meta.get("val"))
                    and o.meta["val"].numel() == xv.numel() and o.meta["val"].dtype == xv.dtype]
            same.sort(key=lambda o: tuple(o.meta["val"].shape) != tuple(xv.shape))  # same shape first
            if same:
                seg.in_place[same[0]] = x
                written.add(x)
    return written


def _describe(x, index: dict) -> str:
    if isinstance(x, fx.Node):
        return f"%{index[x]}" if x in index else "%?"
    if isinstance(x, (list, tuple)):
        inner = ",".join(_describe(v, index) for v in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner})"
    if isinstance(x, torch.dtype):
        return str(x)
    if isinstance(x, float):
        return repr(x)
    return repr(x)


def segment_signature(seg: Segment, strides: list | None = None, in_place: bool = True) -> str:
    """Structural key of a segment: same ops, wiring, constants, input layouts and in-place outputs (unless
    ``in_place`` is off: the definition built without them) -> same key."""
    index: dict[fx.Node, int] = {}
    parts = []
    for i, x in enumerate(seg.inputs):
        t = x.meta["val"]
        st = tuple(strides[i]) if strides is not None else tuple(t.stride())
        parts.append(f"in {t.dtype} {tuple(t.shape)} {st} {t.device.type}")
        index[x] = len(index)
    for n in seg.ops:
        index[n] = len(index)
        for u in n.users:
            if _is_getitem(u):
                index[u] = f"{index[n]}.{u.args[1]}"
        args = _describe(n.args, index)
        kwargs = ",".join(f"{k}={_describe(v, index)}" for k, v in sorted(n.kwargs.items()))
        parts.append(f"{n.target} {args} {kwargs}")
    parts.append("out " + ",".join(str(index[o]) for o in seg.outputs))
    if in_place and seg.in_place:
        parts.append("in place " + ",".join(f"{index[o]}>{index[x]}" for o, x in seg.in_place.items()))
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def lifted_inputs(seg: Segment, in_place: bool = True) -> tuple[int, tuple]:
    """(rank R, positions): the segment's 0-d inputs nvFuser is given as shape [1] * R tensors (``t.view``), whose
    dimensions are broadcast ones, where the segment writes over inputs (``copy_``, in-place pairs). Given as 0-d
    tensors they need broadcast ops, and nvFuser's SegmentInplaceUpdate pass gives every written-over output
    next to a broadcast a kernel of its own (Adam's update: 4 kernels a parameter instead of 2,
    `benchmarks/nvfuser_inplace_segments_probe.py`). Only where every other tensor of the segment has rank R
    and every 0-d value it computes comes from those inputs alone; else (0, ())."""
    if not (seg.copies or (in_place and seg.in_place)) or any(
            isinstance(o.meta.get("val"), torch.Tensor) and o.meta["val"].dim() == 0 for o in seg.in_place):
        return 0, ()

    def val(n):
        v = n.meta.get("val") if isinstance(n, fx.Node) else None
        return v if isinstance(v, torch.Tensor) else None

    zero = [i for i, x in enumerate(seg.inputs) if val(x) is not None and val(x).dim() == 0
            and val(x).device.type != nvfuser_ops.HOST_DEVICE]  # a host scalar is a scalar to nvFuser
    ranks = {val(n).dim() for n in list(seg.inputs) + seg.ops if val(n) is not None and val(n).dim() > 0}
    if not zero or len(ranks) != 1:
        return 0, ()
    lifted = {seg.inputs[i] for i in zero}
    for n in seg.ops:
        if not _broadcasts_operands(n) and any(a in lifted for a in n.all_input_nodes):
            return 0, ()  # its lowering would meet a [1] * R value where it expects the recorded 0-d shape
        if val(n) is not None and val(n).dim() == 0:
            ins = [a for a in n.all_input_nodes if val(a) is not None and val(a).dim() == 0]
            if not ins or not all(a in lifted for a in ins):
                return 0, ()
            lifted.add(n)
    return ranks.pop(), tuple(zero)


_BROADCASTING = {torch.ops.aten.copy_.default, torch.ops.aten.copy.default, torch.ops.aten.expand.default,
                 torch.ops.aten._to_copy.default}


def _broadcasts_operands(n: fx.Node) -> bool:
    """Whether ``n``'s lowering takes a lifted value as it takes a 0-d one: pointwise ops (aten's ``pointwise``
    tag; ``prims.fma``, Adam's lerp) and the copies and expands, whose lowerings broadcast their operands
    (``Builder.broadcast``); not views, reductions or other ops that read their input's shape."""
    t = n.target
    return t in _BROADCASTING or str(t) == "prims.fma.default" or torch.Tag.pointwise in getattr(t, "tags", ())


def build_definition(seg: Segment, nvf, strides: list | None = None, in_place: bool = True,
                     lift: tuple[int, tuple] | None = None):
    """A FusionDefinition computing the segment (not yet compiled: nvFuser compiles on execute). Its visible
    outputs are ``seg.outputs`` in order, less the in-place ones (``seg.in_place``, unless ``in_place`` is off),
    which are added after them aliased to their inputs, as ``copy_``'s are (:func:`output_places`). ``lift``:
    :func:`lifted_inputs` of the segment where the caller has it already."""
    rank, lift = lifted_inputs(seg, in_place) if lift is None else lift
    fd = nvf.FusionDefinition()
    with fd:
        b = Builder(fd, nvf, ones_broadcast=seg.ones_broadcast)
        for i, x in enumerate(seg.inputs):
            if i in lift:
                b.lift(b.define_input(x, [1] * rank, sizes=[1] * rank))
            else:
                b.define_input(x, strides[i] if strides is not None else None)
        for n in seg.ops:
            result = table_entry(n.target).build(b, n)
            if isinstance(n.meta.get("val"), (list, tuple)):
                for u in n.users:
                    if _is_getitem(u):
                        b.values[u] = result[u.args[1]]
            else:
                b.values[n] = result
                if lift and isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].dim() == 0:
                    b.lift(result)  # computed from lifted inputs alone (lifted_inputs)
        added: set[int] = set()
        over = seg.in_place if in_place else {}
        for o in seg.outputs:
            if o in over:
                continue
            v = b.values[o]
            if id(v) in b.inputs or id(v) in added:
                v = fd.ops.set(v)  # an output must be a new value
            if id(b.values[o]) in b.lifted:  # back to the 0-d value the program expects
                v = fd.ops.squeeze(v, list(range(rank)))
            added.add(id(v))
            fd.add_output(v)
        back = {id(b.values[seg.inputs[i]]) for i in written_back(seg, (rank, lift))}
        for _, dest, v in b.aliases:  # lifted values written back: fresh outputs after the visible ones, and not
            if id(dest) in back:      # copy_'s set, which nvFuser would give a no-op segment as it did the alias
                v = fd.ops.set(v) if id(v) in b.inputs or id(v) in added else v
                added.add(id(v))
                fd.add_output(v)
        for v, dest, _ in b.aliases:
            if id(dest) not in back:
                fd.add_output(v, alias_input=dest)
        for o, x in over.items():
            v = b.values[o]
            v = fd.ops.set(v) if id(v) in b.inputs else v
            shape = list(x.meta["val"].shape)
            if list(o.meta["val"].shape) != shape:  # same elements in the same order, the input's shape
                v = fd.ops.reshape(v, shape)
            fd.add_output(v, alias_input=b.values[x])
    return fd


def written_back(seg: Segment, lift: tuple[int, tuple]) -> tuple[int, ...]:
    """Positions of the lifted inputs (:func:`lifted_inputs`) the segment's ``copy_``s write, in op order. The
    definition returns each new value as a fresh [1] * R output, after the visible ones, and the runner copies
    them back (one ``torch._foreach_copy_``), instead of an output aliased to its input: nvFuser's
    MarkAliasesPrepare pass gives an aliased broadcast-only output a no-op segment of its own, and a definition
    with such a segment is segmented whole, so each Adam update cost a second kernel and a region of many
    updates kept them all (`benchmarks/nvfuser_horizontal_probe.py`). () where a lifted input is written twice."""
    lifted = {seg.inputs[i]: i for i in lift[1]}
    back = tuple(lifted[c.args[0]] for c in seg.copies if c.args[0] in lifted)
    return back if len(set(back)) == len(back) else ()


def output_places(seg: Segment, in_place: bool = True) -> tuple[int, list]:
    """(the definition's visible outputs, where each of ``seg.outputs`` comes from): ``("out", i, None)`` the i-th
    visible output, ``("in", k, shape)`` the segment's k-th input, written over (built with ``in_place``), seen
    in the output's shape where it differs (else None)."""
    over = seg.in_place if in_place else {}
    places, visible = [], 0
    for o in seg.outputs:
        if o in over:
            x = over[o]
            shape = tuple(o.meta["val"].shape)
            places.append(("in", seg.inputs.index(x), None if shape == tuple(x.meta["val"].shape) else shape))
        else:
            places.append(("out", visible, None))
            visible += 1
    return visible, places


class _SegmentLine:
    """The key of a segment's line in a region program's plan (for :func:`..runtime.fast_views.plan`: not a view)."""

    op = "segment"


class RegionProgram:
    """Runs one region: torch steps and nvFuser segments over an environment, freeing as it goes.

    ``program(*inputs)`` or ``program.boxed(list)``: the list is handed over and cleared, so an input only the
    caller held goes at its last read inside the region (``donate_inputs``, as Inductor's ``call(args)``)."""

    fold_views = True  # False: view steps stay aten calls (benchmarks/steady_interleaved.py's ~noregionviews A/B)

    def __init__(self, gm: fx.GraphModule, steps, segment_runners: dict, multi: bool):
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        outs = out_node.args[0]
        self.outputs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        self.multi = multi
        keep = set(self.outputs)
        plan = []
        for kind, item in steps:
            if kind == "torch":
                reads = list(item.all_input_nodes)
                plan.append(("torch", item, reads))
            else:
                plan.append(("fuse", (item, segment_runners[id(item)]), list(item.inputs)))
        last: dict[fx.Node, int] = {}
        for i, (_, _, reads) in enumerate(plan):
            for r in reads:
                last[r] = i
        self.plan = [(kind, item, [r for r in reads if last[r] == i and r not in keep])
                     for i, (kind, item, reads) in enumerate(plan)]

        self.views = None  # the first-call view check (fast_views.FirstCallChecked) where the region has views
        self.run, self.source, self.boxed = self._generate(gm)

    def _generate(self, gm: fx.GraphModule):
        """(run, source, boxed). View steps fold as in the main program (:mod:`..runtime.fast_views`): the first
        call runs them as aten ops and checks each result's layout against the recorded one; when all agree, later
        calls build them with one stride reinterpretation each (an attention layer's backward region holds ~30),
        else the aten steps stay. ``source`` is the folded program's where there is one."""
        from ..runtime.fast_views import FirstCallChecked
        from ..runtime.fast_views import plan as plan_views

        keys = [item if kind == "torch" else _SegmentLine() for kind, item, _ in self.plan]
        dead = {k: gone for k, (_, _, gone) in zip(keys, self.plan)}  # line -> the values it drops
        plans, frees = plan_views(keys, self.outputs, dead, fold_returned=True) if self.fold_views else ({}, dead)
        if not plans:
            return self._emit(gm, keys, dead, None)
        state = FirstCallChecked(plans, [n.name for n in plans], lambda: self._emit(gm, keys, dead, None, False)[2])
        state.checked = self._emit(gm, keys, frees, ("check", plans, state.seen), False)[2]
        _, source, state.fast = self._emit(gm, keys, frees, ("fast", plans), False)
        self.views = state
        return (lambda *args: state(list(args))), source, state

    def _emit(self, gm: fx.GraphModule, keys: list, dead: dict, views: tuple | None, positional: bool = True):
        """The plan as generated Python (trace_lab.runtime.codegen): torch steps and segment calls bound as
        globals, each value dropped after its last read (``dead``: line key -> values). ``views``: ``("check",
        plans, seen)`` checks each foldable view's layout after its line, ``("fast", plans)`` folds them. Returns
        (run or None, source, boxed): ``positional`` adds the ``run(*inputs)`` entry."""
        from ..runtime.codegen import Emitter, compile_function, folded_view, view_check
        from ..runtime.fast_views import unread

        mode, plans = views[:2] if views else (None, {})
        order = {n: i for i, n in enumerate(plans)}
        skip = unread(plans) if mode == "fast" else set()
        em = Emitter(lambda n: n.name, gm)
        params = [em.local(p) for p in self.placeholders]
        if mode == "check":
            em.globals["_g_seen"] = views[2]
        body = []
        for key, (kind, item, _) in zip(keys, self.plan):
            if kind == "torch" and item in skip:  # nothing reads it in the folded program
                pass
            elif kind == "torch":
                node = item
                args = [em.arg(a) for a in node.args] + [f"{k}={em.arg(v)}" for k, v in node.kwargs.items()]
                call = f"{em.bind(torch_target(node), 'f')}({', '.join(args)})"
                if mode == "fast" and node in plans:
                    call = folded_view(em, plans[node])
                if isinstance(node.meta.get("val"), (list, tuple)):
                    body.append(f"_r = {call}")
                    body += [f"{em.local(u)} = _r[{u.args[1]}]" for u in node.users if _is_getitem(u)]
                    body.append("del _r")
                else:
                    body.append(f"{em.local(node)} = {call}")
                if mode == "check" and node in plans:
                    body.append(view_check(em, order[node], node, plans[node]))
            else:
                seg, runner = item
                body.append(f"_r = {em.bind(runner, 's')}([{', '.join(em.arg(x) for x in seg.inputs)}])")
                body += [f"{em.local(o)} = _r[{i}]" for i, o in enumerate(seg.outputs)]
                body.append("del _r")
                body += [f"{em.local(c)} = {em.arg(c.args[0])}" for c in seg.copies]
            gone = [em.local(d) for d in dead.get(key, ()) if d in em.locals and d not in skip]
            if gone:
                body.append(f"del {', '.join(gone)}")
        outs = ", ".join(em.arg(o) for o in self.outputs)
        if self.multi:  # a region whose ops only write its inputs (an optimizer's copy_) returns ()
            body.append(f"return ({outs},)" if outs else "return ()")
        else:
            body.append(f"return {outs}")
        what = {"check": " (first call: view layouts checked)", "fast": " (views folded)"}.get(mode, "")
        run = source = None
        if positional:
            run, source = compile_function(em, "region", ", ".join(params), body, "nvFuser region" + what)
        # the boxed entry: the same body after taking the inputs out of the caller's list
        unpack = [f"({', '.join(params)},) = _args", "_args.clear()"] if params else ["_args.clear()"]
        boxed, boxed_source = compile_function(em, "region_boxed", "_args", unpack + body,
                                               "nvFuser region (boxed)" + what)
        return run, source or boxed_source, boxed

    def __call__(self, *args):
        return self.run(*args)

    def legend(self) -> dict[str, str]:
        """What each global the program's source names (``_g_f3``, ``_g_s5``, ``_g_c4``: the generated code binds
        its callables and constants so) is: an aten op by its name, a function by its own
        (``clone_in_16_byte_words``: a head transpose copied in words), a segment's runner as nvFuser's, a constant
        by its value (cut at 60 characters). For :func:`trace_lab.region_code`."""
        fn = self.views.fast if self.views is not None else self.boxed
        bound = getattr(fn, "__globals__", {})
        out = {}
        for name in dict.fromkeys(re.findall(r"\b_g_[a-z]+\d+\b", self.source)):
            if name not in bound:
                continue
            v = bound[name]
            if not callable(v):
                text = repr(v)
                out[name] = text if len(text) <= 60 else text[:57] + "..."
            elif isinstance(v, torch._ops.OpOverload):
                out[name] = str(v)
            elif hasattr(v, "__name__"):
                out[name] = v.__name__
            else:
                out[name] = f"{type(v).__name__.lstrip('_')} (runs an nvFuser definition)"
        return out
