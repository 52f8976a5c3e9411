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

__all__ = ["example_tensor", "workspace_bytes", "fresh_output_bytes", "output_aliases", "measure_workspace",
           "record_measurement"]


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


def output_aliases(outputs, inputs) -> list:
    """Per output, which buffer the call really returned it in: None (fresh), ("input", i)
    or ("output", k) for an earlier output - the form ``node.meta['region']['aliases']`` uses."""
    def key(t):
        return t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else None

    ins = {key(t): ("input", i) for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)}
    seen: dict = {}
    out = []
    for k, t in enumerate(outputs):
        p = key(t)
        src = ins.get(p) or seen.get(p)
        out.append(src)
        if p is not None and src is None:
            seen[p] = ("output", k)
    return out


def measure_workspace(fn, input_vals, rounding: int) -> tuple[int | None, int | None, list | None]:
    """(workspace bytes, bytes of fresh outputs, output aliases) of calling a compiled region on
    placeholder inputs of the recorded layouts; Nones when the call cannot be measured here.

    The aliases say which outputs the compiled code returned in an input's or an earlier
    output's buffer. The model derives them from the region's graph; a compiler may decide
    otherwise (Inductor on CUDA returned a fresh buffer for a view of another output), and
    the executor records what it measured, so the liveness model counts what is allocated."""
    from torch._guards import tracing
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from ..measure import measure_peak

    with unset_fake_temporarily(), tracing(None), torch.no_grad():
        args = [example_tensor(v, zeros=False) for v in input_vals]
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        warm = fn(*args)  # warm-up: lazy initialisation, autotuning, first-call allocations
        del warm
        outs, peak, _method = measure_peak(lambda boxed: fn(*boxed), args, device)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        if peak is None:
            return None, None, output_aliases(outs, args)
        out_bytes = fresh_output_bytes(outs, args, rounding)
        return workspace_bytes(peak, out_bytes, rounding), out_bytes, output_aliases(outs, args)


def record_measurement(node, measured) -> dict:
    """Store a region's measured workspace (and aliases, where measured) in its node's meta.

    Returns the new region record; a new dict, since the old one may be shared with an
    earlier stage's node."""
    workspace, _out_bytes, aliases = measured
    region = dict(node.meta.get("region") or {})
    region["workspace_bytes"] = workspace or 0
    if aliases is not None and len(aliases) == len(region.get("aliases") or aliases):
        if aliases != list(region.get("aliases") or [None] * len(aliases)):
            region["model_aliases"] = region.get("aliases")
        region["aliases"] = aliases
    node.meta["region"] = region
    return region
