"""python_warnings: the Python warnings raised while the lab runs a cell, kept on its Report.

A warning raised during one of the lab's runs of a cell - Inductor's hint that TF32 tensor cores are
off, the notice an optimizer gives once Dynamo's capture has made it ``capturable`` - would otherwise
reach the notebook as a stderr box under the cell, without saying which run or Report it belongs to.
:func:`kept_on_report` wraps a function that returns a Report: every warning its work shows (from any
thread: regions compile on a pool) is listed on that Report's ``warnings``, once, with the place that
raised it. The filters in force decide as always (an ignored warning stays ignored, an ``error`` filter
still raises, a ``default`` one shows a place's warning once per process). If the function raises
instead, the warnings are shown as Python would have shown them.

Not ``warnings.catch_warnings``: it swaps process-wide state on entry and restores it on exit, so two runs
that overlap in time (a widget's rerun thread beside a cell) could restore each other's state and leave
every later warning going into a finished run's list. Instead one hook is installed as
``warnings.showwarning`` (again whenever something else, such as a test's ``catch_warnings``, replaced
it) and stays; it hands a warning to the newest run still collecting, or on to the function it
replaced when none is. A warning goes to the run of the thread that raised it, or, from a thread no run
owns (a compile pool's), to the newest run.
"""
from __future__ import annotations

import functools
import threading
import warnings

__all__ = ["kept_on_report", "describe"]

_LONGEST = 400  # characters of a warning's message a Report keeps
_lock = threading.Lock()
_sinks: list[tuple[int, list]] = []  # (thread id, list) of the runs collecting now, newest last


def describe(w: warnings.WarningMessage) -> str:
    """One line for a Report: category, message (first line, shortened) and where it was raised."""
    lines = str(w.message).strip().splitlines() or [""]
    text = lines[0] if len(lines[0]) <= _LONGEST else lines[0][:_LONGEST - 3] + "..."
    path = w.filename.replace("\\", "/")
    for root in ("site-packages/", "dist-packages/"):
        if root in path:
            path = path.split(root, 1)[1]
    return f"{w.category.__name__} raised at {path}:{w.lineno}: {text}"


def _install() -> None:
    """Make the collecting hook ``warnings.showwarning``, wrapping whatever is there now."""
    with _lock:
        current = warnings.showwarning
        if getattr(current, "_trace_lab_hook", False):
            return

        def hook(message, category, filename, lineno, file=None, line=None):
            sink = _sink_for(threading.get_ident())
            if sink is None:
                return current(message, category, filename, lineno, file, line)
            sink.append(warnings.WarningMessage(message, category, filename, lineno, file, line))

        hook._trace_lab_hook = True
        hook._replaced = current
        warnings.showwarning = hook


def _sink_for(thread: int) -> list | None:
    """The list of the newest run this thread collects for; else the newest run's (a thread a run started,
    such as a compile pool's, collects for it); None when no run collects."""
    runs = list(_sinks)
    for owner, sink in reversed(runs):
        if owner == thread:
            return sink
    return runs[-1][1] if runs else None


def _forward(caught: list) -> None:
    """Show warnings a run collected as Python would have (the hook passes them on: no run collects now, or the
    enclosing run does)."""
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)


def kept_on_report(fn):
    """``fn(...)`` returns a Report; the warnings its work raised are appended to ``report.warnings``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _install()
        caught: list = []
        with _lock:
            _sinks.append((threading.get_ident(), caught))
        try:
            report = fn(*args, **kwargs)
        except BaseException:
            _leave(caught)
            _forward(caught)
            raise
        _leave(caught)
        for text in dict.fromkeys(describe(w) for w in caught):
            if text not in report.warnings:
                report.warnings.append(text)
        return report

    return wrapper


def _leave(caught: list) -> None:
    with _lock:
        for i in range(len(_sinks) - 1, -1, -1):  # by identity: overlapping runs end in any order
            if _sinks[i][1] is caught:
                del _sinks[i]
                break
