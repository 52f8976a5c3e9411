"""The nvFuser op table: which aten ops a FusionDefinition is built from, and how.

:data:`FUSIBLE` is the ONE table: ``aten overload -> OpEntry(build, check)``.
``fusible_reason(node)`` (what ``NvFuserExecutor.can_fuse`` and the region
splitter consult) answers from it alone: ``None`` when the node can join an
nvFuser definition, else the reason it cannot. Attention, RNG, index ops and
anything else absent here run through torch between fusions. :data:`LIBRARY`
holds the matmuls (``mm``, ``bmm``): an nvFuser definition takes them
(``fd.ops.matmul``; nvFuser runs them through ATen's kernel), but only where a
region is meant to hold its matmuls, a layer's region under ``fusion="layers"``
(``fusible_reason(node, library=True)``: ``NvFuserExecutor.can_compile``); the
other strategies fuse the memory-bound glue between them.

Builders follow aten semantics exactly rather than nvFuser's own promotion
rules: each op computes in its *computation dtype* (f32 for bf16/f16 results,
as aten's kernels do) and casts its result to the dtype recorded in the node's
FakeTensor, so every intermediate is rounded where eager rounds it. Python
scalars become constants of the computation dtype. Implicit broadcasting is
made explicit (squeeze size-1 dims, ``broadcast_in_dim``), since nvFuser
requires it. This module imports without nvFuser; builders only run with it.

Parts: this module is the table and the question asked of it; the Builder (the open
FusionDefinition and its dtype / broadcast helpers) is :mod:`.nvfuser_builder`, one
lowering per op and the per-call checks :mod:`.nvfuser_lowerings`. ``Builder`` is
re-exported here.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable

import torch
import torch.fx as fx

from .nvfuser_builder import Builder
from .nvfuser_lowerings import (_binary, _cast, _cat, _check_cat, _check_copy_, _check_div, _check_layer_norm,
                                _check_to_copy, _clamp, _compare, _copy_, _copy_like, _div, _expand, _fma, _full,
                                _gelu, _gelu_backward, _identity, _layer_norm, _logical, _not, _permute,
                                _pow_scalar_base, _reduce, _reshape, _silu_backward, _softmax, _softmax_backward,
                                _squeeze, _transpose2d, _unary, _unsqueeze, _where, _matmul, _check_matmul)

__all__ = [
    "OpEntry", "FUSIBLE", "LIBRARY", "LATE_ENTRIES", "table_entry", "fusible_reason", "Builder", "METADATA_OPS",
    "SUPPORTED_DTYPES",
]

aten = torch.ops.aten
prims = torch.ops.prims

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.bool)


@dataclass(frozen=True)
class OpEntry:
    build: Callable  # (Builder, node) -> nv value, or tuple of them for multi-output ops
    check: Callable | None = None  # node -> reason str when this particular call cannot fuse


# --------------------------------------------------------------------------------------
# THE table
# --------------------------------------------------------------------------------------
FUSIBLE: dict = {}


def _add(overloads, build, check=None):
    for ov in overloads:
        FUSIBLE[ov] = OpEntry(build, check)


for _name in ("abs", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "erf", "sin", "cos",
              "log1p", "expm1", "exp2", "log2", "tan", "erfc", "erfinv", "lgamma", "floor", "ceil", "round",
              "trunc", "sign", "silu", "relu"):
    _op = getattr(aten, _name).default
    _add([_op], _unary(_name))
for _name in ("isnan", "isinf", "isfinite"):
    _add([getattr(aten, _name).default], _unary(_name))
_add([aten.add.Tensor, aten.add.Scalar], _binary("add", alpha=True))
_add([aten.sub.Tensor, aten.sub.Scalar], _binary("sub", alpha=True))
_add([aten.rsub.Scalar, aten.rsub.Tensor], _binary("sub", alpha=True, reverse=True))
_add([aten.mul.Tensor, aten.mul.Scalar], _binary("mul"))
_add([aten.div.Tensor, aten.div.Scalar], _div, _check_div)
_add([aten.div.Tensor_mode], _div, _check_div)
_add([aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor], _binary("pow"))
_add([aten.pow.Scalar], _pow_scalar_base)
_add([aten.maximum.default], _binary("maximum"))
_add([aten.minimum.default], _binary("minimum"))
_add([aten.fmod.Tensor, aten.fmod.Scalar], _binary("fmod"))
_add([aten.remainder.Tensor, aten.remainder.Scalar], _binary("remainder"))
_add([aten.atan2.default], _binary("atan2"))
# prims.fma is registered by Inductor's decompositions (Adam's lerp); it joins the table when it exists
LATE_ENTRIES = {"prims.fma.default": OpEntry(_fma)}
_add([aten.clamp.default], _clamp)
for _cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    _add([getattr(aten, _cmp).Tensor, getattr(aten, _cmp).Scalar], _compare(_cmp))
_add([aten.logical_and.default], _logical("logical_and"))
_add([aten.logical_or.default], _logical("logical_or"))
_add([aten.logical_not.default, aten.bitwise_not.default], _not)
_add([aten.where.self], _where)
_add([aten._to_copy.default], _cast, _check_to_copy)
_add([prims.convert_element_type.default], _cast)
_add([aten.clone.default, aten.alias.default], _identity)
_add([aten.copy.default], _copy_like)
_add([aten.copy_.default], _copy_, _check_copy_)
_add([aten.view.default, aten._unsafe_view.default, aten.reshape.default], _reshape)
_add([aten.permute.default], _permute)
_add([aten.cat.default], _cat, _check_cat)
_add([aten.t.default], _transpose2d)
_add([aten.expand.default], _expand)
_add([aten.unsqueeze.default], _unsqueeze)
_add([aten.squeeze.dims, aten.squeeze.dim, aten.squeeze.default], _squeeze)
_add([aten.sum.dim_IntList], _reduce("sum"))
_add([aten.mean.dim], _reduce("sum", mean=True))
_add([aten.amax.default], _reduce("max"))
_add([aten.amin.default], _reduce("min"))
_add([aten._softmax.default], _softmax(log=False))
_add([aten._log_softmax.default], _softmax(log=True))
_add([aten._softmax_backward_data.default], _softmax_backward)
_add([aten.native_layer_norm.default], _layer_norm, _check_layer_norm)
_add([aten.gelu.default], _gelu)
_add([aten.gelu_backward.default], _gelu_backward,
     lambda n: "gelu_backward with approximate='tanh'" if n.kwargs.get("approximate", "none") != "none" else None)
_add([aten.silu_backward.default], _silu_backward)
_add([aten.full.default, aten.scalar_tensor.default], _full)

# Library ops a definition takes only inside a region meant to hold them (a layer's, fusion="layers")
LIBRARY: dict = {aten.mm.default: OpEntry(_matmul, _check_matmul), aten.bmm.default: OpEntry(_matmul, _check_matmul)}

# Ops that only move metadata: a segment made of these alone stays in torch (views are free there).
METADATA_OPS = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default,
                          aten.t.default, aten.expand.default, aten.unsqueeze.default, aten.squeeze.dims,
                          aten.squeeze.dim, aten.squeeze.default, aten.alias.default})


# --------------------------------------------------------------------------------------
# The question the fusion passes and the splitter ask
# --------------------------------------------------------------------------------------
def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


def table_entry(target) -> OpEntry | None:
    entry = FUSIBLE.get(target) or LIBRARY.get(target)
    if entry is None and isinstance(target, torch._ops.OpOverload) and str(target) in LATE_ENTRIES:
        entry = FUSIBLE[target] = LATE_ENTRIES[str(target)]
    return entry


HOST_DEVICE = "cpu"  # tensors there stay out of definitions (tests/nvfuser_cpu.py lets the CPU stand-in take them)


def fusible_reason(node: fx.Node, index_math: bool = True, library: bool = False) -> str | None:
    """None when ``node`` can be part of an nvFuser definition, else why not (one line).

    ``index_math=False`` keeps ops with integer or bool results (masks built from
    ``arange``) in torch. ``library=True`` also takes the matmuls of :data:`LIBRARY`.
    """
    if node.op != "call_function" or node.target is operator.getitem:
        return f"{node.op} {node.target} is not an aten op"
    if node.target in LIBRARY and not library:
        return f"{node.target} is a library op (runs through torch between fusions; fusion='layers' compiles it)"
    entry = table_entry(node.target)
    if entry is None:
        return f"{node.target} is not in the nvFuser op table (runs through torch)"
    outs = _tensors(node.meta.get("val"))
    if not outs:
        return f"{node.target}: no tensor result recorded"
    for t in outs:
        if t.device.type == HOST_DEVICE:
            return f"{node.target}: result on the CPU (nvFuser computes on CUDA only)"
        if t.dtype not in SUPPORTED_DTYPES:
            return f"{node.target}: dtype {t.dtype} not supported by the translator"
        if not index_math and not t.is_floating_point():
            return f"{node.target}: {t.dtype} result (integer/bool index math runs in torch: index_math=False)"
    for a in node.all_input_nodes:
        ins = _tensors(a.meta.get("val"))
        if not ins:
            return f"{node.target}: input {a.name} is not a tensor"
        for t in ins:
            if t.dtype not in SUPPORTED_DTYPES:
                return f"{node.target}: input dtype {t.dtype} not supported by the translator"
            if t.device.type == HOST_DEVICE and t.dim() > 0:
                return f"{node.target}: CPU input tensor {a.name} (only 0-dim CPU scalars can enter a fusion)"
    if entry.check is not None:
        why = entry.check(node)
        if why:
            return f"{node.target}: {why}"
    return None
