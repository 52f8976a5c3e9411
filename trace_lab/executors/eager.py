"""Eager executor: run a Trace op by op, in trace order, freeing as ``del`` says.

It is the reference executor: no compilation, every aten op called as printed,
and every value dropped right after its last use (the liveness model's
``dead_nodes``), so measured memory follows the model line by line. Fused
regions run op by op too, so their inner values are materialised
(``materializes_regions = True``); fusing under this executor only groups ops.

Instrumentation: :func:`set_wait_hook` installs a hook (only while measuring;
:mod:`trace_lab.distributed.comm_measure`) that a program holding
``wait_tensor`` ops calls around each wait and at its start and end. With no
hook installed a run pays one global read; programs without waits pay nothing.
"""
from __future__ import annotations

import time

import torch
import torch.fx as fx

from ..trace import Trace, is_getitem
from .base import CompiledProgram, Executor, register

__all__ = ["EagerExecutor", "interpret", "set_wait_hook"]

_WAIT = torch.ops._c10d_functional.wait_tensor.default
_VIEW = torch.ops.aten.view.default
_WAIT_HOOK = None


def set_wait_hook(hook):
    """Install ``hook`` (or None) for every interpreted program that waits; return the previous one.

    ``hook.enter(trace)`` / ``hook.exit(trace)`` bracket each run of such a program;
    ``hook.wait(trace, node, fn, args, kwargs)`` runs the wait ``fn(*args, **kwargs)``
    and returns its result.
    """
    global _WAIT_HOOK
    old, _WAIT_HOOK = _WAIT_HOOK, hook
    return old


def _hooked_wait(trace, node, fn):
    def call(*args, **kwargs):
        hook = _WAIT_HOOK  # None if the hook was removed while this program ran
        return fn(*args, **kwargs) if hook is None else hook.wait(trace, node, fn, args, kwargs)

    return call


def interpret(trace: Trace, materialized_regions: bool = True, region_runner=None, probe=None,
              views_as_reshape: bool = False):
    """Build ``run(args) -> tuple`` that executes ``trace`` in order with exact frees.

    ``region_runner(node) -> callable(*args)`` supplies the callable for a fused
    region (``call_module`` node); by default regions are interpreted recursively.
    ``probe(node)``, if given, is called after each line's frees (per-line measurement).
    ``views_as_reshape``: ``aten.view`` runs as ``aten.reshape`` - for executors whose
    regions may return a value in another layout than eager's (same values), where a
    view would be refused and reshape copies.
    """
    live = trace.liveness(materialized_regions=materialized_regions)
    dead = {ln.node: ln.dead_nodes for ln in live.lines}
    inputs = trace.inputs
    steps = []
    for n in trace.ops:
        if n.op == "call_module":
            fn = region_runner(n) if region_runner else _region_callable(trace, n)
        elif n.op == "call_function":
            fn = torch.ops.aten.reshape.default if views_as_reshape and n.target is _VIEW else n.target
        else:  # call_method
            name = n.target
            fn = lambda self_, *a, _m=name, **k: getattr(self_, _m)(*a, **k)  # noqa: E731
        multi = isinstance(n.meta.get("val"), (list, tuple))
        unpack = [(u.args[1], u) for u in n.users if is_getitem(u)] if multi else None
        steps.append((n, fn, n.args, n.kwargs, unpack, dead.get(n, [])))
    out_spec = trace.output_node.args[0]
    hooked = None
    if any(s[0].op == "call_function" and s[0].target is _WAIT for s in steps):
        hooked = [(s[0], _hooked_wait(trace, s[0], s[1]), *s[2:]) if s[0].op == "call_function"
                  and s[0].target is _WAIT else s for s in steps]

    def run(args):
        hook = _WAIT_HOOK if hooked is not None else None
        if hook is not None:
            hook.enter(trace)
        env: dict[fx.Node, object] = dict(zip(inputs, args))
        lookup = env.__getitem__
        for node, fn, a, k, unpack, dead_nodes in (steps if hook is None else hooked):
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


@register("eager")
class EagerExecutor(Executor):
    materializes_regions = True

    def __init__(self, **_options):
        pass

    def can_fuse(self, node: fx.Node) -> bool:
        # Grouping under eager is bookkeeping only (regions run op by op). It groups what a
        # fusing compiler would (Inductor's table: pointwise, reductions, views; no matmuls),
        # so the fusion strategies show the same structure they have on a real executor.
        from .inductor import inductor_can_fuse

        return inductor_can_fuse(node)

    def compile(self, trace: Trace) -> CompiledProgram:
        started = time.perf_counter()
        run = interpret(trace, materialized_regions=True)
        return CompiledProgram(run=run, executor="eager", compile_seconds=time.perf_counter() - started)
