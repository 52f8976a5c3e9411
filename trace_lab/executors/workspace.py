"""The workspace a compiled region allocates inside its call, measured once at compile time.

A compiled region (Inductor kernels with intermediate buffers, split reductions; an
nvFuser region split into segments with global intermediates) may allocate scratch
memory that it frees before returning. Executors call :func:`measure_workspace` (from
:mod:`trace_lab.runtime.call_memory`, re-exported here) once
per compiled structure: the region runs on placeholder inputs of the recorded layouts
(:func:`example_tensor`), once to warm up and once measured (``measure.measure_peak``);
workspace = peak above entry - bytes of the fresh outputs, rounded as the liveness model
rounds. The executor returns it in the region's
:class:`~trace_lab.analysis.region_record.RegionRecord` (``workspace_bytes``), where the
liveness model counts it on the region's line once the Trace is joined to its compiled program.

The same call shows how the compiled code really lays out its outputs
(:func:`output_layout`): which output is a view of an input, which shares the storage
of an earlier output, and how many bytes each fresh storage holds. A compiler may
return a view the capture recorded as sharing one buffer in a storage of its own
(Inductor on CUDA gives the k/v views of an attention in-projection their own
buffer): the record carries that layout (``aliases``, ``output_storage_bytes``) and the
liveness model follows it instead of the plan's aliasing. Nothing is written on the
Trace's nodes: :func:`compiled_region` builds the record from the region's plan and
what the call showed.
"""
from __future__ import annotations

from dataclasses import replace

from ..runtime.call_memory import (example_tensor, fresh_output_bytes, measure_workspace, output_layout,
                                    workspace_bytes)
from ..analysis.buffers import region_output_bytes
from ..analysis.region_record import RegionRecord, plan_record
from ..ir.fx_util import tensor_values

# the measuring helpers live in trace_lab.runtime.call_memory (op scratch uses them too)
__all__ = ["example_tensor", "workspace_bytes", "fresh_output_bytes", "output_layout", "measure_workspace",
           "with_measured_layout", "compiled_region"]


def with_measured_layout(record: RegionRecord, layout, captured_vals) -> RegionRecord:
    """The record with the compiled code's real output layout (a new record), or the record
    unchanged when the call's outputs do not line up one-to-one with the captured tensor
    outputs (then the plan's aliasing stays)."""
    if layout is None:
        return record
    aliases, storage_bytes = layout
    if len(aliases) != len(captured_vals) or any(v is None for v in captured_vals):
        return record
    return replace(record, aliases=tuple(tuple(a) if a is not None else None for a in aliases),
                   output_storage_bytes=tuple(storage_bytes))


def compiled_region(node, layout, workspace, rounding: int, **found) -> RegionRecord:
    """The record of compiled region ``node``: its plan, the output bytes that plan assumed
    (``planned_output_bytes``: :mod:`trace_lab.run.memory_guard` compares against it), the real
    output layout and workspace the compiled call showed, the output bytes the liveness model
    counts for that layout (``model_output_bytes``), and what else the executor found (``found``)."""
    plan = plan_record(node)
    planned = region_output_bytes(node, rounding, plan)
    record = with_measured_layout(plan, layout, tensor_values(node.meta.get("val")))
    record = replace(record, compiled=True, workspace_bytes=workspace, planned_output_bytes=planned)
    return replace(record, model_output_bytes=region_output_bytes(node, rounding, record), **found)
