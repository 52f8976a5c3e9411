"""Executors: how a scheduled Trace becomes a runnable program.

An executor answers two questions in one place each: which ops it can fuse
(:meth:`Executor.can_fuse`, consulted by the fusion passes) and how to run a
final Trace (:meth:`Executor.compile`, returning a :class:`CompiledProgram`).
``materializes_regions`` tells the liveness model whether a fused region's inner
values touch memory under this executor (True for the op-by-op eager executor).

Executors register themselves by name in :data:`EXECUTORS`; ``executor="auto"``
is resolved by :func:`resolve_executor`, which says why it chose what it chose.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.fx as fx

__all__ = ["Executor", "CompiledProgram", "EXECUTORS", "register", "get_executor", "resolve_executor"]


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


def get_executor(name: str, **options) -> Executor:
    from . import eager  # noqa: F401 - registers itself

    try:
        from . import inductor  # noqa: F401
    except ImportError:
        pass
    try:
        from . import nvfuser  # noqa: F401
    except ImportError:
        pass
    if name not in EXECUTORS:
        raise ValueError(f"unknown executor {name!r}; choose one of: auto, {', '.join(sorted(EXECUTORS))}")
    return EXECUTORS[name](**options)


def resolve_executor(name: str, device: torch.device) -> tuple[str, str]:
    """(executor name, one-line reason) for a requested name on a device."""
    if name != "auto":
        return name, f"requested executor={name}"
    if device.type == "cuda":
        from .nvfuser_import import unavailable_reason

        why = unavailable_reason()
        if why is not None:
            return "inductor", f"auto: nvFuser not usable here ({why}); using Inductor"
        return "nvfuser", "auto: CUDA device and nvfuser_direct imports"
    return "inductor", f"auto: device is {device.type}, nvFuser needs CUDA; using Inductor"
