"""Which of a region's dying inputs its compiled code may write an output over (``donate_inplace``), for both
compiling executors.

The liveness model says which arguments of a region die on its line and only it holds
(``LineMemory.donatable``); an executor hands those over in a list its code clears (``donate_inputs``), and
may compile the region so that an output is written over one of them. Compiled that way a region has its own
cache key, so :func:`inplace_positions` gives regions of one signature one set of positions: a model's repeated
layers still compile once. Inductor passes the positions to its compile (``bw_donated_idxs``); nvFuser pairs an
output with such an input where its segment is elementwise (:func:`.nvfuser_region.plan_in_place`).
"""
from __future__ import annotations

__all__ = ["inplace_positions"]


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
