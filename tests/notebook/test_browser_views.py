"""The Trace, Memory and Compare tabs in a real browser (issue 18 items 4-8): what a student sees.

A small notebook (notebook 01's three runs: none, horizontal, memory, all ``--compare``) runs in a
fresh JupyterLab driven by Playwright and Debian's chromium (the server start-up is the one of
test_browser.py). On the horizontal run's output, whose peak line is a long fused-region line:

* Trace: "jump to the peak" brings the peak line into view, and its ``<- peak`` marker lies inside
  the trace box and the window (lines wrap beside the bar gutter; nothing is cut off at the right);
* Memory: the peak labels' boxes (the SVG groups ``tl-peak-label-K``) do not overlap each other and lie
  inside the plot; each step of a curve has a hover title naming its op;
* Compare: the table fits its panel, or its box scrolls sideways with the run column staying in view,
  and the last column ("vs eager") can be reached.

Screenshots of each tab go to test-artifacts/ (git-ignored).
"""
from __future__ import annotations

import re
import secrets

import pytest

from test_browser import (ARTIFACTS, LAB_ARGS, ROOT, ensure_chromium, jupyter_server, open_notebook,
                          wait_for_idle_kernel)

pytestmark = pytest.mark.browser
NOTEBOOK = "views_issue18.ipynb"

CELLS = [
    f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nimport torch\nfrom examples import workloads\n"
    "from trace_lab.notebook import kernel_session\n%load_ext trace_lab\nkernel_session().clear()\n"
    "_, (t0s, a) = workloads.get('memory_peak').make('cpu', 'small')",
    "%%thunder_trace --fusion none --compare --name none --runs 1\nout = workloads.memory_peak_efficient_func(t0s, a)",
    "%%thunder_trace --fusion horizontal --compare --name horizontal --runs 1\n"
    "out = workloads.memory_peak_efficient_func(t0s, a)",
    "%%thunder_trace --fusion memory --compare --name memory --runs 1\nout = workloads.memory_peak_efficient_func(t0s, a)",
    "print('all ' + 'cells ran')",  # the source does not contain the text waited for
]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A fresh JupyterLab (127.0.0.1, token) serving a folder with this test's notebook."""
    pytest.importorskip("playwright.sync_api")
    nbformat = pytest.importorskip("nbformat")
    browser_path = ensure_chromium()
    work = tmp_path_factory.mktemp("lab_views")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, work / NOTEBOOK)
    with jupyter_server("lab", work, *LAB_ARGS) as (base, token):
        yield base, token, browser_path


# JS helpers run in the page ------------------------------------------------------------------------
PEAK_MARKER_BOX = """(area) => {
  const code = area.querySelector('.tl-code');
  const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
  let node;
  while ((node = walker.nextNode())) {
    const i = node.data.indexOf('<- peak');
    if (i < 0) continue;
    const range = document.createRange();
    range.setStart(node, i); range.setEnd(node, node.data.length);
    const r = range.getBoundingClientRect(), c = code.getBoundingClientRect();
    return {marker: [r.left, r.top, r.right, r.bottom], box: [c.left, c.top, c.right, c.bottom],
            view: [window.innerWidth, window.innerHeight], text: node.data.slice(i)};
  }
  return null;
}"""

LABEL_BOXES = """(area) => {
  const svg = area.querySelector('svg');
  const frame = svg.querySelector('#patch_2') || svg;
  const f = frame.getBoundingClientRect();
  return {frame: [f.left, f.top, f.right, f.bottom],
          labels: Array.from(svg.querySelectorAll('g[id^="tl-peak-label"]')).map(g => {
            const r = g.getBoundingClientRect(); return [g.id, r.left, r.top, r.right, r.bottom]; }),
          titles: Array.from(svg.querySelectorAll('#tl-hover title')).map(t => t.textContent)};
}"""

COMPARE_FIT = """(area) => {
  const box = area.querySelector('.tl-compare-scroll'), table = box.querySelector('table');
  const first = () => table.querySelector('tr.tl-row td').getBoundingClientRect();
  const lastHead = () => Array.from(table.querySelectorAll('th')).pop().getBoundingClientRect();
  const b = box.getBoundingClientRect(), a = area.getBoundingClientRect();
  const out = {fits: table.getBoundingClientRect().width <= b.width + 1, box: [b.left, b.right],
               area: [a.left, a.right], scroll: getComputedStyle(box).overflowX,
               firstBefore: [first().left, first().right]};
  box.scrollLeft = box.scrollWidth;
  out.firstAfter = [first().left, first().right];
  out.lastAfter = [lastHead().left, lastHead().right];
  out.boxAfter = [box.getBoundingClientRect().left, box.getBoundingClientRect().right];
  out.lastTitle = Array.from(table.querySelectorAll('th')).pop().textContent;
  box.scrollLeft = 0;
  return out;
}"""


