"""save_graphs: write the graphs (and memory curves) of a Report or of Traces to a folder.

Design: for each program part (forward / backward / inference) the first and the
last stage are drawn (before and after the passes); each graph is written as
``.dot`` and, when ``dot`` is on PATH, ``.svg``, otherwise as a standalone
``.html`` that lays the graph out in the browser with the vendored WebAssembly
Graphviz (offline; stored packed, about 0.65 MB a page instead of 1.3 MB, see
:func:`trace_lab.report.render.viz_loader_html`). The memory curves of all stages of a part go to one
``_memory.svg``. File names come from user names, so they are reduced to
``[A-Za-z0-9_.-]``. Returns the paths written, in order.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

__all__ = ["save_graphs"]


def _slug(s) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(s)).strip("_.") or "x"


def _groups(report_or_traces) -> list[tuple[str, list]]:
    """[(file stem, stages)] from a Report, a list of Traces, or one Trace."""
    from ..trace import Trace
    from .parts import program_parts

    if isinstance(report_or_traces, Trace):
        return [(f"{report_or_traces.kind}", [report_or_traces])]
    jfn = getattr(report_or_traces, "jfn", None)
    if hasattr(report_or_traces, "traces") and hasattr(report_or_traces, "programs"):
        if jfn is None:
            raise ValueError("this Report has no programs attached (loaded from JSON?); pass Traces instead")
        name = _slug(getattr(report_or_traces, "name", "report"))
        return [(f"{name}_p{p.index}_{part.kind}", list(part.traces)) for _, p, part in program_parts(jfn)]
    traces = list(report_or_traces)
    bad = [type(t).__name__ for t in traces if not isinstance(t, Trace)]
    if bad:
        raise TypeError(f"save_graphs needs a Report, a Trace or a list of Traces; got items of type {bad[0]}")
    return [(f"{i}_{t.kind}", [t]) for i, t in enumerate(traces)]


def save_graphs(report_or_traces, out_dir, *, use_dot: bool | None = None, **graph_options) -> list[str]:
    """Write .dot + .svg (or .html without ``dot``) per stage drawn, and memory curves; return the paths."""
    from .graph import before_after, trace_graph
    from .memory_plot import curves_from_traces, memory_curve_svg
    from .render import dot_available, graph_html, render_svg

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with_dot = dot_available() if use_dot is None else use_dot
    written: list[str] = []
    for stem, stages in _groups(report_or_traces):
        if len(stages) > 1:
            graphs = list(before_after(stages[0], stages[-1], **graph_options))
            drawn = [stages[0], stages[-1]]
        else:
            graphs, drawn = [trace_graph(stages[0], **graph_options)], stages
        for k, (t, g) in enumerate(zip(drawn, graphs)):
            base = out / f"{stem}_{k}_{_slug(t.stage)}"
            base.with_suffix(".dot").write_text(g.source, encoding="utf-8")
            written.append(str(base.with_suffix(".dot")))
            svg = render_svg(g) if with_dot else None
            if svg is not None:
                base.with_suffix(".svg").write_text(svg, encoding="utf-8")
                written.append(str(base.with_suffix(".svg")))
            else:
                title = html.escape(f"{stem}: {t.kind} · {t.stage}")
                page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
                        f"<body>{graph_html(g, use_dot=False, height='90vh', compress=True)}</body></html>")
                base.with_suffix(".html").write_text(page, encoding="utf-8")
                written.append(str(base.with_suffix(".html")))
        curves, peaks = curves_from_traces(stages)
        path = out / f"{stem}_memory.svg"
        path.write_text(memory_curve_svg(curves, peaks, title=f"{stem}: live memory per line"), encoding="utf-8")
        written.append(str(path))
    return written
