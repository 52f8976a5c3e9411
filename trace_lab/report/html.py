"""HTML views of a Report: Summary, Trace, Graph, Memory and Compare tabs, and the page that holds them.

Two consumers, one set of fragments: the live notebook widget puts each
fragment in its own tab (``summary_html``, ``code_html``, ``memory_html``,
``compare_html``), and ``report_html`` assembles all of them into one static
page section with CSS-only tabs (radio inputs, no script) for saved notebooks,
nbconvert exports and ``Report.save_html``. Without CSS (a sanitising viewer)
the panels degrade to consecutive headed sections.

Design: this module is the entry point (``report_html``, ``standalone_page``, ``error_html``,
``tabs_html``, ``summary_html``, ``graphs_html``) and re-exports the tabs' fragments, which live one
tab a module: :mod:`.trace_html` (the Trace tab and its packed "show all" data), :mod:`.memory_html`,
:mod:`.compare_html`, :mod:`.depth_html`; the CSS and scripts are files under ``trace_lab/static/``,
read once by :mod:`.assets_html`.

Guarantees: every string that can come from user code (names, labels, source
lines inside traces, warnings, error messages) is escaped, either by ``esc`` or
by pygments' formatter; the page is self-contained (inline CSS, no network),
so a saved report opens offline. The graph view and the memory plot come from
:mod:`trace_lab.report.optional_views` (placeholders when a view fails). Every view reads the
report's view model (:mod:`trace_lab.report.view_model`), never a Trace.

Size: a notebook keeps every output in the .ipynb, so one report stays well
under 1 MB whatever the program's size. A stage longer than ``LAZY_LINES`` is
shown as a window (its first lines, the lines around the peak, its last lines;
each gap says which lines it hides) and the whole part (every stage's lines, one
table of distinct lines shared by the stages, and their memory) is stored once,
gzip + base64 (:func:`pack`), in a hidden element; "show all N lines" unpacks it
in the browser (``DecompressionStream``, trace_lab's own script, no network) and
draws every line as the server would. Where scripts do not run (an untrusted
notebook, GitHub) the window and the way to the full text (``print`` the stage,
``report.save_html``) are still shown. Large graph SVG / DOT and the
WebAssembly Graphviz are stored the same way (:mod:`trace_lab.report.dot_render`),
the renderer once per report; large plots are stored packed too (:func:`_pack_plots`).
"""
from __future__ import annotations

import re
import uuid

from ..ir.printer import format_bytes as _fmt_bytes, plural  # noqa: F401 - re-exported
from .assets_html import PLOTS_JS, TAB_TITLES, TRACE_JS, css, highlight_lines  # noqa: F401 - re-exported
from .compare_html import compare_html
from .memory_html import memory_curves, memory_html, memory_plot_data  # noqa: F401 - re-exported
from .packing import INFLATE_JS, esc, pack, unpack  # noqa: F401 - re-exported
from .trace_html import (BARS_LEGEND, LAZY_LINES, _body, code_html, part_data, part_data_html,  # noqa: F401
                         stage_field, stage_lines, stage_times, traces_html)

__all__ = ["esc", "code_html", "summary_html", "traces_html", "graphs_html", "memory_html",
           "compare_html", "memory_plot_data", "tabs_html", "report_html", "standalone_page", "memory_curves", "report_parts", "error_html",
           "css", "pack", "unpack", "INFLATE_JS", "LAZY_LINES", "part_data", "stage_lines"]


def report_parts(report) -> list:
    """The program parts of a report's view model (:class:`~trace_lab.report.view_model.PartView`: label
    'forward #0', stages, graphs), whether the run was here, in another process or loaded from JSON."""
    return list(report.view.parts)


def _extra_summary_rows(report) -> list[tuple[str, str]]:
    from .table import report_row

    row = report_row(report)
    rows = [("options", ", ".join(f"{k}={v}" for k, v in report.options.items() if v is not None))]
    if row["kernels"] is None:  # a --baseline peer: nothing traced
        return rows
    fus = f"{plural(row['fusions'], 'fused region')}, {plural(row['kernels'], 'kernel')}"
    if row["cache_hits"] is not None:
        fus += f", {plural(row['cache_hits'], 'fusion-cache hit')}"
    rows.append(("fusions", fus))
    return rows


def summary_html(report) -> str:
    rows = list(report.summary_rows()) + _extra_summary_rows(report)
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    if report.comparison is None:
        status = '<div class="tl-warn">not checked against eager</div>'
    elif report.ok:
        status = '<div class="tl-ok">matches eager PyTorch (outputs, gradients, updated values)</div>'
    else:
        status = '<div class="tl-bad">compiled result differs from eager: ' + esc(
            "; ".join(report.comparison.get("problems", [])[:3])) + "</div>"
    warns = "".join(f'<div class="tl-warn">warning: {esc(w)}</div>' for w in report.warnings)
    extra = report.summary_extra_html()  # e.g. a timeline
    return f"{status}<table>{body}</table>{warns}{extra}"


