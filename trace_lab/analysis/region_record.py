"""Region records: what the plan says of a fused region and what compiling it found, joined by op id.

Design. A fused region is a ``call_module`` node. The fusion pass that builds it writes its
*plan* on the node, once, as part of the IR (:mod:`trace_lab.passes.regions`:
``meta['region']`` = name, ops, structural signature, the captured output aliasing, the fx
names of its ops). Nothing writes the IR after the passes: what an executor learns when it
compiles the region (the real output layout, the bytes of each fresh storage, the
workspace inside the call, cache hits, why a region split) comes back as data, a
:class:`RegionRecord` per region in ``CompiledProgram.regions`` (op id -> record, the op id
being the region node's fx name). A Trace the executor compiled is joined to those records
(``Trace.with_regions``, done by the jit once it has compiled a program), so the liveness
model, the printer and the report read what the compiled code really does.

Readers ask :func:`region_record` - the one accessor - for a region node: the compiled
record where the trace (or program) has one, else the plan alone (``compiled`` False).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import torch.fx as fx

__all__ = ["RegionRecord", "region_record", "plan_record", "records_of"]


@dataclass(frozen=True)
class RegionRecord:
    """One fused region: its plan and, once compiled, what the executor found (plain data)."""

    op: str  # op id: the region node's fx name in the trace that was compiled
    name: str  # the region's name (``fusionK``)
    ops: tuple = ()  # op names, in order (the plan)
    signature: str | None = None  # structural signature (passes/signature.py)
    nodes: tuple = ()  # fx names of the ops the region took (memory_guard leaves them unfused)
    # per output: None (a fresh buffer), ("input", j) (a view of input j) or ("output", k) (the storage of
    # output k): the compiled code's layout where it was measured and lines up, else the plan's
    aliases: tuple | None = None
    compiled: bool = False  # False: the plan only (nothing below is known)
    executor: str = ""
    output_storage_bytes: tuple | None = None  # bytes of each fresh output storage, as the compiled code returns them
    workspace_bytes: int | None = None  # scratch inside the call (None: could not be measured); signed when donated
    donated: tuple = ()  # argument positions the call frees inside itself (liveness._donatable), measured so
    output_bytes: int | None = None  # fresh output bytes measured on the compiled call
    planned_output_bytes: int | None = None  # output bytes the fusion plan assumed (memory_guard compares)
    model_output_bytes: int | None = None  # output bytes the liveness model counts for the compiled layout
    cache_hit: bool = False
    compile_seconds: float = 0.0
    split: tuple = ()  # why the executor split the region (nvFuser), one line each
    details: Mapping = field(default_factory=dict)  # executor-specific, JSON-ready (nvFuser segments, torch ops)

    def to_dict(self) -> dict:
        """The JSON-ready row a report shows (``Report.programs[i][kind]['regions']``)."""
        row = {"name": self.name, "op": self.op, "signature": self.signature, "ops": list(self.ops),
               "cache_hit": self.cache_hit, "compile_seconds": self.compile_seconds,
               "workspace_bytes": self.workspace_bytes, "output_bytes": self.output_bytes,
               "model_output_bytes": self.model_output_bytes, "planned_output_bytes": self.planned_output_bytes}
        if self.split:
            row["split"] = list(self.split)
        if self.donated:
            row["donated"] = list(self.donated)
        row.update(self.details)
        return row


def plan_record(node: fx.Node) -> RegionRecord:
    """The record of a region as the fusion pass planned it (nothing compiled yet)."""
    plan = node.meta.get("region") or {}
    aliases = plan.get("aliases")
    return RegionRecord(op=node.name, name=str(plan.get("name", node.target)), ops=tuple(plan.get("ops") or ()),
                        signature=plan.get("signature"), nodes=tuple(plan.get("nodes") or ()),
                        aliases=tuple(aliases) if aliases is not None else None)


def records_of(source) -> Mapping[str, RegionRecord]:
    """op id -> RegionRecord of a compiled program, or of a Trace joined to one (empty otherwise)."""
    regions = getattr(source, "regions", None) if not hasattr(source, "gm") else \
        getattr(source, "compiled_regions", None)
    return regions if isinstance(regions, Mapping) else MappingProxyType({})


def region_record(source, node: fx.Node) -> RegionRecord | None:
    """THE accessor for what is known of region ``node``: ``source`` is a Trace (joined to its
    compiled program, or not) or a ``CompiledProgram``; the compiled record where there is one,
    else the plan's. None when ``node`` is not a fused region."""
    if getattr(node, "op", None) != "call_module":
        return None
    record = records_of(source).get(node.name) if source is not None else None
    return record if record is not None else plan_record(node)

