"""Issue 26 items 2 and 3 over every teaching notebook, as a student runs it: JupyterLab 4, Chromium at
1400x1000, Run All.

For each of the seven notebooks (a copy, with one last cell that prints a marker when everything above ran):

* nothing reached a cell's stderr (profiler warnings were pink boxes that looked like errors);
* the last traced output is rerun with its Rerun button ("time lines" on, so the Timeline has lines), and
  then none of its Compare, Saved, Diff, Regions and Timeline tabs is wider than the output area; a wide
  table scrolls inside its own box with the run column fixed (the checks of test_issue26_widths);
* in the notebooks the issue's timings came from (01 and 04), every traced cell is then run again in
  place, and its first run's steady time is within 1.5x of that immediate rerun's, or its Summary flags the
  first run NOISY and Compare gives that row no star. No absolute time is asserted.
"""
from __future__ import annotations

import re
import secrets
import shutil

import pytest

pytestmark = pytest.mark.browser

NOTEBOOKS = ["01_fusion_and_peak_memory", "02_compile_time_and_fusion_cache", "03_copy_heavy_adam",
             "04_backward_with_checkpointing", "05_wait_sorting", "06_where_the_time_goes", "07_where_the_bytes_go"]
TIMED = {"01_fusion_and_peak_memory", "04_backward_with_checkpointing"}  # the issue's first-run figures
TABS = (("Compare", "tl-compare-area"), ("Saved", "tl-saved-area"), ("Diff", "tl-diff-area"),
        ("Regions", "tl-regions-area"), ("Timeline", "tl-timeline-area"))
DONE = "TL-BROWSER-DONE"
STEADY = re.compile(r"steady state\s*([\d.]+) ms \(median of \d+")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    pytest.importorskip("playwright.sync_api")
    nbformat = pytest.importorskip("nbformat")
    from test_browser import LAB_ARGS, ROOT, ensure_chromium, jupyter_server

    browser_path = ensure_chromium()
    work = tmp_path_factory.mktemp("teaching")
    (work / "notebooks").mkdir()
    shutil.copytree(ROOT / "examples", work / "examples")  # the notebooks find the repository from their folder
    for name in NOTEBOOKS:
        nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(f"print({DONE!r})"))
        nbformat.write(nb, work / "notebooks" / f"{name}.ipynb")
    with jupyter_server("lab", work, *LAB_ARGS) as (base, token):
        yield base, token, browser_path


def _summary_steady(view) -> tuple[float, bool]:
    """(the steady time in ms, whether the Summary flags it NOISY) of one traced output."""
    view.locator(".lm-TabBar-tab", has_text="Summary").first.click()
    area = view.locator(".tl-summary-area")
    area.wait_for(state="visible", timeout=30_000)
    text = " ".join(area.inner_text().split())
    found = STEADY.search(text)
    assert found, f"no steady time in the Summary: {text[:400]}"
    return float(found.group(1)), "NOISY" in text[found.start():found.start() + 600]


def _measure(page, locate, tries: int = 5) -> dict:
    """FITS evaluated on the tab area ``locate()`` finds; the widget re-renders its areas while the kernel sends
    the last updates of a rerun, so an area found a moment ago may be detached: find it again."""
    from playwright.sync_api import Error as PlaywrightError

    from test_issue26_widths import FITS

    for attempt in range(tries):
        try:
            return locate().evaluate(FITS)
        except PlaywrightError as e:
            if attempt == tries - 1 or ("null" not in str(e) and "not attached" not in str(e)):
                raise
            page.wait_for_timeout(500)


