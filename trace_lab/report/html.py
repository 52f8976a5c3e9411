"""HTML views of a Report: Summary, Trace, Graph, Memory and Compare tabs.

Two consumers, one set of fragments: the live notebook widget puts each
fragment in its own tab (``summary_html``, ``code_html``, ``memory_html``,
``compare_html``), and ``report_html`` assembles all of them into one static
page section with CSS-only tabs (radio inputs, no script) for saved notebooks,
nbconvert exports and ``Report.save_html``. Without CSS (a sanitising viewer)
the panels degrade to consecutive headed sections.

Guarantees: every string that can come from user code (names, labels, source
lines inside traces, warnings, error messages) is escaped, either by ``esc`` or
by pygments' formatter; the page is self-contained (inline CSS, no network),
so a saved report opens offline. The graph view and the memory plot come from
:mod:`trace_lab.report.optional_views` and are placeholders when absent.
"""
from __future__ import annotations

import html
import re
import uuid
from functools import lru_cache

__all__ = ["esc", "CSS", "code_html", "summary_html", "traces_html", "graphs_html", "memory_html",
           "compare_html", "tabs_html", "report_html", "standalone_page", "memory_curves", "part_traces", "error_html",
           "trace_html", "css"]

TAB_TITLES = ["Summary", "Trace", "Graph", "Memory", "Compare"]

_BASE_CSS = """
.tl-report{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;color:#1f2328}
.tl-report table{border-collapse:collapse;margin:4px 0}
.tl-report td,.tl-report th{border:1px solid #d0d7de;padding:2px 6px;text-align:left;vertical-align:top}
.tl-report .tl-scroll{overflow-x:auto;max-width:100%}
.tl-report table.tl-compare{font-size:12px}
.tl-report table.tl-compare td,.tl-report table.tl-compare th{white-space:nowrap}
.tl-report th{background:#f6f8fa;font-weight:600}
.tl-report td.tl-num{text-align:right;font-variant-numeric:tabular-nums}
.tl-report td.tl-best{background:#dafbe1;font-weight:600}
.tl-report td.tl-best::after{content:" \\2605";color:#1a7f37}
.tl-report .tl-warn{color:#9a6700}
.tl-report .tl-bad,.tl-report .tl-error{color:#cf222e;font-weight:600}
.tl-report .tl-error{white-space:pre-wrap;border-left:3px solid #cf222e;padding:4px 8px;background:#fff5f5}
.tl-report .tl-ok{color:#1a7f37}
.tl-report .tl-placeholder{color:#57606a;font-style:italic;padding:6px 0}
.tl-report details{margin:2px 0}
.tl-report summary{cursor:pointer}
.tl-code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;line-height:1.35;
  background:#f6f8fa;padding:4px 0;overflow:auto;max-height:560px;border:1px solid #d0d7de}
.tl-code .tl-l{display:flex;white-space:pre;min-height:1.35em}
.tl-code .tl-l code{font-family:inherit;background:none;padding:0 6px}
.tl-code .tl-bar{flex:0 0 64px;height:0.9em;margin-top:0.2em;background:#eaeef2;position:relative}
.tl-code .tl-bar i,.tl-code .tl-bar b{position:absolute;left:0;top:0;bottom:0;background:#54aeff}
.tl-code .tl-bar b{background:#b6e3ff}
.tl-code .tl-pk{background:#ffebe9}
.tl-code .tl-pk .tl-bar i{background:#cf222e}
.tl-code .tl-pk .tl-bar b{background:#ffaba8}
.tl-code details.tl-region>summary{list-style:none;display:block}
.tl-code details.tl-region>summary::-webkit-details-marker{display:none}
.tl-code details.tl-region>summary .tl-fold::before{content:"\\25B8 ";color:#8250df}
.tl-code details.tl-region[open]>summary .tl-fold::before{content:"\\25BE "}
.tl-code details.tl-region .tl-fold{color:#8250df;padding-left:4px}
.tl-code .tl-inner{background:#fbefff}
.tl-tabs>input{position:absolute;opacity:0;pointer-events:none}
.tl-tabs>label{display:inline-block;padding:4px 12px;border:1px solid #d0d7de;border-bottom:none;
  border-radius:6px 6px 0 0;background:#f6f8fa;cursor:pointer;margin-right:2px}
.tl-tabs>section{display:none;border-top:1px solid #d0d7de;padding:6px 0}
.tl-tabs>section>h4{margin:2px 0 6px 0}
""" + "".join(
    f".tl-tabs>input.tl-t{i}:checked~section.tl-p{i}{{display:block}}"
    f".tl-tabs>input.tl-t{i}:checked+label{{background:#fff;font-weight:600}}\n" for i in range(len(TAB_TITLES)))


