"""Op scratch: memory a plain aten op allocates and frees inside its own call (the pure half).

Some kernels take scratch buffers that never appear as a value of the program: a CPU
convolution unfolds its input (im2col ``columns``) or reorders it for oneDNN, its backward
does the same for each gradient, FFTs plan and pad, sorts keep index/key buffers,
anti-aliased upsampling keeps weight tables, LAPACK routines take a workspace. The
liveness model sees only the op's inputs and outputs, so without this a Conv2d + BatchNorm
backward measures 20x its prediction.

Design: measurements are records. This module holds what is pure - which ops take scratch
(:data:`SCRATCH_OPS`, one place to extend; :data:`CUDA_SCRATCH_OPS` on CUDA only,
:data:`CPU_LOW_PRECISION_SCRATCH_OPS` on CPU for bfloat16/float16 only), an op's
*signature* (the overload and every argument's layout or value), and the :class:`OpScratch`
table of records (signature -> ``{"bytes", "why", "bound"}``) that a Trace carries
(``Trace.op_scratch``, shared by every stage of one program). Measuring is the run stage's
job (:mod:`trace_lab.runtime.op_scratch`: right after capture, once per signature, cached
process-wide); the liveness model and the printer only read the table here:
scratch = the op's peak above entry during one call less its fresh outputs, counted on the
op's line only (``high_water = live + allocated + scratch``). An op with no record, or
whose record says it could not be measured (a profiler was running, the meta device), counts
0 and its line is marked a **lower bound** (:func:`bound_note`); an op whose scratch depends on
its input's values (:data:`VALUE_DEPENDENT_SCRATCH`, matrix_exp) is measured at large values
and marked an **upper bound**.
"""
from __future__ import annotations

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

__all__ = ["COMPOSITE", "SCRATCH_OPS", "SCRATCH_OPS_BY_NAME", "CUDA_SCRATCH_OPS", "CPU_LOW_PRECISION_SCRATCH_OPS", "VALUE_DEPENDENT_SCRATCH",
           "OpScratch", "scratch_nodes", "has_scratch", "op_signature", "op_scratch_bytes", "scratch_unknown",
           "lower_bound_note", "bound_note", "fused_away"]

aten = torch.ops.aten

# ---- Which ops allocate scratch inside their call: THE table -----------------------------------
# the category of ops whose scratch is the temporaries of a kernel written as several calls: a compiled region
# that holds one fuses them away (:func:`fused_away`)
COMPOSITE = "composite kernels (temporaries)"

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
    # CPU flash attention: per-thread accumulation buffers (its backward took 5.4 KiB above its outputs for
    # transformer_encoder, found when in-place donation moved that program's peak onto the line, 2026-11-27)
    "attention (CPU flash kernels)": (aten._scaled_dot_product_flash_attention_for_cpu,
                                      aten._scaled_dot_product_flash_attention_for_cpu_backward),
    # kernels written as several aten calls, whose intermediates live only inside the call
    COMPOSITE: (aten.isinf,),
}
_PACKETS = frozenset(p for ops in SCRATCH_OPS.values() for p in ops)
# the same, for operators registered only once torch._prims is imported, by their qualified name: prims.fma (the
# decomposition of lerp and addcmul) runs op by op as (a * b) + c, its product a temporary the size of the result
SCRATCH_OPS_BY_NAME: dict[str, str] = {"prims::fma": COMPOSITE}

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
# A bfloat16 matmul stages its operands and result in float32 (a 32x64 @ 64x168 mm: 40 KiB at its peak for a
# 10.5 KiB result; found on a bf16 llama on the CPU, 2026-11-28: measured 20-60% above predicted).
CPU_LOW_PRECISION_SCRATCH_OPS: dict[str, tuple] = {
    "reduced-precision reductions and scatters": (aten.sum, aten.scatter),
    "reduced-precision matmuls (float32 staging)": (aten.mm, aten.bmm, aten.addmm, aten.baddbmm, aten.addbmm),
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

def has_scratch(node: fx.Node) -> bool:
    """Is ``node`` an op of :data:`SCRATCH_OPS`, of :data:`CUDA_SCRATCH_OPS` on CUDA, or of
    :data:`CPU_LOW_PRECISION_SCRATCH_OPS` on CPU with a bfloat16/float16 tensor?"""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    packet = target.overloadpacket
    return packet in _PACKETS or target._schema.name in SCRATCH_OPS_BY_NAME or \
        (packet in _CUDA_PACKETS and _on_cuda(node)) or \
        (packet in _CPU_LOW_PRECISION_PACKETS and _low_precision_on_cpu(node))


def fused_away(node: fx.Node) -> bool:
    """Whether ``node``'s scratch is only the temporaries of a kernel written as several calls (:data:`COMPOSITE`:
    ``prims.fma``'s product, ``isinf``'s intermediates), which a compiled region holding the op never makes: its
    code computes the op elementwise with the rest of the region."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    return SCRATCH_OPS_BY_NAME.get(target._schema.name) == COMPOSITE or \
        target.overloadpacket in SCRATCH_OPS[COMPOSITE]


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


NOT_RECORDED = "not measured: no record (trace_lab.runtime.op_scratch.measure_op_scratch measures a trace's ops)"


class OpScratch(dict):
    """One program's measured op scratch: signature -> ``{"bytes": int | None, "why": str, "bound": None |
    "upper"}``, filled by the run stage (:mod:`trace_lab.runtime.op_scratch`) and read by the liveness model.
    Every stage of the program shares the table; ``version`` counts the records set, so a cached liveness is
    priced again once a record that could not be measured (``pending``) is measured later."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.version = 0

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.version += 1

    def update(self, *args, **kwargs):  # noqa: D102 - through __setitem__, so the version counts
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    @property
    def pending(self) -> list[str]:
        """Signatures measured while a profiler ran: the run stage measures them again once it has stopped."""
        return [sig for sig, rec in self.items() if rec.get("retry")]

    def record(self, node: fx.Node) -> dict | None:
        sig = op_signature(node)
        return None if sig is None else self.get(sig)


