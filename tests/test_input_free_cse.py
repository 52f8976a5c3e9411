"""Equal input-free values computed once (trace_lab/passes/input_free_cse.py, issue 27 item 1: every Llama layer
built its causal mask again from literals, 48 host calls a step outside nvFuser's segments on 8 layers).

Checked against eager PyTorch (outputs and gradients) with predicted = measured memory: the mask's steps run once
for all layers; a returned value is never merged (the caller would get one tensor twice), nor a random one; a
value larger than MAX_HELD_BYTES is never held across readers; fusion="none" keeps the program as captured."""
from __future__ import annotations

import torch

import trace_lab
from examples.workloads import make_llama
from trace_lab.passes import input_free_cse

aten = torch.ops.aten


def _count(trace, op) -> int:
    """Calls of ``op`` in ``trace``'s program, inside its fused regions included."""
    def walk(gm):
        for n in gm.graph.nodes:
            if n.op == "call_module":
                yield from walk(gm.get_submodule(n.target))
            elif n.op == "call_function":
                yield n
    return sum(1 for n in walk(trace.gm) if n.target is op)


def _llama_report(**options):
    model, (x,) = make_llama(3)("cpu", "small")
    return trace_lab.inspect(model, x, executor="eager", runs=2, **options)


def _check(report):
    assert report.comparison is not None and report.comparison["ok"], report.comparison  # outputs and gradients
    for kind in ("forward", "backward"):
        predicted, measured = report.predicted_peak(kind), report.measured_peak(kind)
        # the backward measures up to 64 bytes over its prediction on the CPU (as tests/test_inductor_executor.py)
        assert predicted is not None and 0 <= measured - predicted <= 64, (kind, predicted, measured)


def test_llamas_mask_steps_run_once_for_all_layers():
    report = _llama_report(fusion="dataflow")
    _check(report)
    captured, final = report.traces()[0], report.traces()[-1]
    assert _count(captured, aten.logical_and.default) == 3
    assert _count(final, aten.logical_and.default) == 1
    # the mask each layer saves for its backward is returned: one per layer still
    assert _count(final, aten.bitwise_not.default) == 3


def test_fusion_none_keeps_every_copy():
    report = _llama_report(fusion="none")
    _check(report)
    assert _count(report.traces()[-1], aten.logical_and.default) == 3


def test_a_value_larger_than_the_limit_is_not_held_across_layers(monkeypatch):
    monkeypatch.setattr(input_free_cse, "MAX_HELD_BYTES", 8)  # the small llama's masks are 16 x 16 bools
    report = _llama_report(fusion="dataflow")
    _check(report)
    final = report.traces()[-1]
    assert _count(final, aten.logical_and.default) == 3


def test_returned_and_random_values_never_merge():
    def f(x):
        a = torch.arange(4.0) * 2  # equal values built from literals, both returned
        b = torch.arange(4.0) * 2
        r = torch.rand(4) + torch.rand(4)  # two draws, never one
        return x + a, a, b, r

    x = torch.ones(4)
    jf = trace_lab.jit(f, fusion="dataflow", executor="eager")
    torch.manual_seed(0)
    got = jf(x)
    torch.manual_seed(0)
    want = f(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert got[1] is not got[2] and got[1].data_ptr() != got[2].data_ptr()
    got[1].add_(100.0)  # the caller owns each value it got back
    torch.testing.assert_close(got[2], want[2])
    final = trace_lab.last_traces(jf)[-1]
    assert _count(final, aten.rand.default) == 2
