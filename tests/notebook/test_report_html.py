"""The static HTML of a report: escaping of user-derived strings, tabs, offline save, Compare marks."""
from __future__ import annotations

import html
import re

import pytest
import torch

import trace_lab
from trace_lab.report.html import INFLATE_JS, PLOTS_JS, compare_html, report_html, unpack
from trace_lab.report.table import COLUMNS

EVIL = '<script>alert("x")</script>'
EVIL_IMG = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def evil_report():
    # a function whose source line (shown in the trace) carries markup, run under a malicious name
    def fn(x, w):
        y = torch.relu(x @ w)  # <img src=x onerror=alert(1)>
        return y * 2

    x, w = torch.randn(4, 4), torch.randn(4, 4, requires_grad=True)
    rep = trace_lab.inspect(fn, x, w, executor="eager", runs=1, name=EVIL)
    rep.warnings.append(f"warning with {EVIL}")
    return rep


def test_every_user_string_is_escaped(evil_report):
    page = report_html(evil_report, runs=[(EVIL, evil_report), (f"second {EVIL_IMG}", evil_report)])
    assert EVIL not in page and EVIL_IMG not in page
    # the view ships no script outside the graph tab (whose renderer and pan/zoom script are trace_lab's own)
    # but trace_lab's unpacker of large plots; the packed plots hold the names escaped
    plots = f"<script>({re.escape(INFLATE_JS)})?{re.escape(PLOTS_JS)}</script>"  # the page's first unpacker or not
    rest = re.sub(plots, "", re.sub(r'<section class="tl-p2">.*?</section>', "", page, flags=re.S))
    assert "<script" not in rest.lower()
    for packed in re.findall(r"class='tl-svgz' data-tlz='([^']+)'", page):
        svg = unpack(packed, as_json=False)
        assert svg.startswith("<svg") and EVIL not in svg and EVIL_IMG not in svg
    assert html.escape(EVIL) in page  # the name is shown, escaped (title, Compare rows)
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert "onerror=alert(1)" in text  # the trace's source comment is shown as text
    assert page.count('class="tl-row"') == 2


def test_tabs_trace_and_bars(evil_report):
    page = report_html(evil_report)
    for title in ("Summary", "Trace", "Graph", "Memory", "Compare"):
        assert "<label for=" in page and f">{title}</label>" in page
    # one peak line per drawn stage of each program part (forward and backward, every pass's stage); a stage
    # whose lines equal a later one's is not drawn twice: it names the stage that holds them
    stages = len(re.findall(r"<summary>stage \d+: ", page))
    same = len(re.findall(r"<summary>stage \d+: [^<]*same lines as stage \d+", page))
    assert same == page.count("only the title differs")
    assert stages - same >= 2 and page.count('class="tl-l tl-pk"') == stages - same
    # bars: live bytes after the line (dark) and while it runs (light); the peak line's light bar is full
    for peak_line in re.findall(r'<div class="tl-l tl-pk">(.*?)</div>', page):
        assert '<b style="width:100.0%">' in peak_line
    live = [float(w) for w in re.findall(r'<i style="width:([0-9.]+)%">', page)]
    assert live and all(0.0 <= w <= 100.0 for w in live)
    # the graph tab holds a rendered graph (an svg from `dot`, or DOT for the in-browser renderer),
    # never a placeholder
    graph = re.search(r'<section class="tl-p2">(.*?)</section>', page, re.S).group(1)
    assert "graph view failed" not in graph and "No module named" not in graph, graph[:300]
    assert "<svg" in graph or "data-tl-viz" in graph, graph[:300]


def test_save_html_is_a_standalone_offline_page(evil_report, tmp_path):
    path = evil_report.save_html(tmp_path / "report.html")
    page = open(path, encoding="utf-8").read()
    assert page.startswith("<!DOCTYPE html>") and "</html>" in page
    assert not re.search(r'(src|href)=["\']?(https?:)?//', page)  # nothing fetched from the network
    assert "def forward(" in html.unescape(re.sub(r"<[^>]+>", "", page))


def test_compare_marks_the_best_value_per_column():
    base = {c: None for c in COLUMNS}
    rows = [dict(base, run="a", compile_s=2.0, first_run_s=3.0, steady_ms=1.5, forward_peak_predicted=300,
                 forward_peak_measured=310, kernels=40, fusions=0),
            dict(base, run="b", compile_s=1.0, first_run_s=4.0, steady_ms=1.5, forward_peak_predicted=900,
                 forward_peak_measured=None, kernels=12, fusions=5),
            dict(base, run="c", compile_s=3.0, first_run_s=5.0, steady_ms=2.5, forward_peak_predicted=900,
                 forward_peak_measured=None, kernels=12, fusions=5)]
    table = compare_html(rows)
    cells = [re.findall(r'<td data-col="(\w+)"([^>]*)>(.*?)</td>', r) for r in re.findall(r'<tr class="tl-row">(.*?)</tr>', table)]
    best = {(i, col) for i, row in enumerate(cells) for col, attr, _ in row if "tl-best" in attr}
    # ties are all marked; a column with a single value (forward_peak_measured) has nothing to compare: no mark
    # kernels and fusions are not better or worse on their own (horizontal: fewest kernels, highest peak): no star
    assert best == {(1, "compile_s"), (0, "first_run_s"), (0, "steady_ms"), (1, "steady_ms"), (0, "forward_peak_predicted")}
    same = [dict(base, run=r, compile_s=1.0, kernels=7) for r in "xy"]
    assert "tl-best" not in compare_html(same)  # every run ties: no star
