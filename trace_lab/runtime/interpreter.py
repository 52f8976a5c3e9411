"""The per-line interpreter: a Trace run node by node, for probes only.

Programs run as generated code (:mod:`.codegen`). This interpreter remains for
the one job generated code cannot do cheaply: calling a ``probe(node)`` after
every line (per-line memory measurement, ``benchmarks/line_memory_probe.py``).
It frees values exactly where the liveness model says (its ``dead_nodes``),
binds the program's constants (``get_attr``), and honours the wait hook.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from ..ir.trace import Trace, is_getitem
from .wait_hook import WAIT, current_hook, hooked_wait

__all__ = ["interpret"]

# views that refuse strides which do not allow the new shape ("view size is not compatible"); where an executor
# may lay a value out otherwise than eager, they run as reshape (the same view where one is possible)
STRICT_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)


def as_reshape(target):
    """``target``, or ``aten.reshape`` for a strict view (:data:`STRICT_VIEWS`)."""
    return torch.ops.aten.reshape.default if target in STRICT_VIEWS else target


def constants_of(trace: Trace) -> dict[fx.Node, object]:
    """The values of the program's ``get_attr`` nodes (tensor literals of the user's code)."""
    return {n: fx.graph_module._get_attr(trace.gm, n.target) for n in trace.graph.nodes if n.op == "get_attr"}


def interpret(trace: Trace, materialized_regions: bool = True, region_runner=None, probe=None,
              views_as_reshape: bool = False):
    """Build ``run(args) -> tuple`` that executes ``trace`` in order with exact frees.

    ``region_runner(node) -> callable(*args)`` supplies the callable for a fused
    region (``call_module`` node); by default regions are interpreted recursively.
    ``probe(node)``, if given, is called after each line's frees (per-line measurement).
    ``views_as_reshape``: ``aten.view`` runs as ``aten.reshape``.
    """
    live = trace.liveness(materialized_regions=materialized_regions)
    dead = {ln.node: ln.dead_nodes for ln in live.lines}
    inputs = trace.inputs
    constants = constants_of(trace)
    owns_inputs = bool(trace.owned_inputs)
    steps = []
    for n in trace.ops:
        if n.op == "call_module":
            fn = region_runner(n) if region_runner else _region_callable(trace, n)
        elif n.op == "call_function":
            fn = as_reshape(n.target) if views_as_reshape else n.target
            if n.target is WAIT:
                fn = hooked_wait(trace, n, fn)
        else:  # call_method
            name = n.target
            fn = lambda self_, *a, _m=name, **k: getattr(self_, _m)(*a, **k)  # noqa: E731
        multi = isinstance(n.meta.get("val"), (list, tuple))
        unpack = [(u.args[1], u) for u in n.users if is_getitem(u)] if multi else None
        steps.append((n, fn, n.args, n.kwargs, unpack, dead.get(n, [])))
    out_spec = trace.output_node.args[0]
    waits = any(s[0].op == "call_function" and s[0].target is WAIT for s in steps)

    def run(args):
        hook = current_hook() if waits else None
        if hook is not None:
            hook.enter(trace)
        env: dict[fx.Node, object] = dict(constants)
        env.update(zip(inputs, args))
        if owns_inputs:
            args.clear()
        lookup = env.__getitem__
        for node, fn, a, k, unpack, dead_nodes in steps:
            result = fn(*fx.node.map_arg(a, lookup), **fx.node.map_arg(k, lookup))
            if unpack is None:
                env[node] = result
            else:
                for i, user in unpack:
                    env[user] = result[i]
                del result
            for d in dead_nodes:
                env.pop(d, None)
            if probe is not None:
                probe(node)
        out = tuple(fx.node.map_arg(out_spec, lookup))
        if hook is not None:
            hook.exit(trace)
        return out

    return run


def _region_callable(trace: Trace, node: fx.Node):
    sub = trace.gm.get_submodule(node.target)
    inner = interpret(Trace(sub, "region"))
    multi = isinstance(node.meta.get("val"), (list, tuple))

    def call(*args):
        outs = inner(list(args))
        return outs if multi else outs[0]

    return call
