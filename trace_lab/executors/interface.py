"""What an executor is: the :class:`Executor` interface, the :class:`CompiledProgram` it returns,
and the :data:`EXECUTORS` table each executor module registers itself in (:func:`register`).

The executor modules (eager, inductor, nvfuser) import only this module; choosing and loading
them is :mod:`.base`'s job (``get_executor``, ``resolve_executor``), which imports them, so the
two directions never meet in an import cycle. :mod:`.base` re-exports these names.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Callable

import torch.fx as fx

from ..analysis.region_record import RegionRecord, region_record

# RegionRecord and region_record (the accessor readers use) are re-exported from analysis.region_record
__all__ = ["Executor", "CompiledProgram", "EXECUTORS", "register", "RegionRecord", "region_record",
           "region_progress"]

# on_region(done, total, name) of the compile running in this context (the jit's progress for the notebook)
_ON_REGION: contextvars.ContextVar = contextvars.ContextVar("trace_lab_on_region", default=None)


@contextlib.contextmanager
def region_progress(callback: Callable[[int, int, str], None] | None):
    """While the block runs, every executor's :meth:`Executor.report_region` calls ``callback``: the
    caller's progress, without setting anything on a (cached, shared) executor."""
    token = _ON_REGION.set(callback)
    try:
        yield
    finally:
        _ON_REGION.reset(token)


@dataclass
class CompiledProgram:
    """A runnable program plus what compiling it found and cost.

    ``regions`` is what the executor learnt of each fused region (layout, workspace, cache hit,
    seconds, splits), op id (the region node's fx name) -> :class:`RegionRecord`: data beside the
    Trace, joined to it by op id (``Trace.with_regions``; read through ``region_record``), never
    written on its nodes."""

    run: Callable[[list], tuple]  # boxed call: list of inputs -> tuple of outputs
    executor: str
    compile_seconds: float = 0.0
    regions: dict[str, RegionRecord] = field(default_factory=dict)  # op id -> what compiling the region found
    notes: list[str] = field(default_factory=list)
    source: str = ""  # the generated Python that runs the program (trace_lab.runtime.codegen)
    memory_guard: object = None  # fusion='memory': the re-plans after compiling (trace_lab.memory_guard.GuardResult)
    generated: object = None  # the runtime.codegen.GeneratedProgram behind run (instrumented() for per-line time)
    region_code: dict = field(default_factory=dict)  # region op id -> () -> the code its executor generated

    def code_of(self, region: str) -> str:
        """What the executor generated for one region (Inductor's output code, nvFuser's definitions)."""
        if region not in self.region_code:
            raise KeyError(f"no generated code for region {region!r}; regions with code: {', '.join(self.region_code) or 'none'}")
        return self.region_code[region]()

    def region_table(self) -> list[dict]:
        """One JSON-ready row per region, in program order (what a report lists)."""
        return [r.to_dict() for r in self.regions.values()]


class Executor:
    name = "base"
    materializes_regions = False
    # does a region compile the library ops it holds (matmuls) itself? fusion="layers" needs it
    compiles_library_ops = False
    def report_region(self, done: int, total: int, name: str = "") -> None:
        """Called before each fused region an executor compiles and once after the last (done == total);
        reaches the callback of the enclosing :func:`region_progress` block (the jit's, for the notebook)."""
        callback = _ON_REGION.get()
        if callback is not None:
            callback(done, total, name)

    @classmethod
    def from_options(cls, options) -> "Executor":
        """The executor for a checked :class:`trace_lab.options.Options` (an executor that reads an
        option, such as ``fusion_cache``, overrides this)."""
        return cls()

    def can_fuse(self, node: fx.Node) -> bool:  # pragma: no cover - interface
        return False

    def can_compile(self, node: fx.Node) -> bool:
        """May ``node`` join a layer's region (fusion="layers")? Its fusible ops, and where
        ``compiles_library_ops``, the library ops it calls itself."""
        return self.can_fuse(node)

    def fuse_reason(self, node: fx.Node) -> str | None:
        """None when ``node`` may join a fused region, else why not (one line; executors say more)."""
        return None if self.can_fuse(node) else f"{getattr(node.target, '__name__', node.target)} is not fused by this executor"

    def compile(self, trace) -> CompiledProgram:  # pragma: no cover - interface
        raise NotImplementedError


EXECUTORS: dict[str, Callable[..., Executor]] = {}


def register(name: str):
    def deco(cls):
        EXECUTORS[name] = cls
        cls.name = name
        return cls

    return deco