def _inside(inner, outer, slack=1.0) -> bool:
    return (inner[0] >= outer[0] - slack and inner[1] >= outer[1] - slack and inner[2] <= outer[2] + slack
            and inner[3] <= outer[3] + slack)


def test_trace_memory_and_compare_tabs_show_what_they_promise(lab):
    from playwright.sync_api import expect, sync_playwright

    base, token, browser_path = lab
    ARTIFACTS.mkdir(exist_ok=True)
    url = f"{base}/lab/workspaces/v{secrets.token_hex(4)}/tree/{NOTEBOOK}?reset&token={token}"
    with sync_playwright() as p, open_notebook(p, browser_path, url, ARTIFACTS / "views_failure.png") as page:
        wait_for_idle_kernel(page)
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        page.get_by_text("all cells ran").wait_for(timeout=300_000)
        news = page.get_by_role("button", name="No", exact=True)
        if news.count():
            news.first.click()
        outputs = page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-tab"))
        expect(outputs).to_have_count(3)

        def view():  # the horizontal run's output
            return outputs.nth(1)

        def tab(title):
            view().locator(".lm-TabBar-tab", has_text=title).first.click()

        # -- Trace: jump to the peak; the marker is inside the box and the window ---------------
        tab("Trace")
        area = view().locator(".tl-trace-area")
        area.locator(".tl-code").wait_for(timeout=30_000)
        jump = area.locator(".tl-jump a")
        expect(jump).to_have_count(1)
        jump.click()
        page.wait_for_timeout(300)
        found = area.evaluate(PEAK_MARKER_BOX)
        assert found is not None, "no '<- peak' marker in the Trace tab"
        assert found["text"].startswith("<- peak") and "above inputs" in found["text"]
        assert _inside(found["marker"], found["box"]), f"the peak marker is cut off: {found}"
        assert _inside(found["marker"], [0, 0, *found["view"]]), f"the peak marker is off-screen: {found}"
        peak_line = area.locator(".tl-pk").first
        expect(peak_line).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / "views_trace_peak.png"))

        # -- Memory: label boxes apart and inside the plot; hover titles per step ----------------
        tab("Memory")
        mem = view().locator(".tl-memory-area")
        mem.locator("svg").first.wait_for(timeout=30_000)
        mem.locator("svg").first.scroll_into_view_if_needed()
        boxes = mem.evaluate(LABEL_BOXES)
        labels = boxes["labels"]
        assert labels, "no peak label on the memory plot"
        for i, a in enumerate(labels):
            assert _inside(a[1:], boxes["frame"]), f"label {a[0]} is clipped by the frame: {a} {boxes['frame']}"
            for b in labels[i + 1:]:
                apart = a[3] <= b[1] or b[3] <= a[1] or a[4] <= b[2] or b[4] <= a[2]
                assert apart, f"peak labels overlap: {a} {b}"
        assert boxes["titles"] and any("<- peak" in t for t in boxes["titles"])
        # each entry names its run(s): runs whose text is the same at a step share one ("none, memory: op 3: ...")
        runs = r"(?:none|horizontal|memory)"
        assert all(re.match(rf"{runs}(?:, {runs})*: (?:op \d+|entry): ", t) for t in boxes["titles"]), boxes["titles"][:5]
        assert any(re.match(rf"{runs}, {runs}", t) for t in boxes["titles"])  # none and memory share lines
        page.screenshot(path=str(ARTIFACTS / "views_memory.png"))

        # -- Compare: fits, or scrolls with the run column in view ---------------------------------
        tab("Compare")
        cmp_area = view().locator(".tl-compare-area")
        expect(cmp_area.locator("tr.tl-row")).to_have_count(3)
        fit = cmp_area.evaluate(COMPARE_FIT)
        assert fit["box"][1] <= fit["area"][1] + 1, f"the table's box is wider than its panel: {fit}"
        if not fit["fits"]:
            assert fit["scroll"] in ("auto", "scroll"), fit
            assert fit["firstAfter"][0] >= fit["boxAfter"][0] - 1, f"the run column scrolled away: {fit}"
            assert fit["lastAfter"][1] <= fit["boxAfter"][1] + 1, f"the last column cannot be reached: {fit}"
        assert fit["lastTitle"] == "vs eager"
        text = cmp_area.inner_text()
        assert "·" not in text and "forward peak" in text
        page.screenshot(path=str(ARTIFACTS / "views_compare.png"))
