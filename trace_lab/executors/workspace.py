"""The workspace a compiled region allocates inside its call, measured once at compile time.

A compiled region (Inductor kernels with intermediate buffers, split reductions; an
nvFuser region split into segments with global intermediates) may allocate scratch
memory that it frees before returning. Executors call :func:`measure_workspace` (from
:mod:`trace_lab.analysis.call_memory`, re-exported here) once
per compiled structure: the region runs on placeholder inputs of the recorded layouts
(:func:`example_tensor`), once to warm up and once measured (``measure.measure_peak``);
workspace = peak above entry - bytes of the fresh outputs, rounded as the liveness model
rounds. The executor records it in ``node.meta['region']['workspace_bytes']``, where the
liveness model counts it on the region's line.

The same call shows how the compiled code really lays out its outputs
(:func:`output_layout`): which output is a view of an input, which shares the storage
of an earlier output, and how many bytes each fresh storage holds. A compiler may
return a view the capture recorded as sharing one buffer in a storage of its own
(Inductor on CUDA gives the k/v views of an attention in-projection their own
buffer): the executor records the layout as ``meta['region']['aliases']`` and
``meta['region']['output_storage_bytes']``, and the liveness model follows it
instead of the captured aliasing.
"""
from __future__ import annotations

from ..analysis.call_memory import (example_tensor, fresh_output_bytes, measure_workspace, output_layout,
                                    workspace_bytes)
from ..analysis.liveness import region_output_bytes
from ..fx_util import tensor_values

# the measuring helpers live in trace_lab.analysis.call_memory (op scratch uses them too)
__all__ = ["example_tensor", "workspace_bytes", "fresh_output_bytes", "output_layout", "measure_workspace",
           "with_measured_layout", "record_compiled_region"]


def with_measured_layout(region: dict, layout, captured_vals) -> dict:
    """The region record with the compiled code's real output layout (a new dict), or the
    record unchanged when the call's outputs do not line up one-to-one with the captured
    tensor outputs (then the captured aliasing stays)."""
    if layout is None:
        return region
    aliases, storage_bytes = layout
    if len(aliases) != len(captured_vals) or any(v is None for v in captured_vals):
        return region
    return {**region, "aliases": [tuple(a) if a is not None else None for a in aliases],
            "output_storage_bytes": list(storage_bytes)}


def record_compiled_region(node, layout, workspace, rounding: int) -> int:
    """Write on ``node.meta['region']`` (a new dict: the record may be shared with an earlier
    stage's node) what compiling the region found - its real output layout and its workspace -
    keeping the output bytes the fusion plan assumed as ``planned_output_bytes`` (set once, at the
    first compile: :mod:`trace_lab.memory_guard` compares against it). Returns those planned bytes."""
    region = node.meta.get("region") or {}
    planned = region.get("planned_output_bytes")
    if planned is None:
        planned = region_output_bytes(node, rounding)
    region = with_measured_layout(region, layout, tensor_values(node.meta.get("val")))
    node.meta["region"] = {**region, "workspace_bytes": workspace or 0, "planned_output_bytes": planned}
    return planned
