"""python_warnings: the Python warnings raised while the lab runs a cell, kept on its Report.

A warning raised during one of the lab's runs of a cell - Inductor's hint that TF32 tensor cores are
off, the notice an optimizer gives once Dynamo's capture has made it ``capturable`` - would otherwise
reach the notebook as a stderr box under the cell, once per process, and without saying which run or
Report it belongs to. :func:`kept_on_report` wraps a function that returns a Report: every warning the
function's work raises (in any thread) is listed on that Report's ``warnings``, once, with the place
that raised it; the filters in force still apply (an ignored warning stays ignored, an ``error``
filter still raises). If the function raises instead, the warnings are shown as Python would have.
"""
from __future__ import annotations

import functools
import warnings

__all__ = ["kept_on_report", "describe"]

_LONGEST = 400  # characters of a warning's message a Report keeps


def describe(w: warnings.WarningMessage) -> str:
    """One line for a Report: category, message (first line, shortened) and where it was raised."""
    lines = str(w.message).strip().splitlines() or [""]
    text = lines[0] if len(lines[0]) <= _LONGEST else lines[0][:_LONGEST - 3] + "..."
    path = w.filename.replace("\\", "/")
    for root in ("site-packages/", "dist-packages/"):
        if root in path:
            path = path.split(root, 1)[1]
    return f"{w.category.__name__} raised at {path}:{w.lineno}: {text}"


def kept_on_report(fn):
    """``fn(...)`` returns a Report; the warnings its work raised are appended to ``report.warnings``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with warnings.catch_warnings(record=True) as caught:
            try:
                report, failed = fn(*args, **kwargs), None
            except BaseException as e:  # noqa: BLE001 - raised again below, once the warnings are shown
                report, failed = None, e
        if failed is not None:  # the run failed: its warnings go where Python would have put them
            for w in caught:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
            raise failed
        for text in dict.fromkeys(describe(w) for w in caught):
            if text not in report.warnings:
                report.warnings.append(text)
        return report

    return wrapper
