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
the renderer once per report.
"""
from __future__ import annotations

import re
import uuid
from functools import lru_cache

from .packing import INFLATE_JS, esc, pack, unpack  # noqa: F401 - re-exported
from .line_timeline import time_note
from .view_model import line_region

__all__ = ["esc", "code_html", "summary_html", "traces_html", "graphs_html", "memory_html",
           "compare_html", "memory_plot_data", "tabs_html", "report_html", "standalone_page", "memory_curves", "report_parts", "error_html",
           "css", "pack", "unpack", "INFLATE_JS", "LAZY_LINES", "part_data", "stage_lines"]

TAB_TITLES = ["Summary", "Trace", "Graph", "Memory", "Compare", "Saved", "Diff", "Regions", "Timeline"]

_BASE_CSS = """
.tl-report{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:13px;color:#1f2328}
.tl-report table{border-collapse:collapse;margin:4px 0}
.tl-report td,.tl-report th{border:1px solid #d0d7de;padding:2px 6px;text-align:left;vertical-align:top}
.tl-report{max-width:100%;min-width:0;box-sizing:border-box}
.tl-report .tl-scroll{overflow-x:auto;max-width:100%}
.tl-report .tl-scroll>table{margin:0}
.tl-report table.tl-compare{font-size:12px}
.tl-report table.tl-compare td{white-space:nowrap}
.tl-report table.tl-compare th{white-space:nowrap;vertical-align:bottom;font-size:11px;line-height:1.2}
.tl-report .tl-scroll table tr>:first-child{position:sticky;left:0;z-index:1;background:#fff;box-shadow:1px 0 0 #d0d7de}
.tl-report table.tl-compare tr>:first-child{white-space:normal;overflow-wrap:anywhere;min-width:9em;max-width:16em}
.tl-report .tl-scroll table tr>th:first-child{background:#f6f8fa}
.tl-report .tl-scroll table tr>td.tl-best:first-child{background:#dafbe1}
.tl-report td.tl-wrap,.tl-report table.tl-compare td.tl-wrap{white-space:normal;overflow-wrap:anywhere;min-width:12em;max-width:36em}
.tl-report svg.tl-timeline{max-width:100%;height:auto}
.tl-report table{line-height:1.3}
.tl-report p,.tl-report li,.tl-report .tl-placeholder{overflow-wrap:anywhere}
.tl-lab,.tl-lab .widget-tab,.tl-lab .widget-box,.tl-lab .widget-html,.tl-lab .widget-html-content{min-width:0;max-width:100%}
.tl-report th{background:#f6f8fa;font-weight:600}
.tl-report td.tl-num{text-align:right;font-variant-numeric:tabular-nums}
.tl-report td.tl-best{background:#dafbe1;font-weight:600}
.tl-report td.tl-best::after{content:" \\2605";color:#1a7f37}
.tl-report .tl-warn{color:#9a6700}
.tl-report .tl-bad,.tl-report .tl-error{color:#cf222e;font-weight:600}
.tl-report .tl-error{white-space:pre-wrap;border-left:3px solid #cf222e;padding:4px 8px;background:#fff5f5}
.tl-report .tl-ok{color:#1a7f37}
.tl-report .tl-memplot{max-width:100%;overflow-x:auto}
.tl-report .tl-memplot svg{max-width:100%;height:auto}
.tl-report .tl-placeholder{color:#57606a;font-style:italic;padding:6px 0}
.tl-report details{margin:2px 0}
.tl-report summary{cursor:pointer}
.tl-code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;line-height:1.35;
  background:#f6f8fa;padding:4px 0;overflow:auto;max-height:560px;border:1px solid #d0d7de}
.tl-code .tl-l{display:flex;white-space:pre;min-height:1.35em}
.tl-code .tl-time,.tl-code .tl-notime{display:inline-block;min-width:11em;color:#8250df;white-space:nowrap;font-size:90%;vertical-align:top}
.tl-code .tl-l code{font-family:inherit;background:none;padding:0 6px 0 calc(6px + 3em);text-indent:-3em;
  white-space:pre-wrap;overflow-wrap:anywhere;flex:1 1 auto;min-width:0}
.tl-report .tl-jump{font-size:12px;margin:2px 0}
.tl-report .tl-jump a{font-weight:600}
.tl-code .tl-pin{color:#57606a}
.tl-code .tl-bar{flex:0 0 64px;height:0.9em;margin-top:0.2em;background:#eaeef2;position:relative}
.tl-code .tl-bar i,.tl-code .tl-bar b{position:absolute;left:0;top:0;bottom:0;background:#54aeff}
.tl-code .tl-bar b{background:#b6e3ff}
.tl-code .tl-bar.tl-nb{visibility:hidden}
.tl-code .tl-gap{color:#57606a;font-style:italic;padding:1px 6px 1px 70px;background:#eef1f4;white-space:pre-wrap}
.tl-report .tl-lazy{font-size:12px;color:#57606a;margin:2px 0}
.tl-report .tl-lazy button{font-size:12px;cursor:pointer;margin-right:6px}
.tl-report .tl-z{display:none}
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


def _trace_lexer_class():
    """A small pygments lexer for trace text: the traces are regular Python, and a few rules
    lex them ~5x faster than the full PythonLexer (large backward traces stay quick)."""
    from pygments.lexer import RegexLexer, bygroups
    from pygments.token import Comment, Keyword, Name, Number, Operator, String, Text

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
            (r"\w+", Text),  # names and punctuation have no style: no <span> per token (notebook size)
            (r"[=*+-/]", Operator),
            (r".", Text),
        ]}

    return TraceLexer


@lru_cache(maxsize=1)
def _pygments():
    from pygments.formatters import HtmlFormatter

    fmt = HtmlFormatter(nowrap=True, style="default")
    return _trace_lexer_class()(), fmt, fmt.get_style_defs(".tl-code")


def css() -> str:
    return _BASE_CSS + _pygments()[2]



def highlight_lines(text: str) -> list[str]:
    """Pygments-highlighted HTML of ``text``, one string per line (content escaped)."""
    from pygments import highlight

    lexer, fmt, _ = _pygments()
    return highlight(text, lexer, fmt).split("\n")


# -- one trace ------------------------------------------------------------------------------


def _fmt_bytes(n) -> str:
    from ..ir.printer import format_bytes

    return format_bytes(n)


def plural(n: int, noun: str) -> str:
    from ..ir.printer import plural as _plural

    return _plural(n, noun)


LAZY_LINES = 300  # a stage with more lines is shown as a window (head, around the peak, tail)
HEAD_LINES, PEAK_CONTEXT, TAIL_LINES = 24, 12, 6
REGION_HEAD, REGION_TAIL = 16, 4  # a windowed stage's fused region shows this many of its ops' lines


# "show all N lines": unpack the part's data and draw every line of the stage as code_html does
TRACE_JS = INFLATE_JS + r"""if (!window.__tlTraceInit) { window.__tlTraceInit = true; (function () {
  var R = /(\n)|([ \t]+)|(#[^|\n]*)(\|[^\n]*)|(#[^\n]*)|\b(def|del|return|import|None|True|False)\b|\b((?:aten|torch|operator)(?:\.\w+)+)|\b(fusion\d+)\b|('[^'\n]*'|"[^"\n]*")|(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|(\w+)|([=*+-\/])|([\s\S])/y;
  var CLS = {3: 'c1', 4: 'cs', 5: 'c1', 6: 'k', 7: 'nf', 8: 'nc', 9: 's', 10: 'm', 12: 'o'};  // names, punctuation: plain
  function esc(t) { return t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;'); }  // as pygments
  function attr(t) { return esc(t).replace(/"/g, '&quot;').replace(/'/g, '&#x27;'); }
  function hl(line) {  // tokens of one class in a row are merged, as pygments' formatter does
    var out = '', m, cur = null, buf = '';
    function flush() { if (buf) { out += cur ? '<span class="' + cur + '">' + esc(buf) + '</span>' : esc(buf); } buf = ''; }
    R.lastIndex = 0;
    while (R.lastIndex < line.length && (m = R.exec(line))) {
      for (var g = 1; g < m.length; g++) {
        if (m[g] === undefined) { continue; }
        var c = CLS[g] || '';
        if (c !== cur) { flush(); cur = c; }
        buf += m[g];
      }
    }
    flush();
    return out;
  }
  function fb(n) {
    var u = [['GiB', 1073741824], ['MiB', 1048576], ['KiB', 1024]];
    for (var i = 0; i < 3; i++) { if (Math.abs(n) >= u[i][1]) { return (n / u[i][1]).toFixed(2) + ' ' + u[i][0]; } }
    return Math.trunc(n) + ' B';
  }
  function sums(xs) { var a = 0; return xs.map(function (x) { a += x; return a; }); }
  function field(d, st, key) {  // as stage_field in html.py: {"like": j, "set": [...]} or (delta-coded) data
    var v = st[key];
    if (v && !Array.isArray(v)) {
      var out = field(d, d.stages[v.like], key).slice();
      (v.set || []).forEach(function (p) { out[p[0]] = p[1]; });
      return out;
    }
    return key === 'idx' || key === 'ops' ? sums(v) : v;
  }
  function draw(d, st) {
    var out = [], L = d.lines, I = field(d, st, 'idx'), base = st.base, scale = st.scale, op = {}, fold = {}, rows = [];
    var mem = field(d, st, 'mem');
    field(d, st, 'ops').forEach(function (i, k) { op[i] = k; });
    var pfold = {};
    field(d, st, 'fold').forEach(function (f) { fold[f[0]] = f[1]; });
    (st.pfold ? field(d, st, 'pfold') : []).forEach(function (f) { fold[f[0]] = f[1]; pfold[f[0]] = true; });
    for (var i = 0; i < I.length; i++) {
      var n = fold[i] || 0; rows.push([i, op[i] === undefined ? -1 : op[i], n, !!pfold[i]]); i += n;
    }
    rows.forEach(function (r) {
      var i = r[0], k = r[1], n = r[2], params = r[3], m = k >= 0 ? mem[k] : null, bar, cls = 'tl-l';
      if (m) {
        var pct = (100 * Math.max(m[0] - base, 0) / scale).toFixed(1), hw = (100 * Math.max(m[1] - base, 0) / scale).toFixed(1);
        var tip = 'after ' + fb(m[0] - base) + ' (' + fb(m[0]) + ' incl. inputs), while it runs ' + fb(m[1] - base) +
          '; +' + fb(m[2]) + ' -' + fb(m[3]);
        bar = '<span class="tl-bar" title="' + attr(tip) + '"><b style="width:' + hw + '%"></b><i style="width:' + pct + '%"></i></span>';
        if (k === st.peak) { cls = 'tl-l tl-pk'; }
      } else { bar = '<span class="tl-bar tl-nb"></span>'; }
      var code = hl(L[I[i]]);
      if (n > 0) {
        var inner = '', kind = params ? 'tl-pin' : 'tl-inner';
        for (var j = i + 1; j <= i + n; j++) {
          inner += '<div class="tl-l ' + kind + '"><span class="tl-bar tl-nb"></span><code>' + hl(L[I[j]]) + '</code></div>';
        }
        var hint = params ? n + ' more input' + (n !== 1 ? 's' : '') : n + ' op' + (n !== 1 ? 's' : '');
        out.push('<details class="tl-region' + (params ? ' tl-params' : '') + '"><summary><div class="' + cls + '">' + bar +
                 '<code>' + code + '<span class="tl-fold">' + hint + '</span></code></div></summary>' + inner + '</details>');
      } else { out.push('<div class="' + cls + '">' + bar + '<code>' + code + '</code></div>'); }
    });
    return out.join('');
  }
  window.__tlTraceDraw = draw;  // (data, stage data) -> the rows' HTML, as code_html draws them
  document.addEventListener('click', function (ev) {
    var b = ev.target.closest ? ev.target.closest('button.tl-all') : null;
    if (!b) { return; }
    var win = b.parentNode.nextElementSibling, full = win && win.nextElementSibling;
    var anchor = win.getAttribute('data-tla');
    function moveAnchor(from, to) {  // the jump-to-peak link targets the peak line of the view on display
      var a = anchor && from.querySelector('.tl-pk code'), b = anchor && to.querySelector('.tl-pk code');
      if (a && b) { a.removeAttribute('id'); b.id = anchor; }
    }
    if (full && full.classList.contains('tl-full')) {
      var show = full.style.display === 'none';
      full.style.display = show ? '' : 'none'; win.style.display = show ? 'none' : '';
      if (show) { moveAnchor(win, full); } else { moveAnchor(full, win); }
      b.textContent = show ? b.getAttribute('data-less') : b.getAttribute('data-more'); return;
    }
    var store = document.getElementById(win.getAttribute('data-tlp'));
    if (!store) { return; }
    b.disabled = true; b.textContent = 'unpacking\u2026';
    store.__tlData = store.__tlData || window.__tlInflate(store.getAttribute('data-tlz')).then(JSON.parse);
    store.__tlData.then(function (d) {
      var div = document.createElement('div');
      div.className = 'tl-code tl-full';
      div.innerHTML = draw(d, d.stages[+win.getAttribute('data-tls')]);
      win.parentNode.insertBefore(div, win.nextSibling); win.style.display = 'none'; moveAnchor(win, div);
      b.disabled = false; b.textContent = b.getAttribute('data-less');
    }).catch(function (e) { b.disabled = false; b.textContent = 'could not unpack: ' + e; });
  });
})(); }
"""


class _Row(tuple):
    """(line, the line's record when it carries memory else None, folded lines after it); ``params``:
    a run of input comments (the first shown, the rest folded) rather than a fused region."""

    params = False


PARAM_FOLD = 4  # more input comments than this in a row: all but the first are folded (closed) by default


def _layout(stage):
    """(lines, rows): rows are :class:`_Row` (line, its memory record or None, number of folded lines after it).

    A fused region's ops fold under its line; a run of more than ``PARAM_FOLD`` input comments folds under
    its first one (a model's ~70 parameter comments no longer fill the first screen).
    ``stage`` is a :class:`~trace_lab.report.view_model.StageView`: its lines are the printer's records."""
    recs = stage.lines
    rows, i = [], 0
    while i < len(recs):
        m = recs[i] if recs[i].has_memory else None
        j = i + 1
        params = False
        if m is not None and line_region(m) is not None:  # a fused region: its ops follow, folded under it
            while j < len(recs) and recs[j].role == "region_op":
                j += 1
        elif recs[i].role in ("input", "constant"):
            while j < len(recs) and recs[j].role in ("input", "constant"):
                j += 1
            if j - i > PARAM_FOLD:
                params = True
            else:
                j = i + 1
        row = _Row((i, m, j - i - 1))
        row.params = params
        rows.append(row)
        i = j
    return [ln.text for ln in recs], rows


def _scale(stage):
    # bars show bytes above the inputs (inputs are held by the caller and never freed)
    return stage.entry_bytes, max(stage.peak_bytes - stage.entry_bytes, 1)


def _inner_lines(row, capped: bool) -> tuple[list[int], list[int]]:
    """A region row's folded lines: (first part, last part); capped, a long region keeps its head and tail."""
    i, _, n = row
    inner = list(range(i + 1, i + 1 + n))
    if not capped or n <= REGION_HEAD + REGION_TAIL + 1:
        return inner, []
    return inner[:REGION_HEAD], inner[-REGION_TAIL:]


BARS_LEGEND = ("bars: live bytes above the inputs after the line (dark) and while it runs (light); a bar's "
               "tooltip gives both, the live bytes including the inputs, and what the line allocated (+) and freed (-)")


def _bar_tip(live_after, high_water, allocated, freed, base) -> str:
    """A bar's tooltip, short (one per op line in every stored output); :data:`BARS_LEGEND` explains it."""
    return (f"after {_fmt_bytes(live_after - base)} ({_fmt_bytes(live_after)} incl. inputs), while it runs "
            f"{_fmt_bytes(high_water - base)}; +{_fmt_bytes(allocated)} -{_fmt_bytes(freed)}")


def _row_html(shown, row, base, scale, capped: bool = False, anchor: str | None = None, times=None) -> str:
    i, m, n_inner = row
    text = shown[i]

    if m is not None:
        pct = 100.0 * max(m.live_after - base, 0) / scale
        hw = 100.0 * max(m.high_water - base, 0) / scale
        tip = _bar_tip(m.live_after, m.high_water, m.allocated, m.freed, base)
        bar = (f'<span class="tl-bar" title="{esc(tip)}"><b style="width:{hw:.1f}%"></b>'
               f'<i style="width:{pct:.1f}%"></i></span>')
    else:
        bar = '<span class="tl-bar tl-nb"></span>'
    if times:  # a column beside the bar: the line's measured time (report/line_timeline.py), blank if not timed
        timed = times.get(m.op) if m is not None else None
        note = time_note(*timed, times.get("device", False)) if timed is not None else ""
        bar += f'<span class="{"tl-time" if timed is not None else "tl-notime"}">{esc(note)}</span>'
    peak = m is not None and m.peak
    cls = "tl-l tl-pk" if peak else "tl-l"
    code = f'<code id="{esc(anchor)}">' if peak and anchor else "<code>"  # the jump-to-peak link's target
    if not n_inner:
        return f'<div class="{cls}">{bar}{code}{text}</code></div>'
    first, last = _inner_lines(row, capped)
    kind = "tl-inner" if not getattr(row, "params", False) else "tl-pin"
    pad = '<span class="tl-notime"></span>' if times else ""  # keep the time column aligned under the region
    line = ('<div class="tl-l ' + kind + '"><span class="tl-bar tl-nb"></span>' + pad + '<code>{}</code></div>').format
    inner = "".join(line(shown[j]) for j in first)
    if last:
        inner += _gap_html(first[-1] + 1, last[0]) + "".join(line(shown[j]) for j in last)
    if getattr(row, "params", False):
        hint = f"{n_inner} more input{'s' if n_inner != 1 else ''}"
        return (f'<details class="tl-region tl-params"><summary><div class="{cls}">{bar}{code}{text}'
                f'<span class="tl-fold">{hint}</span></code></div></summary>{inner}</details>')
    hint = f"{n_inner} op{'s' if n_inner != 1 else ''}"
    return (f'<details class="tl-region"><summary><div class="{cls}">{bar}{code}{text}'
            f'<span class="tl-fold">{hint}</span></code></div></summary>{inner}</details>')


def _window_rows(rows, n_lines) -> set[int]:
    """Indices of the rows a windowed stage shows: the head, the rows around the peak, the tail."""
    keep = set()
    for r, (i, m, n) in enumerate(rows):
        if i < HEAD_LINES or i + n >= n_lines - TAIL_LINES:
            keep.add(r)
    peak_row = next((r for r, (_, m, _) in enumerate(rows) if m is not None and m.peak), None)
    if peak_row is not None:
        keep.update(range(max(peak_row - PEAK_CONTEXT, 0), min(peak_row + PEAK_CONTEXT + 1, len(rows))))
    return keep


def _jump_html(rows, base, anchor: str | None) -> str:
    """A link to the peak line (its row carries ``id=anchor``): plain HTML, scrolls without a script."""
    peak = next(((i, m) for i, m, _ in rows if m is not None and m.peak), None)
    if anchor is None or peak is None:
        return ""
    i, m = peak
    return (f'<div class="tl-jump"><a href="#{esc(anchor)}">&#8595; jump to the peak</a>: line {i + 1:,}, '
            f"<code>{esc(m.name or '')}</code>, {esc(_fmt_bytes(m.high_water - base))} above inputs while it runs</div>")


def code_html(view, max_lines: int | None = LAZY_LINES, *, data_id: str | None = None, stage: int = 0,
              how_to_see_all: str = "", anchor: str | None = None, times: dict | None = None) -> str:
    """One stage (a :class:`~trace_lab.report.view_model.StageView`): highlighted lines, a live-bytes
    bar per op line, the peak line marked, each fused region's ops folded under its line.

    Longer than ``max_lines`` (None: never): a window (the first lines, the lines around
    the peak, the last lines) with a line saying what each gap hides. ``data_id`` names the
    element holding the part's packed data (:func:`part_data_html`): the view then gets a
    "show all N lines" button that draws every line in the browser; ``how_to_see_all`` is
    shown next to it (or alone) to say how else to read the whole trace. ``anchor``: an id for the
    peak line and a "jump to the peak" link above the lines (plain HTML: works where scripts do not
    run); ids are unique per page, so the caller makes them. ``times``: {op index: (host us, device us)} of
    the stage's lines (a profiled run's final stage, :func:`.line_timeline.line_times_of`; key ``"device"``:
    whether device time was measured), shown after each timed line."""
    lines, rows = _layout(view)
    base, scale = _scale(view)
    jump = _jump_html(rows, base, anchor)
    if max_lines is None or len(lines) <= max_lines:
        shown = highlight_lines("\n".join(lines))
        body = "".join(_row_html(shown, r, base, scale, anchor=anchor, times=times) for r in rows)
        return f'{jump}<div class="tl-code">{body}</div>'
    keep = _window_rows(rows, len(lines))
    # highlight only the lines shown (no token spans a line, so each line comes out as in the whole text)
    needed = sorted(j for r in keep for part in ([rows[r][0]], *_inner_lines(rows[r], True)) for j in part)
    shown = dict(zip(needed, highlight_lines("\n".join(lines[j] for j in needed))))
    out, hidden_from = [], None
    for r, row in enumerate(rows):
        if r not in keep:
            hidden_from = row[0] if hidden_from is None else hidden_from
            continue
        if hidden_from is not None:
            out.append(_gap_html(hidden_from, row[0]))
            hidden_from = None
        out.append(_row_html(shown, row, base, scale, capped=True, anchor=anchor, times=times))
    if hidden_from is not None:
        out.append(_gap_html(hidden_from, len(lines)))
    n_shown = len(needed)
    peak_at = next((i for i, m, _ in rows if m is not None and m.peak), None)
    where = f", the peak is line {peak_at + 1:,}" if peak_at is not None else ""
    button = ""
    if data_id is not None:
        more, less = f"show all {len(lines):,} lines", "show the window only"
        button = (f'<button type="button" class="tl-all" data-more="{esc(more)}" data-less="{esc(less)}">'
                  f"{esc(more)}</button>")
    head = (f'<div class="tl-lazy">{button}long trace: {n_shown:,} of {len(lines):,} lines shown (the first, those around '
            f"the peak, the last; of a long fused region its first and last ops{where}). {how_to_see_all}</div>")
    attrs = f' data-tlp="{esc(data_id)}" data-tls="{int(stage)}"' if data_id is not None else ""
    if data_id is not None and anchor:
        attrs += f' data-tla="{esc(anchor)}"'
    return f'{jump}{head}<div class="tl-code"{attrs}>{"".join(out)}</div>'


def _gap_html(start: int, stop: int) -> str:
    n = stop - start
    return (f'<div class="tl-gap">&#8942; {n:,} line{"s" if n != 1 else ""} not shown here '
            f"(lines {start + 1:,}&ndash;{stop:,})</div>")


def _deltas(xs: list[int]) -> list[int]:
    return [x - (xs[k - 1] if k else 0) for k, x in enumerate(xs)]


def part_data(stages) -> dict:
    """Every stage of one program part as plain data for the browser: one table of distinct lines
    shared by the stages; per stage its lines as indices into the table, the op lines (the k-th
    carries ``mem[k]`` = [live_after, high_water, allocated, freed]), the folded regions
    ([op line, inner lines]), the bar scale and the peak's op index. Index lists are
    delta-coded (they mostly step by 1 or 3, which gzip stores in almost nothing)."""
    table: dict[str, int] = {}
    out, plain = [], []
    for t in stages:
        lines, rows = _layout(t)
        base, scale = _scale(t)
        mem_lines = t.op_lines
        peak_k = next((n for n, m in enumerate(mem_lines) if m.peak), -1)
        st = {"idx": [table.setdefault(ln, len(table)) for ln in lines],
              "ops": [i for i, ln in enumerate(t.lines) if ln.has_memory],
              "fold": [[i, n] for i, _, n in (r for r in rows if not r.params) if n],
              "pfold": [[i, n] for i, _, n in (r for r in rows if r.params)],
              "mem": [[m.live_after, m.high_water, m.allocated, m.freed] for m in mem_lines]}
        plain.append(st)
        out.append({"base": base, "scale": scale, "peak": peak_k})
    # order the table so that the forms of one op (its line, its line inside a fused region) sit side by side:
    # gzip then stores the second as a short reference to the first (its window is 32 KB)
    first_core: dict[str, int] = {}
    for ln in table:
        first_core.setdefault(_core(ln), len(first_core))
    order = sorted(table, key=lambda ln: (first_core[_core(ln)], table[ln]))
    new_pos = {table[ln]: k for k, ln in enumerate(order)}
    for st, entry in zip(plain, out):
        st["idx"] = [new_pos[i] for i in st["idx"]]
    for k, (st, entry) in enumerate(zip(plain, out)):
        entry.update(_like_earlier(st, plain[:k + 1]))
    return {"lines": order, "stages": out}


_CORE = re.compile(r"^\s*(?:#\s+)?(.*?)(?:\s\s#.*)?$")


def _core(line: str) -> str:
    """An op's statement without indentation, comment mark and annotations (the same in and out of a region)."""
    return _CORE.match(line).group(1)


def _like_earlier(st: dict, plain: list[dict]) -> dict:
    """A stage's fields, each as data or as ``{"like": j}`` (equal to stage j's; for ``idx`` also
    ``"set": [[line, index]...]``, a few lines changed: the title of a pass that changed nothing)."""
    out = {}
    for key, value in st.items():
        ref = None
        for j, other in enumerate(plain[:-1]):
            if other[key] == value:
                ref = {"like": j}
                break
            if key == "idx" and len(other[key]) == len(value):
                changed = [[i, v] for i, (v, o) in enumerate(zip(value, other[key])) if v != o]
                if len(changed) <= 8:
                    ref = {"like": j, "set": changed}
                    break
        out[key] = ref if ref is not None else (_deltas(value) if key in ("idx", "ops") else value)
    return out


def stage_field(data: dict, stage: int, key: str) -> list:
    """One field of one stage of :func:`part_data`, references resolved and indices absolute (as the page's
    script reads them)."""
    v = data["stages"][stage][key]
    if isinstance(v, dict):
        out = list(stage_field(data, v["like"], key))
        for i, x in v.get("set", []):
            out[i] = x
        return out
    if key in ("idx", "ops"):
        acc, out = 0, []
        for d in v:
            acc += d
            out.append(acc)
        return out
    return v


def stage_lines(data: dict, stage: int) -> list[str]:
    """The text lines of one stage of :func:`part_data` (tests, tools)."""
    return [data["lines"][i] for i in stage_field(data, stage, "idx")]


def part_data_html(data_id: str, stages) -> str:
    """The hidden element holding :func:`part_data` packed (gzip + base64)."""
    return f'<div class="tl-z" hidden id="{esc(data_id)}" data-tlz="{pack(part_data(stages))}"></div>'


# -- report parts ----------------------------------------------------------------------------
def stage_times(report, part) -> dict | None:
    """The measured time of each line of ``part``'s final stage (``code_html``'s ``times``), or None."""
    from .line_timeline import line_times_of

    times = line_times_of(report, part)
    if not times:
        return None
    return {**times, "device": (report.line_times or {}).get("device") == "cuda"}


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


def _see_all_hint(report, part, k: int) -> str:
    how = f"<code>print({esc(report.stage_access(part.label, part.kind, part.position, k))})</code>"
    return (f"The whole text: {how}, or <code>report.save_html(path)</code> and open the file in a browser "
            "(&ldquo;show all&rdquo; needs the page's script: a trusted notebook or an HTML export).")


def _body(text: str) -> str:
    """A stage's text without its title comment (which names the stage)."""
    return text.split("\n", 1)[1] if text.startswith("# trace_lab:") and "\n" in text else text


def _anchor_id(report, label: str) -> str:
    """An id for a part's peak lines: the same for the same report (a reloaded report renders the same),
    distinct for the outputs of one notebook (name, creation time and part differ)."""
    import hashlib

    key = f"{report.name}|{report.created}|{label}".encode("utf-8", "replace")
    return "tlpk" + hashlib.sha1(key).hexdigest()[:12]


def traces_html(report) -> str:
    parts = report_parts(report)
    if not parts:
        return '<div class="tl-placeholder">no program was compiled</div>'
    out, lazy = [f'<div class="tl-placeholder">{BARS_LEGEND}</div>'], False
    for part in parts:
        label, stages = part.label, part.stages
        inner = []
        texts = [t.text for t in stages]
        long = any(len(text.splitlines()) > LAZY_LINES for text in texts)
        data_id = "tlz" + uuid.uuid4().hex[:12] if long else None
        anchor_id = _anchor_id(report, label)
        listed = part.listed_stages()
        last = {_body(texts[k]): k for k, _ in listed}  # passes that changed nothing: say so
        for k, t in listed:
            text = texts[k]
            same = last[_body(text)]
            head = (f"stage {k}: {esc(t.stage)} &mdash; {plural(t.n_ops, 'op')}, peak "
                    f"{esc(_fmt_bytes(t.peak_above_inputs_bytes))} above inputs (high-water "
                    f"{esc(_fmt_bytes(t.peak_bytes))} incl. inputs)"
                    + (f" &mdash; same lines as stage {same} (a new title only)" if same != k else ""))
            opened = " open" if k == len(stages) - 1 else ""
            if same != k:  # no second copy of the same lines (every output is stored in the notebook)
                body = (f'<div class="tl-placeholder">the lines of stage {same} (open it below); only the title '
                        f"differs</div>")
            else:
                body = code_html(t, LAZY_LINES, data_id=data_id, stage=k, how_to_see_all=_see_all_hint(report, part, k),
                                 anchor=f"{anchor_id}-{k}",
                                 times=stage_times(report, part) if k == len(stages) - 1 else None)
            inner.append(f"<details{opened}><summary>{head}</summary>{body}</details>")
        hidden = [t.stage for k, t in enumerate(stages) if part.unchanged_sort_waits(k)]
        if hidden:
            inner.append(f'<div class="tl-placeholder">not listed: {esc(", ".join(hidden))} (no collectives to sort: '
                         "the lines of the stage before)</div>")
        store = ""
        if data_id is not None:
            store, lazy = part_data_html(data_id, stages), True
        out.append(f"<details open><summary><b>{esc(label)}</b> ({plural(len(listed), 'stage')})</summary>"
                   f"<div style='margin-left:12px'>{''.join(inner)}</div>{store}</details>")
    if lazy:
        out.append(f"<script>{TRACE_JS}</script>")
    return "".join(out)


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


def memory_curves(runs, part_label: str) -> dict[str, list[int]]:
    """{run label: live-bytes curve of the final stage of ``part_label``} for each run that has it."""
    curves = {}
    for label, report in runs:
        part = report.view.part(part_label)
        if part is not None:
            curves[label] = part.stages[-1].curve()
    return curves


def _hover_texts(stage) -> list[str]:
    """Per point of a stage's curve (entry, then each op line): the op, its source line, its memory."""
    base = stage.entry_bytes
    out = [f"entry: the inputs, {_fmt_bytes(base)} (0 B above inputs)"]
    for k, ln in enumerate(stage.op_lines, 1):
        stmt = ln.text.split("  #", 1)[0].strip()
        stmt = stmt if len(stmt) <= 110 else stmt[:107] + "..."
        src = f"\n{ln.source}" if ln.source else ""
        out.append(f"op {k}: {stmt}{src}\nlive {_fmt_bytes(ln.live_after - base)} above inputs after it, "
                   f"{_fmt_bytes(ln.high_water - base)} while it runs" + ("  <- peak" if ln.peak else ""))
    return out


def memory_plot_data(runs, part_label: str) -> dict:
    """What the Memory tab draws for one program part, one curve per run that has it (final stage), all
    above the part's inputs: {"curves", "peaks" (the peak above inputs: the high water while the peak
    line runs), "peak_at" (the peak line's point), "hover" (per point: op, source line, bytes), "stages"}."""
    data = {"curves": {}, "peaks": {}, "peak_at": {}, "hover": {}, "stages": {}}
    for label, report in runs:
        part = report.view.part(part_label)
        if part is None:
            continue
        stage = part.stages[-1]
        base = stage.entry_bytes
        data["curves"][label] = [y - base for y in stage.curve()]
        data["peaks"][label] = stage.peak_above_inputs_bytes
        data["peak_at"][label] = next((k for k, ln in enumerate(stage.op_lines, 1) if ln.peak), 0)
        data["hover"][label] = _hover_texts(stage)
        data["stages"][label] = stage
    return data


def _memory_table(data: dict) -> str:
    rows = "".join(
        f"<tr><td>{esc(label)}</td><td class='tl-num'>{len(curve) - 1}</td>"
        f"<td class='tl-num'>{esc(_fmt_bytes(data['peaks'][label]))}</td><td class='tl-num'>{data['peak_at'][label]}</td>"
        f"<td class='tl-num'>{esc(_fmt_bytes(data['stages'][label].peak_bytes))}</td></tr>"
        for label, curve in data["curves"].items())
    return ("<table><tr><th>run</th><th>ops</th><th>peak above inputs</th><th>at op</th>"
            f"<th>high-water incl. inputs</th></tr>{rows}</table>")


def memory_html(runs, part_label: str | None = None) -> str:
    """The Memory tab: per program part, live bytes above its inputs after each op, one curve per run, each
    run's peak (above inputs, as everywhere) marked and labelled; hovering a step names its op and source."""
    from .memory_plot import memory_curve_svg
    from .optional_views import placeholder

    if not runs:
        return '<div class="tl-placeholder">no runs yet</div>'
    labels = [p.label for p in report_parts(runs[-1][1])]
    if not labels:
        return '<div class="tl-placeholder">no program was compiled</div>'
    chosen = [part_label] if part_label else labels[:2]
    out = []
    for pl in chosen:
        data = memory_plot_data(runs, pl)
        if not data["curves"]:
            continue
        try:
            svg = memory_curve_svg(data["curves"], data["peaks"], title=f"{pl}: live memory above its inputs",
                                   xlabel="op (0 = entry)", ylabel="live above inputs", peak_at=data["peak_at"],
                                   hover=data["hover"])
        except Exception as e:  # noqa: BLE001 - a broken plot must not take the other tabs down
            svg = placeholder(f"memory plot failed: {type(e).__name__}: {e}")
        out.append(f"<h5>{esc(pl)}: live bytes above its inputs after each op, one curve per run; the peak is "
                   f"above inputs (hover a step for its op and source line)</h5><div class='tl-memplot'>{svg}</div>"
                   + _memory_table(data))
    return "".join(out)


# column titles: a header may wrap (<br>), a cell never does; peaks are above inputs (table.py's definition)
_COL_TITLES = {"run": "run", "fusion": "fusion", "executor": "executor", "fusion_cache": "fusion<br>cache",
               "sort_waits": "wait<br>sorting", "compile_s": "compile<br>s", "first_run_s": "1st call<br>s",
               "steady_ms": "steady<br>ms", "forward_peak_predicted": "forward peak<br>predicted",
               "forward_peak_measured": "forward peak<br>measured", "backward_peak_predicted": "backward peak<br>predicted",
               "backward_peak_measured": "backward peak<br>measured", "step_peak_measured": "whole call<br>peak measured",
               "kernels": "kernels", "fusions": "fused<br>regions",
               "cache_hits": "cache<br>hits", "matches_eager": "vs eager"}
_OPTION_WORDS = {"fusion": "fusion={}", "executor": "executor={}", "fusion_cache": "fusion cache {}",
                 "sort_waits": "wait sorting {}"}


def _cell(col, v) -> str:
    if v is None:
        return "&ndash;"
    if "_peak_" in col:
        return esc(_fmt_bytes(v))
    if isinstance(v, bool):
        if col == "matches_eager":
            return '<span class="tl-ok">ok</span>' if v else '<span class="tl-bad">DIFFERS</span>'
        return "on" if v else "off"
    if isinstance(v, float):
        return f"{v:.3f}"
    return esc(v)


def _spread(row: dict) -> str:
    """The steady cell's spread of the timed runs ('15.20-18.00') and its noisy flag (issue 26 item 3)."""
    low, high = row.get("steady_min_ms"), row.get("steady_max_ms")
    spread = low is not None and high is not None and high > low  # one timed run has no spread to show
    out = f'<br><span class="tl-spread">{low:.2f}-{high:.2f}</span>' if spread else ""
    if row.get("steady_noisy"):
        out += f' <span class="tl-warn tl-noisy" title="{esc(row["steady_noisy"])}">noisy</span>'
    return out


def _first_noise(row: dict) -> str:
    """The 1st-call cell's noisy flag: other processes competed for the CPUs during the first call."""
    why = row.get("first_run_noisy")
    return f' <span class="tl-warn tl-noisy" title="{esc(why)}">noisy</span>' if why else ""


def compare_html(rows: list[dict], best: dict[str, set[int]] | None = None) -> str:
    """The Compare table; the best value of each lower-is-better column is marked (class tl-best, a star).

    Only the columns that say something are drawn (:func:`~trace_lab.report.table.shown_columns`: the
    options every run shares are said once above the table); the run column stays in view while the
    rest scrolls sideways in a narrow panel. Every cell names its column (``data-col``)."""
    from .table import best_rows, shown_columns

    if not rows:
        return '<div class="tl-placeholder">no runs yet</div>'
    best = best_rows(rows) if best is None else best
    cols, shared = shown_columns(rows)
    head = "".join(f'<th data-col="{c}">{_COL_TITLES[c]}</th>' for c in cols)
    body = []
    for i, r in enumerate(rows):
        tds = []
        for c in cols:
            value = r.get(c)
            cls = ["tl-num"] if isinstance(value, (int, float)) and not isinstance(value, bool) else []
            if i in best.get(c, ()):
                cls.append("tl-best")
            attr = f' class="{" ".join(cls)}"' if cls else ""
            extra = _spread(r) if c == "steady_ms" else _first_noise(r) if c == "first_run_s" else ""
            tds.append(f'<td data-col="{c}"{attr}>{_cell(c, value)}{extra}</td>')
        body.append(f'<tr class="tl-row">{"".join(tds)}</tr>')
    every = ", ".join(_OPTION_WORDS[c].format(_cell(c, v)) for c, v in shared.items())
    top = f'<div class="tl-placeholder">every run: {every}</div>' if every else ""
    notes = ["peaks are above the program's inputs (memory it allocates beyond what was allocated when it "
             "was called); forward and backward apart"]
    if any(r.get("step_peak_measured") is not None for r in rows):
        notes.append("whole call: forward and backward of one call together, measured the same way for trace_lab's "
                     "runs and the --baseline peers (which trace nothing: no predicted peaks, kernels or regions)")
    if any(r.get("steady_noisy") or r.get("first_run_noisy") for r in rows):
        notes.append("noisy: the timed runs spread over 1.5x, or other processes competed for the CPUs while they "
                     "(or the first call) ran (the Summary says which); such a time gets no star")
    if best:
        notes.append("&#9733; best (lowest) time or peak of the column")
    note = f'<div class="tl-placeholder">{"; ".join(notes)}</div>'
    return (f'{top}<div class="tl-scroll tl-compare-scroll"><table class="tl-compare"><tr>{head}</tr>'
            f'{"".join(body)}</table></div>{note}')


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
PLOTS_JS = r"""document.querySelectorAll('.tl-svgz:not([data-tld])').forEach(function (el) {
  el.setAttribute('data-tld', '1');
  window.__tlInflate(el.getAttribute('data-tlz')).then(function (svg) { el.innerHTML = svg; })
    .catch(function (e) { el.textContent = 'could not unpack the plot: ' + e; });
});
"""


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
    """The whole static view: tabs Summary, Trace, Graph, Memory, Compare, Saved, Diff, Regions, Timeline.

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
