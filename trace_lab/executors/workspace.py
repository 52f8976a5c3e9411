"""The workspace a compiled region allocates inside its call, measured once at compile time.

A compiled region (Inductor kernels with intermediate buffers, split reductions; an
nvFuser region split into segments with global intermediates) may allocate scratch
memory that it frees before returning. Executors call :func:`measure_workspace` once
per compiled structure: the region runs on placeholder inputs of the recorded layouts
(:func:`example_tensor`), once to warm up and once measured (``measure.measure_peak``);
workspace = peak above entry - bytes of the fresh outputs, rounded as the liveness model
rounds. The executor records it in ``node.meta['region']['workspace_bytes']``, where the
liveness model counts it on the region's line.
"""
from __future__ import annotations

import torch

from ..analysis.liveness import tensor_bytes

__all__ = ["example_tensor", "workspace_bytes", "fresh_output_bytes", "measure_workspace"]


def example_tensor(val, zeros: bool = True):
    """A real tensor with the recorded size, stride, storage offset, dtype and device
    (zero-filled, or uninitialised floats when ``zeros`` is False: integers and bools
    are always zeros, so indices stay in range)."""
    if not isinstance(val, torch.Tensor):
        return val
    offset = int(val.storage_offset())
    extent = 1 + sum((int(s) - 1) * int(st) for s, st in zip(val.shape, val.stride()) if int(s) > 0)
    if any(int(s) == 0 for s in val.shape):
        extent = 0
    make = torch.zeros if zeros or not (val.dtype.is_floating_point or val.dtype.is_complex) else torch.empty
    base = make(offset + extent, dtype=val.dtype, device=val.device)
    return base.as_strided(tuple(val.shape), tuple(val.stride()), offset)


def workspace_bytes(peak_above_entry: int, output_bytes: int, rounding: int = 1) -> int:
    """Scratch bytes of one call: the call's peak above what was allocated before it, less the
    buffers it returns; never negative, rounded up to the allocator's block size."""
    n = max(0, int(peak_above_entry) - int(output_bytes))
    return (n + rounding - 1) // rounding * rounding if rounding > 1 and n > 0 else n


def fresh_output_bytes(outputs, inputs, rounding: int = 1) -> int:
    """Bytes of the storages a call returned that it allocated: each storage once, none that
    belongs to an input (a returned view of an input allocates nothing)."""
    def key(t):
        return t.untyped_storage().data_ptr()

    seen = {key(t) for t in inputs if isinstance(t, torch.Tensor)}
    total = 0
    for t in outputs:
        if isinstance(t, torch.Tensor) and key(t) not in seen:
            seen.add(key(t))
            total += tensor_bytes(t, rounding)
    return total


def measure_workspace(fn, input_vals, rounding: int) -> tuple[int | None, int | None]:
    """(workspace bytes, bytes of fresh outputs) of calling a compiled region on placeholder
    inputs of the recorded layouts; (None, None) when the call cannot be measured here."""
    from torch._guards import tracing
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from ..measure import measure_peak

    with unset_fake_temporarily(), tracing(None), torch.no_grad():
        args = [example_tensor(v, zeros=False) for v in input_vals]
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        warm = fn(*args)  # warm-up: lazy initialisation, autotuning, first-call allocations
        del warm
        outs, peak, _method = measure_peak(lambda boxed: fn(*boxed), args, device)
        if peak is None:
            return None, None
        out_bytes = fresh_output_bytes(outs if isinstance(outs, (list, tuple)) else [outs], args, rounding)
        return workspace_bytes(peak, out_bytes, rounding), out_bytes