def _run_in_place(page, cell) -> None:
    """Run one cell where it stands (Ctrl+Enter) and wait until its prompt shows a new execution count."""
    prompt = cell.locator(".jp-InputPrompt").first
    before = prompt.inner_text()
    cell.locator(".jp-InputArea-editor").first.click()
    page.keyboard.press("Control+Enter")
    page.wait_for_function(
        "([el, before]) => { const t = el.innerText; return t !== before && /\\[\\d+\\]/.test(t); }",
        arg=[prompt.element_handle(), before], timeout=300_000)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_teaching_notebook_in_jupyterlab(lab, name):
    from playwright.sync_api import expect, sync_playwright

    from test_browser import ARTIFACTS, open_notebook
    from test_issue26_widths import tab_problems

    base, token, browser_path = lab
    ARTIFACTS.mkdir(exist_ok=True)
    url = f"{base}/lab/workspaces/t{secrets.token_hex(4)}/tree/notebooks/{name}.ipynb?reset&token={token}"
    with sync_playwright() as p, open_notebook(p, browser_path, url, ARTIFACTS / f"{name}_failure.png") as page:
        expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1, timeout=60_000)
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        page.locator(".jp-OutputArea-output", has_text=DONE).wait_for(timeout=900_000)
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        assert errors.count() == 0, f"{name}: a cell wrote to stderr: {errors.first.inner_text()[:600]}"
        assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']").count() == 0

        cells = page.locator(".jp-CodeCell")
        # the traced cells by position (a locator filtered on outputs would skip a cell while it reruns)
        at = [k for k in range(cells.count()) if cells.nth(k).locator(".widget-tab").count()]
        n = len(at)
        assert n >= 1, f"{name}: no traced output"
        problems = []
        if name in TIMED:
            traced = [cells.nth(k) for k in at]
            first = [_summary_steady(c) for c in traced]
            names = [re.search(r"--name (\S+)", c.locator(".jp-InputArea").inner_text()).group(1) for c in traced]
            again = []
            for cell in traced:  # an immediate rerun of each traced cell, in place
                _run_in_place(page, cell)
                cell.locator(".widget-tab").first.wait_for(timeout=120_000)
                again.append(_summary_steady(cell))
            # Compare of the last rerun: every --compare run of the kernel, first runs and reruns
            last = traced[-1]
            last.locator(".lm-TabBar-tab", has_text="Compare").first.click()
            rows = last.locator(".tl-compare-area tr.tl-row")
            starred = {}
            for r in range(rows.count()):
                label = rows.nth(r).locator("td").first.inner_text().strip()
                starred[label] = rows.nth(r).locator("td[data-col='steady_ms'].tl-best").count() > 0
            import json

            (ARTIFACTS / f"{name}_first_vs_rerun.json").write_text(json.dumps(
                [{"run": label, "first_ms": ms, "first_noisy": noisy, "rerun_ms": ms2, "starred": starred.get(label)}
                 for (ms, noisy), (ms2, _), label in zip(first, again, names)], indent=1))
            for (ms, noisy), (ms2, _), label in zip(first, again, names):
                if ms <= 1.5 * ms2:
                    continue
                if not noisy:
                    problems.append(f"{label}: first run {ms:.2f} ms vs {ms2:.2f} ms on an immediate rerun, "
                                    f"and its Summary does not flag it NOISY")
                elif starred.get(label):
                    problems.append(f"{label}: a NOISY first run ({ms:.2f} ms) got Compare's star ({starred})")

        # the last traced output, rerun with its own button: every wide tab fits
        view = page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-tab")).last
        view.locator(".lm-TabBar-tab", has_text="Compare").first.click()
        before = view.locator(".tl-compare-area tr.tl-row").count()
        lines = view.locator(".widget-checkbox").filter(has_text="time lines").locator("input")
        if lines.count():
            lines.check()
        view.get_by_role("button", name="Rerun").click()
        view = page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-tab")).last
        expect(view.locator(".tl-compare-area tr.tl-row")).to_have_count(before + 1, timeout=600_000)
        checked = []
        for title, cls in TABS:
            tab = view.locator(".lm-TabBar-tab", has_text=title)
            if not tab.count():
                continue
            tab.first.click()
            area = view.locator(f".{cls}")
            area.wait_for(state="visible", timeout=30_000)
            page.wait_for_timeout(200)
            problems += tab_problems(title, _measure(page, lambda: view.locator(f".{cls}")), expect_wide=False)
            checked.append(title)
            page.screenshot(path=str(ARTIFACTS / f"{name}_{title.lower()}.png"))
        assert "Compare" in checked and "Saved" in checked, checked
        assert not problems, f"{name}:\n" + "\n".join(problems)
