"""Memory curves: live bytes after each line, several runs or strategies on one plot.

Design: plain data in (``{label: [bytes per line, entry first]}``, the shape of
``Liveness.curve()``), an SVG (or PNG) string out, drawn by matplotlib's Agg
backend on a private Figure (no pyplot state, safe in notebooks and threads).
Each curve is a step line; its peak is marked: with ``peaks`` given (the
model's high-water mark, which counts an op's inputs and outputs together and
can lie above the curve) as a dashed level in the curve's colour with a marker at
the peak's line (``peak_at``), otherwise at the curve's maximum. Labels are user
text: ``$`` is escaped so matplotlib never parses them as math, and SVG text is
written as paths (no raw text in the file).

Readable at a glance (issue 18):

* curves differ in colour *and* line style (solid, dashed, dash-dot, dotted; the
  first drawn widest, underneath), so two identical curves both show;
* peak labels are placed by :func:`_place_labels`: each label tries positions
  around its marker, in the renderer's own text boxes, and takes the first that
  lies inside the axes, crosses no curve (if any such place exists; the label has a
  white backing either way) and overlaps no label placed before it (the axes get
  headroom for them; curves whose peaks coincide share one label, "(N curves)"); a label that finds no place is left to the legend, which
  names every curve's peak anyway. The labels carry SVG ids ``tl-peak-label-K``
  and the legend sits below the axes, so nothing is drawn over the curves;
* ``hover`` ({label: [text per point]}) adds, in the SVG only, an invisible
  target over each step of a curve with an SVG ``<title>``: the browser shows it
  as a tooltip, in a standalone page and in JupyterLab's widget alike (no script).
  The targets are placed with the same transform matplotlib drew with; text is
  escaped. At most ``MAX_HOVER`` targets per curve (a long curve: one per bucket
  of lines, naming its highest line); curves drawn on the same step share its target, and
  runs whose text there is the same (the same program run twice) share one entry.

:func:`curves_from_traces` builds the inputs from Traces, :func:`curves_from_stages` from a
report's view model. A curve longer than
``MAX_POINTS`` is drawn through its envelope (per bucket of lines its lowest and
highest value, in line order; first, last and peak kept exactly): the picture is the
same at the figure's resolution and the SVG stays small (~25 KB) for 10,000-line programs.
"""
from __future__ import annotations

import io

from ..ir.printer import format_bytes
from .svg_compact import compact_svg

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


# (line style, width) per curve: the first drawn widest and underneath, so identical curves both show
STYLES = (("-", 2.8), ("--", 1.8), ("-.", 1.5), (":", 2.0), ((0, (5, 1, 1, 1, 1, 1)), 1.4))
MAX_HOVER = 120  # hover targets per curve (a longer curve: one per bucket of lines; ~230 B each, kept
# small because every output is stored in the notebook: issue 18 asks for executed notebooks under 2 MB)
LABEL_ID = "tl-peak-label-{}"  # SVG id of curve k's peak label


def _check(curves: dict, peaks: dict) -> None:
    if not curves:
        raise ValueError("memory_curve needs at least one curve ({label: [bytes per line]})")
    for label, ys in curves.items():
        if len(ys) == 0:
            raise ValueError(f"curve {label!r} is empty")
    unknown = set(peaks) - set(curves)
    if unknown:
        raise ValueError(f"peaks given for curves that are not plotted: {sorted(map(str, unknown))}")


