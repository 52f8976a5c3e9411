"""Passes: pure ``Trace -> Trace`` rewrites, run as a recorded pipeline.

Each pass is a plain function ``pass_fn(trace, ctx) -> Trace`` registered in
:data:`PASSES` under its name (``registry.py``, which the pass modules import).
:func:`run_pipeline` applies the passes that the options ask for, in a fixed order,
and keeps every intermediate Trace as a stage named after the pass, with the seconds
the pass took. A pass that changes nothing still leaves a stage, so users see that it
ran. Passes read their switches from ``ctx.options``, a checked :class:`trace_lab.options.Options`.
"""
from __future__ import annotations

import time

from ..ir.trace import Trace
from ..options import Options
from .registry import PASSES, PassContext, register_pass

__all__ = ["PassContext", "PASSES", "register_pass", "run_pipeline", "pipeline_for"]


def _load_passes() -> None:
    """Import the pass modules (each registers itself). They need nothing optional, so an
    ImportError here is a bug in one of them and propagates as it is."""
    from . import fsdp, fusion, sort_waits  # noqa: F401


def pipeline_for(options: Options) -> list[str]:
    """Names of the passes the options ask for, in order (the same for every kind of program)."""
    _load_passes()
    return [name for name, on in (("fsdp", bool(options.fsdp)), ("sort_waits", options.sort_waits), ("fusion", True))
            if on]


def run_pipeline(trace: Trace, ctx: PassContext) -> list[Trace]:
    stages = [trace]
    for name in pipeline_for(ctx.options):
        started = time.perf_counter()
        new = PASSES[name](stages[-1], ctx)
        seconds = time.perf_counter() - started
        if new is stages[-1]:
            new = new.derive(new.gm, name, seconds, info=new.info)
        else:
            new.pass_seconds = seconds
            if new.stage == stages[-1].stage:
                new.stage = name
        stages.append(new)
    return stages
