"""The pass registry: :data:`PASSES` by name, :func:`register_pass`, and the :class:`PassContext` a pass reads.

Its own module so that the pass modules (``fsdp``, ``fusion``, ``sort_waits``) register
themselves without importing the package ``__init__``, which imports them
(:func:`trace_lab.passes.run_pipeline`): the import graph stays acyclic
(``tests/test_import_graph.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..ir.trace import Trace
from ..options import Options

__all__ = ["PassContext", "PASSES", "register_pass"]


@dataclass
class PassContext:
    options: Options
    executor: object  # trace_lab.executors.Executor
    # names of ops the fusion pass must leave unfused (the memory strategy's compile feedback)
    keep_unfused: frozenset = frozenset()
    # names of ops whose units the memory strategy must not merge with each other (compiled as one region they
    # took more than planned: trace_lab.run.memory_guard)
    keep_apart: frozenset = frozenset()


PASSES: dict[str, Callable[[Trace, PassContext], Trace]] = {}


def register_pass(name: str):
    def deco(fn):
        PASSES[name] = fn
        fn.pass_name = name
        return fn

    return deco
