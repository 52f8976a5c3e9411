"""Runner: the options of a run and one in-process run of a cell function -> Report.

:class:`RunOptions` are the switches the magic's flags and the widgets' controls
set. :func:`inspect_cell` is one run of a cell function in this process (a worker
of ``--nproc`` runs the same call, :mod:`.distributed`); :class:`.cell_runner.CellRunner`
chooses between the two. CellRunner.run builds a fresh function from the cell (so every run
has its own Dynamo cache entries), reads its inputs from the notebook *now*,
runs it through :func:`trace_lab.inspect` (eager reference on deep copies, then
the compiled run, memory and timing runs: every forward/backward program and
every graph of a graph break is recorded) and, only when all of that succeeded,
writes the names the cell bound back into the notebook. The cell's returned dict
is taken from the last compiled call through inspect's ``loss`` hook, which
returns None so that no extra backward runs (the cell calls ``.backward()``
itself when it wants one).

``--nproc N`` / ``--fsdp`` run the same function in N worker processes
(:mod:`.distributed`); rank 0's report comes back as plain data and nothing is
written back from the workers. This module imports neither :mod:`.distributed` nor
:mod:`.cell_runner`, so the workers can use :func:`inspect_cell` without an import cycle.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace

from ..errors import TraceLabError
from ..jit import EXECUTOR_CHOICES, FUSION_STRATEGIES

__all__ = ["RunOptions", "VALUE_NAME", "default_executor", "inspect_cell"]

VALUE_NAME = "__thunder_trace_value__"  # the line form's expression value


def default_executor() -> str:
    """``$TRACE_LAB_EXECUTOR`` if set (validated), else 'auto'."""
    env = os.environ.get("TRACE_LAB_EXECUTOR", "").strip()
    if env and env not in EXECUTOR_CHOICES:
        raise TraceLabError(f"TRACE_LAB_EXECUTOR={env!r} is not an executor; choose one of {', '.join(EXECUTOR_CHOICES)}")
    return env or "auto"


@dataclass(frozen=True)
class RunOptions:
    fusion: str = "auto"
    executor: str = "auto"
    fusion_cache: bool = True
    sort_waits: bool = True
    cuda_graphs: bool = False
    runs: int = 3
    nproc: int | None = None
    fsdp: str | None = None
    max_inflight: int | None = None  # ZeRO-3 all-gathers in flight; None: the pass's default, 0: unlimited
    max_region_ops: int | None = None  # cap on a horizontal region's ops; None: unbounded (Thunder's)

    def validate(self) -> "RunOptions":
        if self.fusion not in FUSION_STRATEGIES:
            raise TraceLabError(f"--fusion {self.fusion}: choose one of {', '.join(FUSION_STRATEGIES)}")
        if self.executor not in EXECUTOR_CHOICES:
            raise TraceLabError(f"--executor {self.executor}: choose one of {', '.join(EXECUTOR_CHOICES)}")
        if self.runs < 0:
            raise TraceLabError(f"--runs {self.runs}: the number of timed runs cannot be negative")
        if self.nproc is not None and self.nproc < 1:
            raise TraceLabError(f"--nproc {self.nproc}: needs at least one process")
        if self.fsdp not in (None, "zero2", "zero3"):
            raise TraceLabError(f"--fsdp {self.fsdp}: choose zero2 or zero3")
        if self.max_inflight is not None and (self.max_inflight < 0 or not self.fsdp):
            raise TraceLabError(f"--max-inflight {self.max_inflight}: needs --fsdp and a count >= 0 (0 = unlimited)")
        if self.max_region_ops is not None and self.max_region_ops < 1:
            raise TraceLabError(f"--max-region-ops {self.max_region_ops}: give a number of ops >= 1")
        return self

    def changed(self, **kw) -> "RunOptions":
        return replace(self, **kw).validate()

    def describe(self) -> str:
        parts = [f"fusion={self.fusion}", f"executor={self.executor}"]
        if not self.fusion_cache:
            parts.append("no cache")
        if not self.sort_waits:
            parts.append("no wait sorting")
        if self.cuda_graphs:
            parts.append("CUDA graphs")
        if self.nproc:
            parts.append(f"nproc={self.nproc}")
        if self.fsdp:
            parts.append(f"fsdp={self.fsdp}")
        if self.max_inflight is not None:
            parts.append(f"max in-flight gathers={self.max_inflight or 'unlimited'}")
        if self.max_region_ops is not None:
            parts.append(f"regions <= {self.max_region_ops} ops")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)


def inspect_cell(fn, args, options: RunOptions, label: str, progress=None):
    """(Report, the names the cell bound in its last compiled call): ``trace_lab.inspect`` of a cell function."""
    __tracebackhide__ = True  # noqa: F841
    import trace_lab

    outputs: list = []

    def keep_output(out):  # inspect's loss hook: record the cell's bindings, request no backward
        outputs.append(out)
        return None

    extra = {} if options.max_inflight is None else {"max_inflight_gathers": options.max_inflight or None}
    if options.max_region_ops is not None:
        extra["max_region_ops"] = options.max_region_ops
    if options.cuda_graphs:
        extra["cuda_graphs"] = True
    report = trace_lab.inspect(
        fn, *args, fusion=options.fusion, executor=options.executor, fusion_cache=options.fusion_cache,
        sort_waits=options.sort_waits, fsdp=options.fsdp, runs=options.runs, measure_memory=options.runs > 0,
        backward=None, loss=keep_output, name=label, progress=progress, **extra)
    return report, (dict(outputs[-1]) if outputs and isinstance(outputs[-1], dict) else {})
