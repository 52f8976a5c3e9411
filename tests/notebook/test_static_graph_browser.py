"""Issue 26 item 1: the static graphs (no kernel behind them) render in a real browser.

Every static Graph tab was corrupt: ``svg_compact`` wrote ``dot``'s integers without their zeros
(``points="-,-167 ..."``, viewBox ``0 0 32 8236``), so the picture was a squashed strip that ``fit``
did not repair and ``+`` blanked. This opens the three static outputs a student gets in headless
Chromium (Playwright, Debian's /usr/bin/chromium, as the other browser tests):

* a ``Report.save_html`` file,
* a workload page of the headless lab (``python -m trace_lab.cli report``),
* the nbconvert HTML of a notebook executed by the lab's ``cli.execute_notebook`` (one ``%%thunder_trace`` cell),

and checks on each: no console error or page error, every graph's viewBox is about the size of what it
draws (the drawn content's box fills the SVG's box; no ``-,`` numbers in its geometry), and the graph
pane shows non-blank pixels at fit, after pressing ``+`` and after a wheel zoom.
"""
from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
BAD_NUMBER = re.compile(r"-(?![\d.])")  # a minus sign not followed by a number ("-,-167" was written)

# What dot drew, read back in the browser (user units): the viewBox, the graph's background polygon (dot
# draws it over exactly the laid-out area), and the drawings that contradict themselves: a node whose label
# is outside its shape, an edge whose arrowhead is away from both ends of its line, a node outside the
# background. Each number that lost a digit moves a point by tens or hundreds of units.
GEOMETRY_JS = """svg => {
  const vb = svg.viewBox.baseVal, bg = svg.querySelector('g.graph > polygon').getBBox(), bad = [];
  const inside = (px, py, b, tol) => px >= b.x - tol && px <= b.x + b.width + tol && py >= b.y - tol
                                     && py <= b.y + b.height + tol;
  const name = g => (g.querySelector('title') || {}).textContent;
  svg.querySelectorAll('g.node').forEach(n => {
    const shape = n.querySelector('polygon, ellipse, path'), b = n.getBBox();
    if (!inside(b.x, b.y, bg, 2) || !inside(b.x + b.width, b.y + b.height, bg, 2)) bad.push('outside: ' + name(n));
    if (!shape) return;
    const s = shape.getBBox();
    n.querySelectorAll('text').forEach(t => {
      const tb = t.getBBox();
      if (!inside(tb.x + tb.width / 2, tb.y + tb.height / 2, s, 2)) bad.push('label off its shape: ' + name(n));
    });
  });
  svg.querySelectorAll('g.edge').forEach(e => {
    const path = e.querySelector('path'), head = e.querySelector('polygon');
    if (!path || !head) return;
    const h = head.getBBox(), a = path.getPointAtLength(0), z = path.getPointAtLength(path.getTotalLength());
    if (!inside(a.x, a.y, h, 3) && !inside(z.x, z.y, h, 3)) bad.push('arrowhead off its edge: ' + name(e));
  });
  const geo = Array.from(svg.querySelectorAll('[points],[d],[transform]')).map(e =>
      [e.getAttribute('points') || '', e.getAttribute('d') || '', e.getAttribute('transform') || ''].join(' '));
  return {viewBox: [vb.width, vb.height], background: [bg.width, bg.height], nodes: svg.querySelectorAll('g.node').length,
          bad: bad, geometry: geo.concat([svg.getAttribute('viewBox') || '']).join(' ')};
}"""


