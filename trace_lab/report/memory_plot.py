"""Memory curves: live bytes after each line, several runs or strategies on one plot.

Design: plain data in (``{label: [bytes per line, entry first]}``, the shape of
``Liveness.curve()``), an SVG (or PNG) string out, drawn by matplotlib's Agg
backend on a private Figure (no pyplot state, safe in notebooks and threads).
Each curve is a step line; its peak is marked: with ``peaks`` given (the
model's high-water mark, which counts an op's inputs and outputs together and
can lie above the curve) as a dashed level in the curve's colour, otherwise at
the curve's maximum. Labels are user text: ``$`` is escaped so matplotlib never
parses them as math, and SVG text is written as paths (no raw text in the file).
:func:`curves_from_traces` builds the inputs from Traces, :func:`curves_from_stages` from a
report's view model. A curve longer than
``MAX_POINTS`` is drawn through its envelope (per bucket of lines its lowest and
highest value, in line order; first, last and peak kept exactly): the picture is the
same at the figure's resolution and the SVG stays small (~25 KB) for 10,000-line programs.
"""
from __future__ import annotations

import io

from ..ir.printer import format_bytes

__all__ = ["memory_curve_svg", "memory_curve_png", "curves_from_traces", "curves_from_stages"]

_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1))
MAX_POINTS = 600  # a lowest and a highest point per ~2 pixels of the default figure's plot area


def _envelope(ys: list, max_points: int = MAX_POINTS) -> tuple[list[int], list]:
    """(xs, ys) to draw: all points, or per bucket of lines the lowest and the highest, in line order."""
    n = len(ys)
    if n <= max_points:
        return list(range(n)), list(ys)
    size = -(-n // (max_points // 2))
    keep = {0, n - 1}
    for start in range(0, n, size):
        chunk = range(start, min(start + size, n))
        keep.add(min(chunk, key=ys.__getitem__))
        keep.add(max(chunk, key=ys.__getitem__))
    xs = sorted(keep)
    return xs, [ys[i] for i in xs]


def _unit(max_bytes: int) -> tuple[str, int]:
    for name, scale in _UNITS:
        if max_bytes >= scale:
            return name, scale
    return "B", 1


def _plain(text) -> str:
    return str(text).replace("\\", "\\\\").replace("$", r"\$")


def _figure(curves: dict, peaks: dict | None, title: str, xlabel: str, size: tuple[float, float]):
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    if not curves:
        raise ValueError("memory_curve needs at least one curve ({label: [bytes per line]})")
    for label, ys in curves.items():
        if len(ys) == 0:
            raise ValueError(f"curve {label!r} is empty")
    peaks = dict(peaks or {})
    unknown = set(peaks) - set(curves)
    if unknown:
        raise ValueError(f"peaks given for curves that are not plotted: {sorted(map(str, unknown))}")
    top = max(max(max(ys) for ys in curves.values()), max(peaks.values(), default=0))
    unit, scale = _unit(top)
    fig = Figure(figsize=size, dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    for label, ys in curves.items():
        xs, drawn = _envelope(ys)
        (line,) = ax.step(xs, [y / scale for y in drawn], where="post", label=_plain(label), linewidth=1.4)
        vals = [y / scale for y in ys]
        color = line.get_color()
        if label in peaks:
            level = peaks[label] / scale
            ax.axhline(level, color=color, linestyle="--", linewidth=0.9)
            ax.annotate(_plain(f"peak {format_bytes(peaks[label])}"), xy=(0, level), xytext=(2, 2),
                        textcoords="offset points", color=color, fontsize=8)
        else:
            i = max(range(len(ys)), key=lambda k: ys[k])
            ax.plot([i], [vals[i]], marker="v", color=color, markersize=7)
            ax.annotate(_plain(f"peak {format_bytes(ys[i])}"), xy=(i, vals[i]), xytext=(4, 4),
                        textcoords="offset points", color=color, fontsize=8)
    ax.set_title(_plain(title), fontsize=11)
    ax.set_xlabel(_plain(xlabel))
    ax.set_ylabel(f"live memory ({unit})")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def memory_curve_svg(curves: dict[str, list[int]], peaks: dict[str, int] | None = None,
                     title: str = "live memory per line", *, xlabel: str = "line (0 = entry)",
                     size: tuple[float, float] = (7.5, 3.4)) -> str:
    """SVG text of live bytes per line for each curve, peaks marked."""
    import matplotlib

    fig = _figure(curves, peaks, title, xlabel, size)
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "trace_lab"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    i = svg.find("<svg")
    return svg[i:] if i >= 0 else svg


def memory_curve_png(curves: dict[str, list[int]], peaks: dict[str, int] | None = None,
                     title: str = "live memory per line", *, xlabel: str = "line (0 = entry)",
                     size: tuple[float, float] = (7.5, 3.4), dpi: int = 100) -> bytes:
    """PNG bytes of the same plot."""
    fig = _figure(curves, peaks, title, xlabel, size)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def curves_from_traces(traces, materialized_regions: bool | None = None) -> tuple[dict, dict]:
    """({label: curve}, {label: peak bytes}) for Traces, labelled by stage (and kind if mixed)."""
    traces = list(traces)
    lives = [t.liveness(materialized_regions) for t in traces]
    return _labelled([(t.kind, t.stage, live.curve(), live.peak_bytes) for t, live in zip(traces, lives)])


def curves_from_stages(stages) -> tuple[dict, dict]:
    """:func:`curves_from_traces` for a view model's stages (:class:`~trace_lab.report.view_model.StageView`)."""
    return _labelled([(s.kind, s.stage, s.curve(), s.peak_bytes) for s in stages])


def _labelled(items) -> tuple[dict, dict]:
    """``items``: (kind, stage, curve, peak) -> curves and peaks labelled by stage (and kind if mixed)."""
    kinds = {kind for kind, _, _, _ in items}
    curves, peaks = {}, {}
    for kind, stage, curve, peak in items:
        label = stage if len(kinds) == 1 else f"{kind}: {stage}"
        base, k = label, 1
        while label in curves:
            k += 1
            label = f"{base} ({k})"
        curves[label] = curve
        peaks[label] = peak
    return curves, peaks
