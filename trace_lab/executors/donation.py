"""Which of a region's dying inputs its compiled code may write an output over (``donate_inplace``), for both
compiling executors.

The liveness model says which arguments of a region die on its line and only it holds
(``LineMemory.donatable``); an executor hands those over in a list its code clears (``donate_inputs``), and
may compile the region so that an output is written over one of them. Compiled that way a region has its own
cache key, so :func:`inplace_positions` gives regions of one signature one set of positions: a model's repeated
layers still compile once. Inductor passes the positions to its compile (``bw_donated_idxs``); nvFuser pairs an
output with such an input where its segment is elementwise (:func:`.nvfuser_region.plan_in_place`).
:func:`region_jobs` lists a program's regions the way both executors plan and compile them (signature, cache key,
in-place positions).
"""
from __future__ import annotations

import torch.fx as fx

from ..analysis.region_record import plan_record
from ..passes.signature import region_signature

__all__ = ["inplace_key", "inplace_positions", "region_jobs"]


def inplace_positions(jobs, donatable: dict, one_per_signature: bool = False) -> dict:
    """Region -> the input positions its kernels may write over (``donate_inplace``). Regions of one signature
    share the positions all of them donate, so identical regions (a model's repeated layers) still compile
    once. A region that donates nothing (its inputs are the caller's) runs the plain compile and is left out
    of that intersection - at most two compiles per signature - except with ``one_per_signature``
    (``fusion="layers"``, regional compilation: each layer compiles once, whatever the first one donates).
    Compiled to write over inputs, a region has its own cache key."""
    common: dict = {}
    for node, *_rest, signature in jobs:
        mine = set(donatable.get(node, ()))
        if mine or one_per_signature:
            common[signature] = mine if signature not in common else common[signature] & mine
    return {node: tuple(sorted(common[signature])) for node, *_rest, signature in jobs
            if donatable.get(node) and common.get(signature)}


def inplace_key(signature: str, over: tuple) -> str:
    """The cache key of a region of ``signature`` compiled to write over the inputs at ``over`` (none: the
    signature itself)."""
    return f"{signature}|in place over inputs {over}" if over else signature


def region_jobs(trace, region_nodes: list, donatable: dict, in_place: bool) -> list:
    """``(node, region GraphModule, input values, plan, signature, cache key, input positions its code may write
    over)`` per region, as both executors compile them and :func:`.region_cover.plan_covers` takes them. With
    ``in_place`` (``donate_inplace``) the positions are :func:`inplace_positions`' and a region compiled to write
    over inputs gets its own cache key; otherwise the key is the signature and the positions are empty."""
    rows = []
    for node in region_nodes:
        sub = trace.gm.get_submodule(node.target)
        vals = [a.meta.get("val") if isinstance(a, fx.Node) else a for a in node.args]
        plan = plan_record(node)
        rows.append((node, sub, vals, plan, plan.signature or region_signature(sub, vals)))
    overs = inplace_positions(rows, donatable, one_per_signature=trace.info.get("fusion") == "layers") \
        if in_place else {}
    return [(node, sub, vals, plan, sig, inplace_key(sig, overs.get(node, ())), overs.get(node, ()))
            for node, sub, vals, plan, sig in rows]
