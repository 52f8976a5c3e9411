"""%%thunder_trace --baseline (peers in Compare) and --meta (predict without running), issue 17 items 7-8.

Expected figures are worked out by hand from the cells' tensors (float32, CPU: the profiler's
allocator events count exact bytes), never taken from the code under test.
"""
from __future__ import annotations

import pytest
import torch
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from trace_lab.report.table import report_row

MIB = 1 << 20


@pytest.fixture(scope="module")
def ip():
    shell = InteractiveShell.instance()
    shell.display_pub.publish = lambda *a, **k: None
    shell.run_line_magic("load_ext", "trace_lab")
    shell.run_cell("import torch")
    return shell


def _view(ip):
    return ip.magics_manager.registry["ThunderTraceMagics"].views[-1]


def test_baseline_adds_a_row_per_peer_measured_like_the_run(ip):
    ip.run_cell("x = torch.ones(1024, 256)")
    result = ip.run_cell("%%thunder_trace --baseline eager,torch.compile --runs 2 --name peers\ny = x * 2\nz = y + 1\n")
    assert result.error_in_exec is None, result.error_in_exec
    runs = {r.label: r.report for r in _view(ip).runs.runs}
    assert set(runs) == {"peers", "peers · eager", "peers · torch.compile"}
    # the cell keeps y and z (it binds them): 2 x 1 MiB above its input, whoever runs it
    for label, report in runs.items():
        # within the README's tolerance (the profiler also counts the runtime's few-byte scalars)
        assert abs(report.step_peak["measured_bytes"] - 2 * MIB) <= 0.01 * 2 * MIB + 1024, (label, report.step_peak)
        assert report.steady_seconds is not None and report.first_run_seconds > 0
    eager = report_row(runs["peers · eager"])
    assert eager["kernels"] is None and eager["fusions"] is None
    assert eager["step_peak_measured"] == runs["peers · eager"].step_peak["measured_bytes"]
    assert "whole call" in _view(ip).table.value
    assert float(ip.user_ns["z"][0, 0]) == 3.0  # written back by trace_lab's run only, once


def test_reduce_overhead_on_cpu_is_said_and_the_run_stands(ip):
    ip.run_cell("x = torch.ones(64, 64)")
    result = ip.run_cell("%%thunder_trace --baseline reduce-overhead --runs 1 -o rep_ro\ny = x.relu()\n")
    assert result.error_in_exec is None
    rep = ip.user_ns["rep_ro"]
    assert any("reduce-overhead" in w and "GPU" in w for w in rep.warnings), rep.warnings
    assert [r.label for r in _view(ip).runs.runs] == [rep.name]


@pytest.mark.parametrize("line, message", [
    ("--baseline eagr", "'eagr' is not a peer"),
    ("--baseline eager --nproc 2", "drop --baseline with --nproc"),
])
def test_bad_baselines_are_clear_usage_errors(ip, line, message):
    with pytest.raises(UsageError, match=message):
        ip.run_cell_magic("thunder_trace", line, "y = x + 1\n")


def test_meta_predicts_per_strategy_without_running_or_writing_back(ip):
    # the shell is one per process (InteractiveShell.instance()): other test files on this worker may
    # have bound w or v, so clear them before asserting the cell did not bind them
    ip.run_cell("x = torch.ones(1024, 256); model = torch.nn.Linear(256, 256)")
    for name in ("w", "v"):
        ip.user_ns.pop(name, None)
    shown = []
    ip.display_pub.publish = lambda data, *a, **k: shown.append(data)
    try:
        result = ip.run_cell("%%thunder_trace --meta\nw = torch.relu(x) * 2\nv = model(x)\n")
    finally:
        ip.display_pub.publish = lambda *a, **k: None
    assert result.error_in_exec is None, result.error_in_exec
    assert "w" not in ip.user_ns and "v" not in ip.user_ns  # nothing ran, nothing written back
    assert model_weight_untouched(ip)
    (data,) = shown
    html = data["text/html"]
    assert "nothing was allocated" in html
    # none: relu's output and the product coexist (2 MiB), then the linear's output (1 MiB) joins the kept w:
    # peak = w + relu's output, or w + v = 2 MiB; fused (dataflow): relu*2 is one region writing w only, so
    # the peak is w + v = 2 MiB as well; the forward's inputs (x, weight, bias) are not counted
    text = data["text/plain"]
    rows = {ln.split()[0]: ln for ln in text.splitlines() if ln.split() and ln.split()[0] in ("none", "dataflow")}
    assert "2.00 MiB" in rows["none"] and "2.00 MiB" in rows["dataflow"], text


