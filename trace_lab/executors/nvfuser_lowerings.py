"""The nvFuser lowerings: one builder per aten op (or family), and the per-call checks.

Design. Each builder ``(Builder, node) -> nv value`` (a tuple for multi-output ops)
follows aten semantics exactly rather than nvFuser's promotion rules: it computes in the
computation dtype and casts to the node's recorded dtype through :class:`.nvfuser_builder.Builder`;
composite ops (softmax, layer norm, gelu and their backwards) are spelled out in primitive
nv ops. A check ``node -> reason or None`` rejects the calls a builder does not handle.
Which aten overload uses which builder and check is :data:`.nvfuser_ops.FUSIBLE`.
"""
from __future__ import annotations

import math

import torch
import torch.fx as fx

from .nvfuser_builder import Builder, _compute_dtype, _ndim_dims, _out, _val

aten = torch.ops.aten


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


def _cat_dim(n: fx.Node) -> int:
    dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)
    return dim % _out(n).dim()


def _cat(b: Builder, n: fx.Node):  # aten.cat(tensors, dim): one definition writes each piece at its offset
    out = _out(n)
    return b.fd.ops.cat([b.arg(t, out.dtype) for t in n.args[0]], _cat_dim(n))


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
    raw = b.broadcast(b.arg(src, d.dtype), tuple(_val(src).shape), tuple(d.shape), expand=True)
    v = b.fd.ops.set(raw)
    b.aliases.append((v, b.values[dest], raw))  # added as outputs after the visible ones
    return v


def _matmul(b: Builder, n: fx.Node):
    """``mm`` / ``bmm`` as nvFuser's ``matmul``: computed in the inputs' dtype, as aten does (no upcast; nvFuser
    hands a matmul segment to ATen's kernel through its expression evaluator by default)."""
    x, y = (b.values[a] for a in n.args[:2])
    return b.fd.ops.matmul(x, y)


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


def _check_cat(n):
    """aten.cat skips 1-d empty tensors of any rank (a legacy rule) and promotes mixed dtypes: the lowering takes
    pieces of the result's rank, each non-empty, cast to the result's dtype."""
    out = _out(n)
    for t in n.args[0]:
        v = _val(t)
        if v.dim() != out.dim():
            return f"a piece of rank {v.dim()} in a rank-{out.dim()} result (aten's legacy empty pieces)"
        if v.numel() == 0:
            return "an empty piece"
    return None


def _check_layer_norm(n):
    return None if len(n.args) >= 5 else "native_layer_norm without eps"


_MATMUL_RANKS = {"mm": 2, "bmm": 3}


def _check_matmul(n):
    """A matmul nvFuser takes as a library call: two tensors of one floating dtype, the result of that dtype."""
    a, b, out = _val(n.args[0]), _val(n.args[1]), _out(n)
    rank = _MATMUL_RANKS[n.target.overloadpacket.__name__]
    if not all(isinstance(t, torch.Tensor) for t in (a, b)) or a.dim() != rank or b.dim() != rank:
        return f"needs two {rank}-d tensors"
    if not (a.dtype == b.dtype == out.dtype) or a.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return f"inputs {a.dtype}/{b.dtype} -> {out.dtype} (one floating dtype: f32, f16 or bf16)"
    return None
