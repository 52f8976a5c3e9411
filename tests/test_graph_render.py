"""Rendering: through `dot` (marked), through the vendored WebAssembly Graphviz (node, browser)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from trace_lab.report import render
from trace_lab.report.graph import trace_graph
from trace_lab.report.render import VIZ_JS_PATH, graph_html, graph_view_html, render_svg

from _graph_programs import small_fused_program, small_program

EVIL = '<script>alert("x")</script>'
NODE = shutil.which("node")
DOT = shutil.which("dot")
EXPECTED_IDS = {"in_x", "in_w", "n_relu", "n_mm", "n_mul", "n_add", "out_0"}


def _svg_titles(svg: str) -> set[str]:
    """Graphviz writes each node's id as the <title> of its <g class="node">."""
    return set(re.findall(r'<g id="node\d+" class="node">\s*<title>([^<]*)</title>', svg))


def _embedded_dot(page: str) -> list[str]:
    """The DOT sources a browser-path snippet hands to viz.renderSVGElement, decoded."""
    return [json.loads(m) for m in re.findall(r"renderSVGElement\((\"(?:[^\"\\]|\\.)*\")\)", page)]


def test_vendored_renderer_ships_with_its_license():
    assert VIZ_JS_PATH.is_file() and VIZ_JS_PATH.stat().st_size > 1_000_000
    notice = VIZ_JS_PATH.with_name("viz-global.js.LICENSE.txt").read_text()
    assert "MIT License" in notice and "Eclipse Public License" in notice
    assert "</script" not in VIZ_JS_PATH.read_text().lower()  # it is inlined in HTML


def _node_svg(source: str, tmp_path) -> str:
    """Lay out DOT with the vendored Viz.js under node (no browser, no `dot`)."""
    (tmp_path / "graph.dot").write_text(source)
    script = tmp_path / "render.cjs"
    script.write_text(
        "const fs = require('fs');\n"
        f"const Viz = require({json.dumps(str(VIZ_JS_PATH))});\n"
        "Viz.instance().then(viz => {\n"
        f"  const dot = fs.readFileSync({json.dumps(str(tmp_path / 'graph.dot'))}, 'utf8');\n"
        "  process.stdout.write(viz.renderString(dot, {format: 'svg'}));\n"
        "}).catch(e => { console.error(e); process.exit(1); });\n")
    done = subprocess.run([NODE, str(script)], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})  # no `dot` reachable from here
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(NODE is None, reason="node is not on PATH (needed to run the vendored JS outside a browser)")
def test_vendored_wasm_renders_trace_graph_under_node(tmp_path):
    svg = _node_svg(trace_graph(small_program()).source, tmp_path)
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert _svg_titles(svg) == EXPECTED_IDS
    assert "256 B" in svg and "512 B" in svg  # edge labels laid out
    clustered = _node_svg(trace_graph(small_fused_program(), collapse_regions=False).source, tmp_path)
    assert "<title>cluster_fusion0</title>" in clustered and _svg_titles(clustered) == EXPECTED_IDS


@pytest.mark.skipif(NODE is None, reason="node is not on PATH (needed to run the vendored JS outside a browser)")
def test_vendored_wasm_keeps_user_names_escaped(tmp_path):
    svg = _node_svg(trace_graph(small_program(input_names=(EVIL, "w"))).source, tmp_path)
    assert "<svg" in svg and "<script" not in svg and "&lt;script&gt;" in svg


def test_browser_path_embeds_dot_and_renderer_inline():
    g = trace_graph(small_program(input_names=(EVIL, "w")))
    page = graph_html(g, use_dot=False)
    assert _embedded_dot(page) == [g.source]  # exactly the DOT, round-tripped
    assert render.vendored_viz_js()[:2000] in page  # renderer inline: nothing fetched at view time
    assert "<script>alert" not in page and 'alert("x")' not in page
    assert not re.search(r"""(src|href)=["']?https?:""", page)
    assert "tl-graph-tools" in page  # pan/zoom controls
    slim = graph_html(g, use_dot=False, include_js=False)
    assert render.vendored_viz_js()[:2000] not in slim and _embedded_dot(slim) == [g.source]


def test_view_carries_renderer_once_and_both_graphs():
    page = graph_view_html(small_program(), small_fused_program(), use_dot=False, collapse_regions=False)
    assert page.count(render.vendored_viz_js()[:2000]) == 1
    before, after = _embedded_dot(page)
    assert "cluster_fusion0" in after and "cluster_fusion0" not in before
    for mode in ("both", "before", "after"):
        assert f"-{mode}'" in page  # the toggle's three states
    assert "before: forward" in page and "after: forward" in page


def test_render_svg_without_dot_returns_none(monkeypatch):
    monkeypatch.setattr(render.shutil, "which", lambda name: None)
    assert render_svg(trace_graph(small_program())) is None
    assert "renderSVGElement" in graph_html(trace_graph(small_program()))  # falls back to the browser path
    bundle = trace_graph(small_program())._repr_mimebundle_()  # displaying the Digraph itself in a notebook
    assert list(bundle) == ["text/html"] and "renderSVGElement" in bundle["text/html"]


@pytest.mark.dot
@pytest.mark.skipif(DOT is None, reason="graphviz `dot` is not on PATH")
def test_dot_path_inline_svg():
    g = trace_graph(small_fused_program(), collapse_regions=False)
    svg = render_svg(g)
    assert svg is not None and _svg_titles(svg) == EXPECTED_IDS
    assert "cluster_fusion0" in svg
    page = graph_html(g)
    assert page.count("<svg") == 1 and "<?xml" not in page and "renderSVGElement" not in page
    assert len(page) < 100_000  # no renderer inlined when dot did the layout
    evil = render_svg(trace_graph(small_program(input_names=(EVIL, "w"))))
    assert "<script" not in evil and "&lt;script&gt;" in evil


@pytest.mark.dot
@pytest.mark.skipif(DOT is None, reason="graphviz `dot` is not on PATH")
def test_render_svg_times_out_instead_of_hanging():
    assert render_svg(trace_graph(small_program()), timeout=1e-4) is None


@pytest.mark.browser
def test_browser_lays_out_view_offline(tmp_path):
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("Debian chromium is not installed")
    playwright = pytest.importorskip("playwright.sync_api")
    page_html = graph_view_html(small_program(), small_fused_program(), use_dot=False, collapse_regions=False)
    path = tmp_path / "view.html"
    path.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>{page_html}</body></html>")
    requests = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium), args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            page = browser.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri())
            page.wait_for_function("document.querySelectorAll('.tl-graph-canvas svg').length == 2", timeout=30_000)
            titles = page.eval_on_selector_all(".tl-gv-after g.node > title", "els => els.map(e => e.textContent)")
            clusters = page.eval_on_selector_all(".tl-gv-after g.cluster > title", "els => els.map(e => e.textContent)")
            page.click("label[for$='-after']")
            before_hidden = page.eval_on_selector(".tl-gv-before", "e => getComputedStyle(e).display")
        finally:
            browser.close()
    assert set(titles) == EXPECTED_IDS and clusters == ["cluster_fusion0"]
    assert before_hidden == "none"
    assert all(u.startswith("file:") for u in requests), requests  # nothing fetched from the network