def graphs_html(report, max_parts: int = 2) -> str:
    """Before/after graphs of the first ``max_parts`` program parts. Large SVG / DOT are stored packed; the
    graphs' CSS and scripts and the in-browser renderer (when ``dot`` is absent) are embedded once for all parts."""
    from .optional_views import graph_view_html

    all_parts = report_parts(report)
    parts = all_parts[:max_parts]
    if not parts:
        return '<div class="tl-placeholder">no program was compiled</div>'
    views = [f"<h5>{esc(p.label)}: {esc(p.stages[0].stage)} &rarr; {esc(p.stages[-1].stage)}</h5>"
             f"{graph_view_html(p, include_js=False, compress=True, shared_assets=False)}" for p in parts]
    from .dot_render import graph_assets_html

    loader = graph_assets_html()  # the graphs' CSS and scripts, once for every graph of the report
    if any("data-tl-viz" in v for v in views):
        from .render import viz_loader_html

        loader += viz_loader_html(compressed=True)
    rest = ""
    if len(all_parts) > max_parts:
        rest = (f'<div class="tl-placeholder">{len(all_parts) - max_parts} more program parts not drawn here: '
                f"{esc(', '.join(p.label for p in all_parts[max_parts:]))} "
                "(<code>trace_lab.report.graph_export.save_graphs(report, folder)</code> draws them all)</div>")
    return loader + "".join(views) + rest


def tabs_html(panels: list[tuple[str, str]]) -> str:
    """CSS-only tabs: one radio input + label per panel; no script, degrades to sections."""
    uid = "tl" + uuid.uuid4().hex[:10]
    out = [f'<div class="tl-tabs" id="{uid}">']
    for i, (title, _) in enumerate(panels):
        checked = " checked" if i == 0 else ""
        out.append(f'<input type="radio" class="tl-t{i}" name="{uid}" id="{uid}-{i}"{checked}>'
                   f'<label for="{uid}-{i}">{esc(title)}</label>')
    for i, (title, body) in enumerate(panels):
        out.append(f'<section class="tl-p{i}"><h4>{esc(title)}</h4>{body}</section>')
    out.append("</div>")
    return "".join(out)


PLOT_PACK_MIN = 24_000  # a plot's SVG longer than this is stored packed in the static view (the widget: plain)


def _pack_plots(fragment: str) -> tuple[str, bool]:
    """``fragment`` with each inline SVG longer than :data:`PLOT_PACK_MIN` stored packed (gzip + base64, a
    third of the size) in an element the page's script (:data:`PLOTS_JS`) fills; where scripts do not run
    it says where the figures are. Returns (fragment, whether anything was packed)."""
    packed = False

    def repl(m) -> str:
        nonlocal packed
        if len(m.group(0)) <= PLOT_PACK_MIN:
            return m.group(0)
        packed = True
        return (f"<div class='tl-svgz' data-tlz='{pack(m.group(0))}'><div class='tl-placeholder'>plot stored packed "
                "(notebook size): drawn by the page's script (an HTML export, <code>report.save_html(path)</code>, "
                "the live view); the tables give its figures</div></div>")

    return re.sub(r"<svg\b.*?</svg>", repl, fragment, flags=re.S), packed


def report_html(report, runs=None) -> str:
    """The whole static view: tabs Summary, Trace, Graph, Memory, Compare, Peak, Saved, Diff, Regions, Timeline.

    ``runs``: [(label, Report)] of the comparison this report belongs to (default: itself). Large plots
    (Summary's timeline, Memory) are stored packed (:func:`_pack_plots`): every output is kept in the notebook.
    """
    from .table import report_row

    runs = list(runs) if runs else [(report.name, report)]
    rows = [report_row(r, label) for label, r in runs]
    summary, packed_summary = _pack_plots(summary_html(report))
    memory, packed_memory = _pack_plots(memory_html(runs))
    from .depth_html import depth_panels
    from .line_timeline import timeline_html

    panels = [("Summary", summary), ("Trace", traces_html(report)), ("Graph", graphs_html(report)),
              ("Memory", memory), ("Compare", compare_html(rows)), *depth_panels(report_parts(report)),
              ("Timeline", timeline_html(report))]
    script = f"<script>{INFLATE_JS}{PLOTS_JS}</script>" if packed_summary or packed_memory else ""
    page = (f'<div class="tl-report"><style>{css()}</style><h3>trace_lab: {esc(report.name)}</h3>'
            f"{tabs_html(panels)}{script}</div>")
    # the unpacker is part of every tab's script that needs it; a page keeps its first copy (which runs first)
    first = page.find(INFLATE_JS)
    if first >= 0:
        cut = first + len(INFLATE_JS)
        page = page[:cut] + page[cut:].replace(INFLATE_JS, "")
    return page


def error_html(title: str, message: str) -> str:
    return f'<div class="tl-report"><div class="tl-error">{esc(title)}: {esc(message)}</div></div>'


def standalone_page(report, runs=None) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>trace_lab: {esc(report.name)}</title>"
            f"</head><body>{report_html(report, runs)}</body></html>")
