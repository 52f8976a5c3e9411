"""Which ops Inductor fuses: THE table, read by the Inductor executor and the eager executor.

:func:`inductor_can_fuse` decides whether an op may join a fused region under Inductor. The
eager executor groups the same ops (its regions run op by op, but the fusion strategies show
the structure they have on a real executor), so the table lives here, in a module both
import, rather than in :mod:`.inductor` (which re-exports it).
"""
from __future__ import annotations

import torch
import torch.fx as fx

from ..ir.fx_util import is_getitem, tensor_values

__all__ = ["inductor_can_fuse", "inductor_can_compile", "inductor_fuse_reason", "FUSIBLE", "NOT_FUSED", "FUSIBLE_TAGS"]

aten = torch.ops.aten

# ---- What Inductor fuses: THE table ----------------------------------------------------------
# An op may join a region when it is a functional aten op whose outputs are all tensors and it
# is tagged pointwise or reduction, or it is listed here. Matmuls, convolutions and attention
# stay OUTSIDE regions: Inductor itself calls them as extern library kernels (BLAS/oneDNN on
# CPU, cuBLAS/cuDNN on CUDA), as Thunder and nvFuser leave them to library executors by
# default; regions are the memory-bound glue between them. Random ops stay out (their values
# would differ from eager's), as do in-place/mutating ops and ops with data-dependent shapes.
FUSIBLE: dict[str, tuple] = {
    "view": (aten.view, aten._unsafe_view, aten.reshape, aten.permute, aten.expand, aten.squeeze,
             aten.unsqueeze, aten.transpose, aten.t, aten.slice, aten.select, aten.split,
             aten.split_with_sizes, aten.unbind, aten.alias, aten.narrow, aten.diagonal, aten.as_strided),
    "layout": (aten.clone, aten.cat, aten.stack, aten.constant_pad_nd, aten.copy, aten._to_copy),
    "creation": (aten.full, aten.full_like, aten.zeros, aten.zeros_like, aten.ones, aten.ones_like,
                 aten.arange, aten.scalar_tensor),
    "normalization": (aten._softmax, aten._log_softmax, aten._softmax_backward_data,
                      aten._log_softmax_backward_data, aten.native_layer_norm, aten.native_layer_norm_backward),
    "indexing": (aten.gather, aten.index_select, aten.embedding, aten.embedding_dense_backward, aten.index,
                 aten.slice_scatter, aten.select_scatter, aten.masked_fill, aten.cumsum),
}
NOT_FUSED: dict[str, tuple] = {
    "matmul (extern library kernel)": (aten.mm, aten.bmm, aten.addmm, aten.baddbmm, aten.convolution,
                                       aten.convolution_backward),
}
FUSIBLE_TAGS = (torch.Tag.pointwise, torch.Tag.reduction)

_FUSIBLE_PACKETS = {p for ops in FUSIBLE.values() for p in ops}
_NOT_FUSED_PACKETS = {p for ops in NOT_FUSED.values() for p in ops}


def inductor_can_fuse(node: fx.Node) -> bool:
    """May Inductor compile ``node`` inside a fused region? (see the table above)"""
    if node.op != "call_function" or is_getitem(node):
        return False
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    vals = tensor_values(node.meta.get("val"))
    if not vals or any(v is None for v in vals):
        return False
    schema = target._schema
    if schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags:
        return False
    packet = target.overloadpacket
    if packet in _NOT_FUSED_PACKETS:
        return False
    if "sdpa" in packet.__name__ or "scaled_dot_product" in packet.__name__:
        return False
    return packet in _FUSIBLE_PACKETS or any(t in target.tags for t in FUSIBLE_TAGS)


def inductor_can_compile(node: fx.Node) -> bool:
    """May ``node`` join a layer's region (fusion="layers")? What Inductor fuses, and the library ops of
    :data:`NOT_FUSED`, which Inductor calls itself as extern kernels inside its generated code."""
    if inductor_can_fuse(node):
        return True
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    vals = tensor_values(node.meta.get("val"))
    return target.overloadpacket in _NOT_FUSED_PACKETS and bool(vals) and all(v is not None for v in vals)


def inductor_fuse_reason(node: fx.Node) -> str | None:
    """None when ``node`` may join a region under Inductor's table, else why not (one line, the table's words)."""
    if inductor_can_fuse(node):
        return None
    name = str(getattr(node.target, "__name__", node.target))
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return f"{name} is not an aten op"
    target = node.target
    for why, ops in NOT_FUSED.items():
        if target.overloadpacket in ops:
            return f"{name}: {why}"
    if "sdpa" in target.overloadpacket.__name__ or "scaled_dot_product" in target.overloadpacket.__name__:
        return f"{name}: attention (a library kernel)"
    if target._schema.is_mutable:
        return f"{name} mutates its input"
    if torch.Tag.nondeterministic_seeded in target.tags:
        return f"{name} draws random numbers (kept out so the stream matches eager)"
    vals = tensor_values(node.meta.get("val"))
    if not vals or any(v is None for v in vals):
        return f"{name} does not return only tensors"
    return f"{name} is neither pointwise, a reduction nor in the fusible table"
