"""Issue 20 item 5: the same student steps as tests/notebook/test_browser.py, in Jupyter Notebook 7 (the
`notebook` package) instead of JupyterLab: Run All on teaching notebook 01, the report's tabs, the Graph
widget's SVGs, then fusion -> horizontal and Rerun adds a Compare row. Notebook 7 is built from JupyterLab's
components, so the same selectors hold; its URL and menus differ."""
from __future__ import annotations

import re
import shutil

import pytest

from test_browser import ARTIFACTS, NOTEBOOK, ROOT, ensure_chromium, jupyter_server, open_notebook

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def notebook7(tmp_path_factory):
    pytest.importorskip("playwright.sync_api")
    pytest.importorskip("notebook", minversion="7")
    browser_path = ensure_chromium()
    work = tmp_path_factory.mktemp("nb7")
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, work / NOTEBOOK)
    with jupyter_server("notebook", work) as (base, token):
        yield base, token, browser_path


def test_notebook7_run_all_tabs_graph_and_rerun(notebook7):
    from playwright.sync_api import expect, sync_playwright

    base, token, browser_path = notebook7
    ARTIFACTS.mkdir(exist_ok=True)
    url = f"{base}/notebooks/{NOTEBOOK}?token={token}"
    with sync_playwright() as p, open_notebook(p, browser_path, url, ARTIFACTS / "notebook7_failure.png") as page:
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        page.get_by_text("saved reports/01_horizontal.html").wait_for(timeout=240_000)

        def view():
            return page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-tab")).first

        def tab(title):
            view().locator(".lm-TabBar-tab", has_text=title).first.click()

        expect(page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-tab"))).to_have_count(3)
        tab("Trace")
        view().locator(".tl-trace-area .tl-code").wait_for(timeout=30_000)
        assert re.search(r"def (forward|inference)\(", view().locator(".tl-trace-area").inner_text())
        tab("Compare")
        rows = view().locator(".tl-compare-area tr.tl-row")
        n_rows = rows.count()
        assert n_rows == 3
        tab("Graph")
        gw = view().locator(".tl-gw")
        gw.locator(".tl-gw-pane svg").first.wait_for(timeout=60_000)
        expect(gw.locator(".tl-gw-pane svg")).to_have_count(2)
        before = float(gw.locator(".tl-gw-pane").nth(1).get_attribute("data-scale"))
        gw.locator("button[data-tool='+']").click()
        assert float(gw.locator(".tl-gw-pane").nth(1).get_attribute("data-scale")) > 1.2 * before
        page.screenshot(path=str(ARTIFACTS / "notebook7_graph.png"))
        view().locator(".widget-dropdown").filter(
            has=page.locator("label", has_text=re.compile(r"^fusion$"))).locator("select").select_option("horizontal")
        view().get_by_role("button", name="Rerun").click()
        tab("Compare")
        expect(view().locator(".tl-compare-area tr.tl-row")).to_have_count(n_rows + 1, timeout=180_000)
        page.screenshot(path=str(ARTIFACTS / "notebook7_after_rerun.png"))
