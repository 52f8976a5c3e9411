"""The nvFuser op table: which aten ops a FusionDefinition is built from, and how.

:data:`FUSIBLE` is the ONE table: ``aten overload -> OpEntry(build, check)``.
``fusible_reason(node)`` (what ``NvFuserExecutor.can_fuse`` and the region
splitter consult) answers from it alone: ``None`` when the node can join an
nvFuser definition, else the reason it cannot. Matmuls, attention, RNG, index
ops and anything else absent here run through torch between fusions.

Builders follow aten semantics exactly rather than nvFuser's own promotion
rules: each op computes in its *computation dtype* (f32 for bf16/f16 results,
as aten's kernels do) and casts its result to the dtype recorded in the node's
FakeTensor, so every intermediate is rounded where eager rounds it. Python
scalars become constants of the computation dtype. Implicit broadcasting is
made explicit (squeeze size-1 dims, ``broadcast_in_dim``), since nvFuser
requires it. This module imports without nvFuser; builders only run with it.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Callable

import torch
import torch.fx as fx

__all__ = ["OpEntry", "FUSIBLE", "LATE_ENTRIES", "table_entry", "fusible_reason", "Builder", "METADATA_OPS", "SUPPORTED_DTYPES"]

aten = torch.ops.aten
prims = torch.ops.prims

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.bool)
_LOW = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class OpEntry:
    build: Callable  # (Builder, node) -> nv value, or tuple of them for multi-output ops
    check: Callable | None = None  # node -> reason str when this particular call cannot fuse


# --------------------------------------------------------------------------------------
# The builder: a FusionDefinition under construction, with fx node -> nv value bookkeeping
# --------------------------------------------------------------------------------------
def _val(x):
    return x.meta.get("val") if isinstance(x, fx.Node) else x


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in _LOW else dtype


class Builder:
    """Translates one fused segment's nodes into ops on ``fd`` (an open FusionDefinition)."""

    def __init__(self, fd, nvf):
        self.fd = fd
        self.nvf = nvf
        self.values: dict[fx.Node, object] = {}  # node -> nv value, always of the node's meta dtype
        self.inputs: set[int] = set()
        self.aliases: list[tuple] = []  # (value, input it is written into) from copy_

    # -- types --------------------------------------------------------------------------
    def nvdtype(self, dtype):
        DT = self.nvf.DataType
        return {torch.float32: DT.Float, torch.float16: DT.Half, torch.bfloat16: DT.BFloat16,
                torch.float64: DT.Double, torch.int64: DT.Int, torch.int32: DT.Int32, torch.bool: DT.Bool,
                float: DT.Double, int: DT.Int, bool: DT.Bool}[dtype]

    def define_input(self, node: fx.Node, strides=None):
        t = node.meta["val"]
        is_cpu = t.device.type == "cpu"
        v = self.fd.define_tensor(sizes=list(t.shape), strides=list(strides if strides is not None else t.stride()),
                                  dtype=self.nvdtype(t.dtype), static_sizes=True, is_cpu=is_cpu)
        self.values[node] = v
        self.inputs.add(id(v))
        return v

    def scalar(self, value, dtype: torch.dtype):
        if dtype.is_floating_point:
            value = float(value)
        elif dtype == torch.bool:
            value = bool(value)
        else:
            value = int(value)
        return self.fd.define_scalar(value, self.nvdtype(dtype))

    def cast(self, v, src: torch.dtype, dst: torch.dtype):
        return v if src == dst else self.fd.ops.cast(v, self.nvdtype(dst))

    def arg(self, x, dtype: torch.dtype, shape=None):
        """nv value of an fx arg or Python scalar, in ``dtype``, broadcast to ``shape`` if given."""
        if isinstance(x, fx.Node):
            t = x.meta["val"]
            v = self.cast(self.values[x], t.dtype, dtype)
            return self.broadcast(v, tuple(t.shape), tuple(shape)) if shape is not None else v
        return self.scalar(x, dtype)

    def broadcast(self, v, in_shape: tuple, out_shape: tuple, expand: bool = False):
        """Make numpy-style broadcasting explicit: squeeze size-1 dims, broadcast_in_dim."""
        if in_shape == out_shape:
            return v
        k = len(out_shape) - len(in_shape)
        aligned = [None] * k + list(in_shape)
        squeeze = [i for i, s in enumerate(in_shape) if s == 1 and out_shape[k + i] != 1]
        if squeeze:
            v = self.fd.ops.squeeze(v, squeeze)
        kept = [k + i for i, s in enumerate(in_shape) if i not in squeeze]
        if not squeeze and k == 0:
            return v
        shape = [out_shape[d] if expand or (aligned[d] is not None and d in kept) else 1
                 for d in range(len(out_shape))]
        return self.fd.ops.broadcast_in_dim(v, shape, kept)

    def finish(self, v, node_or_val, computed: torch.dtype):
        """Cast a result computed in ``computed`` to the dtype eager produces."""
        t = node_or_val.meta["val"] if isinstance(node_or_val, fx.Node) else node_or_val
        return self.cast(v, computed, t.dtype)


