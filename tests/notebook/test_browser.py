"""The lab in a real browser: JupyterLab + Playwright driving Debian's chromium.

Teaching notebook 01 in JupyterLab (127.0.0.1, token), Run All: the first output's tabs and Graph widget;
then its fusion strategy switched, Rerun, and its Compare table gained a row and its Graph area changed.
The session is notebook 01's one JupyterLab session (tests/notebook/teaching_runs.py), shared with
test_browser_teaching.py's issue-26 checks (which run between the two halves) and the prose checks.
Screenshots go to test-artifacts/ (git-ignored). Chromium is installed with apt-get when missing and this
process may do so; otherwise the test is skipped, saying why. Also the browser tests' shared helpers:
jupyter_server, open_notebook, ensure_chromium.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
NOTEBOOK = "01_fusion_and_peak_memory.ipynb"
ARTIFACTS = ROOT / "test-artifacts"


def ensure_chromium() -> str:
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        pytest.skip("chromium is not installed and cannot be installed here (needs apt-get as root)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "install", "-y", "chromium"], ["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
        if os.path.exists(CHROMIUM):
            return CHROMIUM
    pytest.skip("apt-get could not install chromium (no Debian package source reachable?)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyter_server(app: str, work: Path, *extra: str):
    """``jupyter <app>`` ("lab" or "notebook") serving ``work`` on 127.0.0.1 with a fresh token and settings;
    yields (base URL, token) once it answers, stops it afterwards. Shared by the browser tests."""
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRACE_LAB_EXECUTOR="eager", JUPYTER_RUNTIME_DIR=str(work / ".rt"),
               JUPYTERLAB_WORKSPACES_DIR=str(work / ".ws"), JUPYTERLAB_SETTINGS_DIR=str(work / ".settings"))
    env.pop("PYTEST_CURRENT_TEST", None)  # else ipykernel captures no native output (a student's kernel does)
    log_path = work / f"jupyter-{app}.log"
    log = open(log_path, "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", app, "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}", "--ServerApp.open_browser=False",
         *extra, *(["--allow-root"] if os.geteuid() == 0 else [])],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    pytest.fail(f"jupyter {app} did not start:\n" + log_path.read_text()[-3000:])
                time.sleep(0.5)
        yield base, token
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@contextlib.contextmanager
def open_notebook(p, browser_path: str, url: str, failure_png: Path):
    """Headless Chromium with one 1400x1000 page on ``url`` (a notebook in JupyterLab or Notebook 7), the
    notebook shown and the kernel picker, if it asks, answered with the notebook's own kernel. Yields the
    page; on an error the page is saved to ``failure_png`` first; the browser is closed in any case."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    browser = p.chromium.launch(executable_path=browser_path, args=[
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(url)
        page.locator(".jp-Notebook").first.wait_for(timeout=60_000)
        select = page.locator(".jp-Dialog").get_by_role("button", name="Select")
        try:
            select.wait_for(timeout=15_000)
            select.click()
        except PlaywrightTimeout:
            pass
        yield page
    except Exception:
        page.screenshot(path=str(failure_png))
        raise
    finally:
        browser.close()


def wait_for_idle_kernel(page, timeout_s: float = 240) -> None:
    """Waits until JupyterLab's execution indicator says the notebook's kernel is idle, answering the kernel
    picker whenever it shows (on a loaded 2-core machine it can come after :func:`open_notebook`'s 15 s).
    Fails with the indicator's statuses seen and whether a dialog was open, not a bare locator count."""
    idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    select = page.locator(".jp-Dialog").get_by_role("button", name="Select")
    deadline, answered = time.time() + timeout_s, 0
    while time.time() < deadline:
        if select.count():
            select.first.click()
            answered += 1
        if idle.count() == 1:
            return
        page.wait_for_timeout(500)
    statuses = page.locator(".jp-Notebook-ExecutionIndicator").evaluate_all("es => es.map(e => e.dataset.status)")
    dialogs = page.locator(".jp-Dialog").all_inner_texts()
    pytest.fail(f"the notebook's kernel was not idle after {timeout_s:.0f} s: execution indicator statuses "
                f"{statuses}, kernel picker answered {answered} time(s), dialogs open now {dialogs}")


LAB_ARGS = ("--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate")


