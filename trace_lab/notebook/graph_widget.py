"""GraphView: the notebook's Graph tab as a real widget (anywidget, its ESM and CSS vendored in
``trace_lab/static/graph_view.{js,css}``, offline).

Why a widget of its own: an ``ipywidgets.HTML`` value is inserted as markup and its scripts never
run in JupyterLab, so the pan/zoom of the static report could not work there and a graph drawn at
its natural size was clipped by the panel. Here the kernel lays each graph out with ``dot``
(:func:`trace_lab.report.dot_render.render_svg`, with its timeout) and sends the SVG text as a
trait; the front end fits each pane on open, zooms (+, -, fit, 1:1, the wheel at the cursor),
pans by dragging, shows the panes side by side (each fits its half) or one at a time, and on a
click names the node's op, type and source line (the tooltip the DOT carries; ``selected``).
The peak and fused regions are marked in the graph itself (:mod:`trace_lab.report.graph`).

Large programs: the graph data keeps a window of lines around the peak (``shown_range``); when
the live traces are at hand, "earlier lines" / "later lines" ask the kernel (a custom message)
to draw the neighbouring window. A graph too large to read at fit comes as its overview (blocks of
lines, :mod:`trace_lab.report.graph_overview`); a click on a block asks the kernel to open it in that
pane (its lines as a picture, an overview again if still too large), "◀ back" returns. Without ``dot`` (or past its timeout) a pane shows the DOT
source and says so; the static report lays such graphs out in the browser instead.
"""
from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

__all__ = ["GraphView"]

_STATIC = Path(__file__).resolve().parent.parent / "static"


class GraphView(anywidget.AnyWidget):
    _esm = _STATIC / "graph_view.js"
    _css = _STATIC / "graph_view.css"

    panes = traitlets.List(traitlets.Dict()).tag(sync=True)  # [{side, title, svg | dot, note}]
    mode = traitlets.Unicode("both").tag(sync=True)  # "both" (side by side), "before" or "after"
    height = traitlets.Int(560).tag(sync=True)  # px of each pane
    selected = traitlets.Unicode("").tag(sync=True)  # the tooltip of the last node clicked
    window = traitlets.Dict().tag(sync=True)  # {first, last, total} lines of the before graph, or {}

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._traces = None  # (before, after) live traces, for moving the window and opening blocks
        self._back: dict[str, list] = {}  # side -> the panes an opened block replaced
        self.on_msg(self._on_msg)

    # -- what to draw ------------------------------------------------------------------------------
    def show(self, graphs: dict, traces: tuple | None = None) -> None:
        """Draw a part's graphs (the view model's ``{"before": data, "after": data}``); ``traces`` (the
        part's first and last Trace) enable the window control of a large graph."""
        self._traces = traces
        if "error" in graphs:
            self.window = {}
            self.panes = [{"side": "after", "title": "no graph", "svg": "",
                           "dot": "", "note": f"graph view failed: {graphs['error']}"}]
            return
        self._draw(graphs["before"], graphs["after"])

    def snapshot(self) -> tuple:
        """What is drawn now, to :meth:`restore` later without running ``dot`` again."""
        return self.panes, self.window, self._traces

    def restore(self, snapshot: tuple) -> None:
        self._back = {}
        self.panes, self.window, self._traces = snapshot[0], snapshot[1], snapshot[2]

    def clear(self) -> None:
        self._back = {}
        self._traces = None
        self.window = {}
        self.panes = []

    def _draw(self, before: dict, after: dict) -> None:
        self._back = {}
        self.panes = [_pane("before", before), _pane("after", after)]
        rng = before.get("shown_range")
        self.window = ({"first": rng[0], "last": rng[1] - 1, "total": before["ops"]}
                       if rng is not None and self._traces is not None else {})

    # -- the window of a large graph ---------------------------------------------------------------
    def move_window(self, step: int) -> None:
        """Show the window ``step`` half-windows later (negative: earlier), clamped to the program."""
        if not self.window or self._traces is None:
            return
        from ..report.graph import graph_data

        first, last, total = self.window["first"], self.window["last"], self.window["total"]
        width = last - first + 1
        start = min(max(0, first + step * max(1, width // 2)), max(0, total - width))
        trace_before, trace_after = self._traces
        before = graph_data(trace_before, line_range=(start, start + width))
        after = graph_data(trace_after, _focus=set(before["fx_names"]))
        self._draw(before, after)

    # -- the blocks of an overview -----------------------------------------------------------------
    def open_block(self, side: str, start: int, stop: int) -> None:
        """Draw lines ``start:stop`` of the ``side`` pane's stage in that pane (a block of its overview)."""
        k = next((i for i, p in enumerate(self.panes) if p.get("side") == side), None)
        if k is None:
            return
        if self._traces is None:
            self.selected = ("opening a block needs the run's live traces (a report loaded from JSON has none): "
                             f"graph_data(trace, line_range=({start}, {stop})) draws it")
            return
        from ..report.graph import graph_data

        trace = self._traces[0 if side == "before" else 1]
        pane = _pane(side, graph_data(trace, line_range=(int(start), int(stop)), overview=None))
        pane["back"] = True
        self._back.setdefault(side, []).append(self.panes[k])
        self.panes = [pane if i == k else p for i, p in enumerate(self.panes)]

    def close_block(self, side: str) -> None:
        """Back to what the ``side`` pane showed before its last opened block."""
        if not self._back.get(side):
            return
        prev = self._back[side].pop()
        self.panes = [prev if p.get("side") == side else p for p in self.panes]

    def _on_msg(self, _widget, content, _buffers) -> None:
        if not isinstance(content, dict):
            return
        if content.get("move") in (-1, 1):
            self.move_window(content["move"])
        elif isinstance(content.get("open"), dict):
            o = content["open"]
            self.open_block(str(o.get("side")), int(o.get("start", 0)), int(o.get("stop", 0)))
        elif content.get("back") in ("before", "after"):
            self.close_block(content["back"])


def _pane(side: str, data: dict) -> dict:
    from ..report.dot_render import DOT_TIMEOUT_S, render_svg
    from ..report.graph import digraph

    g = digraph(data)
    svg = render_svg(g)
    title = f"{side}: {data['kind']} · {data['stage']} · {data['ops']} ops"
    if svg is not None:
        return {"side": side, "title": title, "svg": svg, "dot": "", "note": ""}
    return {"side": side, "title": title, "svg": "", "dot": g.source,
            "note": f"`dot` is not on PATH or its layout ran past {DOT_TIMEOUT_S:.0f} s: this is the DOT source; "
                    "report.save_html(path) lays the graph out in the browser"}
