"""save_graphs: write the graphs (and memory curves) of a Report or of Traces to a folder.

Design: for each program part (forward / backward / inference) the first and the
last stage are drawn (before and after the passes); each graph is written as
``.dot`` and, when ``dot`` is on PATH, ``.svg``, otherwise as a standalone
``.html`` that lays the graph out in the browser with the vendored WebAssembly
Graphviz (offline; stored packed, about 0.65 MB a page instead of 1.3 MB, see
:func:`trace_lab.report.render.viz_loader_html`). The memory curves of all stages of a part go to one
``_memory.svg``. File names come from user names, so they are reduced to
``[A-Za-z0-9_.-]``. Returns the paths written, in order. A Report is drawn from its
view model (:mod:`.view_model`: the graphs as data, the stages' memory), so a report
loaded from JSON saves the same files.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

from ..errors import TraceLabError

__all__ = ["save_graphs"]


def _slug(s) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(s)).strip("_.") or "x"


def _groups(report_or_traces, graph_options: dict) -> list[tuple[str, list, list, tuple]]:
    """[(file stem, stages drawn, graphs, memory curves and peaks)] from a Report, a list of Traces, or one Trace.

    A Report is read from its view model (a report loaded from JSON too), unless ``graph_options`` ask for
    other pictures than the model's: those are drawn from the Traces of its compilation records."""
    from ..ir.trace import Trace
    from .graph import digraph
    from .memory_plot import curves_from_stages
    from .report import Report

    if isinstance(report_or_traces, Report) and not (graph_options and report_or_traces.compilations is not None):
        if graph_options:
            raise ValueError("this Report has no programs attached (loaded from JSON?): it keeps the default "
                             "pictures only; call save_graphs without graph options, or pass Traces")
        name = _slug(report_or_traces.name)
        out = []
        for part in report_or_traces.view.parts:
            if "error" in part.graphs:
                raise TraceLabError(f"{part.label}: no graphs: {part.graphs['error']}")
            stages = part.stages
            drawn = [stages[0], stages[-1]] if len(stages) > 1 else stages
            graphs = [digraph(part.graphs["before"]), digraph(part.graphs["after"])][:len(drawn)]
            out.append((f"{name}_p{part.program}_{part.kind}", drawn, graphs, curves_from_stages(stages)))
        return out
    if isinstance(report_or_traces, Report):
        from .parts import record_parts

        name = _slug(report_or_traces.name)
        groups = [(f"{name}_p{p.index}_{part.kind}", list(part.traces))
                  for _, p, part in record_parts(report_or_traces.compilations)]
    elif isinstance(report_or_traces, Trace):
        groups = [(f"{report_or_traces.kind}", [report_or_traces])]
    else:
        traces = list(report_or_traces)
        bad = [type(t).__name__ for t in traces if not isinstance(t, Trace)]
        if bad:
            raise TypeError(f"save_graphs needs a Report, a Trace or a list of Traces; got items of type {bad[0]}")
        groups = [(f"{i}_{t.kind}", [t]) for i, t in enumerate(traces)]
    return [(stem, *_drawn(stages, graph_options)) for stem, stages in groups]


def _drawn(stages: list, graph_options: dict) -> tuple[list, list, tuple]:
    """(stages drawn, their graphs, memory curves and peaks) of one part's Traces."""
    from .graph import before_after, trace_graph
    from .memory_plot import curves_from_traces

    if len(stages) > 1:
        return [stages[0], stages[-1]], list(before_after(stages[0], stages[-1], **graph_options)), \
            curves_from_traces(stages)
    return stages, [trace_graph(stages[0], **graph_options)], curves_from_traces(stages)


def save_graphs(report_or_traces, out_dir, *, use_dot: bool | None = None, **graph_options) -> list[str]:
    """Write .dot + .svg (or .html without ``dot``) per stage drawn, and memory curves; return the paths."""
    from .memory_plot import memory_curve_svg
    from .render import dot_available, graph_html, render_svg

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with_dot = dot_available() if use_dot is None else use_dot
    written: list[str] = []
    for stem, drawn, graphs, (curves, peaks) in _groups(report_or_traces, graph_options):
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
        path = out / f"{stem}_memory.svg"
        path.write_text(memory_curve_svg(curves, peaks, title=f"{stem}: live memory per line"), encoding="utf-8")
        written.append(str(path))
    return written
