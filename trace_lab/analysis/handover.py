"""Handover: which inputs of a backward program the caller gives up, and which it keeps.

AOTAutograd calls a compiled backward with one list holding the saved
activations and the incoming gradients, clears the autograd context's own
references first (``ctx.maybe_clear_saved_tensors()``) and lets the callee
clear the list (``steal_args=True``). A saved activation therefore dies at its
last use in the backward, unless something else holds its storage: the
forward's inputs (parameters, the user's tensors) and the forward's outputs
that the user received (and their views) are held by the caller. Gradients
coming in (``tangents_*``) are owned too: AOTAutograd hands the backward a
contiguous copy when the incoming gradient has another layout (``y.sum().backward()``
sends an expanded scalar), and that copy dies at its last use. A gradient that
arrives already in the compiled layout (``y.backward(g)`` with a contiguous ``g``)
is held by the caller, and measured memory is then higher than predicted by its bytes. On torch
2.11 AOTAutograd's backward frame also references every gradient it did not copy (a fresh one from
``(y * w).sum()``), so there too the gradient outlives its last use (torch 2.13 releases it;
benchmarks/backward_gradient_refcount_probe.py); so does torch 2.10. Before
:data:`trace_lab.torch_support.FREES_GRADIENTS` a gradient is therefore held by the caller unless
AOTAutograd copies it, which the caller may say (``gradients_copied``): trace_lab's default loss
(``out.float().sum()``) sends each float32 output of one or more dimensions an expanded gradient, which
is copied; a float16/bfloat16/float64 output gets the cast's fresh, contiguous gradient, which is not.

:func:`owned_backward_inputs` answers, per backward input, "owned" (with the
forward value whose storage it shares, so that two saved views of one buffer
free that buffer once) or "held". The runtime releases the owned ones
(:mod:`trace_lab.runtime.codegen`) and the liveness model frees them at their
last use. Not modelled: ``backward(retain_graph=True)``, which keeps the saved
tensors alive in the autograd graph (measured memory is then higher).
"""
from __future__ import annotations

import torch.fx as fx

from ..ir.trace import is_getitem, tensor_values
from ..torch_support import backward_frees_gradients
from .buffers import alias_sources

__all__ = ["owned_backward_inputs", "storage_root"]


def storage_root(node: fx.Node, _depth: int = 0) -> fx.Node:
    """The node whose fresh buffer ``node``'s (first) tensor lives in, following views and aliases."""
    if _depth > 10_000 or node.op in ("placeholder", "get_attr"):
        return node
    if is_getitem(node):
        producer, index = node.args[0], node.args[1]
        sources = alias_sources(producer) if isinstance(producer, fx.Node) else []
        src = sources[index] if isinstance(index, int) and index < len(sources) else None
        return storage_root(src, _depth + 1) if isinstance(src, fx.Node) else node
    if node.op != "call_function" or not tensor_values(node.meta.get("val")):
        return node
    sources = alias_sources(node)
    src = sources[0] if sources else None
    return storage_root(src, _depth + 1) if isinstance(src, fx.Node) else node


def owned_backward_inputs(forward_gm: fx.GraphModule, backward_gm: fx.GraphModule,
                          gradients_copied=None) -> dict[int, str]:
    """Backward input position -> storage group (a forward value's name) for every input the
    backward may free at its last use; positions not listed are held by the caller.

    ``gradients_copied(val) -> bool``: on a torch that keeps its incoming gradients referenced (before
    ``FREES_GRADIENTS``), whether the gradient for a tangent of fake value ``val`` arrives as AOTAutograd's
    copy (owned) rather than the caller's tensor (held); None: held."""
    fw_nodes = {n.name: n for n in forward_gm.graph.nodes}
    bw_inputs = [n for n in backward_gm.graph.nodes if n.op == "placeholder"]
    saved = [(i, n) for i, n in enumerate(bw_inputs) if not n.name.startswith("tangents")]
    out_spec = next(n for n in reversed(forward_gm.graph.nodes) if n.op == "output").args[0]
    fw_outputs = list(out_spec) if isinstance(out_spec, (list, tuple)) else [out_spec]
    user_outputs = fw_outputs[:max(0, len(fw_outputs) - len(saved))]
    held = {storage_root(n) for n in forward_gm.graph.nodes if n.op in ("placeholder", "get_attr")}
    held |= {storage_root(o) for o in user_outputs if isinstance(o, fx.Node)}
    frees = backward_frees_gradients()
    owned: dict[int, str] = {
        i: f"tangent {i}" for i, n in enumerate(bw_inputs)
        if n.name.startswith("tangents") and tensor_values(n.meta.get("val"))
        and (frees or (gradients_copied is not None and gradients_copied(n.meta.get("val"))))}
    for i, n in saved:
        fw = fw_nodes.get(n.name)
        if fw is None or not tensor_values(n.meta.get("val")):
            continue
        root = storage_root(fw)
        if root not in held:
            owned[i] = root.name
    return owned
