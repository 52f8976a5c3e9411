"""Executors: how a scheduled Trace becomes a runnable program.

An executor answers two questions in one place each: which ops it can fuse
(:meth:`Executor.can_fuse`, consulted by the fusion passes) and how to run a
final Trace (:meth:`Executor.compile`, returning a :class:`CompiledProgram`).
``materializes_regions`` tells the liveness model whether a fused region's inner
values touch memory under this executor (True for the op-by-op eager executor).

Executors register themselves by name in :data:`EXECUTORS` (both defined in
:mod:`.interface`, which the executor modules import); this module loads them
(:func:`get_executor`) and resolves ``executor="auto"`` (:func:`resolve_executor`,
which says why it chose what it chose).

Loading does not hide errors: an executor module that fails to import because an
optional third-party package (:data:`OPTIONAL_PACKAGES`) is missing is recorded in
:data:`UNAVAILABLE` with the reason, and asking for it raises
:class:`~trace_lab.errors.MissingDependencyError` saying so; any other ImportError
(a bug in the package's own modules) propagates as it is.
"""
from __future__ import annotations

import torch

from ..errors import MissingDependencyError
from .interface import EXECUTORS, CompiledProgram, Executor, register

__all__ = ["Executor", "CompiledProgram", "EXECUTORS", "register", "get_executor", "resolve_executor", "strategies_for",
           "UNAVAILABLE", "OPTIONAL_PACKAGES"]

# third-party packages an executor module may import that trace_lab does not require
OPTIONAL_PACKAGES = frozenset({"nvfuser_direct", "nvfuser", "triton"})
# executor name -> why its module could not be imported here (a missing optional package)
UNAVAILABLE: dict[str, str] = {}


def _optional_missing(name: str, error: ImportError) -> None:
    """Record executor ``name`` as unavailable when ``error`` is a missing optional package;
    re-raise it otherwise."""
    missing = getattr(error, "name", None) or ""
    if missing.split(".")[0] not in OPTIONAL_PACKAGES:
        raise error
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    UNAVAILABLE[name] = f"{missing} cannot be imported ({type(error).__name__}: {text})"


def _load_executors() -> None:
    from . import eager  # noqa: F401 - registers itself; needs nothing optional

    if "inductor" not in EXECUTORS and "inductor" not in UNAVAILABLE:
        try:
            from . import inductor  # noqa: F401
        except ImportError as e:
            _optional_missing("inductor", e)
    if "nvfuser" not in EXECUTORS and "nvfuser" not in UNAVAILABLE:
        try:
            from . import nvfuser  # noqa: F401
        except ImportError as e:
            _optional_missing("nvfuser", e)


def get_executor(name: str, options=None) -> Executor:
    """The executor ``name`` made for ``options`` (a checked trace_lab.options.Options; None: the defaults)."""
    _load_executors()
    if name not in EXECUTORS and name in UNAVAILABLE:
        raise MissingDependencyError(
            f"executor={name!r} cannot be used here: {UNAVAILABLE[name]}; "
            f"choose one of: auto, {', '.join(sorted(EXECUTORS))}")
    if name not in EXECUTORS:
        raise ValueError(f"unknown executor {name!r}; choose one of: auto, {', '.join(sorted(EXECUTORS))}")
    if options is None:
        from ..options import Options

        options = Options()
    return EXECUTORS[name].from_options(options)


def strategies_for(executor: str) -> list[str]:
    """The fusion strategies (``auto`` left out) that ``executor`` (a resolved name) can run: ``layers`` needs one
    whose regions compile the library ops they hold (``Executor.compiles_library_ops``)."""
    from ..options import FUSION_STRATEGIES

    _load_executors()
    cls = EXECUTORS.get(executor)
    return [s for s in FUSION_STRATEGIES
            if s != "auto" and (s != "layers" or getattr(cls, "compiles_library_ops", False))]


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