def _figure(curves: dict, peaks: dict | None, title: str, xlabel: str, size: tuple[float, float], *,
            peak_at: dict | None = None, ylabel: str = "live memory"):
    """The Figure, laid out and frozen (its texts placed): ``fig.tl_peaks`` lists per curve
    (label, x, level in bytes, label Text or None)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    peaks = dict(peaks or {})
    _check(curves, peaks)
    peak_at = dict(peak_at or {})
    top = max(max(max(ys) for ys in curves.values()), max(peaks.values(), default=0))
    unit, scale = _unit(top)
    fig = Figure(figsize=size, dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    marks = []  # (label, x, level bytes, colour)
    plotted = []  # (xs, ys in the unit) of each curve, as drawn
    for k, (label, ys) in enumerate(curves.items()):
        style, width = STYLES[k % len(STYLES)]
        xs, drawn = _envelope(ys)
        plotted.append((xs, [y / scale for y in drawn]))
        (line,) = ax.step(xs, [y / scale for y in drawn], where="post", label=_plain(label), linewidth=width,
                          linestyle=style, zorder=2 + 0.01 * k)
        color = line.get_color()
        i = max(range(len(ys)), key=lambda j: ys[j])
        if label in peaks:
            level = peaks[label]
            x = peak_at.get(label, i)
            ax.axhline(level / scale, color=color, linestyle="--", linewidth=0.8, alpha=0.7, zorder=1)
        else:
            level, x = ys[i], i
        ax.plot([x], [level / scale], marker="v", color=color, markersize=7, linestyle="none", zorder=3)
        marks.append((label, x, level, color))
    ax.set_title(_plain(title), fontsize=11)
    ax.set_xlabel(_plain(xlabel))
    ax.set_ylabel(f"{_plain(ylabel)} ({unit})")
    ax.set_ylim(bottom=0, top=max(top / scale, 1e-9) * 1.22)  # headroom for the peak labels
    n = len(curves)
    ax.set_xlim(-0.5, max(len(ys) for ys in curves.values()) - 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    fig.legend(loc="outside lower center", ncols=min(n, 3), fontsize=8, frameon=False)
    fig.draw_without_rendering()  # lay out once, then keep it: labels are placed in these positions
    fig.set_layout_engine("none")
    fig.tl_peaks = _place_labels(fig, ax, marks, scale, plotted)
    return fig


def _step_segments(ax, drawn) -> tuple:
    """The drawn step curves as axis-aligned segments in display pixels: (horizontal [x0, x1, y],
    vertical [x, y0, y1]) as numpy arrays."""
    import numpy as np

    hs, vs = [], []
    for xs, ys in drawn:
        pts = ax.transData.transform(np.column_stack([list(xs) + [xs[-1] + 1], list(ys) + [ys[-1]]]))
        for i in range(len(xs)):
            hs.append((pts[i][0], pts[i + 1][0], pts[i][1]))
            if i:
                vs.append((pts[i][0], pts[i - 1][1], pts[i][1]))
    return np.array(hs or [(0.0, 0.0, -1e9)]), np.array(vs or [(-1e9, 0.0, 0.0)])


def _crosses(box, segments) -> bool:
    hs, vs = segments
    h = (hs[:, 2] >= box.y0) & (hs[:, 2] <= box.y1) & (hs[:, 1] >= box.x0) & (hs[:, 0] <= box.x1)
    lo, hi = vs[:, 1].clip(max=vs[:, 2]), vs[:, 2].clip(min=vs[:, 1])
    v = (vs[:, 0] >= box.x0) & (vs[:, 0] <= box.x1) & (hi >= box.y0) & (lo <= box.y1)
    return bool(h.any() or v.any())


def _place_labels(fig, ax, marks, scale, drawn=()) -> list:
    """Put each peak's label at the first position around its marker that lies inside the axes and
    overlaps no label placed before it (higher peaks first), preferring positions that no curve crosses;
    ``(label, x, level, Text or None)`` each. ``drawn``: the curves as plotted, [(xs, ys)]."""
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    segments = _step_segments(ax, drawn)
    near = [(6, 4, "left", "bottom"), (-6, 4, "right", "bottom"), (6, -5, "left", "top"), (-6, -5, "right", "top")]
    far = [(dx, dy + sign * step * 12, ha, va) for step in range(1, 16) for sign in (1, -1)
           for dx, dy, ha, va in near if (dy > 0) == (sign > 0)]
    placed = []
    groups: dict[tuple, list[int]] = {}  # curves whose peaks coincide share one label
    for k, (_, x, level, _) in enumerate(marks):
        groups.setdefault((x, level), []).append(k)
    texts = {}
    for (x, level), members in sorted(groups.items(), key=lambda g: -g[0][1]):
        k = members[0]
        color = marks[k][3] if len(members) == 1 else "#444444"
        words = f"peak {format_bytes(level)}" + (f" ({len(members)} curves)" if len(members) > 1 else "")
        text = None
        for clear_of_curves in (True, False):
            for dx, dy, ha, va in near + far:
                arrow = ({"arrowstyle": "-", "color": color, "lw": 0.6, "shrinkA": 0, "shrinkB": 3}
                         if abs(dy) > 6 else None)
                ann = ax.annotate(_plain(words), xy=(x, level / scale), xytext=(dx, dy),
                                  textcoords="offset points", ha=ha, va=va, color=color, fontsize=8,
                                  annotation_clip=False, arrowprops=arrow, zorder=4)
                ann.update_positions(renderer)
                box = Text.get_window_extent(ann, renderer)
                inside = (box.x0 >= frame.x0 + 1 and box.x1 <= frame.x1 - 1 and box.y0 >= frame.y0 + 1
                          and box.y1 <= frame.y1 - 1)
                if inside and not any(box.overlaps(other.padded(1)) for other in placed) and \
                        not (clear_of_curves and _crosses(box.padded(1), segments)):
                    placed.append(box)
                    ann.set_gid(LABEL_ID.format(k))
                    ann.set_bbox({"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none",
                                  "alpha": 0.8})
                    text = ann
                    break
                ann.remove()
            if text is not None:
                break
        for m in members:
            texts[m] = text
            if text is None:  # no free place: the legend names this curve's peak instead
                for entry in fig.legends[0].get_texts():
                    if entry.get_text() == _plain(marks[m][0]):
                        entry.set_text(_plain(f"{marks[m][0]} (peak {format_bytes(level)})"))
    return [(marks[k][0], marks[k][1], marks[k][2], texts[k]) for k in range(len(marks))]


def _hover_svg(fig, curves: dict, hover: dict) -> str:
    """Invisible targets over each step of each curve with ``hover`` text, as an SVG group (``<title>``
    tooltips), in the coordinates of matplotlib's SVG (points, origin top left)."""
    from .packing import esc

    ax = fig.axes[0]
    _, scale = _unit(max(max(max(ys) for ys in curves.values()), 1))
    ymax_px = fig.bbox.height
    to_pt = 72.0 / fig.dpi
    right = ax.get_window_extent().x1
    rects: dict[tuple, list[str]] = {}  # one target per place; curves drawn on the same step share it
    for label, ys in curves.items():
        texts = hover.get(label)
        if not texts:
            continue
        n = len(ys)
        size = max(1, -(-n // MAX_HOVER))
        for start in range(0, n, size):
            stop = min(start + size, n)
            j = max(range(start, stop), key=lambda q: ys[q])
            lo, hi = min(ys[start:stop]), ys[j]
            (x0, y0), (x1, y1) = ax.transData.transform([(start, lo / scale), (stop, hi / scale)])
            x1 = min(x1, right)
            x, w = x0 * to_pt, max((x1 - x0) * to_pt, 1.0)
            top, bottom = (ymax_px - y1) * to_pt - 3, (ymax_px - y0) * to_pt + 3
            tip = texts[j] if j < len(texts) else ""
            key = (round(x, 1), round(w, 1), round(top, 1), round(bottom - top, 1))
            rects.setdefault(key, {}).setdefault(tip, []).append(label)
    if not rects:
        return ""

    def title(tips: dict) -> str:  # curves with the same text at this place (identical runs) share one entry
        return "\n".join(f"{', '.join(map(str, labels))}: {tip}" if len(curves) > 1 else tip
                         for tip, labels in tips.items())

    out = [f'<rect x="{x:.2f}" y="{y:.2f}" width="{w:.2f}" height="{h:.2f}"><title>{esc(title(tips))}</title>'
           f"</rect>" for (x, w, y, h), tips in rects.items()]
    return (f'<g id="tl-hover" fill="#000" fill-opacity="0" pointer-events="all" style="cursor:crosshair">'
            f'{"".join(out)}</g>')


def memory_curve_svg(curves: dict[str, list[int]], peaks: dict[str, int] | None = None,
                     title: str = "live memory per line", *, xlabel: str = "line (0 = entry)",
                     size: tuple[float, float] = (7.5, 3.6), peak_at: dict | None = None,
                     hover: dict | None = None, ylabel: str = "live memory") -> str:
    """SVG text of live bytes per line for each curve, peaks marked; ``peak_at`` {label: index of the
    peak's point}; ``hover`` {label: [tooltip text per point]}."""
    import matplotlib

    fig = _figure(curves, peaks, title, xlabel, size, peak_at=peak_at, ylabel=ylabel)
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "trace_lab"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = compact_svg(buf.getvalue())
    i = svg.find("<svg")
    svg = svg[i:] if i >= 0 else svg
    if hover:
        end = svg.rfind("</svg>")
        svg = svg[:end] + _hover_svg(fig, curves, hover) + svg[end:]
    return svg


def memory_curve_png(curves: dict[str, list[int]], peaks: dict[str, int] | None = None,
                     title: str = "live memory per line", *, xlabel: str = "line (0 = entry)",
                     size: tuple[float, float] = (7.5, 3.6), dpi: int = 100, peak_at: dict | None = None,
                     ylabel: str = "live memory") -> bytes:
    """PNG bytes of the same plot (no hover)."""
    fig = _figure(curves, peaks, title, xlabel, size, peak_at=peak_at, ylabel=ylabel)
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
