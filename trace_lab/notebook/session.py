"""Session: the runs that feed a Compare table, in the order they happened.

A :class:`Session` is an append-only list of :class:`Run` (a label and its
Report). Each ``%%thunder_trace`` output owns one (its first run and every
Rerun); the kernel-wide session (:func:`kernel_session`) collects the runs of
cells marked ``--compare``, so runs of different cells (2 vs 8 layers) share one
table. Failed runs are never appended, so a failure keeps every earlier row.

``rows()`` are plain dicts (see :mod:`trace_lab.report.table` for the columns);
``to_dataframe()`` returns a pandas DataFrame when pandas is installed and the
list of dicts otherwise.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

from ..report.table import COLUMNS, best_rows, report_row

__all__ = ["Run", "Session", "kernel_session"]


@dataclass(eq=False)  # identity: two runs are never 'equal'
class Run:
    label: str
    report: object  # trace_lab.report.Report

    def row(self) -> dict:
        return report_row(self.report, self.label)


class Session:
    """Append-only, thread-safe list of runs (a Rerun appends from a worker thread)."""

    def __init__(self):
        self._runs: list[Run] = []
        self._lock = threading.Lock()
        self._listeners = weakref.WeakSet()  # objects with .on_session_change(session); views sharing a table

    def add(self, label: str, report) -> Run:
        run = Run(label, report)
        with self._lock:
            self._runs.append(run)
        self._notify()
        return run

    def subscribe(self, listener) -> None:
        """Call ``listener.on_session_change(self)`` after every change (held weakly)."""
        self._listeners.add(listener)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            try:
                listener.on_session_change(self)
            except Exception:  # noqa: BLE001 - one broken view must not stop the others
                pass

    @property
    def runs(self) -> list[Run]:
        with self._lock:
            return list(self._runs)

    def __len__(self) -> int:
        return len(self._runs)

    def labels(self) -> list[str]:
        return [r.label for r in self.runs]

    def unique_label(self, base: str) -> str:
        taken = set(self.labels())
        if base not in taken:
            return base
        k = 2
        while f"{base} ({k})" in taken:
            k += 1
        return f"{base} ({k})"

    def rows(self) -> list[dict]:
        return [r.row() for r in self.runs]

    def best(self) -> dict[str, set[int]]:
        return best_rows(self.rows())

    def to_dataframe(self):
        """A pandas DataFrame (one row per run, COLUMNS) or, without pandas, the list of row dicts."""
        rows = self.rows()
        try:
            import pandas as pd
        except ImportError:
            return rows
        return pd.DataFrame(rows, columns=COLUMNS)

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()
        self._notify()

    def __repr__(self) -> str:
        return f"<Session: {len(self)} runs>"


_KERNEL_SESSION = Session()


def kernel_session() -> Session:
    """The process-wide session holding every run made with ``--compare``."""
    return _KERNEL_SESSION