def esc(s) -> str:
    return html.escape(str(s), quote=True)


def _trace_lexer_class():
    """A small pygments lexer for trace text: the traces are regular Python, and a few rules
    lex them ~5x faster than the full PythonLexer (large backward traces stay quick)."""
    from pygments.lexer import RegexLexer, bygroups
    from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, String, Text

    class TraceLexer(RegexLexer):
        name = "trace_lab trace"
        tokens = {"root": [
            (r"\n", Text),
            (r"[ \t]+", Text),
            (r"(#[^|\n]*)(\|[^\n]*)", bygroups(Comment.Single, Comment.Special)),
            (r"#[^\n]*", Comment.Single),
            (r"\b(def|del|return|import|None|True|False)\b", Keyword),
            (r"\b(aten|torch|operator)(\.\w+)+", Name.Function),
            (r"\bfusion\d+\b", Name.Class),
            (r"'[^'\n]*'|\"[^\"\n]*\"", String),
            (r"-?\d+(\.\d*)?([eE][-+]?\d+)?", Number),
            (r"\w+", Name),
            (r"[=*+-/]", Operator),
            (r".", Punctuation),
        ]}

    return TraceLexer


@lru_cache(maxsize=1)
def _pygments():
    from pygments.formatters import HtmlFormatter

    fmt = HtmlFormatter(nowrap=True, style="default")
    return _trace_lexer_class()(), fmt, fmt.get_style_defs(".tl-code")


def css() -> str:
    return _BASE_CSS + _pygments()[2]


CSS = _BASE_CSS  # kept for callers that only need the base rules


def highlight_lines(text: str) -> list[str]:
    """Pygments-highlighted HTML of ``text``, one string per line (content escaped)."""
    from pygments import highlight

    lexer, fmt, _ = _pygments()
    return highlight(text, lexer, fmt).split("\n")


# -- one trace ------------------------------------------------------------------------------
_OP_LINE = re.compile(r"^  [^ #].* = .*\| live ")
_REGION_INNER = re.compile(r"^    # ")


def _fmt_bytes(n) -> str:
    from ..printer import format_bytes

    return format_bytes(n)


def code_html(trace, max_lines: int | None = 4000) -> str:
    """One trace: highlighted lines, a live-bytes bar per op line, the peak line marked,
    each fused region's ops folded under its line. Falls back to plain highlighting
    if the printed text and the liveness lines do not pair up."""
    text = str(trace)
    live = trace.liveness()
    lines = text.splitlines()
    shown = highlight_lines("\n".join(lines))
    op_idx = [i for i, ln in enumerate(lines) if _OP_LINE.match(ln)]
    paired = len(op_idx) == len(live.lines)
    # bars show bytes above the inputs (inputs are held by the caller and never freed)
    base, scale = live.entry_bytes, max(live.peak_bytes - live.entry_bytes, 1)
    mem = {i: live.lines[k] for k, i in enumerate(op_idx)} if paired else {}
    peak_line = live.peak_line
    out = []
    i = 0
    truncated = 0
    if max_lines is not None and len(lines) > max_lines:
        truncated = len(lines) - max_lines
        lines = lines[:max_lines]
    while i < len(lines):
        m = mem.get(i)
        if m is not None:
            pct = 100.0 * max(m.live_after - base, 0) / scale
            hw = 100.0 * max(m.high_water - base, 0) / scale
            tip = (f"live {_fmt_bytes(m.live_after)} after this line (dark bar, above inputs); allocated {_fmt_bytes(m.allocated)}, "
                   f"freed {_fmt_bytes(m.freed)}; while it runs {_fmt_bytes(m.high_water)} (light bar)")
            bar = (f'<span class="tl-bar" title="{esc(tip)}"><b style="width:{hw:.1f}%"></b>'
                   f'<i style="width:{pct:.1f}%"></i></span>')
        else:
            bar = '<span class="tl-bar" style="visibility:hidden"></span>'
        cls = "tl-l tl-pk" if (m is not None and m is peak_line) else "tl-l"
        row = f'<div class="{cls}">{bar}<code>{shown[i]}</code></div>'
        inner = []
        j = i + 1
        while m is not None and j < len(lines) and _REGION_INNER.match(lines[j]) and m.node.op == "call_module":
            inner.append(f'<div class="tl-l tl-inner"><span class="tl-bar" style="visibility:hidden"></span>'
                         f"<code>{shown[j]}</code></div>")
            j += 1
        if inner:
            row = (f'<details class="tl-region"><summary><div class="{cls}">{bar}<code>{shown[i]}'
                   f'<span class="tl-fold">{len(inner)} ops</span></code></div></summary>{"".join(inner)}</details>')
        out.append(row)
        i = j
    if truncated:
        out.append(f'<div class="tl-l"><code># ... {truncated} more lines (see str(trace))</code></div>')
    return f'<div class="tl-code">{"".join(out)}</div>'


