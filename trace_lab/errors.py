"""Errors: one exception type for trace_lab's own failures, with messages that say
what happened and what to do.

User code that raises keeps its own exception (the user's bug is theirs to see,
unchanged). Failures inside the compiler stack are unwrapped from Dynamo's
``BackendCompilerFailed`` / ``Unsupported`` wrappers and re-raised as
:class:`TraceLabError` subclasses whose first line is the explanation; the
original exception stays attached as ``__cause__``.
"""
from __future__ import annotations

__all__ = ["TraceLabError", "UnsupportedOpError", "CaptureError", "OutOfMemoryError",
           "MissingDependencyError", "explain_compile_error"]


class TraceLabError(RuntimeError):
    """Base class: something trace_lab could not do, said plainly."""


class CaptureError(TraceLabError):
    """torch.compile could not capture the program."""


class UnsupportedOpError(TraceLabError):
    """An op that no executor in use can run."""


class OutOfMemoryError(TraceLabError):
    """The device ran out of memory while compiling or running."""


class MissingDependencyError(TraceLabError):
    """An optional dependency (nvFuser, a GPU, the `dot` binary) is absent."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def explain_compile_error(e: BaseException) -> BaseException:
    """A TraceLabError explaining ``e``, or ``e`` itself when it is the user's own error."""
    import torch

    inner = e
    try:
        from torch._dynamo.exc import BackendCompilerFailed, Unsupported
    except ImportError:  # pragma: no cover - every supported torch has them
        BackendCompilerFailed = Unsupported = ()  # type: ignore
    if isinstance(e, BackendCompilerFailed):
        inner = getattr(e, "inner_exception", None) or e.__cause__ or e
        if isinstance(inner, TraceLabError):
            return inner
    if isinstance(inner, torch.OutOfMemoryError) or "out of memory" in str(inner).lower():
        return OutOfMemoryError(
            f"the device ran out of memory: {_first_line(inner)}. Try a smaller input, a fusion strategy "
            "with a lower predicted peak (fusion='memory'), or free tensors you no longer need; "
            "earlier results are kept.")
    if isinstance(e, Unsupported):
        return CaptureError(
            f"torch.compile could not capture this code: {_first_line(e)}. Simplify that construct or move it "
            "out of the compiled function.")
    if inner is not e:
        return TraceLabError(f"trace_lab failed while compiling a captured program: "
                             f"{type(inner).__name__}: {_first_line(inner)}")
    return e
