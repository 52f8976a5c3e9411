"""Common input-free values computed once: a value built from literals alone and computed again and again is
computed the first time and read from there.

A Llama layer builds its causal mask from nothing: ``torch.ones(t, t, dtype=bool).tril()`` decomposes into
``full``, ``arange``, two views, ``sub``, ``le`` and ``logical_and``, and ``masked_fill(~mask, ...)`` adds a
``bitwise_not``. Every layer runs them again: on an 8-layer stack under nvFuser, 48 host calls a step outside
the fused segments where 13 do after this pass (llama 8L on the CPU stand-in).

Two nodes are equal when they call the same aten/prims operator on equal arguments: literals equal, tensor
arguments equal nodes (so equality is found in program order, inputs first). Only input-free nodes merge: no
program input or parameter reaches them (program constants, ``get_attr``, may), so equal nodes are equal values
on every call. An operator that is random (``nondeterministic_seeded``), mutating, or allocates undefined values
(``empty``) never merges: two such calls are two values. A returned copy never merges: the caller would get one
tensor twice (a saved mask stays one per layer; the steps before it merge). Merging holds the first value until
the last reader of any copy, so only values of at most :data:`MAX_HELD_BYTES` merge: a large scratch tensor
built per layer is never held across layers. The fusion pass runs this before it forms regions, for every
strategy but ``none`` (as captured).
"""
from __future__ import annotations

import torch
import torch.fx as fx

from ..ir.trace import Trace
from .constant_fold import _UNDEFINED_CONTENT  # allocations whose values are undefined: never one value

__all__ = ["merge_input_free_duplicates", "MAX_HELD_BYTES"]

MAX_HELD_BYTES = 1 << 20  # a merged value no copy of which is returned is held at most this long across readers


def _mergeable_op(n: fx.Node) -> bool:
    t = n.target
    if n.op != "call_function" or not isinstance(t, torch._ops.OpOverload):
        return False
    return not (t._schema.is_mutable or torch.Tag.nondeterministic_seeded in t.tags
                or t.overloadpacket.__name__ in _UNDEFINED_CONTENT)


def _bytes(n: fx.Node) -> int | None:
    val = n.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return int(val.numel()) * val.element_size()
    except (RuntimeError, TypeError):  # a symbolic size
        return None


def _returned(n: fx.Node) -> bool:
    return any(u.op == "output" for u in n.users)


def _literal_key(a) -> str:
    return f"{type(a).__name__}:{a!r}"


def plan(graph: fx.Graph) -> dict[fx.Node, fx.Node]:
    """Each later copy -> the node it merges into (module docstring), in program order."""
    keys: dict[fx.Node, tuple] = {}  # input-free node -> its key
    first: dict[tuple, fx.Node] = {}
    merged: dict[fx.Node, fx.Node] = {}
    for n in graph.nodes:
        if n.op == "get_attr":  # a program constant (a user's tensor literal, a folded scalar): input-free
            keys[n] = ("attr", n.target)
            continue
        if not _mergeable_op(n) or any(a not in keys for a in n.all_input_nodes):
            continue
        canon = lambda a: ("node", keys[a]) if isinstance(a, fx.Node) else ("lit", _literal_key(a))  # noqa: E731
        key = (str(n.target), repr(fx.node.map_aggregate(n.args, canon)),
               repr(fx.node.map_aggregate(dict(n.kwargs), canon)))
        keys[n] = key
        if key not in first:
            first[key] = n
            continue
        keep = first[key]
        size = _bytes(n)
        if not _returned(n) and size is not None and size <= MAX_HELD_BYTES:
            merged[n] = keep
    return merged


def merge_input_free_duplicates(trace: Trace) -> Trace:
    """``trace`` with every later copy of an input-free value reading the first instead (module docstring);
    ``trace`` itself when nothing merges. The new Trace keeps the stage name and info (the fusion pass's input,
    not a stage)."""
    merged = plan(trace.graph)
    if not merged:
        return trace
    dropped = set(merged)  # and the steps that led only to dropped nodes
    for n in reversed(trace.graph.nodes):
        if n not in dropped and n.users and _mergeable_op(n) and all(u in dropped for u in n.users):
            dropped.add(n)
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in trace.graph.nodes:
        if n in merged:
            env[n] = env[merged[n]]
        elif n not in dropped:
            env[n] = graph.node_copy(n, env.__getitem__)
    graph.lint()
    gm = fx.GraphModule(trace.gm, graph)
    out = trace.derive(gm, trace.stage, info=trace.info)
    out.pass_seconds = trace.pass_seconds
    return out
