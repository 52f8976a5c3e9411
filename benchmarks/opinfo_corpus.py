"""The OpInfo corpus: PyTorch's own op database run through trace_lab (issue 15).

For every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db`` and its
sample inputs on the device (``--device cpu``, the default, or ``cuda``) in float32 and
bfloat16: the op runs eagerly (the reference), through ``torch.compile(backend="aot_eager")``
(ops it cannot run are listed and left out of the denominator), and through
``trace_lab.jit(fn, fusion=F, executor=E)`` for every fusion strategy F x executor E
(default on cpu: eager and Inductor; on cuda: nvFuser, ``--configs`` adds Inductor); forward,
and backward where the OpInfo supports autograd for the dtype. Every trace_lab run is
compared with eager (outputs, gradients, inputs after the call) and its predicted peak
(liveness model) with the measured one.

    python -m benchmarks.opinfo_corpus                 # sweep: every op, first 2 samples per dtype
    python -m benchmarks.opinfo_corpus --full          # every sample of every op
    python -m benchmarks.opinfo_corpus --subset        # the fixed CI subset (tests/test_opinfo_corpus.py)
    python -m benchmarks.opinfo_corpus --ops add,mm --jobs 2 --timeout 120
    python -m benchmarks.opinfo_corpus --device cuda --jobs 14 --order categories --max-seconds 420
    python -m benchmarks.opinfo_corpus --merge a.json b.json   # the table from several runs

Writes ``benchmarks/results/<date>-<device>-opinfo-corpus-<commit>[-subset].json`` (``--out``: a
file, or a folder for that name) and the table ``benchmarks/CORPUS.md`` (``--no-table`` leaves
it alone; ``--table PATH`` elsewhere). The table has one section per device; a run or a merge
rewrites the sections of the devices its rows are from and keeps the others as they are.

Workers and budgets
-------------------
Samples run in ``--jobs`` worker processes started with ``spawn`` (never fork: Inductor and
CUDA are not fork-safe), so on cuda every worker has its own CUDA context on the one GPU and
its own allocator statistics (the measured peaks are per process). ``--max-seconds`` stops the
sweep and records what ran; so does SIGTERM. Every ~30 s the sweep prints op keys done / total
and the elapsed time to stderr and rewrites the results JSON (marked ``"partial"``), so even a
hard kill leaves what ran on disk. ``--order categories`` interleaves op_db's categories (each
in a fixed shuffled order) so that a partial sweep reaches every category early.

How a sample is checked
-----------------------
* The op's tensors (``SampleInput`` input, args, kwargs flattened) are the compiled
  function's inputs; everything else is a Python constant. Each run gets fresh clones.
* Backward: the gradient of every floating output that requires grad, with one fixed
  random cotangent per output, w.r.t. every input that requires grad (``autograd.grad``). The
  gradient reaches the compiled backward as a tensor only autograd holds (the output is passed
  as ``o * 1``), as in ``loss.backward()``: a cotangent the caller keeps would stay live through
  the backward, above the liveness model's figure by its bytes (the model frees incoming
  gradients at their last use; see docs/ARCHITECTURE.md). On torch 2.10 and 2.11 AOTAutograd itself keeps
  such a gradient to the end of the backward; ``jfn.gradients_copied = None`` tells the model so.
* Comparison: ``torch.testing.assert_close`` (shape, dtype, values, NaNs equal; strides not
  checked) with the dtype's defaults, widened to the largest ``toleranceOverride`` that the
  OpInfo's own decorators declare for that dtype (any test).
* Random ops: an op whose eager output changes with the global seed (dropout, bernoulli...)
  is compared on shapes, dtypes and devices only, and its row says so. On cuda "changes" means
  beyond the sample's tolerances: CUDA atomics (index_add, scatter_add...) differ run to run
  within them, and those ops are still compared by value.
* Uninitialised-memory ops (``UNINITIALISED_OPS``: ``empty``, ``empty_like``, ``empty_permuted``,
  ``empty_strided``, ``new_empty``, ``new_empty_strided``): their output's values are whatever
  the allocator hands back, so outputs (and gradients) are compared on shape, dtype, device and
  strides only, by name (the seed test above cannot tell: reused memory often repeats); inputs
  after the call are still compared by value. Their rows say so.
* Memory: each configuration is called twice; the first call compiles forward and backward,
  the second runs inside ``jfn.measuring()`` (and is the one compared with eager), which
  records, for every program part run (forward, backward), the liveness prediction and the
  measured peak (CPU: the profiler's allocator events; Inductor compiling a region inside a
  measuring() block crashes the profiler's stop, see NOTES. CUDA: the worker process's
  ``torch.cuda.max_memory_allocated``); they agree when
  ``|measured - predicted| <= 1% + 1 KiB``.
* Low precision: a bfloat16/float16 sample whose direct comparison fails is judged against a
  float64 run of the same op (inputs and cotangents upcast) by PyTorch's own rule for compiled
  low-precision results, ``torch._dynamo.utils.same(..., fp64_ref=...)`` (trace_lab's error at most
  twice eager's plus tol/10): it passes when only the rounding order differs (a decomposition, a
  region computing in float32), and the row says ``compared: float64 reference``.
* Classification of failures: ``error`` (an exception; KeyError ``_tensor_constant`` is
  issue 15 defect 1), ``mismatch`` (values differ; when the same mismatch appears with
  torch's own AOTAutograd + trace_lab's decomposition table and no trace_lab runtime, the
  cause is the decomposition, ``mismatch (decomposition)``), ``timeout``.
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import queue
import subprocess
import sys
import time
import traceback
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FUSIONS = ("none", "dataflow", "horizontal", "memory")
EXECUTORS = ("eager", "inductor", "nvfuser")
ALL_CONFIGS = tuple(f"{f}/{e}" for e in EXECUTORS for f in FUSIONS)
NVFUSER_CONFIGS = tuple(f"{f}/nvfuser" for f in FUSIONS)
DEVICES = ("cpu", "cuda")
# the configurations a sweep runs unless --configs says otherwise (nvFuser runs on CUDA only)
DEFAULT_CONFIGS = {"cpu": tuple(c for c in ALL_CONFIGS if not c.endswith("/nvfuser")), "cuda": NVFUSER_CONFIGS}
DTYPES = ("float32", "bfloat16")
HEARTBEAT_SECONDS = 30.0
MEMORY_REL, MEMORY_ABS = 0.01, 1024  # the README's stated tolerance
# op_db names whose output is uninitialised memory: compared on shape/dtype/device/strides only
UNINITIALISED_OPS = ("empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided")
# ops with internal scratch memory that the liveness model does not see (issue 15 defect 4);
# a memory disagreement on these is expected until trace_lab models op scratch
SCRATCH_OPS = ("conv", "fft", "sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode",
               "unique", "interpolate", "upsample", "linalg", "cholesky", "lu", "qr", "svd", "eig", "inverse",
               "det", "slogdet", "solve", "lstsq", "pinv", "matrix_exp", "triangular_solve", "ormqr", "geqrf",
               "householder", "cdist", "pdist", "ctc_loss", "grid_sample", "embedding_bag", "max_pool",
               "avg_pool", "adaptive", "fractional_max_pool", "lp_pool", "pixel_", "histc", "histogram",
               "bincount", "searchsorted", "bucketize", "cumprod", "logcumsumexp", "cummax", "cummin", "nonzero",
               "masked_select", "index_put", "scatter_reduce", "multi_margin", "multilabel", "unfold", "fold",
               "trace", "matmul", "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "mv", "dot", "vdot",
               "inner", "outer", "ger", "tensordot", "einsum", "kron", "chain_matmul", "linear", "bilinear",
               "renorm", "norm", "cov", "corrcoef", "diff", "gradient", "trapz", "trapezoid", "cumulative_trapezoid",
               "attention", "multi_head", "_softmax_backward", "nll_loss", "cross_entropy", "batch_norm",
               "instance_norm", "group_norm", "layer_norm", "local_response_norm", "rms_norm", "take_along_dim",
               "gather", "scatter", "index_", "cross", "rot90", "roll", "flip", "stft", "istft", "polar",
               "view_as_complex", "nanquantile", "quantile")


NOTES = [
    "Each configuration's first call compiles (forward and backward); the second call is measured and compared. "
    "Compiling an Inductor region inside `jfn.measuring()` (the lazily compiled backward) segfaults in "
    "`torch.profiler.profile.stop()` at the end of the block (trace_lab/runtime/measure.py CpuMemoryWindows.close, since "
    "commit 80c88a4): repro `f = trace_lab.jit(lambda x: torch.nn.functional.gelu(x), fusion='dataflow', "
    "executor='inductor'); x = torch.randn(5, 5, requires_grad=True); with f.measuring(): f(x).sum().backward()`.",
    "`aot_eager not captured`: Dynamo compiled no graph with an op for the sample (a no-op such as `contiguous` of a "
    "contiguous tensor, a graph break on a Python-level op, sparse tensors): torch.compile does not compile it, so "
    "neither does trace_lab; excluded from the denominator like `cannot run`.",
    "Random ops: OpInfos wrap them in `wrapper_set_seed`, which Dynamo cannot trace; the corpus calls the wrapped "
    "function itself and compares shapes/dtypes only (their values depend on the generator stream).",
]

CUDA_NOTES = [
    "Each configuration's first call compiles (forward and backward; nvFuser compiles its fusions ahead of the "
    "first run); the second call is measured and compared. Workers are spawned processes sharing the one GPU, "
    "each with its own CUDA context; a worker whose context hits a sticky CUDA error (illegal address, "
    "device-side assert) records the sample (`cuda_context_lost` in the JSON) and a fresh worker takes the rest.",
] + NOTES[1:]

# ---- ops ------------------------------------------------------------------------------------------
def _ensure_expecttest() -> None:
    """common_utils imports ``expecttest`` only for its TestCase base class; without the package a
    stand-in keeps op_db importable (it is not used to run any test)."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        import types
        import unittest

        mod = types.ModuleType("expecttest")
        mod.TestCase = unittest.TestCase
        sys.modules["expecttest"] = mod


