"""Op scratch: memory a plain aten op allocates and frees inside its own call.

Some kernels take scratch buffers that never appear as a value of the program: a CPU
convolution unfolds its input (im2col ``columns``) or reorders it for oneDNN, its backward
does the same for each gradient, FFTs plan and pad, sorts keep index/key buffers,
anti-aliased upsampling keeps weight tables, LAPACK routines take a workspace. The
liveness model sees only the op's inputs and outputs, so without this a Conv2d + BatchNorm
backward measures 20x its prediction.

Design (the same as compiled regions' workspace, :mod:`trace_lab.analysis.call_memory`):

* Which ops: :data:`SCRATCH_OPS`, a table of aten overload packets known to allocate
  scratch (one place to extend; an op outside it is assumed to allocate only its outputs), and
  :data:`CUDA_SCRATCH_OPS`, ops whose CUDA kernels take scratch that their CPU kernels do not
  (measured on CUDA only), and :data:`CPU_LOW_PRECISION_SCRATCH_OPS`, ops whose CPU kernels take
  scratch for bfloat16/float16 tensors only.
* What: scratch = the op's peak above entry during one call - the bytes of the fresh
  storages it returns, rounded as the liveness model rounds (CUDA blocks). It is counted on
  the op's line only: ``high_water = live + allocated + scratch``, gone when the op returns.
* How: once per *signature* - the op overload, every tensor argument's shape, stride,
  storage offset, dtype and device, and every non-tensor argument - the op runs on real
  inputs built from the recorded meta (:func:`trace_lab.analysis.call_memory.example_tensor`,
  uninitialised: no random generator is touched), once to warm up (lazy initialisation,
  oneDNN primitive creation), once measured with :func:`trace_lab.runtime.measure.measure_peak`
  (CPU profiler allocator events, CUDA ``max_memory_allocated``). Figures are kept in a
  process-wide cache keyed by signature, so a model's repeated layers measure once.
* When: lazily, the first time the liveness model prices the line (for the jit that is at
  compile time: the executors price the program before they run it), or ahead of time with
  :func:`record_op_scratch` (a function an executor or the jit may call on its final trace).
  The result is also written on ``node.meta['op_scratch']``.
* Where it cannot be measured - a profiler is already running (starting ours would fail, and
  running the op would pollute the user's own measurement), the op fails on placeholder
  inputs, a device without a measurement - the op counts 0 scratch, the line's figure is a
  **lower bound**, ``meta['op_scratch']['bytes']`` is None with the reason, and the printed
  trace marks the line (:func:`lower_bound_note`: ``[>= lower bound: ...]``). An op whose scratch
  depends on its input's values (:data:`VALUE_DEPENDENT_SCRATCH`, matrix_exp) is measured at large
  values, the most it takes, and its line is marked ``[<= upper bound: ...]``. A failed
  measurement is not cached: ``Trace.liveness``'s cache key holds :func:`scratch_key`, so a
  line priced under a profiler is priced and measured again once the profiler has stopped.
"""
from __future__ import annotations

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from .call_memory import measure_workspace
from .storage import CUDA_ROUNDING

__all__ = ["SCRATCH_OPS", "CUDA_SCRATCH_OPS", "CPU_LOW_PRECISION_SCRATCH_OPS", "VALUE_DEPENDENT_SCRATCH",
           "has_scratch", "op_signature", "op_scratch_bytes", "record_op_scratch", "scratch_unknown", "scratch_key",
           "lower_bound_note", "bound_note", "clear_cache"]

aten = torch.ops.aten

