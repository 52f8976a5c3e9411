"""The generated-code runtime (trace_lab.runtime): tensor literals, saved activations freed at their
last use, the printed and generated programs, all checked against eager PyTorch and measured memory."""
from __future__ import annotations

import copy

import pytest
import torch

import trace_lab
from trace_lab.analysis.liveness import compute_liveness
from trace_lab.runtime import generate, interpret

STRATEGIES = ("none", "dataflow", "horizontal", "memory", "layers")


def literals(x):
    # three kinds of tensor literal: an index list, a 0-d constant, a 1-d constant
    return x[[0, 2]] * torch.tensor(8.0).sqrt() + torch.tensor([1.0, 2.0])


def _outputs_and_grads(fn, x):
    x = x.detach().clone().requires_grad_(True)
    out = fn(x)
    out.sum().backward()
    return out.detach(), x.grad


@pytest.mark.parametrize("executor,strategy", [("eager", s) for s in STRATEGIES] + [("inductor", "dataflow")])
def test_tensor_literals_run_and_match_eager(executor, strategy):
    x = torch.randn(3, 2)
    want_out, want_grad = _outputs_and_grads(literals, x)
    got_out, got_grad = _outputs_and_grads(trace_lab.jit(literals, fusion=strategy, executor=executor), x)
    torch.testing.assert_close(got_out, want_out)
    torch.testing.assert_close(got_grad, want_grad)


def test_printed_program_with_literals_runs():
    jfn = trace_lab.jit(literals, executor="eager")
    x = torch.randn(3, 2)
    jfn(x)
    trace = trace_lab.last_traces(jfn)[-1]
    text = str(trace)
    assert "(constant)" in text  # the literals are declared in the printed program
    primals = [x]
    torch.testing.assert_close(trace.python_callable()(*primals)[0], literals(x))


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256),
                               torch.nn.Tanh(), torch.nn.Linear(256, 64))


def test_backward_frees_saved_activations_as_predicted():
    model, x = _mlp(), torch.randn(128, 64)
    ref = copy.deepcopy(model)
    want = ref(x)
    want.sum().backward()
    jfn = trace_lab.jit(model, executor="eager")
    with jfn.measuring() as measurements:
        got = jfn(x)
        got.sum().backward()
    torch.testing.assert_close(got, want)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    by_kind = {m.kind: m for m in measurements}
    for m in by_kind.values():
        assert m.measured_peak_above_inputs is not None, m.method
        tolerance = 0.01 * m.predicted_peak_above_inputs + 1024
        assert abs(m.measured_peak_above_inputs - m.predicted_peak_above_inputs) <= tolerance, m
    backward = trace_lab.last_backward_traces(jfn)[-1]
    assert backward.owned_inputs, "the saved activations are handed over to the backward"
    # had the runtime kept every saved activation to the end, the peak would be higher
    held = copy.copy(backward)
    held.owned_inputs = {}
    kept = compute_liveness(held, materialized_regions=True).peak_above_inputs_bytes
    assert kept > by_kind["backward"].predicted_peak_above_inputs
    # and the printed backward says where each saved activation dies
    names = {backward.name(backward.inputs[i]) for i in backward.owned_inputs}
    deleted = {v for ln in backward.liveness().lines for v in ln.dead_values}
    assert names <= deleted


def test_parameters_and_user_outputs_are_not_handed_over():
    model, x = _mlp(), torch.randn(8, 64)
    jfn = trace_lab.jit(model, executor="eager")
    jfn(x).sum().backward()
    backward = trace_lab.last_backward_traces(jfn)[-1]
    forward = trace_lab.last_traces(jfn)[0]
    params = {forward.name(p) for p in forward.inputs}
    owned = {backward.name(backward.inputs[i]) for i in backward.owned_inputs}
    assert not owned & params


def test_generated_code_matches_interpreter_and_clears_only_owned_lists():
    model, x = _mlp(), torch.randn(16, 64)
    jfn = trace_lab.jit(model, fusion="dataflow", executor="eager")
    jfn(x).sum().backward()
    program = jfn.programs[0]
    forward, backward = program.forward, program.backward
    assert "args.clear()" in backward.compiled.source
    assert "args.clear()" not in forward.compiled.source
    fw_trace = forward.traces[-1]
    inputs = [torch.randn(v.shape, dtype=v.dtype) for v in (n.meta["val"] for n in fw_trace.inputs)]
    kept = list(inputs)
    got = generate(fw_trace).run(inputs)
    want = interpret(fw_trace)(list(kept))
    assert len(inputs) == len(kept)  # a forward leaves its caller's list alone
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