def load_ops() -> dict:
    """{key: OpInfo}; key = name, or name.variant_test_name."""
    _ensure_expecttest()
    from torch.testing._internal.common_methods_invocations import op_db

    return {op_key(o): o for o in op_db}


def _freeze_heap() -> None:
    """Move everything alive now (op_db's thousands of objects, torch's modules) to the collector's
    permanent generation: trace_lab's measurement runs ``gc.collect()`` around every measured call,
    which otherwise walks all of it (~0.5 s a call)."""
    import gc

    gc.collect()
    gc.freeze()


def op_key(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def category(op) -> str:
    """A coarse category, for the table and for checking that the CI subset covers every kind."""
    from torch.testing._internal import opinfo

    name = op.name
    cls = type(op).__name__
    if "fft" in name:
        return "fft"
    if any(k in name for k in ("dropout", "bernoulli", "normal", "rand", "multinomial", "uniform", "cauchy",
                               "exponential", "geometric", "log_normal", "rrelu")):
        return "random"
    if "conv" in name:
        return "conv"
    if any(k in name for k in ("norm",)) and "linalg" not in name and name != "norm" and "renorm" not in name:
        return "normalization"
    if name.startswith("linalg") or any(name == k or name.startswith(k) for k in (
            "mm", "bmm", "addmm", "addbmm", "baddbmm", "addmv", "mv", "matmul", "dot", "vdot", "inner", "outer",
            "ger", "tensordot", "einsum", "kron", "chain_matmul", "cholesky", "lu", "qr", "svd", "pinverse",
            "triangular_solve", "ormqr", "geqrf", "logdet", "det", "matrix_exp", "nn.functional.linear",
            "nn.functional.bilinear", "__rmatmul__", "addr", "trace", "inverse", "symeig", "cdist", "pdist")):
        return "linalg/matmul"
    if any(k in name for k in ("pool", "interpolate", "upsample", "pad", "grid_sample", "affine_grid",
                               "pixel_", "unfold", "fold")):
        return "pooling/resampling"
    if any(k in name for k in ("loss", "cross_entropy", "nll")):
        return "loss"
    if any(k in name for k in ("sort", "topk", "kthvalue", "median", "mode", "unique", "searchsorted",
                               "bucketize", "msort", "histc", "bincount", "nonzero", "argwhere", "histogram")):
        return "sort/search/data-dependent"
    if any(k in name for k in ("index", "gather", "scatter", "take", "select", "masked", "put", "embedding",
                               "__getitem__", "where", "diag_embed")):
        return "indexing"
    if name.startswith(("empty", "new_", "zeros", "ones", "full", "arange", "linspace", "logspace", "eye",
                        "tril_indices", "triu_indices", "scalar_tensor")) or name in ("zeros_like", "ones_like",
                                                                                     "full_like"):
        return "creation"
    if isinstance(op, opinfo.core.ReductionOpInfo) or any(k in name for k in (
            "sum", "mean", "prod", "amax", "amin", "max", "min", "std", "var", "all", "any", "logsumexp",
            "count_nonzero", "argmax", "argmin", "aminmax", "norm", "cum", "softmax", "log_softmax", "nansum")):
        return "reduction/scan"
    if isinstance(op, opinfo.core.UnaryUfuncInfo):
        return "pointwise unary"
    if isinstance(op, opinfo.core.BinaryUfuncInfo):
        return "pointwise binary"
    base = name.split(".")[-1]
    if isinstance(op, opinfo.core.ShapeFuncInfo) or any(base == k or (len(k) > 3 and base.startswith(k)) for k in (
            "view", "reshape", "permute", "transpose", "squeeze", "unsqueeze", "expand", "flatten", "unflatten",
            "split", "chunk", "stack", "cat", "concat", "narrow", "movedim", "moveaxis", "swap", "t", "T", "mT",
            "mH", "H", "flip", "roll", "rot90", "tile", "repeat", "broadcast", "atleast", "ravel", "diagonal",
            "as_strided", "hstack", "vstack", "dstack", "column_stack", "row_stack", "tril", "triu", "block_diag",
            "contiguous", "clone", "resize", "unbind", "tensor_split", "hsplit", "vsplit", "dsplit", "real",
            "imag", "conj", "alias_copy")):
        return "view/shape"
    if name.startswith("nn.functional") or name.startswith("special"):
        return "nn.functional/special pointwise"
    return "other"


def is_scratch_op(key: str) -> bool:
    base = key.split(".", 1)[-1] if key.startswith(("nn.functional.", "linalg.", "special.", "fft.")) else key
    return any(s in key for s in SCRATCH_OPS) or any(base.startswith(s) for s in SCRATCH_OPS)


def _torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def tolerances(op, dtype) -> tuple[float, float]:
    """(rtol, atol): assert_close's defaults for ``dtype`` widened to the OpInfo's largest override."""
    from torch.testing._comparison import default_tolerances
    from torch.testing._internal.common_device_type import toleranceOverride

    import torch

    rtol, atol = default_tolerances(torch.empty((), dtype=dtype))
    for dec in getattr(op, "decorators", ()) or ():
        inner = getattr(dec, "cls_name", None) is not None and getattr(dec, "decorators", None)
        for d in (inner or [dec]):
            if isinstance(d, toleranceOverride):
                tol = d.d.get(dtype)
                if tol is not None:
                    rtol, atol = max(rtol, tol.rtol), max(atol, tol.atol)
    return rtol, atol


# ---- one sample -----------------------------------------------------------------------------------
def _seed_for(key: str, dtype: str) -> int:
    return zlib.crc32(f"{key}|{dtype}".encode()) & 0x7FFFFFFF


def samples(op, key: str, dtype_name: str, backward: bool, device: str = "cpu") -> list:
    import torch

    torch.manual_seed(_seed_for(key, dtype_name))
    return list(op.sample_inputs(device, _torch_dtype(dtype_name), requires_grad=backward))


def wants_backward(op, dtype_name: str, device: str = "cpu") -> bool:
    if not op.supports_autograd:
        return False
    try:
        return _torch_dtype(dtype_name) in op.supported_backward_dtypes(device)
    except Exception:  # noqa: BLE001
        return False


def unseeded(op):
    """The op's function. Random ops' OpInfos wrap it in ``wrapper_set_seed`` (re-seeds the global
    generator), which Dynamo cannot trace, so ``torch.compile`` would compile nothing; where the
    wrapper is exactly ``wrapper_set_seed(f, inp, *args, **kwargs)`` the corpus calls ``f``. Their
    outputs are compared on shapes and dtypes only (the sample's 'random' flag)."""
    import inspect

    import torch

    code = getattr(op.op, "__code__", None)
    if code is None or code.co_names[:2] != ("wrapper_set_seed", "torch"):
        return op.op
    if not (code.co_flags & inspect.CO_VARARGS and code.co_flags & inspect.CO_VARKEYWORDS) or code.co_argcount > 1:
        return op.op  # a lambda that does more than forward its arguments
    target = torch
    for part in code.co_names[2:]:
        target = getattr(target, part, None)
    return target if callable(target) else op.op


def _direct_call(opfn, sample):
    """``fn(t0, t1, ...)`` calling ``opfn(input, *args, **kwargs)`` with the sample's tensors as
    parameters, written out as source: Dynamo traces one call, not a pytree unflatten."""
    import torch

    env = {"__opfn": opfn}
    counter = {"t": 0}

    def expr(v):
        if isinstance(v, torch.Tensor):
            counter["t"] += 1
            return f"t{counter['t'] - 1}"
        if type(v) is list:
            return "[" + ", ".join(expr(x) for x in v) + "]"
        if type(v) is tuple:
            return "(" + "".join(expr(x) + ", " for x in v) + ")"
        if type(v) is dict and all(isinstance(k, str) for k in v):
            return "{" + ", ".join(f"{k!r}: {expr(x)}" for k, x in v.items()) + "}"
        name = f"__c{len(env)}"
        env[name] = v
        return name

    call = [expr(sample.input)] + ["*" + expr(tuple(sample.args))]
    call += [f"**{expr(dict(sample.kwargs))}"] if sample.kwargs else []
    params = ", ".join(f"t{i}" for i in range(counter["t"]))
    src = f"def fn({params}):\n    return __opfn({', '.join(call)})\n"
    exec(compile(src, "<opinfo-sample>", "exec"), env)  # noqa: S102 - generated from the sample's structure
    return env["fn"]


class Case:
    """One sample of one op as a function of its tensors."""

    def __init__(self, op, sample, backward: bool):
        import torch
        import torch.utils._pytree as pytree

        self.op = op
        self.sample = sample
        leaves, self.spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
        self.leaves = leaves
        self.tensor_at = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
        self.tensors = [leaves[i].detach().clone() for i in self.tensor_at]
        self.requires = [bool(leaves[i].requires_grad) and backward and
                         (leaves[i].is_floating_point() or leaves[i].is_complex()) for i in self.tensor_at]
        self.backward = backward and any(self.requires)
        self.fn = _direct_call(unseeded(op), sample)
        self.cotangents = None

    def inputs(self):
        return [t.detach().clone().requires_grad_(r) for t, r in zip(self.tensors, self.requires)]

    def run_float64(self):
        """The eager run with every floating input (and cotangent) in float64: the high-precision reference
        a low-precision result is judged against (:func:`close_to_float64`)."""
        import torch

        def up(t):
            return t.double() if t.is_floating_point() else t

        saved = self.tensors, self.cotangents
        try:
            self.tensors = [up(t) for t in self.tensors]
            if self.cotangents is not None:
                self.cotangents = {i: up(c) for i, c in self.cotangents.items()}
            return self.run(self.fn)
        finally:
            self.tensors, self.cotangents = saved

    def run(self, call):
        """(outputs, grads, inputs after the call) of ``call(*inputs)``, all detached."""
        import torch
        import torch.utils._pytree as pytree

        ins = self.inputs()
        out = call(*ins)
        outs = pytree.tree_leaves(out)
        grads = []
        if self.backward:
            diff = [(i, o) for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.requires_grad]
            if diff:
                if self.cotangents is None:  # fixed by the first (eager) run
                    gen = torch.Generator().manual_seed(1234)  # on the CPU: the same numbers on every device
                    self.cotangents = {i: torch.randn(o.shape, generator=gen, dtype=torch.float32).to(
                        device=o.device, dtype=o.dtype) for i, o in diff}
                wrt = [t for t, r in zip(ins, self.requires) if r]
                # ``o * 1``: the gradient reaching the program's backward is a tensor only autograd holds (its
                # MulBackward makes it), as the gradients of ``loss.backward()`` are, so the backward frees it at
                # its last use as the liveness model predicts; the cotangent we keep here would stay live
                gs = torch.autograd.grad([o * 1 for _, o in diff], wrt, [self.cotangents[i] for i, _ in diff],
                                         allow_unused=True)
                grads = [g.detach() if g is not None else None for g in gs]
        detached = [o.detach() if isinstance(o, torch.Tensor) else o for o in outs]
        return detached, grads, [t.detach() for t in ins]


def compare(actual, expected, rtol, atol, metadata_only=False) -> str | None:
    """None when equal; else the first line of the difference. ``metadata_only``: True (random ops)
    compares shape/dtype/device only; "strides" (uninitialised-memory ops) compares outputs and
    gradients on shape/dtype/device/strides and inputs after the call by value."""
    import torch

    for kind, xs, ys in (("output", actual[0], expected[0]), ("grad", actual[1], expected[1]),
                         ("input after call", actual[2], expected[2])):
        if len(xs) != len(ys):
            return f"{kind}s: {len(xs)} vs {len(ys)} in eager"
        for i, (a, b) in enumerate(zip(xs, ys)):
            if isinstance(b, torch.Tensor) != isinstance(a, torch.Tensor):
                return f"{kind}[{i}]: {type(a).__name__} vs {type(b).__name__} in eager"
            if not isinstance(b, torch.Tensor):
                if a != b and not (a != a and b != b):
                    return f"{kind}[{i}]: {a!r} vs {b!r} in eager"
                continue
            if metadata_only and not (metadata_only == "strides" and kind == "input after call"):
                if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
                    return f"{kind}[{i}]: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)} in eager"
                if metadata_only == "strides" and a.numel() > 1 and a.stride() != b.stride():
                    return f"{kind}[{i}]: strides {a.stride()} vs {b.stride()} in eager"
                continue
            try:
                torch.testing.assert_close(a, b, rtol=rtol, atol=atol, equal_nan=True, check_stride=False,
                                           check_layout=False)
            except AssertionError as e:
                lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
                detail = "; ".join(ln for ln in lines if ln.startswith(("Greatest absolute", "Mismatched")))
                return f"{kind}[{i}]: {lines[0] if lines else 'differs'} {detail}".strip()
    return None


def _first_line(e: BaseException) -> str:
    msg = str(e).strip()
    line = msg.splitlines()[0] if msg else ""
    return f"{type(e).__name__}: {line}"[:300]


def classify_error(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    if "_tensor_constant" in text:
        return "error: get_attr tensor constant (defect 1)"
    if "Inductor could not compile" in text:
        return "error: inductor compile"
    if "nothing has run" in text:
        return "error: not captured"
    return f"error: {type(e).__name__}"


def aot_eager_check(case) -> tuple[str, str]:
    """('ok' | 'cannot run' | 'not captured', detail) for torch.compile(backend='aot_eager')."""
    import torch

    ops = []

    def counting(gm, example_inputs):
        ops.append(sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")))
        from torch._dynamo.backends.debugging import aot_eager

        return aot_eager(gm, example_inputs)

    try:
        case.run(torch.compile(case.fn, backend=counting, dynamic=False))
    except Exception as e:  # noqa: BLE001
        return "cannot run", _first_line(e)
    if not ops or not any(ops):
        return "not captured", "Dynamo compiled no graph with an op (ran eagerly or constant-folded)"
    return "ok", ""


def decomposed_reference(case):
    """The case through torch's own AOTAutograd with trace_lab's decomposition table and no
    trace_lab runtime: a mismatch that shows here too comes from the decomposition."""
    import torch
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    from trace_lab.capture.session import capture_decompositions

    def nop(gm, _):
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=nop, bw_compiler=nop, decompositions=capture_decompositions(),
                           partition_fn=min_cut_rematerialization_partition, keep_inference_input_mutations=True)
    return case.run(torch.compile(case.fn, backend=backend, dynamic=False))


def within_memory_tolerance(predicted: int, measured: int | None) -> bool:
    if measured is None:
        return False
    return abs(measured - predicted) <= MEMORY_REL * max(measured, predicted) + MEMORY_ABS


def run_config(case, expected, config: str, rtol, atol, metadata_only: bool) -> dict:
    import torch

    import trace_lab

    fusion, executor = config.split("/")
    res = {"config": config}
    started = time.perf_counter()
    try:
        jfn = trace_lab.jit(case.fn, fusion=fusion, executor=executor)
        jfn.gradients_copied = None  # each gradient is autograd's fresh tensor (``o * 1``), never a copy AOTAutograd makes
        # a first call compiles forward and backward; the second call is measured and compared
        # (Inductor compiling inside a measuring() block crashes the profiler: see the table's notes)
        torch.manual_seed(0)
        case.run(jfn)
        torch.manual_seed(0)
        with jfn.measuring() as ms:
            actual = case.run(jfn)
    except Exception as e:  # noqa: BLE001
        res.update(status="fail", cause=classify_error(e), first_line=_first_line(e))
        res["seconds"] = round(time.perf_counter() - started, 3)
        return res
    res["seconds"] = round(time.perf_counter() - started, 3)
    res["programs"] = len(jfn.programs)
    mem = [{"kind": m.kind, "predicted": m.predicted_peak_above_inputs, "measured": m.measured_peak_above_inputs,
            "ok": within_memory_tolerance(m.predicted_peak_above_inputs, m.measured_peak_above_inputs)}
           for m in ms]
    try:  # the public figure the brief names: the last forward stage's liveness
        res["predicted_last_traces"] = trace_lab.last_traces(jfn)[-1].liveness().peak_above_inputs_bytes
        bw = trace_lab.last_backward_traces(jfn)
        res["predicted_last_backward"] = bw[-1].liveness().peak_above_inputs_bytes if bw else None
    except Exception as e:  # noqa: BLE001
        res["predicted_last_traces_error"] = _first_line(e)
    res["memory"] = mem
    res["memory_ok"] = all(m["ok"] for m in mem) if mem else None
    problem = compare(actual, expected, rtol, atol, metadata_only)
    if problem is not None and not metadata_only and close_to_float64(case, actual, expected, rtol, atol):
        res["status"], res["compared"] = "pass", "float64 reference"
        res["low_precision_note"] = problem  # what the direct comparison said
    elif problem is None:
        res["status"] = "pass"
    else:
        res.update(status="fail", cause="mismatch", first_line=problem)
    return res


LOW_PRECISION = ("torch.bfloat16", "torch.float16")


def close_to_float64(case, actual, expected, rtol, atol) -> bool:
    """For a bfloat16/float16 sample whose direct comparison failed: whether trace_lab's result is as close
    to a float64 run of the same op as eager's own low-precision result is, by PyTorch's own rule for
    compiled low-precision results (``torch._dynamo.utils.same`` with ``fp64_ref``: the compiled error
    against float64 at most twice eager's plus ``tol/10``, the rule Inductor's tests use). A different
    rounding order (a decomposition, a fused region keeping float32 inside) passes; a wrong value does not."""
    import torch
    from torch._dynamo.utils import same

    lows = [t for part in actual for t in part if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not lows or any(str(t.dtype) not in LOW_PRECISION for t in lows):
        return False
    ref = getattr(case, "_float64", None)
    if ref is None:
        try:
            ref = case.run_float64()
        except Exception:  # noqa: BLE001 - no float64 kernel for the op here: no second opinion
            ref = False
        case._float64 = ref
    if ref is False:
        return False
    for part in range(3):
        for a, b, r in zip(actual[part], expected[part], ref[part]):
            if not isinstance(a, torch.Tensor) or not a.is_floating_point():
                if isinstance(a, torch.Tensor) and not torch.equal(a, b):
                    return False
                continue
            if not same(b, a, fp64_ref=r, tol=max(rtol, atol), equal_nan=True, exact_dtype=True):
                return False
    return True


def run_sample(op, key: str, dtype_name: str, index: int, sample, backward: bool, configs,
               check_aot: bool = True, device: str = "cpu") -> dict:
    import torch

    torch._dynamo.reset()
    row = {"op": key, "device": device, "dtype": dtype_name, "sample": index, "backward": False,
           "category": category(op), "desc": _describe(sample), "configs": {}}
    started = time.perf_counter()
    try:
        case = Case(op, sample, backward)
        row["backward"] = case.backward
        torch.manual_seed(0)
        expected = case.run(case.fn)
    except Exception as e:  # noqa: BLE001
        row.update(eager="error", eager_error=_first_line(e))
        return row
    rtol, atol = tolerances(op, _torch_dtype(dtype_name))
    row["rtol"], row["atol"] = rtol, atol
    # random ops: eager differs from itself under another seed; on cuda beyond the tolerances (within
    # them: a nondeterministic reduction order, CUDA atomics, which the value comparison allows)
    try:
        torch.manual_seed(1)
        again = case.run(case.fn)
        random_op = compare(again, expected, *((rtol, atol) if device == "cuda" else (0, 0))) is not None
    except Exception:  # noqa: BLE001
        random_op = False
    row["random"] = random_op
    uninitialised = op.name in UNINITIALISED_OPS
    row["uninitialised"] = uninitialised
    metadata_only = "strides" if uninitialised else random_op
    if check_aot:
        status, detail = aot_eager_check(case)
        row["aot_eager"] = status
        if detail:
            row["aot_eager_detail"] = detail
        if status != "ok":
            row["seconds"] = round(time.perf_counter() - started, 3)
            return row
    decomposed = None
    for config in configs:
        torch.manual_seed(0)
        res = run_config(case, expected, config, rtol, atol, metadata_only)
        if res.get("cause") == "mismatch":
            if decomposed is None:
                try:
                    torch.manual_seed(0)
                    dec = decomposed_reference(case)
                    decomposed = compare(dec, expected, rtol, atol, metadata_only) or ""
                except Exception as e:  # noqa: BLE001
                    decomposed = f"(decomposed reference raised {_first_line(e)})"
            if decomposed and not decomposed.startswith("(decomposed"):
                res["cause"] = "mismatch (decomposition)"
        row["configs"][config] = res
    row["seconds"] = round(time.perf_counter() - started, 3)
    return row


def _describe(sample) -> str:
    import torch
    import torch.utils._pytree as pytree

    def d(v):
        if isinstance(v, torch.Tensor):
            return f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}"
        return repr(v)[:40]

    leaves = pytree.tree_leaves((sample.input, sample.args))
    kw = ", ".join(f"{k}={d(v)}" for k, v in sample.kwargs.items())
    return (", ".join(d(v) for v in leaves) + (f"; {kw}" if kw else ""))[:160]


# ---- workers --------------------------------------------------------------------------------------
def device_info(device: str) -> dict:
    """What a results file says about the device: its name (the GPU's), and nvFuser's version on cuda."""
    import torch

    if device != "cuda":
        return {"device_name": "cpu"}
    info = {"device_name": torch.cuda.get_device_name()}
    from trace_lab.executors.nvfuser_import import unavailable_reason

    reason = unavailable_reason()
    if reason:
        info["nvfuser"] = f"unavailable: {reason}"
    else:
        try:
            from importlib import metadata

            info["nvfuser"] = next((f"{d.metadata['Name']} {d.version}" for d in metadata.distributions()
                                    if (d.metadata.get("Name") or "").lower().startswith("nvfuser")), "importable")
        except Exception:  # noqa: BLE001
            info["nvfuser"] = "importable"
    return info


def _worker(tasks, results, threads: int, device: str = "cpu"):
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import warnings

    import torch

    torch.set_num_threads(threads)
    if device == "cuda":  # this process's own CUDA context (spawned: nothing inherited from the parent)
        torch.cuda.init()
        results.put(("info", os.getpid(), device_info(device)))
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
    logging.getLogger("torch._inductor").setLevel(logging.ERROR)
    import trace_lab  # noqa: F401

    ops = load_ops()
    _freeze_heap()
    pid = os.getpid()
    while True:
        task = tasks.get()
        if task is None:
            return
        key, dtype_name, indices, configs, check_aot = task
        op = ops[key]
        backward = wants_backward(op, dtype_name, device)
        try:
            all_samples = samples(op, key, dtype_name, backward, device)
        except Exception as e:  # noqa: BLE001
            results.put(("op-error", pid, key, dtype_name, _first_line(e)))
            results.put(("done", pid, key, dtype_name))
            continue
        for index in indices:
            if index >= len(all_samples):
                continue
            results.put(("start", pid, key, dtype_name, index))
            try:
                row = run_sample(op, key, dtype_name, index, all_samples[index], backward, configs, check_aot,
                                 device)
            except Exception as e:  # noqa: BLE001
                row = {"op": key, "device": device, "dtype": dtype_name, "sample": index,
                       "worker_error": _first_line(e),
                       "traceback": traceback.format_exc()[-2000:], "configs": {}}
            lost = _cuda_context_lost() if device == "cuda" else None
            if lost:
                row["cuda_context_lost"] = lost
            results.put(("row", pid, row))
            if lost:  # a sticky CUDA error fails every later call in this process: hand the rest back
                results.put(("retire", pid, key, dtype_name, index))
                return
        results.put(("done", pid, key, dtype_name))


def _cuda_context_lost() -> str | None:
    """None while this process's CUDA context works; after a sticky error (illegal address,
    device-side assert) the error's first line."""
    import torch

    try:
        torch.cuda.synchronize()
        torch.ones(1, device="cuda").add_(1).item()
    except Exception as e:  # noqa: BLE001
        return _first_line(e)
    return None


def sweep(tasks: list, jobs: int = 1, timeout: float = 300.0, progress=print, max_seconds: float | None = None,
          stopped: list | None = None, device: str = "cpu", heartbeat=None, should_stop=None,
          info: dict | None = None) -> list[dict]:
    """Run ``tasks`` [(op key, dtype, [sample indices], [configs], check_aot)] in ``jobs`` worker
    processes on ``device``; a sample that takes longer than ``timeout`` s kills its worker (by pid),
    is recorded as a timeout, and the rest of its op's samples go back on the queue for a fresh worker.

    Stops early (``stopped`` gets why) after ``max_seconds`` or when ``should_stop()`` returns a
    reason. ``heartbeat(rows, state)`` is called every HEARTBEAT_SECONDS with the rows so far and
    {'keys_done', 'keys', 'tasks_done', 'tasks', 'elapsed'}; ``info`` receives the workers'
    device description (on cuda)."""
    import multiprocessing as mp

    # spawn, not fork: Inductor compiling in a child forked from a parent that imported torch segfaults,
    # and a CUDA context does not survive a fork; every spawned worker makes its own
    ctx = mp.get_context("spawn")
    task_q, result_q = ctx.Queue(), ctx.Queue()
    for t in tasks:
        task_q.put(t)
    threads = max(1, (os.cpu_count() or 1) // max(1, jobs))
    workers: dict = {}
    running: dict = {}  # pid -> (key, dtype, index, started)
    retired: set = set()  # workers that exit by themselves (CUDA context lost)
    task_of = {(t[0], t[1]): t for t in tasks}
    open_tasks: dict = {}  # op key -> its tasks not finished yet
    for t in tasks:
        open_tasks[t[0]] = open_tasks.get(t[0], 0) + 1
    n_keys = len(open_tasks)

    def spawn():
        p = ctx.Process(target=_worker, args=(task_q, result_q, threads, device), daemon=True)
        p.start()
        workers[p.pid] = p

    def finish(key):
        open_tasks[key] -= 1
        return 1

    def requeue_rest(key, dt, idx) -> int:
        """Put the op's samples after ``idx`` back on the queue; 1 when the task is finished instead."""
        t = task_of[(key, dt)]
        rest = [i for i in t[2] if i > idx]
        if rest:  # the re-queued task reports its own 'done'
            task_of[(key, dt)] = (key, dt, rest, t[3], t[4])
            task_q.put(task_of[(key, dt)])
            return 0
        return finish(key)

    for _ in range(jobs):
        spawn()
    rows: list[dict] = []
    remaining = len(tasks)
    t0 = last_beat = time.perf_counter()
    while remaining > 0:
        elapsed = time.perf_counter() - t0
        why = (f"stopped after {max_seconds:.0f} s (--max-seconds)"
               if max_seconds is not None and elapsed > max_seconds else should_stop() if should_stop else None)
        if why:
            progress(f"[{elapsed:7.1f}s] {why}: stopping with {len(rows)} samples")
            if stopped is not None:
                stopped.append(why)
            break
        # workers seen dead before the queue is drained: everything they sent is read first
        dead = [pid for pid, p in workers.items() if not p.is_alive()]
        msgs = []
        try:
            msgs.append(result_q.get(timeout=1.0))
            while True:
                msgs.append(result_q.get_nowait())
        except queue.Empty:
            pass
        now = time.perf_counter()
        for msg in msgs:
            kind, pid = msg[0], msg[1]
            if kind == "start":
                running[pid] = (msg[2], msg[3], msg[4], now)
            elif kind == "row":
                rows.append(msg[2])
                running.pop(pid, None)
                progress(_progress_line(msg[2], len(rows), now - t0))
            elif kind == "op-error":
                rows.append({"op": msg[2], "device": device, "dtype": msg[3], "sample": None,
                             "sample_error": msg[4], "configs": {}})
                progress(f"[{now - t0:7.1f}s] {msg[2]} {msg[3]}: sample_inputs raised {msg[4]}")
            elif kind == "done":
                remaining -= finish(msg[2])
            elif kind == "info" and info is not None:
                info.update(msg[2])
            elif kind == "retire":  # its CUDA context is lost; it exits, the rest of its task goes back
                running.pop(pid, None)
                retired.add(pid)
                progress(f"[{now - t0:7.1f}s] worker {pid} lost its CUDA context in {msg[2]} {msg[3]} "
                         f"sample {msg[4]}; a fresh worker takes over")
                remaining -= requeue_rest(msg[2], msg[3], msg[4])
        for pid, (key, dt, idx, started) in list(running.items()):
            if now - started <= timeout:
                continue
            running.pop(pid)
            p = workers.pop(pid, None)
            if p is not None:
                p.kill()
                p.join(5)
            rows.append({"op": key, "device": device, "dtype": dt, "sample": idx, "timeout": timeout,
                         "configs": {}, "category": None})
            progress(f"[{now - t0:7.1f}s] {key} {dt} sample {idx}: TIMEOUT after {timeout:.0f}s (worker killed)")
            remaining -= requeue_rest(key, dt, idx)
            spawn()
        if should_stop and should_stop():
            continue  # a SIGTERM to the process group also ends workers: not crashes; stop at the top
        for pid in dead:
            p = workers.get(pid)
            if p is not None and remaining > 0:
                workers.pop(pid)
                lost = running.pop(pid, None)
                if pid in retired:
                    spawn()
                    continue
                progress(f"[{now - t0:7.1f}s] worker {pid} died (exit {p.exitcode})"
                         + (f" in {lost[0]} {lost[1]} sample {lost[2]}" if lost else "") + "; restarting")
                if lost:
                    key, dt, idx, _ = lost
                    rows.append({"op": key, "device": device, "dtype": dt, "sample": idx, "crash": p.exitcode,
                                 "configs": {}})
                    remaining -= requeue_rest(key, dt, idx)
                spawn()
        if heartbeat is not None and now - last_beat >= HEARTBEAT_SECONDS:
            last_beat = now
            heartbeat(rows, {"keys_done": sum(1 for n in open_tasks.values() if n <= 0), "keys": n_keys,
                             "tasks_done": len(tasks) - remaining, "tasks": len(tasks), "elapsed": now - t0})
    if remaining > 0:  # stopped early: workers are mid-task
        for p in workers.values():
            p.kill()
    for _ in workers:
        task_q.put(None)
    for p in workers.values():
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    return rows


def _progress_line(row: dict, n: int, elapsed: float) -> str:
    cfgs = row.get("configs", {})
    if "eager_error" in row:
        verdict = "eager raised"
    elif row.get("aot_eager") not in (None, "ok"):
        verdict = f"aot_eager {row['aot_eager']}"
    elif "worker_error" in row:
        verdict = f"worker error {row['worker_error']}"
    else:
        fails = [c for c, r in cfgs.items() if r.get("status") != "pass"]
        mem = [c for c, r in cfgs.items() if r.get("memory_ok") is False]
        verdict = ("pass" if not fails else f"FAIL {','.join(fails)}") + (f" mem!={','.join(mem)}" if mem else "")
    return (f"[{elapsed:7.1f}s] #{n} {row['op']} {row['dtype']} s{row.get('sample')} "
            f"({row.get('seconds', 0):.1f}s): {verdict}")


# ---- planning ---------------------------------------------------------------------------------
def plan(ops: dict, keys, dtypes=DTYPES, samples_per_op: int | None = 2, configs=DEFAULT_CONFIGS["cpu"],
         inductor_samples: int | None = 1, check_aot: bool = True, device: str = "cpu") -> list:
    """Tasks for :func:`sweep`. ``samples_per_op=None``: every sample. The compiling executors'
    configs (Inductor, nvFuser) run on the first ``inductor_samples`` samples of each op and dtype
    (None: all), because every new fused region is a kernel compile (C++ on CPU, CUDA on a GPU)."""
    tasks = []
    eager_cfgs = [c for c in configs if c.endswith("/eager")]
    ind_cfgs = [c for c in configs if not c.endswith("/eager")]
    limit = samples_per_op if samples_per_op is not None else 10_000
    for key in keys:
        op = ops[key]
        for dt in dtypes:
            if _torch_dtype(dt) not in op.supported_dtypes(device):
                continue
            n_ind = limit if inductor_samples is None else min(limit, inductor_samples)
            if ind_cfgs and n_ind:
                tasks.append((key, dt, list(range(n_ind)), list(eager_cfgs) + list(ind_cfgs), check_aot))
                if limit > n_ind and eager_cfgs:
                    tasks.append((key, dt, list(range(n_ind, limit)), list(eager_cfgs), check_aot))
            else:
                tasks.append((key, dt, list(range(limit)), list(eager_cfgs), check_aot))
    return [t for t in tasks if t[2]]


def order_keys(ops: dict, keys: list, order: str) -> list:
    """``sorted`` as given; ``shuffled``: a fixed permutation (crc32 of the key); ``categories``: the
    shuffled keys dealt round-robin over :func:`category`, so every category comes early."""
    if order == "sorted":
        return list(keys)
    shuffled = sorted(keys, key=lambda k: zlib.crc32(k.encode()))
    if order == "shuffled":
        return shuffled
    by_cat: dict = {}
    for k in shuffled:
        by_cat.setdefault(category(ops[k]), []).append(k)
    lanes = [by_cat[c] for c in sorted(by_cat)]
    return [lane[i] for i in range(max(map(len, lanes), default=0)) for lane in lanes if i < len(lane)]


# ---- the CI subset ----------------------------------------------------------------------------------
# (op key, dtype, sample indices) run under every fusion strategy on the eager executor, chosen to
# cover every category of op_db (tests/test_opinfo_corpus.py checks the coverage)
_SUBSET_OPS = {
    "pointwise unary": "abs exp log1p sigmoid tanh erf rsqrt round isnan nn.functional.gelu nn.functional.silu "
                       "nn.functional.relu nn.functional.hardtanh nn.functional.softplus",
    "pointwise binary": "add mul sub div.no_rounding_mode pow atan2 eq fmod xlogy logical_and",
    "reduction/scan": "sum mean amax argmax var std_mean prod logsumexp softmax log_softmax cumsum norm all "
                      "max.reduction_with_dim maximum clamp_min",
    "view/shape": "view reshape permute transpose squeeze unsqueeze expand flatten split chunk cat stack narrow movedim "
                  "flip roll repeat tile tril diagonal as_strided unbind t contiguous clone unflatten",
    "indexing": "__getitem__ gather index_select index_add index_put scatter scatter_add masked_fill take_along_dim "
                "select_scatter slice_scatter nn.functional.embedding where diag_embed masked_select",
    "linalg/matmul": "mm bmm addmm matmul nn.functional.linear einsum baddbmm mv outer linalg.vector_norm "
                     "linalg.solve linalg.cholesky linalg.inv",
    "conv": "nn.functional.conv1d nn.functional.conv2d nn.functional.conv_transpose2d",
    "normalization": "nn.functional.layer_norm nn.functional.batch_norm nn.functional.group_norm "
                     "nn.functional.rms_norm native_layer_norm nn.functional.normalize",
    "creation": "zeros_like ones_like full_like new_zeros new_full arange linspace eye full zeros empty_like",
    "pooling/resampling": "nn.functional.max_pool2d nn.functional.avg_pool2d nn.functional.adaptive_avg_pool2d "
                          "nn.functional.interpolate.nearest nn.functional.interpolate.bilinear nn.functional.pad.constant "
                          "nn.functional.pad.reflect nn.functional.pixel_shuffle nn.functional.unfold",
    "loss": "nn.functional.mse_loss nn.functional.cross_entropy nn.functional.nll_loss "
            "nn.functional.binary_cross_entropy_with_logits nn.functional.smooth_l1_loss",
    "sort/search/data-dependent": "sort topk argsort searchsorted kthvalue nonzero",
    "fft": "fft.fft fft.rfft fft.irfft",
    "random": "nn.functional.dropout bernoulli rand_like randn_like uniform",
    "nn.functional/special pointwise": "special.i1 nn.functional.logsigmoid",
    "other": "addcdiv addcmul cross diff clamp lerp",
}
# bfloat16 too for these (low precision through every category that has numerics)
_SUBSET_BF16 = ("exp sigmoid nn.functional.gelu add mul div.no_rounding_mode sum mean softmax log_softmax var cat "
                "__getitem__ index_put mm addmm nn.functional.conv2d nn.functional.layer_norm nn.functional.batch_norm "
                "nn.functional.cross_entropy nn.functional.interpolate.bilinear cumsum").split()
SUBSET_EAGER: list = ([(k, "float32", (0,)) for keys in _SUBSET_OPS.values() for k in keys.split()]
                      + [(k, "bfloat16", (0,)) for k in _SUBSET_BF16])
# a smaller slice also through the Inductor executor (dataflow and memory strategies)
SUBSET_INDUCTOR: list = [(k, "float32", (0,)) for k in (
    "nn.functional.gelu", "softmax", "nn.functional.layer_norm", "addcmul", "nn.functional.cross_entropy", "var")]
SUBSET_INDUCTOR_CONFIGS = ("dataflow/inductor", "memory/inductor")


def subset_tasks() -> list:
    eager = [f"{f}/eager" for f in FUSIONS]
    tasks = [(k, dt, list(idx), eager, False) for k, dt, idx in SUBSET_EAGER]
    tasks += [(k, dt, list(idx), list(SUBSET_INDUCTOR_CONFIGS), False) for k, dt, idx in SUBSET_INDUCTOR]
    return tasks


# ---- results: JSON and table ------------------------------------------------------------------------
def commit() -> str:
    """HEAD's short hash; ``TRACE_LAB_COMMIT`` where the tree was copied without its git history (a GPU machine)."""
    if os.environ.get("TRACE_LAB_COMMIT"):
        return os.environ["TRACE_LAB_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        return "nocommit"


def summarize(rows: list[dict]) -> dict:
    """Pass rates: per op (an op passes a config when all its samples in all dtypes pass) and per sample."""
    by_op: dict = {}
    excluded: dict = {}
    for r in rows:
        if r.get("aot_eager") not in (None, "ok"):
            excluded.setdefault(r["op"], f"aot_eager {r['aot_eager']}: {r.get('aot_eager_detail', '')}")
            continue
        if "eager_error" in r:
            excluded.setdefault(r["op"], f"eager raised on the sample: {r['eager_error']}")
            continue
        by_op.setdefault(r["op"], []).append(r)
    # an op excluded for one sample but run on others is kept
    excluded = {k: v for k, v in excluded.items() if k not in by_op}
    configs = sorted({c for r in rows for c in r.get("configs", {})}, key=lambda c: ALL_CONFIGS.index(c)
                     if c in ALL_CONFIGS else 99)
    per_config = {}
    for c in configs:
        ops_run = [k for k, rs in by_op.items() if any(c in r["configs"] for r in rs)]
        ops_ok = [k for k in ops_run if all(r["configs"][c]["status"] == "pass" for r in by_op[k]
                                            if c in r["configs"]) and not any(_broken(r) for r in by_op[k])]
        samples_run = [r for rs in by_op.values() for r in rs if c in r["configs"]]
        per_config[c] = {"ops": len(ops_run), "ops_pass": len(ops_ok),
                         "samples": len(samples_run),
                         "samples_pass": sum(r["configs"][c]["status"] == "pass" for r in samples_run)}
    all_ops = [k for k in by_op]
    ops_all_ok = [k for k in all_ops if not any(_broken(r) for r in by_op[k]) and all(
        res["status"] == "pass" for r in by_op[k] for res in r["configs"].values())]
    mem = [m for rs in by_op.values() for r in rs for res in r["configs"].values() for m in res.get("memory", [])]
    mem_samples = [(r, res) for rs in by_op.values() for r in rs for res in r["configs"].values()
                   if res.get("memory_ok") is not None]
    mem_ok = [x for x in mem_samples if x[1]["memory_ok"]]
    non_scratch = [x for x in mem_samples if not is_scratch_op(x[0]["op"])]
    causes: dict = {}
    for rs in by_op.values():
        for r in rs:
            for c, res in r["configs"].items():
                if res["status"] != "pass":
                    causes.setdefault(res["cause"], set()).add(r["op"])
            if _broken(r):
                causes.setdefault("timeout" if "timeout" in r else "worker crash/error", set()).add(r["op"])
    return {
        "ops_run": len(all_ops), "ops_pass_everywhere": len(ops_all_ok),
        "samples": sum(len(rs) for rs in by_op.values()),
        "excluded_ops": excluded, "per_config": per_config,
        "memory": {"runs": len(mem_samples), "agree": len(mem_ok), "program_parts": len(mem),
                   "runs_non_scratch": len(non_scratch), "agree_non_scratch": sum(x[1]["memory_ok"] for x in non_scratch)},
        "failure_causes": {k: sorted(v) for k, v in sorted(causes.items())},
    }


_BROKEN_KEYS = ("timeout", "crash", "worker_error", "sample_error")  # a row whose sample never finished


def _broken(r) -> bool:
    return any(k in r for k in _BROKEN_KEYS)


def _pct(a, b) -> str:
    return f"{100.0 * a / b:.1f}% ({a}/{b})" if b else "n/a"


TABLE_TITLE = "# OpInfo corpus through trace_lab"
TABLE_INTRO = (
    "PyTorch's OpInfo database (`op_db`) run through `trace_lab.jit` by `benchmarks/opinfo_corpus.py` (issue 15), "
    "one section per device. A run, or `--merge` of result files, rewrites the sections of the devices its rows "
    "are from and keeps the other sections as they are: the GPU section (`--device cuda`, nvFuser executor) "
    "never overwrites the CPU one, nor the reverse.")


def _section_marks(device: str) -> tuple[str, str]:
    return f"<!-- corpus-section: {device} -->", f"<!-- /corpus-section: {device} -->"


def read_sections(path: str) -> dict:
    """{device: the section's text, marks included} of an existing table (empty when there is none)."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        text = f.read()
    found = {}
    for device in (*DEVICES, "notes"):  # "notes": the hand-written part, between <!-- corpus-section: notes --> marks
        begin, end = _section_marks(device)
        i, j = text.find(begin), text.find(end)
        if i >= 0 and j > i:
            found[device] = text[i:j + len(end)]
    return found


def write_table(sections: dict, path: str) -> None:
    """Write the table with ``sections`` {device: (rows, summary, meta)} rendered afresh and every
    other device's section copied from the existing file at ``path``."""
    kept = read_sections(path)
    if os.path.exists(path) and not kept:
        print(f"note: {path} has no device sections; it is replaced", file=sys.stderr)
    for device, (rows, summary, meta) in sections.items():
        begin, end = _section_marks(device)
        kept[device] = "\n".join([begin] + render_section(rows, summary, meta, device) + [end])
    notes = [kept["notes"] + "\n"] if "notes" in kept else []  # written by hand, kept as it is
    parts = [TABLE_TITLE, "", TABLE_INTRO, ""] + notes + [kept[d] + "\n" for d in DEVICES if d in kept]
    with open(path, "w") as f:
        f.write("\n".join(parts))
    print("wrote", path)


def section_title(device: str, meta: dict) -> str:
    if device == "cpu":
        return "## CPU"
    name = meta.get("device_name") or device
    return f"## GPU: {name} (`{device}`)" + (f", nvFuser {meta['nvfuser']}" if meta.get("nvfuser") else "")


def render_section(rows: list[dict], summary: dict, meta: dict, device: str) -> list[str]:
    """One device's part of the table: how it was made, pass rates per configuration, per op cells,
    the first line of each failure, the excluded ops."""
    configs = list(summary["per_config"])
    lines = [
        section_title(device, meta),
        "",
        f"Generated by `{meta['command']}` on {meta['date']} at commit {meta['commit']} "
        f"(torch {meta['torch']}, {meta['jobs']} jobs, {meta['seconds']:.0f} s). Results: `{meta['json']}`.",
        "",
        f"Coverage: {meta['coverage']}",
        "",
        "Each sample runs eagerly (reference), through `torch.compile(backend='aot_eager')` (ops it cannot run "
        "are excluded from the denominator) and through `trace_lab.jit(fn, fusion=F, executor=E)`, forward and "
        "(where the OpInfo supports autograd for the dtype) backward with a fixed cotangent. Outputs, gradients "
        "and inputs after the call are compared with `torch.testing.assert_close` at the dtype's defaults widened "
        "to the OpInfo's own `toleranceOverride`s; random ops (output depends on the seed"
        + ("" if device == "cpu" else " beyond those tolerances: CUDA atomics' run-to-run differences are not "
           "random") + ") on shape/dtype only; "
        "uninitialised-memory ops (" + ", ".join(f"`{n}`" for n in UNINITIALISED_OPS) + ") on shape/dtype/strides "
        "only (outputs; inputs after the call by value). "
        f"Memory agrees when |measured - predicted| <= {MEMORY_REL:.0%} + {MEMORY_ABS} B for every program part "
        + ("(profiler allocator events vs the liveness model)." if device == "cpu" else
           "(`torch.cuda.max_memory_allocated` in the worker's own process, which has the GPU's allocator to "
           "itself, vs the liveness model)."),
        "",
        "### Summary",
        "",
        f"- ops run: {summary['ops_run']}; passing every configuration on every sample: "
        f"{_pct(summary['ops_pass_everywhere'], summary['ops_run'])}; samples: {summary['samples']}",
        f"- excluded (torch.compile aot_eager cannot run / does not capture, or eager raises): "
        f"{len(summary['excluded_ops'])} ops (listed at the end)",
        f"- memory predicted = measured: {_pct(summary['memory']['agree'], summary['memory']['runs'])} of "
        f"sample runs; without the scratch-memory ops: "
        f"{_pct(summary['memory']['agree_non_scratch'], summary['memory']['runs_non_scratch'])}",
        "",
        "| configuration | ops pass | samples pass |",
        "|---|---|---|",
    ]
    for c, s in summary["per_config"].items():
        lines.append(f"| {c} | {_pct(s['ops_pass'], s['ops'])} | {_pct(s['samples_pass'], s['samples'])} |")
    lines += ["", "### Notes", ""] + [f"- {n}" for n in (NOTES if device == "cpu" else CUDA_NOTES)]
    lines += ["", "### Failures by cause", ""]
    for cause, ops in summary["failure_causes"].items():
        lines.append(f"- **{cause}** ({len(ops)} ops): {', '.join(ops[:60])}{' ...' if len(ops) > 60 else ''}")
    lines += ["", "### Per op", "",
              "Cells: `ok` all samples pass, `F` some sample fails (first failure line below), `-` not run; "
              "memory column: samples whose every configuration agrees / samples measured.", "",
              "| op | category | dtypes | samples | " + " | ".join(configs) + " | memory |",
              "|---" * (5 + len(configs)) + "|"]
    by_op: dict = {}
    for r in rows:
        by_op.setdefault(r["op"], []).append(r)
    details = []
    for key in sorted(by_op):
        rs = by_op[key]
        if key in summary["excluded_ops"]:
            continue
        live = [r for r in rs if r.get("aot_eager") in (None, "ok") and "eager_error" not in r]
        cells = []
        for c in configs:
            ran = [r for r in live if c in r["configs"]]
            if not ran:
                cells.append("-")
                continue
            bad = [r for r in ran if r["configs"][c]["status"] != "pass"]
            cells.append("ok" if not bad else f"F {len(bad)}/{len(ran)}")
            for r in bad[:1]:
                res = r["configs"][c]
                details.append(f"- `{key}` {r['dtype']} s{r['sample']} `{c}` [{res['cause']}]: "
                               f"{res.get('first_line', '').replace('|', '/')}")
        for r in live:
            if _broken(r):
                details.append(f"- `{key}` {r['dtype']} s{r['sample']}: "
                               + ("timeout" if "timeout" in r else str(r.get('worker_error') or r.get('crash'))))
        measured = [r for r in live if any(res.get("memory_ok") is not None for res in r["configs"].values())]
        mem_ok = [r for r in measured if all(res.get("memory_ok") in (True, None) for res in r["configs"].values())]
        for r in [r for r in measured if r not in mem_ok][:1]:
            worst = max((m for res in r["configs"].values() for m in res.get("memory", []) if not m["ok"]),
                        key=lambda m: abs((m["measured"] or 0) - m["predicted"]))
            cfg = next(c for c, res in r["configs"].items() if worst in res.get("memory", []))
            details.append(f"- `{key}` {r['dtype']} s{r['sample']} `{cfg}` [memory{' (scratch op)' if is_scratch_op(key) else ''}]: "
                           f"{worst['kind']} predicted {worst['predicted']} B, measured {worst['measured']} B")
        dts = ",".join(sorted({'f32' if r['dtype'] == 'float32' else 'bf16' for r in live}))
        rnd = (" (uninitialised: shape/dtype/strides only)" if any(r.get("uninitialised") for r in live)
               else " (random: shapes only)" if any(r.get("random") for r in live) else "")
        cat = next((r.get("category") for r in rs if r.get("category")), "")
        lines.append(f"| `{key}`{rnd} | {cat} | {dts} | {len(live)} | " + " | ".join(cells)
                     + f" | {len(mem_ok)}/{len(measured)} |")
    lines += ["", "### First failure lines", ""] + (details or ["none"])
    lines += ["", "### Excluded ops", ""]
    for key, why in sorted(summary["excluded_ops"].items()):
        lines.append(f"- `{key}`: {why.replace('|', '/')[:240]}")
    return lines


def merge(paths: list, table: str | None, out: str | None) -> int:
    """The table (and JSON) from several runs: rows of the same (device, op, dtype, sample) merged
    config by config; one table section per device. A device's results from a single file keep that
    file's description as it is (a merged file re-rendered gives the same section)."""
    by_device: dict = {}
    for path in paths:
        with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:  # large results kept gzipped
            data = json.load(f)
        device = data.get("device", "cpu")
        if device not in DEVICES:
            raise SystemExit(f"{path}: device {device!r} is not one of {', '.join(DEVICES)}")
        for r in data["rows"]:
            r.setdefault("device", device)
        by_device.setdefault(device, []).append((path, data))
    if out and len(by_device) > 1:
        raise SystemExit(f"--out: these files hold results of several devices ({', '.join(by_device)}); "
                         "merge each device's files into its own JSON")
    sections = {}
    for device, runs in by_device.items():
        rows, summary, meta = _merge_runs(runs, out)
        sections[device] = (rows, summary, meta)
        if out:
            with open(out, "w") as f:
                json.dump({**meta, "device": device, "summary": summary, "rows": rows}, f, indent=1)
            print("wrote", out)
    if table:
        write_table(sections, table)
    return 0


def _run_configs(data: dict) -> set:
    """The configurations a result file's run was asked for (its command's --configs, else the defaults)."""
    parts = data.get("command", "").split()
    if "--configs" in parts and parts.index("--configs") + 1 < len(parts):
        return set(parts[parts.index("--configs") + 1].split(","))
    return set(DEFAULT_CONFIGS.get(data.get("device", "cpu"), ALL_CONFIGS))


def _merge_runs(runs: list, out: str | None) -> tuple[list, dict, dict]:
    merged: dict = {}
    broken: dict = {}  # key -> (the timed-out / crashed row, the configurations its run was asked for)
    for _, data in runs:
        for r in data["rows"]:
            k = (r["device"], r["op"], r["dtype"], r.get("sample"))
            if _broken(r) and not r.get("configs"):
                broken[k] = (r, _run_configs(data))
                continue
            if k in merged and r.get("configs") and merged[k].get("configs"):
                cfgs = {**merged[k]["configs"], **r["configs"]}  # another run's configurations of the sample
                merged[k] = {**merged[k], **r, "configs": cfgs}  # its flags (random, uninitialised) win too
            elif k not in merged or r.get("configs") or not merged[k].get("configs"):
                merged[k] = r  # a later run (a re-run) replaces an excluded or unrun row
    # a sample that timed out or crashed in one run stays a failure, unless another run produced results for
    # every configuration the broken run was asked for (a re-run): another run's configurations never hide it
    for k, (r, asked) in broken.items():
        if k not in merged:
            merged[k] = r
        elif not asked <= set(merged[k].get("configs", {})):
            merged[k] = {**merged[k], **{b: r[b] for b in _BROKEN_KEYS if b in r}}
    rows = list(merged.values())
    summary = summarize(rows)
    described = ("device_name", "nvfuser")
    if len(runs) == 1:
        path, data = runs[0]
        meta = {k: data[k] for k in ("command", "date", "commit", "torch", "jobs", "seconds", "coverage", "json")}
        meta.update({k: data[k] for k in described if k in data})
        meta["json"] = os.path.relpath(out or path, ROOT)  # where it is now (a GPU run wrote it elsewhere)
        return rows, summary, meta
    metas = [data for _, data in runs]
    paths = [p for p, _ in runs]
    reached = {r["op"] for r in rows}
    by_exec = {e: {r["op"] for r in rows if any(c.endswith("/" + e) for c in r.get("configs", {}))}
               for e in EXECUTORS}
    ran = ", ".join(f"{e} on {len(ks)}" for e, ks in by_exec.items() if ks)
    merged_cov = (f"MERGED over {len(paths)} runs: {len(reached)} op keys reached in all "
                  f"({len(summary['excluded_ops'])} of them excluded, see the end); configs by executor ran: {ran} "
                  f"op keys; {sum(1 for r in rows if r.get('configs'))} (op, dtype, sample) rows with results. "
                  "A 'not reached' count below is that run's own; later runs picked those keys up. Runs: ")
    meta = {"command": "python -m benchmarks.opinfo_corpus --merge " + " ".join(os.path.basename(p) for p in paths),
            "date": max(m["date"] for m in metas), "commit": ", ".join(dict.fromkeys(m["commit"] for m in metas)),
            "torch": metas[0]["torch"], "jobs": metas[0]["jobs"], "seconds": sum(m["seconds"] for m in metas),
            "coverage": merged_cov + " + ".join(f"[{m['command'].split('opinfo_corpus', 1)[-1].strip()}] {m['coverage']}"
                                   for m in metas),
            "json": os.path.relpath(out, ROOT) if out else ", ".join(os.path.relpath(p, ROOT) for p in paths)}
    meta.update({k: metas[-1][k] for k in described if k in metas[-1]})
    return rows, summary, meta


def _cuda_unavailable() -> str | None:
    """Why ``--device cuda`` cannot run here, in one line (None: it can)."""
    import torch

    if not torch.cuda.is_available():
        return (f"--device cuda: torch.cuda.is_available() is False here (torch {torch.__version__}, "
                f"{'a CPU-only build' if torch.version.cuda is None else 'no usable GPU or driver'}); "
                "run it on a GPU machine or use --device cpu")
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=DEVICES, default="cpu",
                    help="where samples are made and run (default cpu); cuda: every worker its own CUDA context")
    ap.add_argument("--ops", help="comma-separated op keys (name or name.variant); default: all of op_db")
    ap.add_argument("--full", action="store_true", help="every sample of every op (default: first --samples)")
    ap.add_argument("--subset", action="store_true", help="the fixed CI subset only")
    ap.add_argument("--samples", type=int, default=2, help="samples per op and dtype (default 2)")
    ap.add_argument("--inductor-samples", "--compiled-samples", dest="inductor_samples", type=int, default=1,
                    help="samples per op and dtype that also run the compiling executors' configs (Inductor, "
                         "nvFuser) (default 1; -1 all)")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="default float32,bfloat16 (cpu and cuda)")
    ap.add_argument("--configs", help="fusion/executor pairs (default on cpu: "
                    + ",".join(DEFAULT_CONFIGS["cpu"]) + "; on cuda: " + ",".join(DEFAULT_CONFIGS["cuda"]) + ")")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)), help="worker processes")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per sample before its worker is killed")
    ap.add_argument("--no-aot-check", action="store_true", help="skip the torch.compile(aot_eager) check")
    ap.add_argument("--order", choices=("sorted", "shuffled", "categories"), default="sorted",
                    help="op order (shuffled: a fixed permutation; categories: shuffled, dealt round-robin over "
                         "op categories, so a partial sweep reaches every category)")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="write the table from these result files (rows of one sample merged) instead of running")
    ap.add_argument("--max-seconds", type=float, help="stop the sweep after this long; what ran is recorded")
    ap.add_argument("--shard", help="i/n: run every n-th op starting at i (split a sweep over sessions)")
    ap.add_argument("--table", default=os.path.join(HERE, "CORPUS.md"))
    ap.add_argument("--no-table", action="store_true")
    ap.add_argument("--out", help="JSON path, or a folder for the default name "
                                  "(default benchmarks/results/<date>-<device>-opinfo-corpus-<commit>.json)")
    args = ap.parse_args(argv)
    configs = args.configs.split(",") if args.configs else list(DEFAULT_CONFIGS[args.device])
    bad = [c for c in configs if c not in ALL_CONFIGS]
    if bad:
        ap.error(f"unknown configs {', '.join(bad)}: use fusion/executor with fusion in {', '.join(FUSIONS)} and "
                 f"executor in {', '.join(EXECUTORS)}")
    if args.device == "cpu" and any(c.endswith("/nvfuser") for c in configs):
        ap.error("the nvfuser executor runs on CUDA only: use --device cuda")

    started = time.perf_counter()
    if args.merge:
        return merge(args.merge, None if args.no_table else args.table, args.out)
    if args.device == "cuda":
        why = _cuda_unavailable()
        if why:
            ap.exit(2, f"{ap.prog}: error: {why}\n")
    ops = load_ops()
    if args.subset:
        tasks = subset_tasks()
        coverage = f"the CI subset ({sum(len(t[2]) for t in tasks)} sample tasks)"
    else:
        keys = args.ops.split(",") if args.ops else sorted(ops)
        unknown = [k for k in keys if k not in ops]
        if unknown:
            ap.error(f"unknown op keys: {', '.join(unknown)}")
        if args.shard:
            i, n = map(int, args.shard.split("/"))
            keys = keys[i::n]
        keys = order_keys(ops, keys, args.order)
        tasks = plan(ops, keys, args.dtypes.split(","), None if args.full else args.samples, configs,
                     None if args.inductor_samples < 0 else args.inductor_samples, not args.no_aot_check,
                     args.device)
        coverage = (f"{len(keys)} op keys{' (shard ' + args.shard + ')' if args.shard else ''} ({args.order}), dtypes "
                    f"{args.dtypes}, {'every sample' if args.full else f'first {args.samples} samples'} per op and "
                    f"dtype; compiling executors' (Inductor, nvFuser) configs on the first "
                    f"{'all' if args.inductor_samples < 0 else args.inductor_samples} of them; configs {','.join(configs)}")
    sha = commit()
    tag = "-subset" if args.subset else ("-full" if args.full else "")
    name = f"{datetime.date.today()}-{args.device}-opinfo-corpus-{sha}{tag}.json"
    out = (os.path.join(args.out, name) if args.out and os.path.isdir(args.out)
           else args.out or os.path.join(HERE, "results", name))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    import torch

    info: dict = {} if args.device == "cuda" else device_info("cpu")
    meta = {"command": "python -m benchmarks.opinfo_corpus " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": str(datetime.date.today()), "commit": sha, "torch": torch.__version__, "jobs": args.jobs,
            "json": os.path.relpath(out, ROOT)}
    all_keys = list(dict.fromkeys(t[0] for t in tasks))

    def save(rows, partial: str | None, seconds: float, cov: str, not_reached=None):
        data = {**meta, **info, "seconds": seconds, "coverage": cov, "device": args.device,
                **({"partial": partial} if partial else {}), "not_reached": not_reached or [],
                "summary": summarize(rows), "rows": rows}
        tmp = out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, out)  # a kill mid-write leaves the previous checkpoint whole

    def heartbeat(rows, st):
        print(f"[corpus {st['elapsed']:6.0f}s] {args.device}: {st['keys_done']}/{st['keys']} op keys done, "
              f"{st['tasks_done']}/{st['tasks']} (op, dtype) tasks, {len(rows)} samples", file=sys.stderr, flush=True)
        reached = len({r["op"] for r in rows})
        save(rows, f"in progress: checkpoint after {st['elapsed']:.0f} s", time.perf_counter() - started,
             coverage + f". CHECKPOINT: {reached} of {len(all_keys)} op keys reached so far")

    signalled: list = []
    import signal

    signal.signal(signal.SIGTERM, lambda *_: signalled.append("stopped by SIGTERM"))
    print(f"{len(tasks)} tasks ({len(all_keys)} op keys) on {args.device}, {args.jobs} jobs, timeout "
          f"{args.timeout:.0f}s per sample, configs {','.join(configs)}", flush=True)
    stopped: list = []
    rows = sweep(tasks, jobs=args.jobs, timeout=args.timeout, progress=lambda s: print(s, flush=True),
                 max_seconds=args.max_seconds, stopped=stopped, device=args.device, heartbeat=heartbeat,
                 should_stop=lambda: signalled[0] if signalled else None, info=info)
    if stopped:
        reached = {r["op"] for r in rows}
        not_reached = [k for k in all_keys if k not in reached]
        coverage += (f". PARTIAL: {stopped[0]}; {len(reached)} of {len(all_keys)} op keys reached "
                     f"(in the order run: {args.order} keys, split between workers); not reached: "
                     f"{len(not_reached)} keys, listed in the JSON")
    else:
        not_reached = []
    seconds = time.perf_counter() - started
    summary = summarize(rows)
    meta.update(info, seconds=seconds, coverage=coverage)
    save(rows, None, seconds, coverage, not_reached)
    print("wrote", out)
    if not args.no_table:
        write_table({args.device: (rows, summary, meta)}, args.table)
    print(json.dumps({k: summary[k] for k in ("ops_run", "ops_pass_everywhere", "samples", "per_config", "memory")},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