@pytest.mark.xdist_group("teaching-01_fusion_and_peak_memory")
def test_notebook_01_run_all_switch_fusion_rerun(teaching):
    """Notebook 01 in JupyterLab (its one session, shared with test_browser_teaching.py: teaching_runs.py), right
    after Run All: three traced outputs, the first one's Compare has a row per --compare run, its Graph widget,
    Diff and Timeline (fusion_rerun_before); after the issue-26 checks: the first output's fusion -> horizontal,
    "time lines" on, Rerun, and Compare, Diff, Timeline and Graph show the rerun (fusion_rerun_after)."""
    teaching.browser("01_fusion_and_peak_memory").check("fusion_rerun")


def _first_view(page):  # the first %%thunder_trace output (re-queried: outputs re-render after a rerun)
    return page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-tab")).first


def _box_once_settled(page, locator, seconds: float = 10.0):
    """The locator's bounding box, asked again while it is None (for up to ``seconds``). CI, 2026-11-28: right
    after a rerun the Timeline's lane read None although the screenshot taken a moment later shows it drawn; the
    likely cause is a late update of the output (the Compare table, the shown run) setting its HTML areas again,
    with the read falling between the old element leaving and the new one being laid out."""
    box = locator.bounding_box()
    waited = 0.0
    while box is None and waited < seconds:
        page.wait_for_timeout(250)
        waited += 0.25
        box = locator.bounding_box()
    return box


def _tab(page, title):
    _first_view(page).locator(".lm-TabBar-tab", has_text=title).first.click()