def _out(node):
    return node.meta["val"]


def _ndim_dims(dims, ndim):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % ndim if ndim else 0 for d in dims})


# --------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------
def _unary(opname: str):
    def build(b: Builder, n: fx.Node):
        out = _out(n)
        # predicates (isnan...) compute in their input's dtype, everything else in the result's
        cd = _compute_dtype(_val(n.args[0]).dtype if out.dtype == torch.bool else out.dtype)
        x = b.arg(n.args[0], cd)
        return b.finish(getattr(b.fd.ops, opname)(x), n, cd)

    return build


def _binary(opname: str, alpha: bool = False, reverse: bool = False):
    def build(b: Builder, n: fx.Node):
        out = _out(n)
        cd = _compute_dtype(out.dtype)
        shape = tuple(out.shape)
        lhs, rhs = n.args[0], n.args[1]
        x, y = b.arg(lhs, cd, shape), b.arg(rhs, cd, shape)
        a = n.kwargs.get("alpha", 1) if alpha else 1
        if a != 1:
            y = b.fd.ops.mul(y, b.scalar(a, cd))
        if reverse:
            x, y = y, x
        return b.finish(getattr(b.fd.ops, opname)(x, y), n, cd)

    return build


def _common_dtype(a, b) -> torch.dtype:
    """torch.result_type of two args (tensors or Python scalars), from metadata only."""
    def proxy(x):
        x = _val(x)
        if isinstance(x, torch.Tensor):
            return torch.empty((1,) if x.dim() else (), dtype=x.dtype, device="meta")
        return x

    return torch.result_type(proxy(a), proxy(b))


def _compare(opname: str):
    def build(b: Builder, n: fx.Node):
        cd = _compute_dtype(_common_dtype(n.args[0], n.args[1]))
        shape = tuple(_out(n).shape)
        return getattr(b.fd.ops, opname)(b.arg(n.args[0], cd, shape), b.arg(n.args[1], cd, shape))

    return build


def _logical(opname: str):
    def build(b: Builder, n: fx.Node):
        shape = tuple(_out(n).shape)
        return getattr(b.fd.ops, opname)(b.arg(n.args[0], torch.bool, shape), b.arg(n.args[1], torch.bool, shape))

    return build


def _not(b: Builder, n: fx.Node):
    x = _val(n.args[0])
    if x.dtype == torch.bool:
        return b.fd.ops.logical_not(b.arg(n.args[0], torch.bool))
    return b.fd.ops.bitwise_not(b.arg(n.args[0], x.dtype))


def _div(b: Builder, n: fx.Node):
    if n.kwargs.get("rounding_mode") is not None:
        raise AssertionError("rounding_mode division is not in the table")  # excluded by its check
    out = _out(n)
    cd = _compute_dtype(out.dtype)
    shape = tuple(out.shape)
    return b.finish(b.fd.ops.div(b.arg(n.args[0], cd, shape), b.arg(n.args[1], cd, shape)), n, cd)


