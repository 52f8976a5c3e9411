"""Optional views: the report's only doors to views that live in other modules.

The graph view (``trace_lab.report.graph``) and the memory plot
(``trace_lab.report.memory_plot``) are imported lazily, at call time. When one is
absent, or fails, the adapter returns a one-line placeholder saying which module
is needed (HTML, escaped), so every other tab keeps working. :func:`optional`
is the shared lookup (the notebook uses it for the multi-process runner).
"""
from __future__ import annotations

import importlib

from .packing import esc

__all__ = ["graph_view_html", "memory_curve_html", "optional", "placeholder"]


def placeholder(text: str) -> str:
    return f'<div class="tl-placeholder">{esc(text)}</div>'


def optional(module: str, attr: str):
    """(callable or None, why it is missing)."""
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name == module:
            return None, f"needs {module} (not in this build of trace_lab)"
        return None, f"needs {module}, which failed to import: {type(e).__name__}: {e}"
    fn = getattr(mod, attr, None)
    return fn, (f"needs {module}.{attr}" if fn is None else "")


def graph_view_html(before, after, **options) -> str:
    """Before/after-fusion graphs of one program part (``trace_lab.report.graph``); ``options`` go to
    :func:`trace_lab.report.graph.graph_view_html` (e.g. ``include_js``, ``compress``)."""
    fn, why = optional("trace_lab.report.graph", "graph_view_html")
    if fn is None:
        return placeholder(f"graph view {why}")
    try:
        return fn(before, after, **options)
    except Exception as e:  # noqa: BLE001 - a broken view must not take the other tabs down
        return placeholder(f"graph view failed: {type(e).__name__}: {e}")


def memory_curve_html(curves: dict[str, list[int]], peaks: dict | None = None, title: str = "live bytes") -> str:
    """One plot of several live-bytes curves (``trace_lab.report.memory_plot``), else a peak table."""
    from ..printer import format_bytes

    fn, why = optional("trace_lab.report.memory_plot", "memory_curve_svg")
    table = "".join(f"<tr><td>{esc(label)}</td><td>{len(c) - 1}</td><td>{esc(format_bytes(max(c) if c else 0))}</td></tr>"
                    for label, c in curves.items())
    table = f"<table><tr><th>curve</th><th>lines</th><th>peak live</th></tr>{table}</table>"
    if fn is None:
        return placeholder(f"memory plot {why}; peaks:") + table
    try:
        return fn(curves, peaks=peaks, title=title) + table
    except Exception as e:  # noqa: BLE001
        return placeholder(f"memory plot failed: {type(e).__name__}: {e}") + table
