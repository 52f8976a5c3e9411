"""Collectives in fx graphs: rebuilding graphs around them.

Shared by the ``fsdp`` pass (which inserts torch's functional collectives) and
the ``sort_waits`` pass (which reorders them). What a collective, a wait and a
view op are is the IR's (:mod:`trace_lab.ir.collectives`, re-exported here):
view-like ops on a waited value move with their wait.

Rebuilding: :func:`rebuild` copies a graph into a new GraphModule in a given
node order (checked to be topological); :func:`new_node` creates a node and its
``meta['val']`` by running the op on the FakeTensors of its arguments.
"""
from __future__ import annotations

import torch.fx as fx

from ..errors import TraceLabError
from ..ir.collectives import (ALL_GATHER, C10D, COLLECTIVES, REDUCE_SCATTER, VIEW_OPS, WAIT, is_all_gather,
                              is_collective, is_view_op, is_wait)
from ..ir.trace import is_getitem

__all__ = ["C10D", "WAIT", "ALL_GATHER", "REDUCE_SCATTER", "COLLECTIVES", "VIEW_OPS", "is_wait", "is_collective",
           "is_all_gather", "is_view_op", "wait_chain", "rebuild", "new_node", "fake_mode_of"]


def wait_chain(wait: fx.Node) -> list[fx.Node]:
    """The wait and the view ops hanging off it (graph order): they move as one block."""
    chain, frontier = [wait], [wait]
    while frontier:
        n = frontier.pop()
        for u in n.users:
            if is_view_op(u) and u not in chain:
                chain.append(u)
                frontier.append(u)
    pos = {n: i for i, n in enumerate(wait.graph.nodes)}
    return sorted(chain, key=pos.__getitem__)


def fake_mode_of(gm: fx.GraphModule):
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, FakeTensor):
            return v.fake_mode
    return FakeTensorMode()


def new_node(graph: fx.Graph, fake_mode, target, args, kwargs=None, like: fx.Node | None = None) -> fx.Node:
    """Create ``target(*args)`` at the graph's insertion point, with a FakeTensor ``meta['val']``."""
    kwargs = kwargs or {}
    node = graph.call_function(target, tuple(args), dict(kwargs))
    fake_args = fx.node.map_arg(node.args, lambda a: a.meta["val"])
    fake_kwargs = fx.node.map_arg(node.kwargs, lambda a: a.meta["val"])
    with fake_mode:
        node.meta["val"] = target(*fake_args, **fake_kwargs)
    if like is not None:
        for key in ("stack_trace", "recompute", "source_fn_stack", "nn_module_stack"):
            if key in like.meta:
                node.meta[key] = like.meta[key]
    return node


def rebuild(gm: fx.GraphModule, order: list[fx.Node]) -> fx.GraphModule:
    """A new GraphModule with the same nodes, placeholders first, ``order`` next, output last."""
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    output = nodes[-1]
    body = [n for n in nodes if n.op not in ("placeholder", "output")]
    if sorted(map(id, order)) != sorted(map(id, body)):
        raise TraceLabError("internal error: a reordering lost or duplicated nodes")
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in placeholders + list(order) + [output]:
        for a in n.all_input_nodes:
            if a not in env:
                raise TraceLabError(f"internal error: reordering puts {n.name} before its input {a.name}")
        env[n] = graph.node_copy(n, env.__getitem__)
    new = fx.GraphModule(gm, graph)
    return new


def ops_with_getitems(gm: fx.GraphModule) -> list[fx.Node]:
    """Body nodes as units: each multi-output op followed by its getitems."""
    return [n for n in gm.graph.nodes if n.op not in ("placeholder", "output") and not is_getitem(n)]


def getitems_of(n: fx.Node) -> list[fx.Node]:
    return sorted((u for u in n.users if is_getitem(u)), key=lambda u: u.args[1])