def _pow_scalar_base(b: Builder, n: fx.Node):  # aten.pow.Scalar(self: number, exponent: Tensor)
    out = _out(n)
    cd = _compute_dtype(out.dtype)
    return b.finish(b.fd.ops.pow(b.scalar(n.args[0], cd), b.arg(n.args[1], cd)), n, cd)


def _fma(b: Builder, n: fx.Node):
    out = _out(n)
    cd = _compute_dtype(out.dtype)
    shape = tuple(out.shape)
    a, m, c = (b.arg(x, cd, shape) for x in n.args[:3])
    return b.finish(b.fd.ops.add(b.fd.ops.mul(a, m), c), n, cd)


def _where(b: Builder, n: fx.Node):
    out = _out(n)
    shape = tuple(out.shape)
    cond = b.arg(n.args[0], torch.bool, shape)
    return b.fd.ops.where(cond, b.arg(n.args[1], out.dtype, shape), b.arg(n.args[2], out.dtype, shape))


def _clamp(b: Builder, n: fx.Node):
    out = _out(n)
    cd = _compute_dtype(out.dtype)
    x = b.arg(n.args[0], cd)
    lo = n.args[1] if len(n.args) > 1 else n.kwargs.get("min")
    hi = n.args[2] if len(n.args) > 2 else n.kwargs.get("max")
    if lo is not None:
        x = b.fd.ops.maximum(x, b.scalar(lo, cd))
    if hi is not None:
        x = b.fd.ops.minimum(x, b.scalar(hi, cd))
    return b.finish(x, n, cd)


def _cast(b: Builder, n: fx.Node):  # _to_copy / convert_element_type
    out = _out(n)
    return b.arg(n.args[0], out.dtype)


def _copy_like(b: Builder, n: fx.Node):  # aten.copy(self, src): src's values in self's shape/dtype
    out = _out(n)
    return b.fd.ops.set(b.broadcast(b.arg(n.args[1], out.dtype), tuple(_val(n.args[1]).shape), tuple(out.shape),
                                    expand=True))


def _identity(b: Builder, n: fx.Node):  # clone / alias: a fresh buffer of the same values
    return b.fd.ops.set(b.arg(n.args[0], _out(n).dtype))


def _reshape(b: Builder, n: fx.Node):
    src, out = _val(n.args[0]), _out(n)
    v = b.arg(n.args[0], out.dtype)
    return v if tuple(src.shape) == tuple(out.shape) else b.fd.ops.reshape(v, list(out.shape))


def _permute(b: Builder, n: fx.Node):
    dims = [d % max(_out(n).dim(), 1) for d in n.args[1]]
    return b.fd.ops.permute(b.arg(n.args[0], _out(n).dtype), dims)


def _transpose2d(b: Builder, n: fx.Node):
    x = _val(n.args[0])
    v = b.arg(n.args[0], x.dtype)
    return b.fd.ops.permute(v, [1, 0]) if x.dim() == 2 else v


def _expand(b: Builder, n: fx.Node):
    src, out = _val(n.args[0]), _out(n)
    return b.broadcast(b.arg(n.args[0], out.dtype), tuple(src.shape), tuple(out.shape), expand=True)


def _unsqueeze(b: Builder, n: fx.Node):
    src, out = _val(n.args[0]), _out(n)
    d = n.args[1] % out.dim()
    kept = [i for i in range(out.dim()) if i != d]
    return b.fd.ops.broadcast_in_dim(b.arg(n.args[0], out.dtype), [s if i != d else 1 for i, s in enumerate(out.shape)],
                                     kept)


def _squeeze(b: Builder, n: fx.Node):
    src = _val(n.args[0])
    dims = n.args[1] if len(n.args) > 1 else list(range(src.dim()))
    dims = [dims] if isinstance(dims, int) else list(dims)
    dims = sorted({d % src.dim() for d in dims if src.shape[d % src.dim()] == 1}) if src.dim() else []
    v = b.arg(n.args[0], src.dtype)
    return b.fd.ops.squeeze(v, dims) if dims else v


