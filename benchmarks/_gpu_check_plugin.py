"""pytest plugin of the GPU check: one JSON line per finished test, written as it finishes.

Loaded by benchmarks/gpu_check.py (``-p _gpu_check_plugin``). It runs in pytest's controlling process
(pytest-xdist forwards every worker's reports there), so a run stopped by the check's time budget still
leaves the result of every test that finished. ``TRACE_LAB_GPU_CHECK_LOG`` names the file.
"""
from __future__ import annotations

import json
import os

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


def pytest_collectreport(report):
    """A test module that does not import is a failure of the check, not a test that never existed."""
    if report.failed:
        _write({"nodeid": report.nodeid, "when": "collect", "outcome": "failed", "seconds": 0.0,
                "reason": _reason(report)})


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
    """How many items this run selected (without xdist; with it the controller collects nothing itself)."""
    if session.items:
        _write({"collected": len(session.items)})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """How many items the run selected, as an xdist worker collected them (each worker collects them all): the
    check can then tell a run its budget stopped before every item finished from one whose shutdown ran over."""
    _write({"collected": len(ids)})


def pytest_runtest_logreport(report):
    _write({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
            "seconds": round(report.duration, 3), "reason": _reason(report)})
