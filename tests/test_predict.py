"""trace_lab.predict: peak memory per strategy from a meta-device run (issue 17 item 8, "will it fit?").

The figures must be the ones a real run predicts and measures: checked against trace_lab.inspect
on CPU (its liveness prediction and the profiler's measured peak, 1% + 1 KiB) for workloads at two
sizes, forward and backward. A model built on the meta device (too big to allocate here) predicts
without allocating, and the user's module and weights are left as they were.
"""
from __future__ import annotations

import pytest
import torch

import trace_lab
from examples.llama import LlamaStack
from examples import workloads
from trace_lab.errors import TraceLabError


def _llama(dim, seq, batch=2, layers=2):
    torch.manual_seed(0)
    return LlamaStack(layers=layers, dim=dim, heads=4), (torch.randn(batch, seq, dim),)


CASES = {
    "llama2 d=64": lambda: workloads.get("llama2").make("cpu", "small"),
    "llama2 d=128 T=64": lambda: _llama(128, 64),
    "memory_peak": lambda: workloads.get("memory_peak").make("cpu", "small"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_prediction_equals_a_real_runs_prediction_and_measurement(case):
    fn, args = CASES[case]()
    pred = trace_lab.predict(fn, *args, strategies=["none"], device="cpu", executor="eager")
    report = trace_lab.inspect(fn, *args, fusion="none", executor="eager", runs=1)
    kinds = ["forward", "backward"] if report.traces("backward") else ["forward"]
    assert {p.kind for p in pred.parts} == set(kinds) or {p.kind for p in pred.parts} == {"inference"}
    for kind in kinds:
        kind_pred = kind if any(p.kind == kind for p in pred.parts) else "inference"
        predicted = pred.peak("none", kind_pred)
        assert predicted == report.predicted_peak(kind), (kind, predicted, report.predicted_peak(kind))
        measured = report.measured_peak(kind)
        assert measured is not None and abs(measured - predicted) <= 0.01 * measured + 1024, (kind, measured, predicted)


def test_attention_is_the_meta_devices_math_path_and_the_prediction_says_so():
    """Where a device picks its own attention kernel (CPU flash attention here), the meta program is the
    math path's: measured on transformer_encoder (small), the meta forward predicts more than the CPU run."""
    fn, args = workloads.get("transformer_encoder").make("cpu", "small")
    pred = trace_lab.predict(fn, *args, strategies=["none"], device="cpu", executor="eager")
    report = trace_lab.inspect(fn, *args, fusion="none", executor="eager", runs=1)
    assert pred.peak("none", "forward") > report.predicted_peak("forward")
    assert any("attention" in n for n in pred.notes)


def test_every_strategy_is_predicted_and_the_memory_strategy_is_never_above_none():
    fn, args = workloads.get("memory_peak").make("cpu", "small")
    pred = trace_lab.predict(fn, *args, device="cuda")
    strategies = {p.strategy for p in pred.parts}
    assert strategies == {"none", "dataflow", "horizontal", "memory", "layers"}  # Inductor runs every strategy
    kind = pred.parts[0].kind
    assert pred.peak("memory", kind) <= pred.peak("none", kind)
    assert pred.peak("horizontal", kind) > pred.peak("memory", kind)  # the lesson of notebook 01
    assert all(p.peak_above_inputs % 512 == 0 for p in pred.parts)  # the CUDA allocator's rounding
    text = str(pred)
    assert "cuda allocator modelled" in text and "memory" in text and "lower bound" in text


def test_a_model_too_big_to_allocate_is_predicted_on_meta_and_the_users_module_is_untouched():
    small, (x,) = _llama(64, 16)
    before = {k: v.clone() for k, v in small.state_dict().items()}
    trace_lab.predict(small, x, strategies=["none"], device="cpu")
    assert all(torch.equal(before[k], v) and v.device.type == "cpu" for k, v in small.state_dict().items())

    with torch.device("meta"):  # 4 x 8192^2 x 4 B per layer ~ 1 GiB of weights: never allocated here
        big = LlamaStack(layers=2, dim=8192, heads=64)
    x_big = torch.empty(8, 2048, 8192, device="meta")
    pred = trace_lab.predict(big, x_big, strategies=["none"], device="cuda")
    act = 8 * 2048 * 8192 * 4  # one activation of the residual stream, f32
    assert pred.peak("none", "forward") > act and pred.peak("none", "backward") > act


def test_bad_arguments_say_what_to_give():
    fn, args = workloads.get("memory_peak").make("cpu", "small")
    with pytest.raises(TraceLabError, match="'cuda' or 'cpu'"):
        trace_lab.predict(fn, *args, device="tpu")
    with pytest.raises(TraceLabError, match="unknown strategies"):
        trace_lab.predict(fn, *args, strategies=["fastest"])


_LIN = torch.nn.Linear(16, 16)  # a model the function below reads from its globals, as a notebook cell's would


def _reads_a_global_model(x):
    return torch.relu(_LIN(x)).sum()


def test_a_model_reached_outside_the_arguments_is_named_with_what_to_pass_instead():
    """predict replaces the arguments by meta twins; a module or tensor the function reads from its globals or its
    closure stays on its real device, and the run would fail with torch's "meta and cpu" device mismatch."""
    weight = torch.randn(16, 16, requires_grad=True)

    def reads_a_closure_tensor(x):
        return (x @ weight).tanh().sum()

    x = torch.randn(4, 16)
    with pytest.raises(TraceLabError, match=r"reads _LIN \(Linear, in the globals, on cpu\).*Pass it as an argument"):
        trace_lab.predict(_reads_a_global_model, x, device="cpu", strategies=["none"])
    with pytest.raises(TraceLabError, match=r"reads weight \(Tensor, in the closure, on cpu\)"):
        trace_lab.predict(reads_a_closure_tensor, x, device="cpu", strategies=["none"])
    before = _LIN.weight.detach().clone()
    # passed as arguments, the same computations are predicted, and the user's module is untouched
    by_argument = trace_lab.predict(lambda lin, x: torch.relu(lin(x)).sum(), _LIN, x, device="cpu",
                                    strategies=["none"])
    assert by_argument.peak("none", "forward") > 0 and by_argument.peak("none", "backward") > 0
    assert _LIN.weight.device.type == "cpu" and torch.equal(_LIN.weight.detach(), before)
    assert trace_lab.predict(lambda w, x: (x @ w).tanh().sum(), weight, x, device="cpu",
                             strategies=["none"]).peak("none", "forward") > 0
