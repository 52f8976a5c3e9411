"""trace_lab.sweep (issue 28 item 3): step time against peak over configurations.

Every row's run is checked against eager by inspect; its predicted peak is compared here with the measured one
(CPU: exact); the front is recomputed here from the rows' figures; the partitioner's memory budget is shown to
change the program (its predicted peak differs from the same strategy's without it); a failing configuration is
a row with its error while the others run; progress is said before each configuration."""
from __future__ import annotations

import pytest
import torch

import trace_lab
from examples import workloads
from trace_lab.lab.sweep import DEFAULT_CONFIGS


@pytest.fixture(scope="module")
def llama_sweep():
    fn, args = workloads.get("llama2").make("cpu", "small")
    said = []
    s = trace_lab.sweep(fn, *args, runs=1, executor="eager", progress=lambda d, n, label: said.append((d, n, label)))
    return s, said


def test_every_configuration_matches_eager_and_measures_as_predicted(llama_sweep):
    s, _ = llama_sweep
    assert [r.config for r in s.rows] == [dict(c) for c in DEFAULT_CONFIGS]
    for r in s.rows:
        assert r.error is None and r.ok, r.to_dict()
        assert r.step_ms > 0 and r.part in ("forward", "backward")
        assert 0 <= r.measured_peak - r.predicted_peak <= 64, r.to_dict()


def test_the_front_is_what_no_other_row_beats_on_both(llama_sweep):
    s, _ = llama_sweep
    for r in s.rows:
        beaten = any(o.step_ms <= r.step_ms and o.measured_peak <= r.measured_peak
                     and (o.step_ms, o.measured_peak) != (r.step_ms, r.measured_peak) for o in s.rows)
        assert r.front == (not beaten), r.label
    assert s.front()


def test_the_memory_budget_changes_what_the_partitioner_saves(llama_sweep):
    s, _ = llama_sweep
    by = {r.label: r for r in s.rows}
    plain, none_saved = by["fusion=dataflow"], by["fusion=dataflow, memory_budget=0.0"]
    assert none_saved.predicted_peak != plain.predicted_peak


def test_progress_before_each_configuration_and_at_the_end(llama_sweep):
    s, said = llama_sweep
    n = len(DEFAULT_CONFIGS)
    assert [(d, t) for d, t, _ in said] == [(k, n) for k in range(n + 1)]
    assert [label for _, _, label in said[:-1]] == [r.label for r in s.rows]


def test_a_failing_configuration_is_a_row_and_the_others_run():
    x = torch.randn(32, requires_grad=True)

    def f(x):
        return (x.exp() * x.sin()).sum()

    s = trace_lab.sweep(f, x, runs=1, executor="eager", configs=[
        {"fusion": "bogus"}, {"fusion": "dataflow", "memory_budget": 2}, {"fusion": "dataflow", "name": "<b>x</b>"}])
    bad, budget, good = s.rows
    assert bad.error and "fusion" in bad.error and "bogus" in bad.error
    assert budget.error and "memory_budget=2" in budget.error and "from 0 to 1" in budget.error
    assert good.error is None and good.ok and good.front
    page = s._repr_html_()
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page and "<svg" in page
    from trace_lab.report.html import css

    assert f"<style>{css()}</style>" in page  # styled where no report was shown before it (an export)


@pytest.mark.parametrize("configs,message", [([], "at least one configuration"),
                                             (["dataflow"], "each configuration is a dict of options")])
def test_bad_configurations_say_what_to_give(configs, message):
    with pytest.raises(trace_lab.TraceLabError, match=message):
        trace_lab.sweep(lambda x: x * 2, torch.randn(4), configs=configs)


@pytest.mark.gpu
def test_on_cuda_rows_match_eager_and_measure_as_predicted():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (run on the GPU machine)")
    torch.manual_seed(0)
    fn, args = workloads.get("llama2").make("cuda", "small")
    s = trace_lab.sweep(fn, *args, runs=3, executor="inductor", configs=[
        {"fusion": "dataflow"}, {"fusion": "memory"}, {"fusion": "dataflow", "memory_budget": 0.5}])
    assert s.device.startswith("cuda")
    for r in s.rows:
        assert r.error is None and r.ok, r.to_dict()
        assert abs(r.measured_peak - r.predicted_peak) <= 0.01 * r.predicted_peak + 4096, r.to_dict()
    assert s.front() and "<svg" in s._repr_html_()
