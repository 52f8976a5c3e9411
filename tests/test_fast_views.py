"""View lines folded into stride reinterpretations (trace_lab.runtime.fast_views): checked against eager
PyTorch (outputs and gradients), against measured memory, and against a region that lays its output out
otherwise than recorded (the first call's check keeps the aten views then)."""
from __future__ import annotations

import copy
import re

import pytest
import torch

import trace_lab
from trace_lab.runtime import generate

from examples.llama import LlamaStack


def _llama():
    torch.manual_seed(0)
    return LlamaStack(layers=2, dim=64, heads=4), torch.randn(2, 16, 64)


@pytest.mark.parametrize("executor", ["eager", "inductor"])
def test_llama_views_fold_after_the_first_call_and_match_eager(executor):
    model, x = _llama()
    ref = copy.deepcopy(model)
    jfn = trace_lab.jit(model, fusion="dataflow", executor=executor)
    for _ in range(3):  # the first call checks, the later ones run the folded lines
        model.zero_grad(), ref.zero_grad()
        got, want = jfn(x), ref(x)
        got.sum().backward(), want.sum().backward()
        torch.testing.assert_close(got, want)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    backward = jfn.compilations()[-1]
    assert backward.kind == "backward"
    views = backward.compiled.generated.views
    assert views.fast_chosen and views.mismatch is None
    # a Llama layer's backward holds permutes of permutes (a weight transposed twice): those are the weight
    identities = sum(identity for *_, identity in views.expected.values())
    assert identities >= 2 and len(views.expected) > identities
    assert re.search(r"_g_v\d+\(", backward.compiled.source), "no folded view in the backward's source"


def test_folded_views_free_as_predicted():
    model, x = _llama()
    jfn = trace_lab.jit(model, fusion="dataflow", executor="eager")
    jfn(x).sum().backward()  # the first call chose the folded programs
    with jfn.measuring() as measurements:
        jfn(x).sum().backward()
    assert {m.kind for m in measurements} == {"forward", "backward"}
    for m in measurements:
        assert m.measured_peak_above_inputs is not None, m.method
        tolerance = 0.01 * m.predicted_peak_above_inputs + 1024
        assert abs(m.measured_peak_above_inputs - m.predicted_peak_above_inputs) <= tolerance, m


def _transposed_product(x, w):
    return x.t() @ w


def test_an_input_laid_out_otherwise_keeps_the_aten_view():
    x, w = torch.randn(6, 4), torch.randn(6, 5)
    jfn = trace_lab.jit(_transposed_product, fusion="dataflow", executor="eager")
    jfn(x, w)
    trace = trace_lab.last_traces(jfn)[-1]
    column_major = x.t().contiguous().t()  # same values, other strides than the capture recorded
    program = generate(trace, fast_views=True)
    views = program.views
    assert views.fast_chosen is None and len(views.expected) == 1
    for _ in range(2):
        (got,) = program.run([column_major, w])
        torch.testing.assert_close(got, _transposed_product(x, w))
    assert views.fast_chosen is False and "recorded [4, 6] strides [1, 4]" in views.mismatch
    # the same program handed the recorded layouts folds its view
    same = generate(trace, fast_views=True)
    for _ in range(2):
        (got,) = same.run([x, w])
        torch.testing.assert_close(got, _transposed_product(x, w))
    assert same.views.fast_chosen is True and re.search(r"_g_v\d+\(", same.source)


def _offset_views(x, w):
    return x[2:].t() @ w[1] + x.select(0, 3)[:1]


def test_views_at_an_offset_fold_to_the_same_values():
    x, w = torch.randn(6, 4), torch.randn(3, 4, 5)
    jfn = trace_lab.jit(_offset_views, fusion="none", executor="eager")
    for _ in range(3):
        torch.testing.assert_close(jfn(x, w), _offset_views(x, w))
    views = jfn.compilations()[-1].compiled.generated.views
    assert views.fast_chosen and any(delta for _, _, delta, _ in views.expected.values())


def test_a_backwards_returned_gradient_view_folds_and_autograd_accumulates_it_as_eager():
    """A backward's results are gradients, not a caller's views: a weight gradient that is a permute of a
    matmul's result folds too (no aten permute after the checked first call), in eager's layout, and three
    steps accumulate into ``.grad`` as eager's do."""
    model, x = _llama()
    ref = copy.deepcopy(model)
    jfn = trace_lab.jit(model, fusion="dataflow", executor="eager")
    for _ in range(3):  # gradients accumulate over the calls: AccumulateGrad takes the first, adds the rest
        got, want = jfn(x), ref(x)
        got.sum().backward(), want.sum().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
            assert p.grad.stride() == q.grad.stride()
    record = jfn.compilations()[-1]
    backward, trace = record.compiled, record.traces[-1]
    out = trace.output_node
    returned_views = [a for a in out.args[0] if isinstance(a, torch.fx.Node) and a.target is torch.ops.aten.permute.default]
    assert returned_views, "the llama backward returns no permuted gradient: the test checks nothing"
    folded = backward.generated.views.expected
    assert backward.generated.views.fast_chosen and len(folded) >= len(returned_views)
    for v in returned_views:
        name = trace.name(v)
        # one stride reinterpretation, or the root itself where the permute undoes another
        assert re.search(rf"^\s*{name} = (_g_v\d+\(|\w+$)", backward.source, re.M), (name, backward.source)
