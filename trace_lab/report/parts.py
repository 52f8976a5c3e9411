"""The programs x parts walk, written once.

A run has programs (one per Dynamo graph); each has a forward (or inference) part and
maybe a backward part. What the views show of a part is its compilation record
(:class:`trace_lab.run.compilation.CompilationRecord`, kept by the Report):
:func:`record_parts` walks a run's records; :func:`program_parts` (:mod:`trace_lab.capture.session`,
beside Program) walks a live JitFunction's programs for the run stage; :func:`summary_parts`
walks a Report's plain ``programs`` data the same way. :func:`materializes_regions`
says how the executor that runs a part runs its fused regions (the liveness
model the part's figures use): read from the part's own record, never from the
JitFunction's executors.
"""
from __future__ import annotations

from ..capture.session import program_parts
from ..run.compilation import program_records

__all__ = ["program_parts", "record_parts", "summary_parts", "materializes_regions", "PART_KINDS"]

PART_KINDS = ("forward", "inference", "backward")


def record_parts(records):
    """(position of the program in the run, its records grouped as a program, record) for every compiled part,
    in program order, forward (or inference) before backward: ``program_parts`` over compilation records."""
    for program in sorted(program_records(records), key=lambda p: p.index):
        for part in program.parts:
            if part.traces:
                yield program.index, program, part


def summary_parts(programs: list[dict]):
    """(program entry, kind, part entry) for every part of a Report's ``programs`` data."""
    for p in programs:
        for kind in PART_KINDS:
            if kind in p:
                yield p, kind, p[kind]


def materializes_regions(part) -> bool:
    """Whether the part's executor runs fused regions op by op (``Trace.materialized_regions``, set by jit)."""
    return bool(part.traces and part.traces[-1].materialized_regions)
