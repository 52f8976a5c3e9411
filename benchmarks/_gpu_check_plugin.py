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
