"""Views that must not take the report down: the graph view and the memory plot.

graphviz and matplotlib are dependencies of trace_lab, so both views are plain
imports (:mod:`.graph`, :mod:`.memory_plot`). A view that fails, or a part whose
view model holds no graphs (it says why), becomes a one-line placeholder (HTML,
escaped), so every other tab keeps working.
"""
from __future__ import annotations

from ..ir.printer import format_bytes
from .graph import graph_pair_html
from .memory_plot import memory_curve_svg
from .packing import esc

__all__ = ["graph_view_html", "memory_curve_html", "placeholder"]


def placeholder(text: str) -> str:
    return f'<div class="tl-placeholder">{esc(text)}</div>'


def graph_view_html(part, **options) -> str:
    """Before/after-fusion graphs of one program part (a :class:`~.view_model.PartView`); ``options`` go to
    :func:`trace_lab.report.graph.graph_pair_html` (e.g. ``include_js``, ``compress``)."""
    graphs = part.graphs
    if "error" in graphs:
        return placeholder(f"graph view failed: {graphs['error']}")
    try:
        return graph_pair_html(graphs["before"], graphs["after"], **options)
    except Exception as e:  # noqa: BLE001 - a broken view must not take the other tabs down
        return placeholder(f"graph view failed: {type(e).__name__}: {e}")


def memory_curve_html(curves: dict[str, list[int]], peaks: dict | None = None, title: str = "live bytes") -> str:
    """One plot of several live-bytes curves (``trace_lab.report.memory_plot``) and a peak table."""
    table = "".join(f"<tr><td>{esc(label)}</td><td>{len(c) - 1}</td><td>{esc(format_bytes(max(c) if c else 0))}</td></tr>"
                    for label, c in curves.items())
    table = f"<table><tr><th>curve</th><th>lines</th><th>peak live</th></tr>{table}</table>"
    try:
        return memory_curve_svg(curves, peaks=peaks, title=title) + table
    except Exception as e:  # noqa: BLE001
        return placeholder(f"memory plot failed: {type(e).__name__}: {e}") + table