def _reduce(opname: str, mean: bool = False):
    def build(b: Builder, n: fx.Node):
        src, out = _val(n.args[0]), _out(n)
        dims = _ndim_dims(n.args[1] if len(n.args) > 1 else n.kwargs.get("dim"), src.dim())
        keep = bool(n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False))
        cd = _compute_dtype(out.dtype)
        x = b.arg(n.args[0], cd)
        if not dims or src.dim() == 0:
            return b.finish(b.fd.ops.set(x), n, cd)
        r = getattr(b.fd.ops, opname)(x, dims, keep, b.nvdtype(cd)) if opname == "sum" else \
            getattr(b.fd.ops, opname)(x, dims, keep)
        if mean:
            count = math.prod(src.shape[d] for d in dims)
            r = b.fd.ops.div(r, b.scalar(count, cd))
        return b.finish(r, n, cd)

    return build


def _softmax(log: bool):
    def build(b: Builder, n: fx.Node):
        src, out = _val(n.args[0]), _out(n)
        dim = n.args[1] % max(src.dim(), 1)
        cd = _compute_dtype(out.dtype)
        x = b.arg(n.args[0], cd)
        m = b.fd.ops.max(x, [dim], True)
        shifted = b.fd.ops.sub(x, m)
        e = b.fd.ops.exp(shifted)
        s = b.fd.ops.sum(e, [dim], True, b.nvdtype(cd))
        r = b.fd.ops.sub(shifted, b.fd.ops.log(s)) if log else b.fd.ops.div(e, s)
        return b.finish(r, n, cd)

    return build


def _softmax_backward(b: Builder, n: fx.Node):  # (grad_output, output, dim, input_dtype)
    out = _out(n)
    dim = n.args[2] % max(out.dim(), 1)
    cd = _compute_dtype(out.dtype)
    g, y = b.arg(n.args[0], cd), b.arg(n.args[1], cd)
    s = b.fd.ops.sum(b.fd.ops.mul(g, y), [dim], True, b.nvdtype(cd))
    return b.finish(b.fd.ops.mul(y, b.fd.ops.sub(g, s)), n, cd)


def _layer_norm(b: Builder, n: fx.Node):  # (input, normalized_shape, weight, bias, eps) -> (out, mean, rstd)
    x_node, shape, w, bias, eps = n.args[:5]
    src = _val(x_node)
    vals = n.meta["val"]
    cd = _compute_dtype(src.dtype)
    dims = list(range(src.dim() - len(shape), src.dim()))
    count = math.prod(src.shape[d] for d in dims)
    x = b.arg(x_node, cd)
    mean = b.fd.ops.div(b.fd.ops.sum(x, dims, True, b.nvdtype(cd)), b.scalar(count, cd))
    diff = b.fd.ops.sub(x, mean)
    var = b.fd.ops.div(b.fd.ops.sum(b.fd.ops.mul(diff, diff), dims, True, b.nvdtype(cd)), b.scalar(count, cd))
    rstd = b.fd.ops.rsqrt(b.fd.ops.add(var, b.scalar(eps, cd)))
    y = b.fd.ops.mul(diff, rstd)
    full = tuple(src.shape)
    if w is not None:
        y = b.fd.ops.mul(y, b.arg(w, cd, full))
    if bias is not None:
        y = b.fd.ops.add(y, b.arg(bias, cd, full))
    return (b.finish(y, vals[0], cd), b.finish(mean, vals[1], cd), b.finish(rstd, vals[2], cd))


_SQRT1_2 = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


def _gelu(b: Builder, n: fx.Node):
    out = _out(n)
    cd = _compute_dtype(out.dtype)
    x = b.arg(n.args[0], cd)
    ops = b.fd.ops
    if n.kwargs.get("approximate", "none") == "tanh":
        inner = ops.mul(ops.add(x, ops.mul(ops.mul(ops.mul(x, x), x), b.scalar(0.044715, cd))),
                        b.scalar(math.sqrt(2 / math.pi), cd))
        cdf = ops.mul(ops.add(ops.tanh(inner), b.scalar(1.0, cd)), b.scalar(0.5, cd))
    else:
        cdf = ops.mul(ops.add(ops.erf(ops.mul(x, b.scalar(_SQRT1_2, cd))), b.scalar(1.0, cd)), b.scalar(0.5, cd))
    return b.finish(ops.mul(x, cdf), n, cd)


