"""A fused region's structural signature: what makes two regions "the same kernel".

The signature lists the ops in order (overloads), how they wire (each argument as a
reference to an input or an earlier op's output slot), every constant argument, which
values leave the region, and a descriptor of each input: dtype, sizes, strides (their
order and, because Inductor specialises on them and asserts them, their values),
whether the data pointer is 16-byte aligned (Inductor assumes alignment when the
example was aligned), and the device. Names, source lines and region numbers are left
out, so the same layer repeated gives the same signature.

:mod:`.regions` records it on each region it builds (``meta['region']['signature']``);
the executors key their compiled-region caches on it
(:mod:`trace_lab.executors.fusion_cache`, which re-exports these names).
"""
from __future__ import annotations

import hashlib

import torch
import torch.fx as fx

__all__ = ["describe_input", "region_signature", "restricted_signature", "is_view_of_computed", "signature_hash"]


def describe_input(val) -> str:
    if not isinstance(val, torch.Tensor):
        return f"obj:{type(val).__name__}:{val!r}"
    sizes = tuple(int(s) for s in val.shape)
    strides = tuple(int(s) for s in val.stride())
    order = tuple(sorted(range(len(strides)), key=lambda d: (-strides[d], d)))
    aligned = (int(val.storage_offset()) * val.element_size()) % 16 == 0
    return (f"{str(val.dtype).replace('torch.', '')}{list(sizes)} stride={list(strides)} order={list(order)} "
            f"{'aligned' if aligned else 'unaligned'} {val.device}")


def _const(x) -> str:
    if isinstance(x, (list, tuple)):
        inner = ",".join(_const(a) for a in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner})"
    if isinstance(x, dict):
        return "{" + ",".join(f"{k}:{_const(v)}" for k, v in sorted(x.items())) + "}"
    if isinstance(x, float):
        return repr(x) if x == x else "nan"
    return repr(x)


def region_signature(sub: fx.GraphModule, input_vals) -> str:
    """Canonical text of a region: ops, wiring, constants, outputs and input descriptors."""
    nodes = list(sub.graph.nodes)
    out = next(n for n in reversed(nodes) if n.op == "output")
    return _signature([n for n in nodes if n.op not in ("placeholder", "output")],
                      [n for n in nodes if n.op == "placeholder"], out.args[0], list(input_vals))


def restricted_signature(sub: fx.GraphModule, input_vals, kept: tuple,
                         unviewed: tuple = ()) -> tuple[str, tuple] | None:
    """The signature the region would have if it returned only its outputs at positions ``kept`` (in that order),
    without the ops and inputs those outputs do not need (dead-code elimination: regions are functional), and
    the positions of the inputs it would keep; None when the region's outputs are not a flat list of values.
    ``unviewed``: positions in ``kept``'s order whose output, an ``aten.view`` of a value the region computes, is
    returned as that value instead (the view's base). Equal to another region's :func:`region_signature`, it says
    that region computes exactly those outputs from exactly those inputs (:mod:`trace_lab.executors.region_cover`)."""
    nodes = list(sub.graph.nodes)
    outs = next(n for n in reversed(nodes) if n.op == "output").args[0]
    if not isinstance(outs, (tuple, list)) or not all(isinstance(o, fx.Node) for o in outs):
        return None
    kept_outs = [outs[i] for i in kept]
    for j in unviewed:
        if not is_view_of_computed(kept_outs[j]):
            return None
        kept_outs[j] = kept_outs[j].args[0]
    needed: set = set()
    stack = list(kept_outs)
    while stack:
        n = stack.pop()
        if n in needed:
            continue
        needed.add(n)
        stack.extend(n.all_input_nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    used = tuple(j for j, n in enumerate(placeholders) if n in needed)
    body = [n for n in nodes if n.op not in ("placeholder", "output") and n in needed]
    vals = list(input_vals)
    return (_signature(body, [placeholders[j] for j in used], type(outs)(kept_outs), [vals[j] for j in used]),
            used)


def is_view_of_computed(n: fx.Node) -> bool:
    """``aten.view`` of a value the region computes (not of one of its inputs): a result whose base the region
    could return instead, the same storage in another shape (:func:`restricted_signature`'s ``unviewed``)."""
    return (n.op == "call_function" and n.target is torch.ops.aten.view.default and bool(n.args)
            and isinstance(n.args[0], fx.Node) and n.args[0].op == "call_function")


def _signature(body, placeholders, out_arg, input_vals) -> str:
    ref: dict[fx.Node, str] = {n: f"%in{j}" for j, n in enumerate(placeholders)}
    lines = []

    def arg(a):
        if isinstance(a, fx.Node):
            return ref[a]
        if isinstance(a, (list, tuple)):
            inner = ",".join(arg(x) for x in a)
            return f"[{inner}]" if isinstance(a, list) else f"({inner})"
        return _const(a)

    for k, n in enumerate(body):
        target = n.target if isinstance(n.target, str) else f"{getattr(n.target, '__module__', '')}.{getattr(n.target, '__name__', repr(n.target))}"
        if isinstance(n.target, torch._ops.OpOverload):
            target = str(n.target)
        args = ",".join(arg(a) for a in n.args)
        kwargs = ",".join(f"{key}={arg(v)}" for key, v in sorted(n.kwargs.items()))
        ref[n] = f"%{k}"
        lines.append(f"%{k} = {n.op}:{target}({args};{kwargs})")
    lines.append(f"return {arg(out_arg)}")
    inputs = [f"in{j}: {describe_input(v)}" for j, v in enumerate(input_vals)]
    return "\n".join(inputs + lines)


def signature_hash(signature: str) -> str:
    return hashlib.sha256(signature.encode()).hexdigest()[:16]
