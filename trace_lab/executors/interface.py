"""What an executor is: the :class:`Executor` interface, the :class:`CompiledProgram` it returns,
and the :data:`EXECUTORS` table each executor module registers itself in (:func:`register`).

The executor modules (eager, inductor, nvfuser) import only this module; choosing and loading
them is :mod:`.base`'s job (``get_executor``, ``resolve_executor``), which imports them, so the
two directions never meet in an import cycle. :mod:`.base` re-exports these names.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch.fx as fx

__all__ = ["Executor", "CompiledProgram", "EXECUTORS", "register"]


@dataclass
class CompiledProgram:
    """A runnable program plus what compiling it cost."""

    run: Callable[[list], tuple]  # boxed call: list of inputs -> tuple of outputs
    executor: str
    compile_seconds: float = 0.0
    regions: list[dict] = field(default_factory=list)  # per fused region: name, signature, cache hit, seconds
    notes: list[str] = field(default_factory=list)
    source: str = ""  # the generated Python that runs the program (trace_lab.runtime.codegen)


class Executor:
    name = "base"
    materializes_regions = False

    def can_fuse(self, node: fx.Node) -> bool:  # pragma: no cover - interface
        return False

    def compile(self, trace) -> CompiledProgram:  # pragma: no cover - interface
        raise NotImplementedError


EXECUTORS: dict[str, Callable[..., Executor]] = {}


def register(name: str):
    def deco(cls):
        EXECUTORS[name] = cls
        cls.name = name
        return cls

    return deco
