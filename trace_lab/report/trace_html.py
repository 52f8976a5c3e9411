"""The Trace tab: each program part's stages as highlighted lines with a live-bytes bar per op line.

Design: a stage's rows come from the printer's line records (:class:`~trace_lab.ir.printer.Line`,
via the view model's :class:`~trace_lab.report.view_model.StageView`), never from re-parsing its
text: :func:`_layout` groups them (a fused region's ops fold under its line, a long run of input
comments under its first one), :func:`_row_html` draws one row, :func:`code_html` one stage (whole,
or windowed past :data:`LAZY_LINES`). :func:`part_data` is the same rows as plain data, packed once
per part, from which the page's script (``static/trace_view.js``, :data:`~.assets_html.TRACE_JS`)
draws every line exactly as :func:`code_html` would. :func:`traces_html` puts the stages of every
part together. Every string from user code is escaped (``esc`` or pygments).
"""
from __future__ import annotations

import uuid

from ..ir.printer import format_bytes as _fmt_bytes, plural
from .assets_html import TRACE_JS, highlight_lines
from .line_timeline import time_note
from .packing import esc, pack
from .view_model import line_region

__all__ = ["LAZY_LINES", "BARS_LEGEND", "code_html", "part_data", "part_data_html", "stage_field", "stage_lines",
           "stage_times", "traces_html"]

LAZY_LINES = 300  # a stage with more lines is shown as a window (head, around the peak, tail)
HEAD_LINES, PEAK_CONTEXT, TAIL_LINES = 24, 12, 6
REGION_HEAD, REGION_TAIL = 16, 4  # a windowed stage's fused region shows this many of its ops' lines


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
    value_of: dict[str, object] = {}  # a line's text -> the value it computes (its group in the table's order)
    out, plain = [], []
    for t in stages:
        for rec in t.lines:
            value_of.setdefault(rec.text, _value_key(rec))
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
    # order the table so that the forms of one op (its line in each stage, its line inside a fused region) sit
    # side by side: gzip then stores the later ones as short references to the first (its window is 32 KB)
    first_seen: dict[object, int] = {}
    for ln in table:
        first_seen.setdefault(value_of[ln], len(first_seen))
    order = sorted(table, key=lambda ln: (first_seen[value_of[ln]], table[ln]))
    new_pos = {table[ln]: k for k, ln in enumerate(order)}
    for st, entry in zip(plain, out):
        st["idx"] = [new_pos[i] for i in st["idx"]]
    for k, (st, entry) in enumerate(zip(plain, out)):
        entry.update(_like_earlier(st, plain[:k + 1]))
    return {"lines": order, "stages": out}


def _value_key(rec):
    """What groups a line with the other forms of the same op in :func:`part_data`'s table: the value an op
    line or a fused region's op line computes (the printer's ``name``, the same in and out of a region and in
    every stage), else the line itself."""
    return ("value", rec.name) if rec.role in ("op", "region_op") and rec.name else ("line", rec.text)


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


def stage_times(report, part) -> dict | None:
    """The measured time of each line of ``part``'s final stage (``code_html``'s ``times``), or None."""
    from .line_timeline import line_times_of

    times = line_times_of(report, part)
    if not times:
        return None
    return {**times, "device": (report.line_times or {}).get("device") == "cuda"}


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
    parts = list(report.view.parts)
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
