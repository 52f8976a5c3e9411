"""HTML views of a Report: the summary table and annotated traces.

Every string that can come from user code (function names, input names, source
lines in traces, warnings) goes through ``html.escape``. The page is
self-contained (inline CSS, no scripts, no network), so a saved report opens
offline and survives static notebook exports.
"""
from __future__ import annotations

import html

__all__ = ["report_html", "standalone_page", "trace_html", "esc"]

CSS = """
.tl-report{font-family:system-ui,sans-serif;font-size:13px}
.tl-report table{border-collapse:collapse;margin:4px 0}
.tl-report td,.tl-report th{border:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top}
.tl-report pre{background:#f7f7f9;padding:6px;overflow:auto;max-height:480px;font-size:12px}
.tl-report .tl-warn{color:#a15c00}
.tl-report .tl-bad{color:#b00020;font-weight:bold}
.tl-report .tl-peak{background:#ffe2e2}
"""


def esc(s) -> str:
    return html.escape(str(s), quote=True)


def trace_html(trace) -> str:
    lines = []
    for line in str(trace).splitlines():
        cls = ' class="tl-peak"' if "<- peak" in line else ""
        lines.append(f"<span{cls}>{esc(line)}</span>")
    return "<pre>" + "\n".join(lines) + "</pre>"


def report_html(report) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in report.summary_rows())
    warns = "".join(f'<div class="tl-warn">warning: {esc(w)}</div>' for w in report.warnings)
    status = "" if report.ok else '<div class="tl-bad">compiled result differs from eager</div>'
    traces = []
    for p in (report.jfn.programs if report.jfn is not None else []):
        for part in p.parts:
            if part.traces:
                traces.append(f"<details><summary>{esc(part.kind)} program #{p.index}: "
                              f"{esc(part.traces[-1].stage)}</summary>{trace_html(part.traces[-1])}</details>")
    return (f'<div class="tl-report"><style>{CSS}</style><h3>trace_lab: {esc(report.name)}</h3>{status}'
            f"<table>{rows}</table>{warns}{''.join(traces)}</div>")


def standalone_page(report) -> str:
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>trace_lab: {esc(report.name)}</title>"
            f"</head><body>{report_html(report)}</body></html>")
