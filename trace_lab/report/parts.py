"""The programs x parts walk, written once.

A JitFunction holds programs (one per Dynamo graph); each has a forward (or
inference) part and maybe a backward part, and a part with Traces is what the
views show. :func:`program_parts` (:mod:`trace_lab.capture.session`, beside Program) walks the live objects; :func:`summary_parts`
walks a Report's plain ``programs`` data the same way. :func:`materializes_regions`
says how the executor that runs a part runs its fused regions (the liveness
model the part's figures use): read from the part's own record, never from the
JitFunction's executors.
"""
from __future__ import annotations

from ..capture.session import program_parts

__all__ = ["program_parts", "summary_parts", "materializes_regions", "PART_KINDS"]

PART_KINDS = ("forward", "inference", "backward")


def summary_parts(programs: list[dict]):
    """(program entry, kind, part entry) for every part of a Report's ``programs`` data."""
    for p in programs:
        for kind in PART_KINDS:
            if kind in p:
                yield p, kind, p[kind]


def materializes_regions(part) -> bool:
    """Whether the part's executor runs fused regions op by op (``Trace.materialized_regions``, set by jit)."""
    return bool(part.traces and part.traces[-1].materialized_regions)
