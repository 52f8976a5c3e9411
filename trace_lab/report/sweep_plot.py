"""The sweep's scatter plot (trace_lab.lab.sweep): step time against measured peak, one point per configuration.

Points of the front (no other configuration better on both) are filled and joined in time order; the others are
hollow; each point is labelled with its configuration. Drawn by matplotlib's Agg canvas to SVG (no display);
labels are user text: ``$`` is escaped so matplotlib never reads them as math.
"""
from __future__ import annotations

import io

from .svg_compact import compact_svg

__all__ = ["sweep_svg"]


def sweep_svg(rows, size: tuple[float, float] = (6.5, 3.8)) -> str:
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    points = [r for r in rows if r.step_ms is not None and r.measured_peak is not None]
    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    scale, unit = (2 ** 20, "MiB") if max((r.measured_peak for r in points), default=0) >= 2 ** 20 else (2 ** 10, "KiB")
    for r in points:
        x, y = r.step_ms, r.measured_peak / scale
        ax.plot([x], [y], "o", color="C0", markerfacecolor="C0" if r.front else "none")
        ax.annotate(r.label.replace("$", r"\$"), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    front = sorted((r for r in points if r.front), key=lambda r: r.step_ms)
    if len(front) > 1:
        ax.plot([r.step_ms for r in front], [r.measured_peak / scale for r in front], "-", color="C0", alpha=0.5)
    ax.set_xlabel("step time (ms, median)")
    ax.set_ylabel(f"measured peak above inputs ({unit})")
    ax.set_title("time against memory (filled: no other configuration better on both)", fontsize=9)
    fig.tight_layout()
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "trace_lab"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = compact_svg(buf.getvalue())
    i = svg.find("<svg")
    return svg[i:] if i >= 0 else svg
