"""Constant folding: scalar values that depend on no input are computed once, at compile time.

A captured program recomputes, on every call, values built from literals alone: ``Adam.step``'s
``exp_avg.lerp_(grad, 1 - beta1)`` decomposes into ``full([], 0.1)``, ``abs``, ``ge(., 0.5)``, ``sub``
and ``where`` on 0-dim tensors for each of its 200 parameters. Fused, those become a region with no
inputs plus a torch op per parameter: on an H100 with nvFuser, 400 of the step's 600 launches and most
of its host time (``benchmarks/adam_step_profile.py``). :func:`fold_constants` evaluates such values
once and turns each into a program constant (a ``get_attr``, printed ``(constant)``, held by the program
like the user's own tensor literals, counted with the inputs by the liveness model).

A node folds when it is a call of an aten/prims operator that every input of is folded (or a literal),
its result is one tensor of at most :data:`MAX_NUMEL` element(s), the operator is neither random
(``nondeterministic_seeded``), mutating, nor an allocation of undefined values (``empty``), and no user
of it is the program's output or an op whose result aliases its input (a view), so that no caller ever
holds a folded tensor, which every call shares. Equal folded values (the same ops on the same literals)
share one constant. The fusion pass folds before it forms regions, for every strategy but ``none``
(which keeps the program as captured).
"""
from __future__ import annotations

import torch
import torch.fx as fx
from torch.fx._lazy_graph_module import _LazyGraphModule

from ..ir.trace import Trace

__all__ = ["fold_constants", "foldable", "MAX_NUMEL"]

MAX_NUMEL = 1  # scalars: a folded constant is held for the program's lifetime, so only tiny ones fold
# allocations whose values are undefined: nothing to compute once
_UNDEFINED_CONTENT = frozenset({"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided",
                                "empty_permuted"})


def _is_operator(target) -> bool:
    return isinstance(target, torch._ops.OpOverload)


def _returns_alias(target) -> bool:
    return any(r.alias_info is not None for r in target._schema.returns)


def _foldable_op(n: fx.Node) -> bool:
    if n.op != "call_function" or not _is_operator(n.target):
        return False
    t = n.target
    if t._schema.is_mutable or _returns_alias(t) or torch.Tag.nondeterministic_seeded in t.tags \
            or t.overloadpacket.__name__ in _UNDEFINED_CONTENT:
        return False
    val = n.meta.get("val")
    return isinstance(val, torch.Tensor) and val.numel() <= MAX_NUMEL


def _safe_users(n: fx.Node) -> bool:
    """Nobody outside the program, and no view, ever holds the folded value itself."""
    return all(u.op != "output" and not (u.op == "call_function" and _is_operator(u.target)
                                         and _returns_alias(u.target)) for u in n.users)


def _plan(graph: fx.Graph) -> list[fx.Node]:
    """The nodes that fold, in program order."""
    folded: set[fx.Node] = set()
    order = []
    for n in graph.nodes:
        if n.op == "call_function" and _foldable_op(n) and _safe_users(n) \
                and all(a in folded for a in n.all_input_nodes):
            folded.add(n)
            order.append(n)
    return order


def foldable(graph: fx.Graph) -> set[fx.Node]:
    """The nodes :func:`fold_constants` would compute ahead (planned; one that fails to run then stays): what a
    caller deciding on the program before its passes should read as constants (``fusion="auto"``)."""
    return set(_plan(graph))


def _evaluate(order: list[fx.Node]) -> dict[fx.Node, torch.Tensor]:
    values: dict[fx.Node, torch.Tensor] = {}
    for n in order:
        if not all(a in values for a in n.all_input_nodes):
            continue
        args = fx.node.map_arg(n.args, values.__getitem__)
        kwargs = fx.node.map_arg(n.kwargs, values.__getitem__)
        try:
            with torch.no_grad():
                out = n.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - an op that cannot run here stays in the program
            continue
        val = n.meta["val"]
        if isinstance(out, torch.Tensor) and out.dtype == val.dtype and tuple(out.shape) == tuple(val.shape) \
                and out.device == val.device:
            values[n] = out
    return values


def _keys(values: dict) -> dict:
    """A key per folded node naming how it is computed (op, literals, the keys of its folded inputs) and what it
    is: equal keys are equal values, on any device (a meta run's constants have no data to compare)."""
    keys: dict[fx.Node, str] = {}
    for n in values:  # program order: inputs first
        args = fx.node.map_arg((n.args, n.kwargs), lambda a: keys[a])
        t = values[n]
        keys[n] = f"{n.target}{args!r}:{t.dtype}{tuple(t.shape)}@{t.device}"
    return keys


def fold_constants(trace: Trace) -> Trace:
    """``trace`` with its scalar constant subexpressions computed (module docstring); ``trace`` itself when
    nothing folds. The new Trace keeps the stage name and info (the fusion pass's input, not a stage)."""
    from torch.utils._python_dispatch import _disable_current_modes

    # compiling runs under the capture's fake mode and AOTAutograd's Python dispatcher (through which ``.cpu()``
    # of a real tensor recurses between ``_to_copy``'s decomposition and ``device_put``): these are real values,
    # computed with both set aside
    with _disable_current_modes(), torch._C._DisablePythonDispatcher():
        values = _evaluate(_plan(trace.graph))
        keys = _keys(values)
    # only values something unfolded reads become constants; the rest were steps towards them
    kept = [n for n in values if any(u not in values for u in n.users)]
    if not kept:
        return trace
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    attrs: dict[str, object] = {}
    for n in trace.graph.nodes:
        if n.op == "get_attr":
            attrs[n.target] = fx.graph_module._get_attr(trace.gm, n.target)
        elif n.op == "call_module":
            attrs[n.target] = trace.gm.get_submodule(n.target)
    by_value: dict[tuple, fx.Node] = {}  # one constant per distinct value
    for n in trace.graph.nodes:
        if n in values and n not in kept:
            continue  # a step towards a constant: not in the new program
        if n in values:
            key = keys[n]
            if key not in by_value:
                name = f"folded{len(by_value)}"
                while name in attrs or hasattr(trace.gm, name):
                    name += "_"
                attrs[name] = values[n]
                g = graph.get_attr(name)
                g.meta = {k: v for k, v in n.meta.items() if k in ("val", "tensor_meta", "stack_trace")}
                g.meta["folded"] = _describe(n, values)
                by_value[key] = g
            env[n] = by_value[key]
            continue
        env[n] = graph.node_copy(n, env.__getitem__)
    gm = _LazyGraphModule(attrs, graph)  # the fusion pass reads its graph; its code is built only if read
    gm.graph.lint()
    folded = trace.derive(gm, trace.stage, info=trace.info)  # each constant's node says what it was folded from
    folded.pass_seconds = trace.pass_seconds
    return folded


def _describe(n: fx.Node, values: dict) -> str:
    """``ge(abs(full))``: the ops a folded value was computed from (inputs folded too are nested)."""
    name = getattr(n.target, "__name__", str(n.target)).split(".")[0]
    inner = [_describe(a, values) for a in n.all_input_nodes if a in values]
    return f"{name}({', '.join(inner)})" if inner else f"{name}()"
