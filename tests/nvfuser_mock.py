"""A CPU stand-in for ``nvfuser_direct``: the FusionDefinition API evaluated with torch.

Only for checking the translator's own logic (decompositions, dtype handling,
broadcast bookkeeping, output/alias plumbing) without a GPU: each ``fd.ops``
call records a torch computation that ``execute`` replays. It does not model
nvFuser's code generation; GPU tests run the real thing. Where nvFuser refuses
what the translator hands it, the stand-in refuses too: an input of other sizes
than its definition's (static sizes), ``broadcast_in_dim`` naming fewer dims than
its input has. Where nvFuser would split a definition, it counts: ``split_writes``
(after an ``execute``) is the number of results written over inputs that nvFuser's
SegmentInplaceUpdate pass (csrc/preseg_passes/segment_inplace_update.cpp) moves into
a copy kernel of their own, with a fresh intermediate: those whose value or input
lies on a path through a broadcast op (a ``broadcast_in_dim`` that adds dims).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


class DataType:
    Float, Half, BFloat16, Double = torch.float32, torch.float16, torch.bfloat16, torch.float64
    Int, Int32, Bool = torch.int64, torch.int32, torch.bool


class _V:
    def __init__(self, fn, deps):
        self.fn, self.deps = fn, deps

    def dtype(self):
        return None


def _ev(x, env):
    if isinstance(x, _V):
        if id(x) not in env:
            env[id(x)] = x.fn(*[_ev(d, env) for d in x.deps])
        return env[id(x)]
    if isinstance(x, (list, tuple)):
        return type(x)(_ev(v, env) for v in x)
    return x


def _lazy(fn):
    return lambda *args: _V(fn, list(args))


def _bid(x, shape, dims):
    if len(dims) != x.dim():  # as nvFuser refuses it: one broadcast dim named for each of the input's dims
        raise ValueError(f"broadcast_in_dim: {len(dims)} dims for an input of rank {x.dim()}")
    new = [1] * len(shape)
    for i, d in enumerate(dims):
        new[d] = x.shape[i]
    return x.reshape(new).expand(shape)


def _squeeze(x, dims):
    for d in sorted(dims, reverse=True):
        x = x.squeeze(d)
    return x


class _Ops:
    cast = staticmethod(_lazy(lambda x, dt: x.to(dt)))
    set = staticmethod(_lazy(lambda x: x.clone()))
    squeeze = staticmethod(_lazy(_squeeze))
    broadcast_in_dim = staticmethod(_lazy(_bid))
    reshape = staticmethod(_lazy(lambda x, s: x.reshape(s)))
    permute = staticmethod(_lazy(lambda x, d: x.permute(d)))
    expand = staticmethod(_lazy(lambda x, s: x.expand(s)))
    full = staticmethod(_lazy(lambda s, v, dt: torch.full(s, v.item(), dtype=dt)))
    sum = staticmethod(_lazy(lambda x, d, k=False, dt=None: x.sum(d, keepdim=k)))
    max = staticmethod(_lazy(lambda x, d, k=False: x.amax(d, keepdim=k)))
    min = staticmethod(_lazy(lambda x, d, k=False: x.amin(d, keepdim=k)))
    where = staticmethod(_lazy(torch.where))
    silu = staticmethod(_lazy(F.silu))
    relu = staticmethod(_lazy(torch.relu))

    def __getattr__(self, name):
        return _lazy(getattr(torch, name))


def _split_writes(outputs: list, aliases: list, env: dict) -> int:
    """How many of ``aliases`` (value, input written over) nvFuser's SegmentInplaceUpdate pass splits off, as the
    pass decides: a broadcast op is a ``broadcast_in_dim`` to a higher rank (one of equal rank only expands); it
    first marks every consumer of each broadcast's output, then every producer of each broadcast's input (each
    traversal stops at what is marked already); an alias whose value or input is marked is split."""
    users: dict = {}
    nodes: dict = {}
    todo = list(outputs) + [x for pair in aliases for x in pair]
    while todo:
        v = todo.pop()
        if not isinstance(v, _V) or id(v) in nodes:
            continue
        nodes[id(v)] = v
        for d in v.deps:
            if isinstance(d, _V):
                users.setdefault(id(d), []).append(v)
                todo.append(d)

    def rank(x):
        return (env[id(x)] if isinstance(x, _V) else x).dim()

    def consumers(v):
        return users.get(id(v), [])

    def producers(v):
        return [d for d in v.deps if isinstance(d, _V)]

    def mark(start, step):
        todo = [start] if isinstance(start, _V) else []
        while todo:
            v = todo.pop()
            if id(v) not in marked:
                marked.add(id(v))
                todo.extend(step(v))

    broadcasts = [b for b in nodes.values() if b.fn is _bid and rank(b.deps[0]) < len(b.deps[1])]
    marked: set = set()
    for b in broadcasts:
        mark(b, consumers)
    for b in broadcasts:
        mark(b.deps[0], producers)
    return sum(1 for v, dest in aliases if id(v) in marked or id(dest) in marked)


class FusionDefinition:
    def __init__(self):
        self.ops = _Ops()
        self._inputs, self._outputs, self._aliases = [], [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def define_tensor(self, sizes, strides, dtype, static_sizes=True, is_cpu=False):
        i = len(self._inputs)
        v = _V(None, [])
        v.fn = lambda: None
        self._inputs.append(v)
        v.index = i
        v.sizes = list(sizes)
        return v

    def define_scalar(self, value, dtype):
        return torch.tensor(value, dtype=dtype)

    def add_output(self, v, alias_input=None):
        (self._aliases.append((v, alias_input)) if alias_input is not None else self._outputs.append(v))

    def execute(self, inputs):
        for v, t in zip(self._inputs, inputs, strict=True):  # static sizes, as nvFuser checks them
            if isinstance(t, torch.Tensor) and list(t.shape) != v.sizes:
                raise ValueError(f"input {v.index}: defined with sizes {v.sizes}, given {list(t.shape)}")
        env = {id(v): t for v, t in zip(self._inputs, inputs)}
        outs = [_ev(v, env) for v in self._outputs]
        # every value is computed before any is written over its input, as nvFuser keeps a fusion's reads before
        # its in-place writes (its SegmentInplaceUpdate pass moves a write it cannot order so into a copy kernel
        # of its own): two outputs written over two inputs may each read the other's input
        written = [(env[id(dest)], _ev(v, env)) for v, dest in self._aliases]
        self.split_writes = _split_writes(self._outputs, self._aliases, env) if self._aliases else 0
        for dest, value in written:
            dest.copy_(value)
        return outs

    def __repr__(self):
        return f"<mock fd: {len(self._inputs)} inputs, {len(self._outputs)} outputs>"


class module:
    """Stands where ``nvfuser_direct`` would: ``FusionDefinition`` and ``DataType``."""
    FusionDefinition = FusionDefinition
    DataType = DataType
