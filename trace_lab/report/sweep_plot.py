"""The sweep's scatter plot (trace_lab.lab.sweep): step time against peak, one point per configuration, measured
and predicted.

Measured peaks are circles: filled where the configuration is on the front (no other better on both), joined in
time order; hollow otherwise. Predicted peaks (the liveness model's figure for the same part) are a second series
of hollow diamonds at the same step time, so a gap between the two reads straight off the plot. Each measured point
is labelled with its configuration. Drawn by matplotlib's Agg canvas to SVG (no display); labels are user text:
``$`` is escaped so matplotlib never reads them as math.
"""
from __future__ import annotations

import io

from .svg_compact import compact_svg

__all__ = ["sweep_svg", "sweep_figure"]


def sweep_figure(rows, size: tuple[float, float] = (6.5, 3.8)):
    """The matplotlib Figure (Agg canvas): series ``measured`` (circles) and ``predicted`` (hollow diamonds)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    points = [r for r in rows if r.step_ms is not None and r.measured_peak is not None]
    predicted = [r for r in rows if r.step_ms is not None and r.predicted_peak is not None]
    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    top = max([r.measured_peak for r in points] + [r.predicted_peak for r in predicted], default=0)
    scale, unit = (2 ** 20, "MiB") if top >= 2 ** 20 else (2 ** 10, "KiB")
    if points:  # one series, the front's points filled
        ax.scatter([r.step_ms for r in points], [r.measured_peak / scale for r in points], marker="o", color="C0",
                   facecolors=["C0" if r.front else "none" for r in points], label="measured", zorder=3)
    if predicted:
        ax.scatter([r.step_ms for r in predicted], [r.predicted_peak / scale for r in predicted], marker="D", s=22,
                   facecolors="none", edgecolors="C1", label="predicted", zorder=2)
    for r in points:
        ax.annotate(r.label.replace("$", r"\$"), (r.step_ms, r.measured_peak / scale), textcoords="offset points",
                    xytext=(4, 4), fontsize=7)
    front = sorted((r for r in points if r.front), key=lambda r: r.step_ms)
    if len(front) > 1:
        ax.plot([r.step_ms for r in front], [r.measured_peak / scale for r in front], "-", color="C0", alpha=0.5)
    ax.set_xlabel("step time (ms, median)")
    ax.set_ylabel(f"peak above inputs ({unit})")
    ax.set_title("time against memory (filled: no other configuration better on both)", fontsize=9)
    if points or predicted:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def sweep_svg(rows, size: tuple[float, float] = (6.5, 3.8)) -> str:
    import matplotlib

    fig = sweep_figure(rows, size)
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "trace_lab"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = compact_svg(buf.getvalue())
    i = svg.find("<svg")
    return svg[i:] if i >= 0 else svg
