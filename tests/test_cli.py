"""The headless lab writes a report per workload and an index, and fails loudly on bad workloads."""
import json

from trace_lab.cli import main


def test_headless_report_writes_html_json_and_index(tmp_path):
    rc = main(["report", "--out", str(tmp_path), "--workloads", "memory_peak", "--executor", "eager",
               "--runs", "1", "--no-notebooks"])
    assert rc == 0
    assert (tmp_path / "memory_peak.html").read_text().startswith("<!DOCTYPE html>")
    data = json.loads((tmp_path / "memory_peak.json").read_text())
    assert data["comparison"]["ok"]
    assert "def inference(" in (tmp_path / "memory_peak.txt").read_text()
    assert "memory_peak" in (tmp_path / "index.html").read_text()


def test_unknown_workload_is_reported_and_fails_the_run(tmp_path):
    rc = main(["report", "--out", str(tmp_path), "--workloads", "nope", "--no-notebooks"])
    assert rc == 1
    index = json.loads((tmp_path / "index.json").read_text())
    assert "unknown workload 'nope'" in index["workloads"][0]["error"]
