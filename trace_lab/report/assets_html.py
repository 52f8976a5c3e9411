"""The report page's look: its CSS and scripts, and the highlighting of trace text.

Design: the CSS and JavaScript are plain files under ``trace_lab/static/`` (``report.css``,
``trace_view.js``, ``plots.js``; shipped as package data), read once each (:func:`static_text`,
cached) and injected verbatim, so they can be read and linted as CSS/JS and the Python modules hold
only markup. Only what depends on Python data is added here: one pair of tab rules per tab
(:data:`TAB_TITLES`) and pygments' style rules for the highlighted trace lines. Every other
``*_html`` module of :mod:`trace_lab.report` takes its CSS and scripts from this one.
"""
from __future__ import annotations

from functools import lru_cache
from importlib import resources

from .packing import INFLATE_JS

__all__ = ["static_text", "TAB_TITLES", "css", "styled", "highlight_lines", "TRACE_JS", "PLOTS_JS"]

TAB_TITLES = ["Summary", "Trace", "Graph", "Memory", "Compare", "Peak", "Saved", "Diff", "Regions", "Timeline"]


@lru_cache(maxsize=None)
def static_text(name: str) -> str:
    """The text of ``trace_lab/static/<name>`` (read once)."""
    return resources.files("trace_lab").joinpath("static", name).read_text(encoding="utf-8")


def _tab_css(n_tabs: int) -> str:
    """CSS-only tabs: the checked radio input shows its section and marks its label."""
    return "".join(f".tl-tabs>input.tl-t{i}:checked~section.tl-p{i}{{display:block}}"
                   f".tl-tabs>input.tl-t{i}:checked+label{{background:#fff;font-weight:600}}\n" for i in range(n_tabs))


# "show all N lines": unpack the part's data and draw every line of the stage as code_html does
TRACE_JS = INFLATE_JS + static_text("trace_view.js")
# fill each plot stored packed (html._pack_plots) once the page's script runs
PLOTS_JS = static_text("plots.js")


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


@lru_cache(maxsize=1)
def css() -> str:
    """The report's whole stylesheet: ``report.css``, the tabs' rules, the highlighting's rules."""
    return static_text("report.css") + _tab_css(len(TAB_TITLES)) + _pygments()[2]


def styled(body: str) -> str:
    """``body`` inside a report div carrying the stylesheet: a static view shown on its own (an export where no
    report came before it) is styled, and JupyterLab's rendered-HTML rules do not override it."""
    return f"<div class='tl-report'><style>{css()}</style>{body}</div>"


def highlight_lines(text: str) -> list[str]:
    """Pygments-highlighted HTML of ``text``, one string per line (content escaped)."""
    from pygments import highlight

    lexer, fmt, _ = _pygments()
    return highlight(text, lexer, fmt).split("\n")