def scratch_nodes(gm) -> list[fx.Node]:
    """Every op of ``gm`` and of its fused regions' own modules that takes scratch (:func:`has_scratch`)."""
    modules = [gm] + [m for _, m in gm.named_modules() if m is not gm and hasattr(m, "graph")]
    return [n for m in modules for n in m.graph.nodes if has_scratch(n)]


def _record(node: fx.Node, table) -> dict:
    if not has_scratch(node):
        return {"bytes": 0}
    sig = op_signature(node)
    if sig is None:
        return {"bytes": None, "why": "not measured: an argument has no recorded meta"}
    record = table.get(sig) if table is not None else None
    return record if record is not None else {"bytes": None, "why": NOT_RECORDED}


def _unknown_why(node: fx.Node, record: dict) -> str | None:
    return (record.get("why") or "not measured") if record.get("bytes") is None else None


def op_scratch_bytes(node: fx.Node, table: OpScratch | None) -> int:
    """Scratch bytes ``node``'s op holds during its call, as ``table`` records it (0 for ops outside
    :data:`SCRATCH_OPS` and where it was not measured: see :func:`scratch_unknown`). Reads only."""
    return int(_record(node, table).get("bytes") or 0)


def scratch_unknown(node: fx.Node, table: OpScratch | None) -> str | None:
    """Why ``node``'s line is a lower bound (its op's scratch was not measured), else None."""
    return _unknown_why(node, _record(node, table))


def lower_bound_note(node: fx.Node, table: OpScratch | None) -> str:
    """The mark a printed line carries when its memory figure is a lower bound ('' otherwise)."""
    return _lower_bound_text(node, _unknown_why(node, _record(node, table)))


def _lower_bound_text(node: fx.Node, why: str | None) -> str:
    return f"[>= lower bound: scratch inside {node.target} {why}]" if why else ""


def bound_note(node: fx.Node, table: OpScratch | None) -> str:
    """The mark a printed line carries when its memory figure is a bound, not the figure: a lower bound
    (scratch not measured) or an upper bound (:data:`VALUE_DEPENDENT_SCRATCH`); '' otherwise."""
    record = _record(node, table)  # once: an op's signature describes every argument
    if record.get("bound") == "upper" and record.get("bytes") is not None:
        return f"[<= upper bound: scratch inside {node.target} {record['why']}]"
    return _lower_bound_text(node, _unknown_why(node, record))