# ---- Which ops allocate scratch inside their call: THE table -----------------------------------
SCRATCH_OPS: dict[str, tuple] = {
    "convolution": (aten.convolution, aten.convolution_backward, aten._convolution, aten.convolution_overrideable,
                    aten.convolution_backward_overrideable, aten.mkldnn_convolution, aten._slow_conv2d_forward,
                    aten._slow_conv2d_backward, aten.slow_conv3d_forward, aten.slow_conv_transpose2d,
                    aten.slow_conv_transpose3d, aten.slow_conv_dilated2d, aten.slow_conv_dilated3d,
                    aten.cudnn_convolution, aten.cudnn_convolution_transpose, aten.miopen_convolution),
    "fft": (aten._fft_r2c, aten._fft_c2r, aten._fft_c2c),
    "sort": (aten.sort, aten.topk, aten.kthvalue, aten.median, aten.nanmedian, aten.mode, aten.msort,
             aten.argsort, aten.unique_dim, aten._unique2, aten.unique_consecutive),
    "anti-aliased upsampling": (aten._upsample_bilinear2d_aa, aten._upsample_bicubic2d_aa,
                                aten._upsample_bilinear2d_aa_backward, aten._upsample_bicubic2d_aa_backward),
    "normalization": (aten.native_batch_norm, aten._native_batch_norm_legit,
                      aten._native_batch_norm_legit_functional, aten._native_batch_norm_legit_no_training,
                      aten.native_batch_norm_backward, aten.native_group_norm, aten.native_group_norm_backward),
    "linear algebra (LAPACK workspace)": (aten.linalg_svd, aten._linalg_svd, aten.linalg_qr, aten.linalg_eigh,
                                          aten._linalg_eigh, aten.linalg_eig, aten.linalg_cholesky_ex,
                                          aten.linalg_lu_factor_ex, aten.linalg_lu, aten._linalg_det,
                                          aten._linalg_slogdet, aten.linalg_solve_ex, aten._linalg_solve_ex,
                                          aten.linalg_inv_ex, aten.triangular_solve, aten.linalg_householder_product,
                                          aten.linalg_matrix_exp),
    # kernels written as several aten calls, whose intermediates live only inside the call
    "composite kernels (temporaries)": (aten.isinf,),
}
_PACKETS = frozenset(p for ops in SCRATCH_OPS.values() for p in ops)

# Ops whose scratch depends on their input's *values*, not only its layout: measured with every floating
# input filled with VALUE_DEPENDENT_FILL, the case that takes the most, so the line's figure is an upper
# bound and the printed trace says so (:func:`bound_note`). Found by the OpInfo corpus (2026-11-26).
VALUE_DEPENDENT_SCRATCH: dict = {
    aten.linalg_matrix_exp: "its Taylor degree and squarings grow with the input's norm",
}
VALUE_DEPENDENT_FILL = 1.0e3

# Ops whose CUDA kernels take scratch (cub scans and radix sorts, atomics' staging, cuBLAS/cuSOLVER and
# attention workspaces) but whose CPU kernels do not: measured on CUDA only, so a CPU program runs no extra
# calls for them. Found by the OpInfo corpus on an H100 (2026-11-24: measured above predicted by 1.5-270 KiB).
CUDA_SCRATCH_OPS: dict[str, tuple] = {
    "accumulating index writes (sort + scan)": (aten.index_put, aten._index_put_impl, aten._unsafe_index_put,
                                                aten.index_add, aten.index_reduce, aten.embedding_dense_backward,
                                                aten._embedding_bag, aten._embedding_bag_backward,
                                                aten._embedding_bag_dense_backward, aten.masked_scatter,
                                                aten._segment_reduce_backward, aten.segment_reduce),
    "scans and selections (cub)": (aten.cumsum, aten.cumprod, aten.logcumsumexp, aten.nonzero, aten.masked_select,
                                   aten.multinomial, aten.isin, aten.bincount, aten.histc),
    "upsampling backward and folding": (aten.upsample_nearest1d_backward, aten.upsample_nearest2d_backward,
                                        aten.upsample_nearest3d_backward, aten._upsample_nearest_exact1d_backward,
                                        aten._upsample_nearest_exact2d_backward, aten._upsample_nearest_exact3d_backward,
                                        aten.upsample_linear1d_backward, aten.upsample_bilinear2d_backward,
                                        aten.upsample_bicubic2d_backward, aten.upsample_trilinear3d_backward,
                                        aten.im2col, aten.col2im),
    "linear algebra and attention workspaces": (aten.ormqr, aten.geqrf,
                                                aten.linalg_ldl_factor_ex, aten._efficient_attention_forward,
                                                aten._efficient_attention_backward, aten._flash_attention_forward,
                                                aten._flash_attention_backward,
                                                aten._scaled_dot_product_efficient_attention,
                                                aten._scaled_dot_product_efficient_attention_backward,
                                                aten._scaled_dot_product_flash_attention,
                                                aten._scaled_dot_product_flash_attention_backward),
}
_CUDA_PACKETS = frozenset(p for ops in CUDA_SCRATCH_OPS.values() for p in ops)

