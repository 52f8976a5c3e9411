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
    index = (tmp_path / "index.html").read_text()
    # the index says, per report, its options, its eager check, its peaks and times, and links its files
    assert '<a href="memory_peak.html">memory_peak</a>' in index and '<a href="memory_peak.json">json</a>' in index
    assert "fusion=memory" in index and "executor=eager" in index and "matches eager" in index
    summary = dict(json.loads((tmp_path / "index.json").read_text())["workloads"][0]["summary"])
    peaks = [k for k in summary if k.startswith("peak")]
    assert peaks and all(f"<th>{k}</th>" in index for k in peaks)
    assert all(str(summary[k]) in index for k in peaks)


def test_index_escapes_names_and_errors(tmp_path):
    from trace_lab.cli import write_index

    write_index(tmp_path, [{"workload": "<b>w</b>", "ok": False, "error": "KeyError: '<x>'", "options": {}}],
                [{"notebook": "<n>.ipynb", "ok": False, "error": "<e>"}], {"torch": "<t>"})
    page = (tmp_path / "index.html").read_text()
    assert "<b>w</b>" not in page and "&lt;b&gt;w&lt;/b&gt;" in page
    assert "<x>" not in page and "<n>" not in page and "<e>" not in page and "<t>" not in page


def test_unknown_workload_is_reported_and_fails_the_run(tmp_path):
    rc = main(["report", "--out", str(tmp_path), "--workloads", "nope", "--no-notebooks"])
    assert rc == 1
    index = json.loads((tmp_path / "index.json").read_text())
    assert "unknown workload 'nope'" in index["workloads"][0]["error"]
