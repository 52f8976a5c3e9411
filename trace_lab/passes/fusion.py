"""The fusion pass: one Trace -> Trace function, five strategies.

``ctx.options.fusion`` picks the strategy; which op may join a region is asked
of ``ctx.executor.can_fuse(node)`` only; whether a region's inner values touch
memory is ``ctx.executor.materializes_regions`` (it changes what the memory
strategy predicts).

Every strategy but ``none`` first folds scalar constants (:mod:`.constant_fold`) and computes equal input-free
values once (:mod:`.input_free_cse`).

* ``none``       - one op per kernel, original order: the trace is unchanged.
* ``dataflow``   - fusible producer/consumer chains merged (cycle-checked), groups
  in original order where dependencies allow (:func:`.partition.dataflow_groups`).
* ``horizontal`` - Thunder's partitioner: dataflow merging, then its FIFO Kahn
  pass that pulls every ready fusible group into the current one
  (``trace_lab.jit(..., max_region_ops=N)`` caps a region at N ops).
* ``memory``     - order for the lowest predicted high-water mark, then merge only
  where the predicted peak does not rise (:mod:`.schedule`). It starts twice,
  from single ops in original order and from the dataflow groups, and keeps the
  lowest peak of each start as it is and scheduled and merged (fewer regions on a
  tie), so it is never above ``none`` or ``dataflow``.
* ``layers``     - regional compilation: each repeated layer (a numbered child module) one region,
  its matmuls included, for executors that compile library ops inside a region
  (``executor.compiles_library_ops``: Inductor; eager shows the structure); :mod:`.layers`.

``ctx.keep_unfused`` names ops no region may take (see :mod:`trace_lab.run.memory_guard`).
The result's ``info`` records the strategy, the regions and the predicted peak.
"""
from __future__ import annotations

from ..errors import TraceLabError
from ..options import FUSION_STRATEGIES
from .constant_fold import fold_constants
from .input_free_cse import merge_input_free_duplicates
from .layers import layer_keys, layer_units
from .registry import register_pass
from .partition import (OpGraph, dataflow_groups, horizontal_order, singleton_units, topological_order)
from .region_ends import region_ends
from .regions import build_trace
from .schedule import MemoryModel, merge_pass, min_peak_order

__all__ = ["fusion_pass", "plan_units", "STRATEGIES", "layers_refused"]

STRATEGIES = tuple(s for s in FUSION_STRATEGIES if s != "auto")  # "auto" is resolved per device by jit


def plan_units(trace, strategy: str, can_fuse, materialized: bool, max_region_ops: int | None = None,
               can_compile=None, keep_apart: frozenset = frozenset()):
    """The ordered units (see :class:`.partition.Unit`) a strategy chooses for ``trace``.

    ``max_region_ops`` bounds the size of ``horizontal``'s regions (None: unbounded, as Thunder);
    ``can_compile`` (``layers`` only) says which ops may join a layer's region (default ``can_fuse``);
    ``keep_apart`` (``memory`` only) names ops whose units are never merged with each other.
    """
    graph = OpGraph(trace, can_fuse)
    if strategy == "layers":
        return layer_units(graph, can_compile or can_fuse)[0]
    if strategy == "none":
        return singleton_units(graph, fused_if_fusible=False)
    if strategy == "dataflow":
        return topological_order(dataflow_groups(graph))
    if strategy == "horizontal":
        return horizontal_order(dataflow_groups(graph), max_region_ops)
    if strategy == "memory":
        model = MemoryModel(trace, graph, materialized)
        best = None
        for start in (singleton_units(graph, fused_if_fusible=True), topological_order(dataflow_groups(graph))):
            # the start itself is a candidate too: merging is judged window by window, and windows that each keep
            # their own peak can still add up to a higher one. (What a merged region allocates inside its call is
            # seen only after compiling: run/memory_guard.py's split answers that.)
            for order in (merge_pass(model, min_peak_order(model, start), apart=keep_apart), start):
                score = (model.peak(order), sum(1 for u in order if u.fused), len(order))
                if best is None or score < best[0]:
                    best = (score, order)
        return best[1]
    raise ValueError(f"fusion={strategy!r} is not a fusion strategy; choose one of {', '.join(STRATEGIES)}")