def fusion_rerun_before(page) -> None:
    """On the freshly run notebook 01: the outputs, the first one's Compare rows, Graph widget, Diff, Timeline."""
    from playwright.sync_api import expect

    ARTIFACTS.mkdir(exist_ok=True)
    page.get_by_text("saved reports/01_horizontal.html").wait_for(timeout=30_000)  # the notebook's last cell ran
    news = page.get_by_role("button", name="No", exact=True)
    if news.count():  # JupyterLab's "notified about news?" toast
        news.first.click()
    view = lambda: _first_view(page)  # noqa: E731
    tab = lambda title: _tab(page, title)  # noqa: E731
    expect(page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-tab"))).to_have_count(3)
    tab("Compare")
    rows = view().locator(".tl-compare-area tr.tl-row")
    assert rows.count() == 3  # none, horizontal, memory: every --compare run of the notebook
    tab("Graph")
    view().locator(".tl-graph-area .tl-report").wait_for(timeout=30_000)
    _check_graph_widget(page, view().locator(".tl-gw"))

    tab("Diff")  # the depth views: what fusion changed in the shown part, as the student sees it
    expect(view().locator(".tl-diff-area")).to_contain_text(re.compile("peak|one stage only"), timeout=30_000)
    tab("Timeline")  # not profiled yet: says how
    expect(view().locator(".tl-timeline-area")).to_contain_text("--profile", timeout=30_000)


def fusion_rerun_after(page) -> None:
    """The first output (after the issue-26 reruns: its cell rerun in place, still fusion none): fusion ->
    horizontal, "time lines" on, Rerun: a Compare row more, Diff names the fused regions, the Timeline draws a
    host lane, the Graph changed."""
    from playwright.sync_api import expect

    view = lambda: _first_view(page)  # noqa: E731
    tab = lambda title: _tab(page, title)  # noqa: E731
    tab("Compare")
    n_rows = view().locator(".tl-compare-area tr.tl-row").count()
    assert n_rows >= 3, n_rows
    tab("Graph")
    graph = view().locator(".tl-graph-area .tl-report")
    graph.wait_for(timeout=30_000)
    graph_before = graph.inner_html()
    assert "fusion=horizontal" not in graph.inner_text()
    view().locator(".widget-dropdown").filter(
        has=page.locator("label", has_text=re.compile(r"^fusion$"))).locator("select").select_option("horizontal")
    view().locator(".widget-checkbox").filter(has_text="time lines").locator("input").check()
    view().get_by_role("button", name="Rerun").click()
    tab("Compare")
    expect(view().locator(".tl-compare-area tr.tl-row")).to_have_count(n_rows + 1, timeout=180_000)
    tab("Diff")  # horizontal fused ops into regions: the diff names them
    expect(view().locator(".tl-diff-area")).to_contain_text("fused into", timeout=30_000)
    tab("Timeline")  # the rerun timed every line: a host lane drawn, the slowest lines listed
    lane = view().locator(".tl-timeline-area svg.tl-timeline")
    lane.wait_for(timeout=30_000)
    box = _box_once_settled(page, lane)
    assert box and box["width"] > 100 and box["height"] > 20, box
    expect(view().locator(".tl-timeline-area")).to_contain_text("slowest lines")
    _scroll_for_screenshot(lambda: view().locator(".tl-timeline-area"))
    page.screenshot(path=str(ARTIFACTS / "notebook01_timeline.png"))
    tab("Compare")
    expect(view().locator(".tl-compare-area tr.tl-row").last).to_contain_text("rerun of none with fusion=horizontal")
    _scroll_for_screenshot(lambda: view().locator(".tl-compare-area"))
    page.screenshot(path=str(ARTIFACTS / "notebook01_compare.png"))
    tab("Graph")
    graph = view().locator(".tl-graph-area .tl-report")
    expect(graph).not_to_have_text(graph_before, timeout=30_000)
    assert "fusion=horizontal" in graph.inner_text()
    tab("Trace")
    view().locator(".tl-trace-area .tl-code").wait_for(timeout=30_000)
    _scroll_for_screenshot(view)
    page.screenshot(path=str(ARTIFACTS / "notebook01_after_rerun.png"))


def _check_graph_widget(page, gw) -> None:
    """Issue 18 items 1-2: the graph widget's SVGs are visible inside the panel and the window, not blank;
    + zooms; side by side shows both graphs within the panel; a click names the op; 'after' shows one."""
    import io

    from PIL import Image
    from playwright.sync_api import expect

    gw.locator(".tl-gw-pane svg").first.wait_for(timeout=60_000)
    gw.scroll_into_view_if_needed()
    panes = gw.locator(".tl-gw-pane")
    assert panes.count() == 2  # side by side: before and after
    box, viewport = gw.bounding_box(), page.viewport_size
    for i in range(2):
        view_box = panes.nth(i).locator(".tl-gw-view").bounding_box()
        svg_box = panes.nth(i).locator("svg").first.bounding_box()
        assert view_box["x"] >= box["x"] - 1 and view_box["x"] + view_box["width"] <= box["x"] + box["width"] + 1
        assert view_box["x"] + view_box["width"] <= viewport["width"]  # both panes on screen
        # fitted on open: the whole graph inside its pane
        assert svg_box["x"] >= view_box["x"] - 2 and svg_box["x"] + svg_box["width"] <= view_box["x"] + view_box["width"] + 2
        assert svg_box["y"] >= view_box["y"] - 2 and svg_box["y"] + svg_box["height"] <= view_box["y"] + view_box["height"] + 2
        pixels = Image.open(io.BytesIO(panes.nth(i).locator(".tl-gw-view").screenshot())).convert("L")
        dark = sum(1 for v in pixels.getdata() if v < 200)
        assert dark > 0.002 * pixels.width * pixels.height, f"pane {i} looks blank ({dark} dark pixels)"
    page.screenshot(path=str(ARTIFACTS / "notebook01_graph_side_by_side.png"))
    before = float(panes.nth(1).get_attribute("data-scale"))
    gw.locator("button[data-tool='+']").click()
    assert float(gw.locator(".tl-gw-pane").nth(1).get_attribute("data-scale")) > 1.2 * before
    gw.locator("button[data-tool='fit']").click()
    info = gw.locator(".tl-gw-info")
    default = info.inner_text()
    gw.locator(".tl-gw-pane").nth(1).locator("g.node").last.click()
    expect(info).not_to_have_text(default, timeout=10_000)
    gw.locator("button[data-mode='after']").click()
    expect(gw.locator(".tl-gw-pane")).to_have_count(1)
    page.screenshot(path=str(ARTIFACTS / "notebook01_graph_after_only.png"))
    gw.locator("button[data-mode='both']").click()
    expect(gw.locator(".tl-gw-pane")).to_have_count(2)


def _scroll_for_screenshot(locate, tries: int = 3) -> None:
    """Scroll an output into view for a screenshot. Widget outputs re-render while the kernel
    sends updates, so the element found may be detached a moment later: find it again."""
    from playwright.sync_api import Error as PlaywrightError

    for attempt in range(tries):
        try:
            locate().scroll_into_view_if_needed(timeout=10_000)
            return
        except PlaywrightError as e:
            if "not attached" not in str(e) or attempt == tries - 1:
                raise
