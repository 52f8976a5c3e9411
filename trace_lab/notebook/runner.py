"""Runner: the options of a run and one in-process run of a cell function -> Report.

:class:`RunOptions` are the switches the magic's flags and the widgets' controls
set: one field per option of :data:`trace_lab.options.SCHEMA` offered to a cell run
(surface ``cell``), checked when made. :func:`inspect_cell` is one run of a cell function in this process (a worker
of ``--nproc`` runs the same call, :mod:`.distributed`); :class:`.cell_runner.CellRunner`
chooses between the two. CellRunner.run builds a fresh function from the cell (so every run
has its own Dynamo cache entries), reads its inputs from the notebook *now*,
runs it through :func:`trace_lab.inspect` (eager reference on deep copies, then
the compiled run, memory and timing runs: every forward/backward program and
every graph of a graph break is recorded) and, only when all of that succeeded,
writes the names the cell bound back into the notebook. A progress that takes compile events
(:class:`.progress.RunProgress`) is told what compiles (program part, region k of N) and ticks the
elapsed time while the cell runs. The cell's returned dict
is taken from the last compiled call through inspect's ``loss`` hook, which
returns None so that no extra backward runs (the cell calls ``.backward()``
itself when it wants one).

``--nproc N`` / ``--fsdp`` run the same function in N worker processes
(:mod:`.distributed`); rank 0's report comes back as plain data and nothing is
written back from the workers. This module imports neither :mod:`.distributed` nor
:mod:`.cell_runner`, so the workers can use :func:`inspect_cell` without an import cycle.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import replace

from ..errors import TraceLabError
from ..options import EXECUTOR_CHOICES, OPTIONS, SCHEMA, names, options_class

__all__ = ["RunOptions", "VALUE_NAME", "default_executor", "from_flags", "inspect_cell"]

VALUE_NAME = "__thunder_trace_value__"  # the line form's expression value


def default_executor() -> str:
    """``$TRACE_LAB_EXECUTOR`` if set (validated), else 'auto'."""
    env = os.environ.get("TRACE_LAB_EXECUTOR", "").strip()
    if env and env not in EXECUTOR_CHOICES:
        raise TraceLabError(f"TRACE_LAB_EXECUTOR={env!r} is not an executor; choose one of {', '.join(EXECUTOR_CHOICES)}")
    return env or "auto"


def _validate(self) -> "RunOptions":
    """The checks between options (each option's own values are checked when a RunOptions is made)."""
    if self.baseline is not None:
        from ..lab.peers import parse_peers

        parse_peers(self.baseline)  # a clear error before anything runs
        if self.nproc is not None or self.fsdp is not None:
            raise TraceLabError("--baseline: peers run in this process; drop --baseline with --nproc/--fsdp")
    if self.peer_trace and (self.nproc is not None or self.fsdp is not None):
        raise TraceLabError("--peer-trace: torch.compile's trace runs in this process; drop --peer-trace with "
                            "--nproc/--fsdp")
    if self.max_inflight_gathers != "auto" and not self.fsdp:
        shown = OPTIONS["max_inflight_gathers"].flag_none if self.max_inflight_gathers is None else \
            self.max_inflight_gathers
        raise TraceLabError(f"--max-inflight {shown}: needs --fsdp and a count >= 0 (0 = unlimited)")
    return self


def _changed(self, **kw) -> "RunOptions":
    return replace(self, **kw).validate()


def _describe(self) -> str:
    """Fusion, executor and every option that is not at its default, e.g. 'fusion=memory, executor=eager, no cache'."""
    parts = []
    for o in (o for o in SCHEMA if "cell" in o.surfaces):
        value = getattr(self, o.name)
        if value != o.flag_default_value or o.name in ("fusion", "executor"):
            parts.append((o.word if value else f"no {o.word}") if o.type is bool else f"{o.name}={value}")
    return ", ".join(parts)


def from_flags(args) -> "RunOptions":
    """The RunOptions of the magic's parsed flags (argparse's namespace; see magics.py)."""
    values = {}
    for o in SCHEMA:
        if "cell" in o.surfaces:
            value = getattr(args, o.dest)
            if o.type is bool and o.default is True:  # --no-NAME
                value = not value
            elif value is None:
                value = default_executor() if o.name == "executor" else o.default
            elif value == o.flag_none:
                value = None
            values[o.name] = value
    return RunOptions(**values).validate()


RunOptions = options_class(
    "RunOptions", "cell", "The options of a cell run (the magic's flags, the widgets' controls).",
    defaults={o.name: o.flag_default_value for o in SCHEMA}, methods={
        "validate": _validate, "changed": _changed, "describe": _describe})
RunOptions.__module__ = __name__


def inspect_cell(fn, args, options: RunOptions, label: str, progress=None):
    """(Report, the names the cell bound in its last compiled call): ``trace_lab.inspect`` of a cell function."""
    __tracebackhide__ = True  # noqa: F841
    from ..lab.inspection import inspect

    outputs: list = []

    def keep_output(out):  # inspect's loss hook: record the cell's bindings, request no backward
        outputs.append(out)
        return None

    from ..runtime.measure import NOTEBOOK_SETTLE_SECONDS, settling

    given = {n: getattr(options, n) for n in names("cell") if n in names("inspect")}
    # the front end renders the last outputs while this cell runs (Run All): timing waits for it to finish; not
    # in a --nproc rank, whose timed runs meet the other ranks' at every collective
    with _reporting(progress), settling(0.0 if _in_process_group() else NOTEBOOK_SETTLE_SECONDS):
        report = inspect(fn, *args, **given, measure_memory=options.runs > 0, backward=None,
                         loss=keep_output, name=label, progress=progress,
                         measure_step=bool(options.baseline))  # the figure --baseline peers have
    return report, (dict(outputs[-1]) if outputs and isinstance(outputs[-1], dict) else {})


def _in_process_group() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


@contextlib.contextmanager
def _reporting(progress):
    """A progress that takes compile events (:class:`.progress.RunProgress`) gets jit's, and its ticker runs
    while the cell does; a plain ``progress(msg)`` gets inspect's steps only."""
    from ..run.jit import compile_progress

    events = getattr(progress, "compile_event", None)
    if events is None:
        yield
        return
    start, stop = getattr(progress, "start", None), getattr(progress, "stop", None)
    if start is not None:
        start()
    try:
        with compile_progress(events):
            yield
    finally:
        if stop is not None:
            stop()