# -- report parts ----------------------------------------------------------------------------
def part_traces(report) -> list[tuple[str, list]]:
    """[(label, stages)] for every program part of a report, e.g. ('forward #0', [Trace, ...]).

    A report rebuilt from another process's data has no Traces; its stored text and memory
    (``trace_parts``, :mod:`trace_lab.report.stored`) stand in for them."""
    if report.jfn is None and getattr(report, "trace_parts", None):
        from .stored import stored_part_traces

        return stored_part_traces(report.trace_parts)
    out = []
    for p in (report.jfn.programs if report.jfn is not None else []):
        for part in p.parts:
            if part.traces:
                out.append((f"{part.kind} #{p.index}", list(part.traces)))
    return out


def _extra_summary_rows(report) -> list[tuple[str, str]]:
    from .table import report_row

    row = report_row(report)
    rows = [("options", ", ".join(f"{k}={v}" for k, v in report.options.items() if k != "extra" and v is not None))]
    fus = f"{row['fusions']} fused regions, {row['kernels']} kernels"
    if row["cache_hits"] is not None:
        fus += f", {row['cache_hits']} fusion-cache hits"
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
    extra = report.summary_extra_html() if hasattr(report, "summary_extra_html") else ""  # e.g. a timeline
    return f"{status}<table>{body}</table>{warns}{extra}"


def traces_html(report) -> str:
    parts = part_traces(report)
    if not parts:
        return '<div class="tl-placeholder">no program was compiled</div>'
    out = []
    for label, stages in parts:
        inner = []
        for k, t in enumerate(stages):
            live = t.liveness()
            head = (f"stage {k}: {esc(t.stage)} &mdash; {len(t.ops)} lines, peak {esc(_fmt_bytes(live.peak_bytes))} "
                    f"(+{esc(_fmt_bytes(live.peak_above_inputs_bytes))} above inputs)")
            opened = " open" if k == len(stages) - 1 else ""
            inner.append(f"<details{opened}><summary>{head}</summary>{code_html(t)}</details>")
        out.append(f"<details open><summary><b>{esc(label)}</b> ({len(stages)} stages)</summary>"
                   f"<div style='margin-left:12px'>{''.join(inner)}</div></details>")
    return "".join(out)


def graphs_html(report, max_parts: int = 2) -> str:
    from .optional_views import graph_view_html

    parts = part_traces(report)[:max_parts]
    if not parts:
        return '<div class="tl-placeholder">no program was compiled</div>'
    return "".join(f"<h5>{esc(label)}: {esc(stages[0].stage)} &rarr; {esc(stages[-1].stage)}</h5>"
                   f"{graph_view_html(stages[0], stages[-1])}" for label, stages in parts)


