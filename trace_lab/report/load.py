"""load_report: a Report back from its saved JSON (``Report.save_json`` / ``json.dump(report.to_dict())``).

The JSON holds the report's plain fields and its view model, so the reloaded
Report renders the same text and HTML as the one that was saved (no Traces:
``traces()`` gives the stored stages). A multi-process report (it has a
``launch`` entry) comes back as a DistributedReport.
"""
from __future__ import annotations

import json

from .distributed_report import DistributedReport
from .report import Report

__all__ = ["load_report", "report_from_dict"]


def report_from_dict(data: dict) -> Report:
    return DistributedReport.from_dict(data) if "launch" in data else Report.from_dict(data)


def load_report(path) -> Report:
    with open(path, encoding="utf-8") as f:
        return report_from_dict(json.load(f))
