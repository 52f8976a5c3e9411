"""Eager executor: run a Trace op by op, in trace order, freeing as ``del`` says.

It is the reference executor: no compilation, every aten op called as printed,
and every value dropped right after its last use (the liveness model's
``dead_nodes``), so measured memory follows the model line by line. The program
runs as generated code (:mod:`trace_lab.runtime.codegen`); fused regions run op
by op too, so their inner values are materialised (``materializes_regions =
True``); fusing under this executor only groups ops.

``interpret`` and ``set_wait_hook`` are re-exported from :mod:`trace_lab.runtime`
for callers that used them from here.
"""
from __future__ import annotations

import time

import torch.fx as fx

from ..runtime import generate, interpret, set_wait_hook
from ..ir.trace import Trace
from .inductor_ops import inductor_can_compile, inductor_can_fuse, inductor_fuse_reason
from .interface import CompiledProgram, Executor, register

__all__ = ["EagerExecutor", "interpret", "set_wait_hook"]


@register("eager")
class EagerExecutor(Executor):
    materializes_regions = True
    compiles_library_ops = True  # regions run op by op: a layer region shows the structure Inductor would compile

    def can_fuse(self, node: fx.Node) -> bool:
        # Grouping under eager is bookkeeping only (regions run op by op). It groups what a
        # fusing compiler would (Inductor's table: pointwise, reductions, views; no matmuls),
        # so the fusion strategies show the same structure they have on a real executor.
        return inductor_can_fuse(node)

    def can_compile(self, node: fx.Node) -> bool:
        return inductor_can_compile(node)

    def fuse_reason(self, node: fx.Node) -> str | None:
        return inductor_fuse_reason(node)

    def compile(self, trace: Trace) -> CompiledProgram:
        started = time.perf_counter()
        program = generate(trace, materialized_regions=True, fast_views=True)
        return CompiledProgram(run=program.run, executor="eager", compile_seconds=time.perf_counter() - started,
                               source=program.source, generated=program)