def _fn(x, w):  # a forward and a backward, a few fusible ops: before/after graphs differ
    h = torch.relu(x @ w) * 2 + 1
    return torch.tanh(h).sum(dim=0) - 0.5


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip("Debian chromium is not installed")
    pytest.importorskip("playwright.sync_api")
    import trace_lab

    out = tmp_path_factory.mktemp("static_graphs")
    x, w = torch.randn(16, 32, requires_grad=True), torch.randn(32, 32, requires_grad=True)
    report = trace_lab.inspect(_fn, x, w, fusion="horizontal", executor="eager", runs=1)
    found = {"save_html": Path(report.save_html(out / "saved.html"))}

    cli_out = out / "cli"
    done = subprocess.run([sys.executable, "-m", "trace_lab.cli", "report", "--out", str(cli_out), "--workloads",
                           "memory_peak", "--no-notebooks", "--runs", "1", "--executor", "eager"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found["cli report"] = cli_out / "memory_peak.html"

    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from nbconvert import HTMLExporter

    from trace_lab.cli import execute_notebook

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext trace_lab\nimport torch\n"
                                          "x, w = torch.randn(16, 32), torch.randn(32, 32)"),
                nbformat.v4.new_code_cell("%%thunder_trace --fusion horizontal --executor eager --runs 1\n"
                                          "y = (torch.relu(x @ w) * 2 + 1).tanh()")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    execute_notebook(nb, ROOT, timeout=600)
    body, _ = HTMLExporter().from_notebook_node(nb)
    found["nbconvert"] = out / "executed.html"
    found["nbconvert"].write_text(body, encoding="utf-8")
    return found


def _dark_pixels(png: bytes) -> float:
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("L")
    return sum(1 for v in img.getdata() if v < 200) / (img.width * img.height)


def _pane_pixels(page, graph) -> float:
    """The share of dark pixels in the graph's viewport, its tool buttons hidden for the shot."""
    graph.evaluate("g => g.querySelector('.tl-graph-tools').style.visibility = 'hidden'")
    try:
        return _dark_pixels(graph.locator(".tl-graph-viewport").screenshot())
    finally:
        graph.evaluate("g => g.querySelector('.tl-graph-tools').style.visibility = ''")


@pytest.mark.parametrize("which", ["save_html", "cli report", "nbconvert"])
def test_static_graph_renders_fits_and_zooms(pages, which):
    from playwright.sync_api import sync_playwright

    path = pages[which]
    errors, requests = [], []
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"static_graph_{which.replace(' ', '_')}"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("request", lambda r: requests.append(r.url))
            # nbconvert's template links require.js / MathJax from a CDN (not the lab's; offline here): served empty
            page.route(re.compile(r"^https?://"), lambda route: route.fulfill(status=200, body="",
                                                                              content_type="text/javascript"))
            page.goto(path.as_uri())
            report = page.locator(".tl-report").first if which == "nbconvert" else page
            report.locator("label:has-text('Graph')").first.click()
            graphs = report.locator(".tl-graph")
            graphs.first.locator(".tl-graph-canvas svg").wait_for(timeout=60_000)
            n = graphs.count()
            assert n >= 2  # before and after of the first program part at least
            checked = 0
            for i in range(n):
                g = graphs.nth(i)
                if not g.is_visible():
                    continue
                g.locator(".tl-graph-canvas svg").wait_for(timeout=60_000)
                geo = g.locator(".tl-graph-canvas svg").first.evaluate(GEOMETRY_JS)
                assert not BAD_NUMBER.search(geo["geometry"]), (i, geo["geometry"][:400])
                assert geo["nodes"] >= 2 and geo["bad"] == [], (i, geo["bad"][:10])
                # the viewBox is the area dot laid out (its background polygon), not a digit of it
                for k in (0, 1):
                    assert abs(geo["viewBox"][k] - geo["background"][k]) <= 2 and geo["viewBox"][k] > 20, (i, geo)
                checked += 1
            assert checked >= 2
            g = graphs.first
            g.scroll_into_view_if_needed()
            page.wait_for_timeout(300)
            fit = _pane_pixels(page, g)
            page.screenshot(path=f"{shot}_fit.png")
            assert fit > 0.002, f"the graph pane is blank at fit ({fit:.4f} dark)"
            vp, drawn = g.locator(".tl-graph-viewport").bounding_box(), g.locator(".tl-graph-canvas svg").bounding_box()
            # fit: the whole width of the graph inside the pane
            assert drawn["x"] >= vp["x"] - 2 and drawn["x"] + drawn["width"] <= vp["x"] + vp["width"] + 2, (vp, drawn)
            g.locator(".tl-graph-tools button[data-act='in']").click()
            page.wait_for_timeout(300)
            zoomed = _pane_pixels(page, g)
            page.screenshot(path=f"{shot}_zoom.png")
            assert zoomed > 0.002, f"the graph pane is blank after + ({zoomed:.4f} dark)"
            box = g.locator(".tl-graph-viewport").bounding_box()
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.mouse.wheel(0, -300)
            page.wait_for_timeout(300)
            wheeled = _pane_pixels(page, g)
            assert wheeled > 0.002, f"the graph pane is blank after a wheel zoom ({wheeled:.4f} dark)"
            g.locator(".tl-graph-tools button[data-act='fit']").click()
            page.wait_for_timeout(300)
            assert _pane_pixels(page, g) > 0.002
        finally:
            browser.close()
    assert errors == [], errors
    if which != "nbconvert":  # the lab's own pages fetch nothing
        assert all(u.startswith(("file:", "data:", "blob:")) for u in requests), requests


ALIGN_JS = """root => Array.from(root.querySelectorAll('td, th')).filter(c => c.offsetParent !== null)
  .map(c => [c.classList.contains('tl-num'), getComputedStyle(c).textAlign])"""


@pytest.mark.parametrize("which", ["save_html", "cli report", "nbconvert"])
def test_the_reports_text_reads_left_aligned_and_only_numbers_right(pages, which):
    """The nbconvert export (and a saved notebook opened without its kernel) styles every table cell with
    JupyterLab's ``:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td {text-align: right}``, which outranked
    the report's ``.tl-report td``: the Summary's words stood right-aligned (seen in the headless lab's
    notebook 06, 2026-11-28). Every visible cell of the report reads left, its number columns right."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.route(re.compile(r"^https?://"), lambda route: route.fulfill(status=200, body="",
                                                                              content_type="text/javascript"))
            page.goto(pages[which].as_uri())
            report = page.locator(".tl-report").first
            report.wait_for(timeout=60_000)
            cells = report.evaluate(ALIGN_JS)  # the Summary tab, shown first
            report.locator("label:has-text('Compare')").first.click()
            page.wait_for_timeout(200)
            cells += report.evaluate(ALIGN_JS)
        finally:
            browser.close()
    assert len(cells) >= 10 and any(num for num, _ in cells)
    wrong = [(num, align) for num, align in cells if align != ("right" if num else "left")]
    assert wrong == [], f"{len(wrong)} of {len(cells)} cells misaligned, e.g. {wrong[:5]}"
