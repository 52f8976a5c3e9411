"""Measuring one call's memory on placeholder inputs: the workspace a compiled region or a
plain op allocates and frees inside its call, and how its outputs sit in memory.

:func:`example_tensor` builds a real tensor of a recorded layout; :func:`measure_workspace`
runs a callable on such inputs once to warm up and once measured (``measure.measure_peak``)
and returns workspace = peak above entry - bytes of the fresh outputs, rounded as the
liveness model rounds, plus the outputs' layout (:func:`output_layout`). The executors use
it for compiled regions (:mod:`trace_lab.executors.workspace` records the result on the
region's record) and :mod:`.op_scratch` for plain ops. It measures, so it lives in the runtime, with
:mod:`.measure`; the analysis layer only reads what it found (records on the Trace).
"""
from __future__ import annotations

import torch

from ..analysis.storage import span_elements, tensor_bytes

__all__ = ["example_tensor", "workspace_bytes", "fresh_output_bytes", "output_layout", "measure_workspace"]


def example_tensor(val, zeros: bool = True):
    """A real tensor with the recorded size, stride, storage offset, dtype and device
    (zero-filled, or uninitialised floats when ``zeros`` is False: integers and bools
    are always zeros, so indices stay in range)."""
    if not isinstance(val, torch.Tensor):
        return val
    offset = int(val.storage_offset())
    extent = span_elements(val)
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
    ptrs = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
    return _fresh_bytes_against(outputs, ptrs, rounding)


def output_layout(outputs, inputs) -> tuple[list, list]:
    """How a call's outputs sit in memory: per output, its alias (None for a fresh storage,
    ``("input", j)`` for a view of input j, ``("output", k)`` for the storage of earlier
    output k) and the unrounded bytes of its storage where fresh (None otherwise);
    non-tensor outputs count as fresh with 0 bytes."""
    owners = [(t.untyped_storage().data_ptr(), j) for j, t in enumerate(inputs) if isinstance(t, torch.Tensor)]
    return _layout_against(outputs, owners)


def measure_workspace(fn, input_vals, rounding: int, donate: tuple = ()) -> tuple:
    """(workspace bytes, bytes of fresh outputs, output layout) of calling a compiled region on
    placeholder inputs of the recorded layouts; the layout is :func:`output_layout`'s pair.
    The figures are None when the call cannot be measured here (the layout is still given).

    ``donate``: argument positions the program hands over (``fn.boxed(list)``, which the compiled code
    clears, so each goes at its last use inside the call): the measured call holds them only in that list,
    and the workspace is signed (peak above entry - outputs: below zero when inputs go before outputs)."""
    from torch._guards import tracing
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from .measure import measure_peak

    with unset_fake_temporarily(), tracing(None), torch.no_grad():
        if donate:
            return _measure_donated(fn, input_vals, rounding, tuple(donate))
        args = [example_tensor(v, zeros=False) for v in input_vals]
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        warm = fn(*args)  # warm-up: lazy initialisation, autotuning, first-call allocations
        del warm
        outs, peak, _method = measure_peak(lambda boxed: fn(*boxed), args, device, collect=False)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        layout = output_layout(outs, args)
        if peak is None:
            return None, None, layout
        out_bytes = fresh_output_bytes(outs, args, rounding)
        return workspace_bytes(peak, out_bytes, rounding), out_bytes, layout


def _measure_donated(fn, input_vals, rounding: int, donate: tuple) -> tuple:
    """:func:`measure_workspace` (inside its context) for a region that frees the inputs at ``donate`` inside its
    call. On CPU the inputs are made inside the profiler session (``measure_peak_handing_over``: a free is sized only
    for a block allocated while it profiles); on CUDA ``max_memory_allocated`` sees them anyway."""
    from torch.multiprocessing.reductions import StorageWeakRef

    from .measure import measure_peak, measure_peak_handing_over

    warm = fn(*[example_tensor(v, zeros=False) for v in input_vals])  # warm-up, inputs kept by no one
    del warm
    kept: dict[int, object] = {}  # the inputs the caller keeps (all but the donated ones)
    owners: list = []  # (storage address, position, weak ref of a donated one) per input: the output layout

    def make_args():
        args = [example_tensor(v, zeros=False) for v in input_vals]
        for j, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                weak = StorageWeakRef(a.untyped_storage()) if j in donate else None
                owners.append((a.untyped_storage().data_ptr(), j, weak))
                if j not in donate:
                    kept[j] = a
        return args

    device = next((v.device for v in input_vals if isinstance(v, torch.Tensor)), torch.device("cpu"))
    if device.type == "cpu":
        outs, peak, _method = measure_peak_handing_over(fn.boxed, make_args, device, collect=False)
    else:
        outs, peak, _method = measure_peak(fn.boxed, make_args(), device, collect=False)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    # a donated input freed inside the call owns nothing now: an output at its address is a fresh block
    live_owners = [(ptr, j) for ptr, j, weak in owners if weak is None or not weak.expired()]
    layout = _layout_against(outs, live_owners)
    if peak is None:
        return None, None, layout
    out_bytes = _fresh_bytes_against(outs, {ptr for ptr, _ in live_owners}, rounding)
    signed = int(peak) - out_bytes  # below zero when donated inputs go before the outputs are made
    return (workspace_bytes(signed, 0, rounding) if signed > 0 else signed), out_bytes, layout


def _layout_against(outputs, owners) -> tuple[list, list]:
    """:func:`output_layout` against the inputs' storage addresses (donated inputs may be gone by now)."""
    owner: dict[int, tuple] = {}
    for ptr, j in owners:
        owner.setdefault(ptr, ("input", j))
    aliases, storage_bytes = [], []
    for k, t in enumerate(outputs):
        if not isinstance(t, torch.Tensor):
            aliases.append(None)
            storage_bytes.append(0)
            continue
        key = t.untyped_storage().data_ptr()
        if key in owner and key != 0:
            aliases.append(owner[key])
            storage_bytes.append(None)
        else:
            if key != 0:
                owner[key] = ("output", k)
            aliases.append(None)
            storage_bytes.append(int(t.untyped_storage().nbytes()))
    return aliases, storage_bytes


def _fresh_bytes_against(outputs, input_ptrs: set, rounding: int) -> int:
    seen = set(input_ptrs)
    total = 0
    for t in outputs:
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            total += tensor_bytes(t, rounding)
    return total
