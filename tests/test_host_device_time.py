"""Where the time goes (issue 14, item 4): the Report's host time per call, and on CUDA its device time."""
import json
import os
import statistics

import pytest
import torch

import trace_lab
from trace_lab.runtime.measure import CallTimes, time_host_device
from trace_lab.report import Report


def _fn(x):
    return torch.tanh(x @ x).sum(0)


def test_cpu_report_has_host_time_per_call_in_dict_and_summary():
    x = torch.randn(32, 32, requires_grad=True)
    r = trace_lab.inspect(_fn, x, executor="eager", runs=3, name="tanh")
    d = json.loads(json.dumps(r.to_dict()))
    t = d["timing"]
    assert t["host_seconds"] > 0 and len(t["host_run_seconds"]) == 3
    assert all(s > 0 for s in t["host_run_seconds"])
    assert t["device_seconds"] is None and t["bound"] is None  # CPU: the host's time is the time
    # steady state on CPU is the host time
    assert d["steady_seconds"] == pytest.approx(t["host_seconds"])
    rows = dict(r.summary_rows())
    assert rows["time per call"].startswith("host ") and "ms" in rows["time per call"]
    assert "time per call" in str(r)
    # round trip: a Report rebuilt from its dict keeps the timing and shows the same row
    back = Report.from_dict(d)
    assert back.timing == d["timing"] and dict(back.summary_rows())["time per call"] == rows["time per call"]


def test_untimed_report_has_no_timing_row():
    r = trace_lab.inspect(_fn, torch.randn(8, 8), executor="eager", runs=0)
    assert r.to_dict()["timing"] is None
    assert "time per call" not in dict(r.summary_rows())


def test_bound_verdict_from_medians():
    cpu = torch.device("cpu")
    assert CallTimes(cpu, [1e-3], None).bound() is None
    assert CallTimes(torch.device("cuda"), [1.0e-3] * 3, [1.05e-3] * 3).bound() == "host-bound"
    assert CallTimes(torch.device("cuda"), [0.2e-3] * 3, [1.0e-3] * 3).bound() == "device-bound"


@pytest.mark.gpu
def test_cuda_host_and_device_time():
    """On CUDA: device time from events, host time until return; a tiny op chain spends far more of its time
    launching than a large matmul does (the GPU check shares the device between workers, whose kernels stretch
    any one call's device time: so the two calls are compared with each other, and each verdict alone only where
    the device is not shared)."""
    dev = torch.device("cuda")
    small = torch.randn(16, device=dev)

    def launches():
        y = small
        for _ in range(200):
            y = y * 1.0001
        return y

    chain = time_host_device(launches, dev, 5)
    assert len(chain.device) == 5 and all(s > 0 for s in chain.device + chain.host)
    big = torch.randn(8192, 8192, device=dev)
    matmul = time_host_device(lambda: big @ big @ big, dev, 5)
    share = {name: statistics.median(t.host) / statistics.median(t.device) for name, t in
             (("chain", chain), ("matmul", matmul))}
    assert share["chain"] > 10 * share["matmul"], share
    assert matmul.bound() == "device-bound"
    if os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") == "1":  # the device is this test's alone
        assert chain.bound() == "host-bound"
    # and in a Report
    x = torch.randn(256, 256, device=dev, requires_grad=True)
    r = trace_lab.inspect(_fn, x, runs=3)
    d = r.to_dict()["timing"]
    assert d["device_seconds"] > 0 and d["host_seconds"] > 0 and d["bound"] in ("host-bound", "device-bound")
    assert "device" in dict(r.summary_rows())["time per call"]