# Ops whose CPU kernels take scratch for reduced-precision (bfloat16, float16) tensors only: a reduction over
# non-innermost dimensions stages its input, a scatter sorts its indices. Measured on CPU for those dtypes
# only. Found by the OpInfo corpus (2026-11-26: kron's and sort's bfloat16 backwards measured 1.5-2x).
CPU_LOW_PRECISION_SCRATCH_OPS: dict[str, tuple] = {
    "reduced-precision reductions and scatters": (aten.sum, aten.scatter),
}
_CPU_LOW_PRECISION_PACKETS = frozenset(p for ops in CPU_LOW_PRECISION_SCRATCH_OPS.values() for p in ops)
_LOW_PRECISION = (torch.bfloat16, torch.float16)


def _on_cuda(node: fx.Node) -> bool:
    from ..ir.fx_util import tensor_values

    vals = [v for v in tensor_values(node.meta.get("val")) if v is not None]
    return bool(vals) and vals[0].device.type == "cuda"


def _low_precision_on_cpu(node: fx.Node) -> bool:
    vals = [v for v in _vals(node)[0] if isinstance(v, torch.Tensor)]
    return bool(vals) and vals[0].device.type == "cpu" and any(v.dtype in _LOW_PRECISION for v in vals)

_CACHE: dict[tuple, int] = {}  # (signature, rounding) -> scratch bytes; only successful measurements


def clear_cache() -> None:
    _CACHE.clear()


def has_scratch(node: fx.Node) -> bool:
    """Is ``node`` an op of :data:`SCRATCH_OPS`, of :data:`CUDA_SCRATCH_OPS` on CUDA, or of
    :data:`CPU_LOW_PRECISION_SCRATCH_OPS` on CPU with a bfloat16/float16 tensor?"""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    packet = target.overloadpacket
    return packet in _PACKETS or (packet in _CUDA_PACKETS and _on_cuda(node)) or \
        (packet in _CPU_LOW_PRECISION_PACKETS and _low_precision_on_cpu(node))


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return (f"T({x.dtype},{x.device.type},{tuple(int(s) for s in x.shape)},"
                f"{tuple(int(s) for s in x.stride())},{int(x.storage_offset())})")
    return repr(x)


def _vals(node: fx.Node):
    """(flat argument leaves with tensors' recorded meta in place of nodes, pytree spec)."""
    leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
    vals = [a.meta.get("val") if isinstance(a, fx.Node) else a for a in leaves]
    return vals, spec


# views that set a bit instead of computing: a kernel that cannot read the bit copies its input inside the call
# (an FFT of a conjugated gradient); the recorded meta does not always carry the bit, the producing op does
_BIT_VIEWS = {aten._conj.default: "conj", aten._neg_view.default: "neg"}


def _bits(node: fx.Node) -> list[str]:
    """For each flat argument leaf: the lazy bit ('conj', 'neg') its producer sets, or ''."""
    return [_BIT_VIEWS.get(a.target, "") if isinstance(a, fx.Node) and a.op == "call_function" else ""
            for a in pytree.tree_leaves((node.args, node.kwargs))]


def op_signature(node: fx.Node) -> str | None:
    """The op overload and every argument's layout (tensors, with a lazy conj/neg bit) or value (the
    rest); None when an argument's meta is missing."""
    vals, _ = _vals(node)
    if any(v is None and isinstance(a, fx.Node) for v, a in zip(vals, pytree.tree_leaves((node.args, node.kwargs)))):
        return None
    return f"{node.target}(" + ", ".join(_describe(v) + (f"[{b}]" if b else "")
                                         for v, b in zip(vals, _bits(node))) + ")"


def _profiler_active() -> bool:
    try:
        return bool(torch.autograd.profiler._is_profiler_enabled)
    except AttributeError:  # pragma: no cover - older torch
        return False