def _gelu_backward(b: Builder, n: fx.Node):  # (grad_output, self, approximate='none')
    out = _out(n)
    cd = _compute_dtype(out.dtype)
    ops = b.fd.ops
    g, x = b.arg(n.args[0], cd), b.arg(n.args[1], cd)
    cdf = ops.mul(ops.add(ops.erf(ops.mul(x, b.scalar(_SQRT1_2, cd))), b.scalar(1.0, cd)), b.scalar(0.5, cd))
    pdf = ops.mul(ops.exp(ops.mul(ops.mul(x, x), b.scalar(-0.5, cd))), b.scalar(_INV_SQRT_2PI, cd))
    return b.finish(ops.mul(g, ops.add(cdf, ops.mul(x, pdf))), n, cd)


def _silu_backward(b: Builder, n: fx.Node):  # (grad_output, self)
    out = _out(n)
    cd = _compute_dtype(out.dtype)
    ops = b.fd.ops
    g, x = b.arg(n.args[0], cd), b.arg(n.args[1], cd)
    s = ops.sigmoid(x)
    return b.finish(ops.mul(g, ops.mul(s, ops.add(ops.mul(x, ops.sub(b.scalar(1.0, cd), s)), b.scalar(1.0, cd)))), n, cd)


def _full(b: Builder, n: fx.Node):
    out = _out(n)
    fill = n.args[1] if n.target is not aten.scalar_tensor.default else n.args[0]
    return b.fd.ops.full(list(out.shape), b.scalar(fill, out.dtype), b.nvdtype(out.dtype))


def _copy_(b: Builder, n: fx.Node):
    """``copy_(dest, src)``: an output aliased to the input ``dest`` (written in place)."""
    dest, src = n.args[0], n.args[1]
    d = _val(dest)
    v = b.fd.ops.set(b.broadcast(b.arg(src, d.dtype), tuple(_val(src).shape), tuple(d.shape), expand=True))
    b.aliases.append((v, b.values[dest]))  # added as outputs after the visible ones
    return v


# --------------------------------------------------------------------------------------
# Checks (per call: arguments the builder does not handle)
# --------------------------------------------------------------------------------------
def _check_div(n):
    return "division with rounding_mode" if n.kwargs.get("rounding_mode") is not None else None


def _check_to_copy(n):
    src, out = _val(n.args[0]), _out(n)
    if isinstance(src, torch.Tensor) and src.device != out.device:
        return f"moves data {src.device} -> {out.device}"
    return None


def _check_copy_(n):
    dest = n.args[0]
    if not (isinstance(dest, fx.Node) and dest.op == "placeholder"):
        return "copy_ into a value computed in this program (nvFuser aliases outputs to inputs only)"
    return None


def _check_layer_norm(n):
    return None if len(n.args) >= 5 else "native_layer_norm without eps"


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
    entry = FUSIBLE.get(target)
    if entry is None and isinstance(target, torch._ops.OpOverload) and str(target) in LATE_ENTRIES:
        entry = FUSIBLE[target] = LATE_ENTRIES[str(target)]
    return entry


def fusible_reason(node: fx.Node, index_math: bool = True) -> str | None:
    """None when ``node`` can be part of an nvFuser definition, else why not (one line).

    ``index_math=False`` keeps ops with integer or bool results (masks built from
    ``arange``) in torch.
    """
    if node.op != "call_function" or node.target is operator.getitem:
        return f"{node.op} {node.target} is not an aten op"
    entry = table_entry(node.target)
    if entry is None:
        return f"{node.target} is not in the nvFuser op table (runs through torch)"
    outs = _tensors(node.meta.get("val"))
    if not outs:
        return f"{node.target}: no tensor result recorded"
    for t in outs:
        if t.device.type == "cpu":
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
            if t.device.type == "cpu" and t.dim() > 0:
                return f"{node.target}: CPU input tensor {a.name} (only 0-dim CPU scalars can enter a fusion)"
    if entry.check is not None:
        why = entry.check(node)
        if why:
            return f"{node.target}: {why}"
    return None