def memory_curves(runs, part_label: str) -> dict[str, list[int]]:
    """{run label: live-bytes curve of the final stage of ``part_label``} for each run that has it."""
    curves = {}
    for label, report in runs:
        for pl, stages in part_traces(report):
            if pl == part_label:
                curves[label] = stages[-1].liveness().curve()
    return curves


def memory_html(runs, part_label: str | None = None) -> str:
    from .optional_views import memory_curve_html

    if not runs:
        return '<div class="tl-placeholder">no runs yet</div>'
    labels = [pl for pl, _ in part_traces(runs[-1][1])]
    if not labels:
        return '<div class="tl-placeholder">no program was compiled</div>'
    chosen = [part_label] if part_label else labels[:2]
    return "".join(f"<h5>{esc(pl)}: live bytes after each line, one curve per run</h5>"
                   + memory_curve_html(memory_curves(runs, pl), title=f"{pl}: live bytes") for pl in chosen)


_COL_TITLES = {"run": "run", "fusion": "fusion", "executor": "executor", "fusion_cache": "cache",
               "sort_waits": "waits sorted", "compile_s": "compile s", "first_run_s": "1st run s",
               "steady_ms": "steady ms", "peak_predicted": "peak (pred.)", "peak_measured": "peak (meas.)",
               "kernels": "kernels", "fusions": "fusions", "cache_hits": "cache hits", "matches_eager": "vs eager"}


def _cell(col, v) -> str:
    if v is None:
        return "&ndash;"
    if col.startswith("peak_"):
        return esc(_fmt_bytes(v))
    if isinstance(v, bool):
        if col == "matches_eager":
            return '<span class="tl-ok">ok</span>' if v else '<span class="tl-bad">DIFFERS</span>'
        return "on" if v else "off"
    if isinstance(v, float):
        return f"{v:.3f}"
    return esc(v)


def compare_html(rows: list[dict], best: dict[str, set[int]] | None = None) -> str:
    """The Compare table; the best value of each lower-is-better column is marked (class tl-best, a star)."""
    from .table import COLUMNS, best_rows

    if not rows:
        return '<div class="tl-placeholder">no runs yet</div>'
    best = best_rows(rows) if best is None else best
    head = "".join(f"<th>{esc(_COL_TITLES[c])}</th>" for c in COLUMNS)
    body = []
    for i, r in enumerate(rows):
        tds = []
        for c in COLUMNS:
            cls = ["tl-num"] if isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) else []
            if i in best.get(c, ()):
                cls.append("tl-best")
            attr = f' class="{" ".join(cls)}"' if cls else ""
            tds.append(f"<td{attr}>{_cell(c, r.get(c))}</td>")
        body.append(f'<tr class="tl-row">{"".join(tds)}</tr>')
    note = '<div class="tl-placeholder">&#9733; best (lowest) value of the column</div>' if best else ""
    return f'<div class="tl-scroll"><table class="tl-compare"><tr>{head}</tr>{"".join(body)}</table></div>{note}'


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


def report_html(report, runs=None) -> str:
    """The whole static view: tabs Summary, Trace, Graph, Memory, Compare.

    ``runs``: [(label, Report)] of the comparison this report belongs to (default: itself).
    """
    from .table import report_row

    runs = list(runs) if runs else [(report.name, report)]
    rows = [report_row(r, label) for label, r in runs]
    panels = [("Summary", summary_html(report)), ("Trace", traces_html(report)), ("Graph", graphs_html(report)),
              ("Memory", memory_html(runs)), ("Compare", compare_html(rows))]
    return (f'<div class="tl-report"><style>{css()}</style><h3>trace_lab: {esc(report.name)}</h3>'
            f"{tabs_html(panels)}</div>")


def error_html(title: str, message: str) -> str:
    return f'<div class="tl-report"><div class="tl-error">{esc(title)}: {esc(message)}</div></div>'


def standalone_page(report, runs=None) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>trace_lab: {esc(report.name)}</title>"
            f"</head><body>{report_html(report, runs)}</body></html>")


# kept for callers of the first version of this module
def trace_html(trace) -> str:
    return f'<div class="tl-report"><style>{css()}</style>{code_html(trace)}</div>'
