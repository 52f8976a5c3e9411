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
           "MissingDependencyError", "explain_compile_error", "nothing_captured"]


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


# -- calls that ran but captured nothing (Dynamo skipped the code) -------------------------------------
def dynamo_break_counts() -> dict[str, int]:
    """Dynamo's graph-break messages so far, with their counts (process-wide)."""
    from torch._dynamo.utils import counters

    return dict(counters["graph_break"])


def dynamo_breaks_since(before: dict[str, int]) -> list[str]:
    """The graph-break messages Dynamo reported since ``before`` (:func:`dynamo_break_counts`)."""
    return [msg for msg, n in dynamo_break_counts().items() if n > before.get(msg, 0)]


def _summarise_break(msg: str, hints: bool = True) -> str:
    """First line of a Dynamo graph-break message with its explanation (and hints, not 'report an issue')."""
    lines = [ln.strip() for ln in msg.strip().splitlines() if ln.strip()]
    keep = [lines[0]] if lines else []
    keep += [ln for ln in lines[1:] if ln.startswith("Explanation:") or
             (hints and ln.startswith("Hint:") and "report an issue" not in ln)]
    return " ".join(keep).replace(" Explanation: ", ": ", 1)


def _rnn_modules(objs) -> list[str]:
    """Names of the nn.RNN / nn.LSTM / nn.GRU modules in ``objs`` (modules, bound methods, closures)."""
    import types

    import torch

    found, seen = [], set()

    def visit(o, depth):
        if depth > 4 or id(o) in seen:
            return
        seen.add(id(o))
        if isinstance(o, torch.nn.Module):
            found.extend(f"{name or 'the module'} ({type(m).__name__})" for name, m in o.named_modules()
                         if isinstance(m, torch.nn.RNNBase))
        elif isinstance(o, types.MethodType):
            visit(o.__self__, depth + 1)
        elif isinstance(o, types.FunctionType):
            for cell in o.__closure__ or ():
                try:
                    visit(cell.cell_contents, depth + 1)
                except ValueError:  # an empty cell
                    pass
        elif isinstance(o, (list, tuple)):
            for v in o:
                visit(v, depth + 1)
        elif isinstance(o, dict):
            for v in o.values():
                visit(v, depth + 1)

    for o in objs:
        visit(o, 0)
    return list(dict.fromkeys(found))


RNN_ADVICE = ("To trace it: set torch._dynamo.config.allow_rnn = True and call torch._dynamo.reset() before the "
              "first call (experimental in PyTorch: GRU and RNN are then captured with their backward; an LSTM "
              "under autograd can fail inside AOTAutograd), or write the recurrence with explicit ops, e.g. "
              "nn.LSTMCell / nn.GRUCell called in a Python loop, which torch.compile captures.")


def nothing_captured(jfn, args=()) -> str | None:
    """Why a JitFunction that was called has no program, with what to do; None when it has one
    (or was never called). ``args``: the call's arguments, searched for RNN modules too."""
    if not jfn.calls or jfn.programs:
        return None
    import types

    rnns = _rnn_modules([jfn.fn, *args])
    reasons = [_summarise_break(m, hints=not rnns) for m in getattr(jfn, "dynamo_breaks", [])]
    calls = f"{jfn.calls} call{'s' if jfn.calls > 1 else ''}"
    text = f"{calls} ran, but Dynamo ran the code eagerly without capturing a program"
    if reasons:
        text += " (Dynamo: " + "; ".join(reasons[:3]) + ")"
    if rnns:
        names = ", ".join(rnns)
        return (f"{text}. {names[:1].upper()}{names[1:]} is an RNN module, which Dynamo skips by default "
                f"(torch._dynamo.config.allow_rnn is False). {RNN_ADVICE}")
    if reasons:
        return f"{text}. Change the code Dynamo names, or move it out of the compiled function."
    if isinstance(jfn.fn, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        return (f"{text}: {getattr(jfn.fn, '__name__', jfn.fn)!s} is a builtin (no Python code for Dynamo to "
                "trace); wrap the call in a Python function, e.g. inspect(lambda t: torch.sum(t, dim=0), x)")
    return (f"{text}: either the function ran no tensor operations, or Dynamo skipped it without saying why "
            "(this code was skipped before, e.g. by an earlier torch.compile of it, or it is marked "
            "torch._dynamo.disable). torch._dynamo.explain(fn)(*args) lists Dynamo's reasons.")