def layers_info(trace, units, can_fuse) -> dict:
    """What ``layers`` found, for the stage's ``info``: the layers in program order and how many regions hold their
    ops (``{"layers": {"found": [...], "regions": n}}``), and a warning when there were none (``info["warnings"]``:
    the Report lists a stage's warnings with its own)."""
    keys = layer_keys(OpGraph(trace, can_fuse))
    found = list(dict.fromkeys(k for k in keys.values() if k is not None))
    regions = sum(1 for u in units if u.fused and keys[u.nodes[0]] is not None)
    info = {"layers": {"found": found, "regions": regions}}
    if not found:
        info["warnings"] = ["fusion=layers: no repeated layer found (no op was traced inside a numbered child module "
                         "such as layers.0 or blocks[0]), so the ops are grouped as fusion=dataflow groups them"]
    return info


def layers_refused(executor: str) -> str:
    """Why ``fusion="layers"`` cannot run with ``executor`` (one that compiles no library ops inside a region)."""
    return (f"fusion='layers' puts each repeated layer's matmuls inside its region; executor={executor!r} "
            f"leaves matmuls to library calls between its regions, so it cannot compile a layer as one region: "
            f"use executor='inductor' (or 'auto', which picks Inductor for fusion='layers'; 'eager' shows the "
            f"structure op by op)")


@register_pass("fusion")
def fusion_pass(trace, ctx):
    strategy = ctx.options.fusion
    if strategy == "none":
        return trace.derive(trace.gm, "fusion", info={"fusion": "none", "regions": []})
    trace = fold_constants(trace)  # scalars computed from literals alone: once, not on every call
    trace = merge_input_free_duplicates(trace)  # equal values built from literals alone: computed once a call
    materialized = ctx.executor.materializes_regions
    can_fuse = ctx.executor.can_fuse
    can_compile = ctx.executor.can_compile
    if strategy == "layers" and not ctx.executor.compiles_library_ops:
        raise TraceLabError(layers_refused(ctx.executor.name))
    keep_unfused = ctx.keep_unfused
    if keep_unfused:
        def can_fuse(node, _can_fuse=ctx.executor.can_fuse):
            return node.name not in keep_unfused and _can_fuse(node)
    units = plan_units(trace, strategy, can_fuse, materialized, ctx.options.max_region_ops, can_compile,
                       ctx.keep_apart)
    new = build_trace(trace, units, f"fusion ({strategy})", info={"fusion": strategy})
    if strategy == "layers":
        new.info.update(layers_info(trace, units, can_fuse))
    fuse_reason = getattr(ctx.executor, "fuse_reason", None) or (lambda n: None)
    if keep_unfused:
        def fuse_reason(node, _reason=fuse_reason):
            return "kept unfused by the memory guard" if node.name in keep_unfused else _reason(node)
    if strategy == "layers":
        can_fuse = can_compile  # a layer's region takes what the executor compiles; the ends say where layers part
    ends = region_ends(trace, units, strategy, can_fuse, fuse_reason, materialized, ctx.options.max_region_ops,
                       ctx.keep_apart)
    new.info["region_ends"] = _by_region_name(new, units, ends)
    new.info["predicted_peak_above_inputs_bytes"] = new.liveness(materialized).peak_above_inputs_bytes
    return new


def _by_region_name(new, units, ends) -> dict[str, list[dict]]:
    """The reasons keyed by the name each fused unit's region got in the new stage (matched by the
    fx names of its ops, which the region's inner graph keeps), each neighbour named as the new
    stage prints it."""
    unit_by_ops = {frozenset(n.name for n in u.nodes): k for k, u in enumerate(units) if u.fused}
    top = {n.name: new.name(n) for n in new.ops}
    inside, named, order = {}, {}, []
    for node in new.ops:
        if node.op == "call_module":
            ops = [m.name for m in new.gm.get_submodule(node.target).graph.nodes
                   if m.op in ("call_function", "call_module") and not _is_getitem(m)]
            for name in ops:
                inside[name] = new.name(node)
            order.append((new.name(node), frozenset(ops)))
    for region, ops in order:
        k = unit_by_ops.get(ops)
        if k is not None:
            named[region] = [dict(e, name=top.get(e["node"]) or f"{e['node']} in {inside.get(e['node'], '?')}")
                             for e in ends[k]]
    return named


def _is_getitem(n) -> bool:
    from ..ir.fx_util import is_getitem

    return is_getitem(n)