def model_weight_untouched(ip) -> bool:
    w = ip.user_ns["model"].weight
    return w.device.type == "cpu" and w.grad is None


# --peer-trace (issue 28 item 1): torch.compile's own program beside the cell's run. The cell runs its own
# loss.backward(); the peer trace runs on copies of its inputs, so the gradients the user's model holds are the ones
# trace_lab's runs wrote (the same as a twin model's after the same cell without --peer-trace: the cell's side
# effects repeat on every run, docs/notebook.md); the peer's own gradients are checked against eager by its Report.
def test_peer_trace_adds_torch_compiles_program_as_a_run_with_traces(ip):
    ip.run_cell("torch.manual_seed(0)\n"
                "model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))\n"
                "x = torch.randn(4, 16)\n"
                "import copy\ntwin = copy.deepcopy(model)\n")
    result = ip.run_cell("%%thunder_trace --runs 1 --executor eager --name twin\n"
                         "loss = twin(x).sum()\nloss.backward()\n")
    assert result.error_in_exec is None, result.error_in_exec
    result = ip.run_cell("%%thunder_trace --peer-trace --runs 1 --executor eager --name pt\n"
                         "loss = model(x).sum()\nloss.backward()\n")
    assert result.error_in_exec is None, result.error_in_exec
    runs = {r.label: r.report for r in _view(ip).runs.runs}
    assert set(runs) == {"pt", "pt · torch.compile trace"}
    peer = runs["pt · torch.compile trace"]
    assert peer.options["fusion"] == "torch.compile"
    assert peer.comparison is not None and peer.comparison["ok"], peer.comparison
    kinds = {p["kind"] for p in peer.memory}
    assert kinds == {"forward", "backward"}, peer.memory  # the cell's own backward ran through Inductor's
    for row in peer.memory:
        assert row["measured_peak_above_inputs_bytes"] is not None, row
    # the forward keeps the first Linear's output (4 x 32 floats) for GELU's backward: at least that is live
    fw = next(r for r in peer.memory if r["kind"] == "forward")
    assert fw["measured_peak_above_inputs_bytes"] >= 4 * 32 * 4
    # the user's model holds the gradients trace_lab's runs wrote, as the twin's, and none of the peer's
    model, twin = ip.user_ns["model"], ip.user_ns["twin"]
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_peer_trace_with_nproc_is_refused_before_anything_runs(ip):
    ip.run_cell("before = 1")
    with pytest.raises(UsageError, match="drop --peer-trace with --nproc"):
        ip.run_cell_magic("thunder_trace", "--peer-trace --nproc 2", "before = 2\n")
    assert ip.user_ns["before"] == 1


def test_meta_plans_with_the_executor_the_run_would_use(ip):
    """``--meta --executor eager`` plans as the eager executor runs: a fused region's inner values materialise. The
    cell's chain relu, * 2, + 1, sum over a 1 MiB input is one dataflow region; op by op two of its 1 MiB
    temporaries are alive at once (2 MiB above the inputs), compiled (Inductor: the default on a CPU) only the
    sum's 4 B result is. Before session 42 the magic planned with Inductor's rules whatever --executor said."""
    ip.run_cell("x = torch.ones(1024, 256)")
    rows = {}
    for executor in ("eager", "auto"):
        shown = []
        ip.display_pub.publish = lambda data, *a, **k: shown.append(data)
        try:
            result = ip.run_cell(f"%%thunder_trace --meta --executor {executor}\ns = (x.relu() * 2 + 1).sum()\n")
        finally:
            ip.display_pub.publish = lambda *a, **k: None
        assert result.error_in_exec is None, result.error_in_exec
        (data,) = shown
        rows[executor] = next(ln for ln in data["text/plain"].splitlines() if ln.split()[:1] == ["dataflow"])
    # the peak-above-inputs column of the inference program's row (nothing here requires grad)
    assert rows["eager"].split("inference #0")[1].split()[:2] == ["2.00", "MiB"], rows
    assert rows["auto"].split("inference #0")[1].split()[:2] == ["4", "B"], rows
