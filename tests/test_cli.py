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


def test_executed_notebooks_say_their_slowest_cell(tmp_path):
    """Issue 26 item 4: each cell of a teaching notebook should finish within a minute on a 2-core CPU; the
    headless lab reads nbclient's per-cell timing and its index names the slowest cell, marked when over."""
    import nbformat

    from trace_lab.cli import SLOW_CELL_SECONDS, cell_seconds, write_index

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# t"), nbformat.v4.new_code_cell("1"),
                                         nbformat.v4.new_code_cell("2"), nbformat.v4.new_code_cell("3")])
    nb.cells[1].metadata["execution"] = {"iopub.execute_input": "2026-11-26T10:00:00.000000Z",
                                         "shell.execute_reply": "2026-11-26T10:00:02.500000Z"}
    nb.cells[2].metadata["execution"] = {"iopub.execute_input": "2026-11-26T10:00:03.000000Z",
                                         "shell.execute_reply": "2026-11-26T10:01:15.250000Z"}
    assert cell_seconds(nb) == [(1, 2.5), (2, 72.25)]  # the unexecuted cell 3 has no timing
    write_index(tmp_path, [], [{"notebook": "a.ipynb", "ok": True, "error": None,
                                "slowest_cell": {"index": 2, "seconds": 72.25}},
                               {"notebook": "b.ipynb", "ok": True, "error": None,
                                "slowest_cell": {"index": 4, "seconds": 12.0}}])
    page = (tmp_path / "index.html").read_text()
    assert "cell 2: 72.2 s <span class='bad'>(over 60 s)</span>" in page and SLOW_CELL_SECONDS == 60
    assert "cell 4: 12.0 s</td>" in page


class _FlakyClient:
    """Stands in for nbclient's NotebookClient: its first ``fails`` starts raise ``error``."""
    starts = 0

    def __init__(self, fails, error):
        self.fails, self.error = fails, error

    def __call__(self, nb, **kwargs):
        outer = self

        class Client:
            def execute(self_inner):
                outer.starts += 1
                if outer.starts <= outer.fails:
                    raise outer.error
                nb.metadata["ran"] = True
                return nb
        return Client()


def test_a_kernel_that_dies_while_starting_is_started_once_more(tmp_path, monkeypatch, capsys):
    """jupyter_client's 'died before replying to kernel_info' means no cell ran (GPU check at 2dcfa3a): one more
    start, said; it dying twice, or any other error, reaches the caller."""
    import nbclient
    import nbformat
    import pytest

    from trace_lab.cli import KERNEL_DIED_AT_START, execute_notebook

    died = RuntimeError(f"{KERNEL_DIED_AT_START} (at client.py:207)")
    flaky = _FlakyClient(1, died)
    monkeypatch.setattr(nbclient, "NotebookClient", flaky)
    nb = execute_notebook(nbformat.v4.new_notebook(), tmp_path, 10)
    assert nb.metadata["ran"] and flaky.starts == 2
    assert "kernel died while starting, before any cell ran" in capsys.readouterr().out
    twice, other = _FlakyClient(2, died), _FlakyClient(1, RuntimeError("Kernel died while running cell 3"))
    for client, starts in ((twice, 2), (other, 1)):
        monkeypatch.setattr(nbclient, "NotebookClient", client)
        with pytest.raises(RuntimeError, match="Kernel died"):
            execute_notebook(nbformat.v4.new_notebook(), tmp_path, 10)
        assert client.starts == starts
