"""The backward's regions compiled with the forward's (issue 27 item 3: the first iteration).

AOTAutograd partitions the joint graph into forward and backward before it compiles the forward, and
compiles the backward lazily, inside the first ``loss.backward()``. Compiled then, the backward's regions
wait for their kernels on their own, after the forward's did (llama, 8 layers, ``layers`` + Inductor on an
H100: forward 9.7 s, then backward 9.2 s, each three regions compiled side by side). The capture keeps the
backward module the partitioner made (``Program.backward_preview``); when the forward compiles,
:func:`plan_backward_ahead` runs the backward through the same passes on a copy of that module and hands
its final Trace to the executor (``Executor.compile_ahead``), which compiles those regions in the same
batch as the forward's (:mod:`trace_lab.executors.compile_pool`) into its fusion cache. When the backward
really compiles, its passes run again on AOTAutograd's module and its regions are found in the cache; the
records say they were compiled ahead. A region whose signature differs then (a module AOTAutograd changed
afterwards) just compiles then, as before. Only with the fusion cache on, for executors that offer it
(Inductor). Nothing here can fail a forward: a plan that raises is dropped, with a note.
"""
from __future__ import annotations

import time

import torch.fx as fx

from ..analysis.handover import owned_backward_inputs
from ..ir.trace import Trace
from ..passes import PassContext, run_pipeline
from ..runtime.op_scratch import measure_op_scratch

__all__ = ["plan_backward_ahead"]


def _copy(gm: fx.GraphModule) -> fx.GraphModule:
    """The module on a copied graph (nodes' meta copied shallowly): nothing the passes do reaches AOTAutograd's."""
    graph = fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return fx.GraphModule(gm, graph)


def plan_backward_ahead(program, options, executor, gradients_copied) -> str | None:
    """Hand ``executor`` the backward of ``program`` planned now, for compiling with the forward (module
    docstring). Returns a note for the forward's record (None when nothing was handed over)."""
    preview, program.backward_preview = getattr(program, "backward_preview", None), None
    if preview is None or not options.fusion_cache or not hasattr(executor, "compile_ahead") \
            or program.forward is None:
        return None
    started = time.perf_counter()
    try:
        gm = _copy(preview)
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        owned = owned_backward_inputs(program.forward.gm, gm, gradients_copied)
        trace = Trace(gm, "backward", "as captured", names, owned_inputs=owned,
                      materialized_regions=executor.materializes_regions)
        measure_op_scratch(trace)
        planned = run_pipeline(trace, PassContext(options, executor))[-1]
    except Exception as e:  # noqa: BLE001 - an optimisation only: the backward compiles when it runs
        return f"the backward's regions were not planned ahead ({type(e).__name__}: {e}); they compile when it runs"
    count = executor.compile_ahead(planned)
    if not count:
        return None
    return (f"{count} of the backward's regions compiled with this program's (planned ahead in "
            f"{time.perf_counter() - started:.2f} s; the backward finds them in the fusion cache)")