def _measure(node: fx.Node, rounding: int) -> tuple[int | None, str]:
    """(scratch bytes or None, how / why not) of one call of ``node``'s op on placeholder inputs."""
    vals, spec = _vals(node)
    positions = [i for i, v in enumerate(vals) if isinstance(v, torch.Tensor)]
    devices = {vals[i].device.type for i in positions}
    if not positions or devices - {"cpu", "cuda"}:
        return None, f"not measured on {', '.join(sorted(devices)) or 'a program without tensors'}"
    if _profiler_active():
        return None, "not measured: a profiler is active"
    target = node.target
    bits = _bits(node)

    def call(*tensors):
        leaves = list(vals)
        for i, t in zip(positions, tensors):
            # lazy views (no allocation), as the real input is one
            leaves[i] = t.conj() if bits[i] == "conj" else t._neg_view() if bits[i] == "neg" else t
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        return target(*args, **kwargs)

    largest = target.overloadpacket in VALUE_DEPENDENT_SCRATCH

    def flat_call(*tensors):
        if largest:  # in place: the fill allocates nothing inside the measured call
            for t in tensors:
                if t.is_floating_point() or t.is_complex():
                    t.fill_(VALUE_DEPENDENT_FILL)
        return [t for t in pytree.tree_leaves(call(*tensors)) if isinstance(t, torch.Tensor)]

    try:
        # outputs counted as the allocator rounds them (CUDA blocks), so their rounding is not scratch
        scratch, _out_bytes, _layout = measure_workspace(flat_call, [vals[i] for i in positions], rounding)
    except Exception as e:  # noqa: BLE001 - any failure: the line is a lower bound, and says why
        first = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
        return None, f"not measured: {type(e).__name__}: {first}"
    if scratch is None:
        return None, "not measured: the allocator could not be observed"
    return int(scratch), "measured once per signature"


def op_scratch_bytes(node: fx.Node, rounding: int = 1) -> int:
    """Scratch bytes ``node``'s op holds during its call (0 for ops outside :data:`SCRATCH_OPS`
    and where it could not be measured: see :func:`scratch_unknown`). Measures on first use."""
    if not has_scratch(node):
        return 0
    signature = op_signature(node)
    if signature is None:
        node.meta["op_scratch"] = {"bytes": None, "why": "not measured: an argument has no recorded meta"}
        return 0
    key = (signature, rounding)
    if key not in _CACHE:
        scratch, why = _measure(node, rounding)
        if scratch is None:
            node.meta["op_scratch"] = {"bytes": None, "why": why, "signature": signature}
            return 0
        _CACHE[key] = scratch
    scratch = _CACHE[key]
    record = {"bytes": scratch, "why": "measured once per signature", "signature": signature}
    if node.target.overloadpacket in VALUE_DEPENDENT_SCRATCH:
        record.update(bound="upper", why=f"depends on the input's values: "
                                         f"{VALUE_DEPENDENT_SCRATCH[node.target.overloadpacket]}; measured at large values")
    node.meta["op_scratch"] = record
    return scratch


def scratch_unknown(node: fx.Node) -> str | None:
    """Why ``node``'s line is a lower bound (its op's scratch could not be measured), else None."""
    record = node.meta.get("op_scratch")
    if record is not None and record.get("bytes") is None:
        return record.get("why") or "not measured"
    return None


def scratch_key(node: fx.Node):
    """What the liveness cache keys on for ``node`` (``Trace.liveness`` via ``liveness.cache_key``): the
    measured bytes, or for a scratch not measured yet whether it could be measured now, so a line
    priced under a profiler is priced (and measured) again once the profiler has stopped."""
    record = node.meta.get("op_scratch") or {}
    if record.get("bytes") is not None:
        return record["bytes"]
    return ("not measured", _profiler_active())


def lower_bound_note(node: fx.Node) -> str:
    """The mark a printed line carries when its memory figure is a lower bound ('' otherwise)."""
    why = scratch_unknown(node)
    return f"[>= lower bound: scratch inside {node.target} {why}]" if why else ""


def bound_note(node: fx.Node) -> str:
    """The mark a printed line carries when its memory figure is a bound, not the figure: a lower bound
    (scratch not measured) or an upper bound (:data:`VALUE_DEPENDENT_SCRATCH`); '' otherwise."""
    record = node.meta.get("op_scratch") or {}
    if record.get("bound") == "upper" and record.get("bytes") is not None:
        return f"[<= upper bound: scratch inside {node.target} {record['why']}]"
    return lower_bound_note(node)


def record_op_scratch(trace, rounding: int | None = None) -> dict:
    """Measure (or look up) the scratch of every op of ``trace`` in :data:`SCRATCH_OPS` now,
    e.g. right after compiling it, before any measured run. Returns {line name: bytes or None}."""
    if rounding is None:
        rounding = CUDA_ROUNDING if trace.device.type == "cuda" else 1
    found = {}
    for n in trace.ops:
        if has_scratch(n):
            scratch = op_scratch_bytes(n, rounding)
            found[trace.name(n)] = None if scratch_unknown(n) else scratch
    return found
