"""The Compare tab: one row per run (:mod:`trace_lab.report.table`), the best value of a column starred.

Design: :mod:`.table` decides the rows, the columns shown and the best values; this module only draws
them. A column's title comes from :data:`_COL_TITLES`, except the option columns, whose titles and
"every run: ..." words come from the options schema (:func:`~trace_lab.report.table.option_title`:
the option's label, as the widget's control shows it, else its name), so an option is named once.
A header may wrap (``<br>`` between words), a cell never does.
"""
from __future__ import annotations

from ..ir.printer import format_bytes as _fmt_bytes
from .packing import esc
from .table import OPTION_COLUMNS, OPTION_SCHEMA, option_title

__all__ = ["compare_html", "column_title"]

# the other columns' titles; peaks are above inputs (table.py's definition)
_COL_TITLES = {"run": "run", "compile_s": "compile<br>s", "first_run_s": "1st call<br>s",
               "steady_ms": "steady<br>ms", "forward_peak_predicted": "forward peak<br>predicted",
               "forward_peak_measured": "forward peak<br>measured", "backward_peak_predicted": "backward peak<br>predicted",
               "backward_peak_measured": "backward peak<br>measured", "step_peak_measured": "whole call<br>peak measured",
               "kernels": "kernels", "fusions": "fused<br>regions",
               "cache_hits": "cache<br>hits", "matches_eager": "vs eager"}


def column_title(col: str) -> str:
    """A column's header (HTML): an option's schema label ('fusion cache' -> 'fusion<br>cache'), else
    :data:`_COL_TITLES`'s."""
    if col in OPTION_COLUMNS:
        return "<br>".join(esc(word) for word in option_title(col).split())
    return _COL_TITLES[col]


def _option_words(col: str, value) -> str:
    """How "every run: ..." names an option's shared value: 'fusion=dataflow' (the option's name and value),
    'fusion cache on' (a switch: its label and on/off)."""
    shown = _cell(col, value)
    return f"{esc(option_title(col))} {shown}" if OPTION_SCHEMA[col].type is bool else f"{col}={shown}"


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
    head = "".join(f'<th data-col="{c}">{column_title(c)}</th>' for c in cols)
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
    every = ", ".join(_option_words(c, v) for c, v in shared.items())
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
