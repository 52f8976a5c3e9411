"""pytest plugin of the GPU check: one JSON line per finished test, written as it finishes.

Loaded by benchmarks/gpu_check.py (``-p _gpu_check_plugin``). It runs in pytest's controlling process
(pytest-xdist forwards every worker's reports there), so a run stopped by the check's time budget still
leaves the result of every test that finished. ``TRACE_LAB_GPU_CHECK_LOG`` names the file.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def _reason(report) -> str:
    """The one line that says why: the crash message of a failure, the reason of a skip."""
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # a skip: (file, line, reason)
        return str(longrepr[-1]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr)
    where = f" (at {os.path.relpath(crash.path)}:{crash.lineno})" if crash is not None and crash.path else ""
    return " ".join(text.split())[:600] + where


def _write(line: dict) -> None:
    path = os.environ.get("TRACE_LAB_GPU_CHECK_LOG")
    # -p loads this plugin in the xdist workers too; only the controlling process (which gets every worker's
    # reports) writes, or each line would be there twice
    if path and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


_SKIPPED_MODULES: list[str] = []  # modules skipped whole at collection (a CPU machine: "needs a CUDA device")


def pytest_collectreport(report):
    """A test module that does not import is a failure of the check, not a test that never existed. A module
    skipped whole is remembered for the forecast of a collect-only run on another machine."""
    if report.failed:
        _write({"nodeid": report.nodeid, "when": "collect", "outcome": "failed", "seconds": 0.0,
                "reason": _reason(report)})
    elif report.skipped and report.nodeid.endswith(".py"):
        _SKIPPED_MODULES.append(report.nodeid)


UNKNOWN_SECONDS = 60.0  # an item no earlier check ran (a new test): started early, in case it is long


def scope_of(item) -> str:
    """The unit pytest-xdist's loadgroup hands one worker: the item's ``xdist_group`` name, else the item."""
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.kwargs.get("name", mark.args[0] if mark.args else "default"))
    return item.nodeid.split("@")[0]


def longest_first(items: list, seconds: dict) -> list:
    """``items`` with the longest scopes first (the sum of their items' known seconds), each scope's items together
    in their collected order: the longest-processing-time-first rule, so the run does not end waiting on one long
    item that started last."""
    scopes = [scope_of(item) for item in items]
    totals: dict[str, float] = {}
    first_seen: dict[str, int] = {}
    for i, (item, scope) in enumerate(zip(items, scopes)):
        totals[scope] = totals.get(scope, 0.0) + seconds.get(item.nodeid.split("@")[0], UNKNOWN_SECONDS)
        first_seen.setdefault(scope, i)
    order = sorted(range(len(items)), key=lambda i: (-totals[scopes[i]], first_seen[scopes[i]], i))
    return [items[i] for i in order]


def expected_wall(ids: list[str], seconds: dict, workers: int) -> dict:
    """How long the run should take from the last checks' seconds: the selected ids (xdist's ``@group`` suffix
    names a scope one worker runs whole) handed out longest scope first, each to the least loaded worker (what
    loadgroup does with the plugin's order); an id no check ran counts ``UNKNOWN_SECONDS``. Worker start-up and
    pytest's own time are not in it."""
    totals: dict[str, float] = {}
    unknown = 0
    for nodeid in ids:
        base, _, group = nodeid.partition("@")
        if base not in seconds:
            unknown += 1
        totals[group or base] = totals.get(group or base, 0.0) + seconds.get(base, UNKNOWN_SECONDS)
    from _forecast import makespan  # benchmarks/ is on the path of the check's pytest processes

    return {"expected_wall_s": round(makespan(list(totals.values()), workers, longest_first=True), 1),
            "test_seconds": round(sum(totals.values()), 1), "items": len(ids), "unknown_items": unknown,
            "workers": max(1, workers)}


def pytest_collection_modifyitems(session, config, items):
    """With the GPU check's durations file (``TRACE_LAB_GPU_CHECK_DURATIONS``), run the longest work first; every
    xdist worker orders the same way, so their collections agree."""
    path = os.environ.get("TRACE_LAB_GPU_CHECK_DURATIONS")
    if not path or not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        seconds = json.load(f)
    items[:] = longest_first(items, seconds)


def pytest_collection_finish(session):
    """How many items this run selected (without xdist; with it the controller collects nothing itself), and
    without xdist the forecast (``say_forecast``): a collect-only run (``gpu_check.py --forecast``) or one worker."""
    if session.items:
        _write({"collected": len(session.items), "ids": [item.nodeid for item in session.items]})
        if not os.environ.get("PYTEST_XDIST_WORKER"):
            # a forecast made on a machine that skips whole modules (gpu_check.py --forecast on a CPU) counts
            # their items as the last checks ran them
            whole = _SKIPPED_MODULES if os.environ.get("TRACE_LAB_GPU_CHECK_FORECAST_ONLY") else []
            say_forecast([item.nodeid + ("@" + scope_of(item) if item.get_closest_marker("xdist_group") else "")
                          for item in session.items], int(os.environ.get("TRACE_LAB_GPU_CHECK_WORKERS") or 1),
                         skipped_modules=whole)


_FORECAST_SAID = False
_IDS_WRITTEN = False
# 2026-11-28 on H100s: 531.5 s for a forecast of 462 s (b642451), 415.6 s for 378 s (c1cd96d); 525.4 s for
# 390 s (2dcfa3a) was a misread (an older same-day check's seconds taken for the newest; gpu_check.checks_in_order)
OVERRUN = 1.15


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """How many items the run selected, as an xdist worker collected them (each worker collects them all), and the
    first time their ids: the check can then tell a run its budget stopped before every item finished from one
    whose shutdown ran over, and name the items it did not reach; and, the first time, the forecast
    (``say_forecast``)."""
    global _IDS_WRITTEN
    if not _IDS_WRITTEN:  # every worker collects every item: its ids once (what a stopped run did not reach)
        _IDS_WRITTEN = True
        _write({"collected": len(ids), "ids": list(ids)})
    say_forecast(list(ids), int(os.environ.get("TRACE_LAB_GPU_CHECK_WORKERS")
                                or node.config.getoption("numprocesses") or 1))


def say_forecast(ids: list[str], workers: int, skipped_modules: list[str] = ()) -> None:
    """Once a run, with the durations file: how long it should take (``expected_wall``), printed at once and
    against the budget (``TRACE_LAB_GPU_CHECK_BUDGET``), so a run that cannot fit says so at its start rather than
    when the budget stops it; kept in the log for the result file."""
    global _FORECAST_SAID
    path = os.environ.get("TRACE_LAB_GPU_CHECK_DURATIONS")
    if _FORECAST_SAID or not path or not os.path.exists(path):
        return
    _FORECAST_SAID = True
    with open(path, encoding="utf-8") as f:
        seconds = json.load(f)
    latest = os.environ.get("TRACE_LAB_GPU_CHECK_LATEST_ITEMS")  # the newest whole check's items: no renamed ones
    pool = json.loads(Path(latest).read_text(encoding="utf-8")) if latest and os.path.exists(latest) else list(seconds)
    added = [k for k in pool if k.split("::")[0] in skipped_modules and k not in ids]
    forecast = expected_wall(ids + added, seconds, workers)
    forecast["from_skipped_modules"] = len(added)
    _write({"forecast": forecast})
    budget = float(os.environ.get("TRACE_LAB_GPU_CHECK_BUDGET") or 0)
    line = (f"[gpu-check] {forecast['items']} items, {forecast['test_seconds']:.0f} s of test time by the last "
            f"checks ({forecast['unknown_items']} never timed, counted {UNKNOWN_SECONDS:.0f} s each): about "
            f"{forecast['expected_wall_s']:.0f} s on {forecast['workers']} workers, plus start-up"
            + (f" ({len(added)} items of {len(skipped_modules)} module(s) skipped here counted as the last checks "
               "ran them)" if added else ""))
    if budget and forecast["expected_wall_s"] > budget:
        line += (f"; MORE than the budget ({budget:.0f} s): the budget will stop it, so select a part with -k or -m, "
                 "or give it more workers or budget")
    elif budget and forecast["expected_wall_s"] * OVERRUN > budget:
        line += (f"; CLOSE to the budget ({budget:.0f} s): checks have taken up to {OVERRUN:.2f}x their forecast "
                 "(start-up, uneven scopes)")
    elif budget:
        line += f" (budget {budget:.0f} s)"
    print(line, flush=True)


def pytest_runtest_logreport(report):
    _write({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
            "seconds": round(report.duration, 3), "reason": _reason(report)})
