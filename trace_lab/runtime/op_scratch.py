"""Measuring op scratch: the run stage's half of :mod:`trace_lab.analysis.op_scratch`.

Design: once per *signature* (the op overload, every tensor argument's shape, stride, storage
offset, dtype and device, and every non-tensor argument) the op runs on real inputs built from
the recorded meta (:func:`.call_memory.example_tensor`, uninitialised: no random generator is
touched), once to warm up (lazy initialisation, oneDNN primitive creation) and once measured
(:func:`.measure.measure_peak`: CPU profiler allocator events, CUDA ``max_memory_allocated``).
Successful figures are cached process-wide, so a model's repeated layers measure once.

:func:`measure_op_scratch` is called by the jit right after capture, on the program as captured
(later stages hold the same ops, fused regions' inner ops included), and fills the Trace's
:class:`~trace_lab.analysis.op_scratch.OpScratch` table, which every stage shares. Where a
measurement cannot run - a profiler is active (starting ours would fail, and running the op
would pollute the user's own measurement), the op fails on placeholder inputs, a device
without a measurement - the record says why (``bytes`` None: the line is a lower bound); a
record left by an active profiler is marked ``retry`` and measured when
:func:`complete_op_scratch` runs with no profiler (the jit does at its next call and when a
``measuring()`` block ends). Nothing here writes the IR.
"""
from __future__ import annotations

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from ..analysis.op_scratch import (VALUE_DEPENDENT_FILL, VALUE_DEPENDENT_SCRATCH, OpScratch, _bits, _vals,
                                   op_signature, scratch_nodes)
from ..analysis.storage import CUDA_ROUNDING
from .call_memory import measure_workspace

__all__ = ["measure_op_scratch", "complete_op_scratch", "clear_cache"]

_CACHE: dict[tuple, int] = {}  # (signature, rounding) -> scratch bytes; only successful measurements


def clear_cache() -> None:
    _CACHE.clear()


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
    from .codegen import _callable_of

    runs_as = _callable_of(target)  # what the generated program calls (prims.fma: (a * b) + c)
    bits = _bits(node)

    def call(*tensors):
        leaves = list(vals)
        for i, t in zip(positions, tensors):
            # lazy views (no allocation), as the real input is one
            leaves[i] = t.conj() if bits[i] == "conj" else t._neg_view() if bits[i] == "neg" else t
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        return runs_as(*args, **kwargs)

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


def _record(node: fx.Node, signature: str, rounding: int) -> dict:
    key = (signature, rounding)
    if key not in _CACHE:
        scratch, why = _measure(node, rounding)
        if scratch is None:
            return {"bytes": None, "why": why, "retry": why == "not measured: a profiler is active"}
        _CACHE[key] = scratch
    record = {"bytes": _CACHE[key], "why": "measured once per signature"}
    packet = node.target.overloadpacket
    if packet in VALUE_DEPENDENT_SCRATCH:
        record.update(bound="upper", why=f"depends on the input's values: {VALUE_DEPENDENT_SCRATCH[packet]}; "
                                         "measured at large values")
    return record


def measure_op_scratch(trace, rounding: int | None = None) -> dict:
    """Measure (or look up) the scratch of every op of ``trace`` that takes scratch, fused regions' inner
    ops included, into ``trace.op_scratch`` (a table is attached if the trace has none). Records already
    there are kept, except those a profiler kept from measuring. Returns {line name: bytes or None}."""
    if rounding is None:
        rounding = CUDA_ROUNDING if trace.device.type == "cuda" else 1
    if trace.op_scratch is None:
        trace.op_scratch = OpScratch()
    table = trace.op_scratch
    found = {}
    for n in scratch_nodes(trace.gm):
        signature = op_signature(n)
        if signature is None:
            continue
        if signature not in table or table[signature].get("retry"):
            table[signature] = _record(n, signature, rounding)
        if n.graph is trace.graph:
            found[trace.name(n)] = table[signature]["bytes"]
    return found


def complete_op_scratch(traces) -> None:
    """Measure the records a profiler kept from measuring, if none runs now (each table once)."""
    if _profiler_active():
        return
    seen = set()
    for trace in traces:
        table = trace.op_scratch
        if table is not None and id(table) not in seen and table.pending:
            seen.add(id(table))
            measure_op_scratch(trace)
