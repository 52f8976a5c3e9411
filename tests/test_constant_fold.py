"""Constant folding before fusion (trace_lab/passes/constant_fold.py, issue 27: Adam.step recomputed its
lerp weight from literals for every parameter on every call, a region without inputs plus a torch op each).

Checked: the folded program matches eager (outputs, updated parameters and state) with predicted = measured
memory; equal constants are shared; what a caller can hold (a returned value, a view of it) and random
values are never folded; fusion="none" keeps the program as captured; only scalars fold."""
from __future__ import annotations

import torch

import trace_lab
from examples.workloads import make_adam_step


def _final(report):
    return report.traces()[-1]


def _constants(trace):
    return [n for n in trace.graph.nodes if n.op == "get_attr" and n.meta.get("folded")]


def test_adam_step_folds_its_literal_scalars_once_for_all_parameters():
    fn, _ = make_adam_step("cpu", "small", n_params=3, numel=64)
    report = trace_lab.inspect(fn, fusion="dataflow", executor="eager", runs=2)
    assert report.comparison is not None and report.comparison["ok"], report.comparison
    final = _final(report)
    folded = _constants(final)
    # lerp's weight (1 - beta1 = 0.1) decomposes into a bool and a float scalar: two constants, not two per parameter
    assert len(folded) == 2, [n.meta["folded"] for n in folded]
    assert {str(fx_val.dtype) for fx_val in (n.meta["val"] for n in folded)} == {"torch.bool", "torch.float32"}
    # every region reads inputs: no region recomputes literals
    regions = [n for n in final.graph.nodes if n.op == "call_module"]
    assert len(regions) == 3 and all(n.args for n in regions)
    text = str(final)
    assert "folded at compile time from where(ge(abs(full()))" in text
    # the captured stage still computes them (the fold belongs to the fusion stage); the summary says how many
    assert not _constants(report.traces()[0])
    assert "3 fused regions, 2 scalar constants folded" in str(report)
    predicted, measured = report.predicted_peak("inference"), report.measured_peak("inference")
    assert predicted is not None and predicted == measured


def _outputs_of_two_calls(fn, x):
    jf = trace_lab.jit(fn, fusion="dataflow", executor="eager")
    return jf, jf(x), jf(x)


def test_a_returned_constant_is_never_shared_between_calls():
    def f(x):
        c = torch.full((), 2.0) * 3.0  # computed from literals alone, and returned
        return x * c, c, c.expand(4)

    x = torch.ones(4)
    jf, first, second = _outputs_of_two_calls(f, x)
    torch.testing.assert_close(first[0], x * 6)
    first[1].add_(100.0)  # the caller owns what it got back
    third = jf(x)
    torch.testing.assert_close(third[1], torch.tensor(6.0))
    torch.testing.assert_close(third[0], x * 6)
    assert first[1].data_ptr() != second[1].data_ptr()


def test_random_scalars_and_larger_constants_are_computed_on_every_call():
    def f(x):
        noise = torch.rand(())  # random: never folded
        ramp = torch.arange(4.0)  # four elements: only scalars fold
        return x + noise + ramp * torch.full((), 0.5).exp()

    x = torch.zeros(4)
    jf = trace_lab.jit(f, fusion="dataflow", executor="eager")
    a, b = jf(x), jf(x)
    assert not torch.equal(a, b), "torch.rand(()) folded into a constant"
    final = trace_lab.last_traces(jf)[-1]
    folded = _constants(final)
    assert [n.meta["folded"] for n in folded] == ["exp(full())"]
    computed = [str(n.target) for m in final.gm.modules() if isinstance(m, torch.fx.GraphModule)
                for n in m.graph.nodes if n.op == "call_function"]
    assert any("arange" in t for t in computed) and any("rand" in t for t in computed), computed


def test_fusion_none_keeps_the_program_as_captured():
    fn, _ = make_adam_step("cpu", "small", n_params=2, numel=16)
    report = trace_lab.inspect(fn, fusion="none", executor="eager", runs=1)
    assert report.comparison is not None and report.comparison["ok"], report.comparison
    assert not _constants(_final(report))


def test_memory_order_of_a_folded_adam_step_is_priced_as_measured():
    """With the constants folded, the memory strategy orders two parameters' updates so that an op-by-op
    ``prims.fma`` (lerp's and addcmul's decomposition, run as (a * b) + c) is the peak: its product is a
    temporary the size of the result, counted as the op's scratch (analysis/op_scratch.py)."""
    fn, _ = make_adam_step("cpu", "small", n_params=2, numel=65536)
    report = trace_lab.inspect(fn, fusion="memory", executor="eager", runs=1)
    assert report.comparison is not None and report.comparison["ok"], report.comparison
    predicted, measured = report.predicted_peak("inference"), report.measured_peak("inference")
    assert predicted == measured, (predicted, measured)
    assert _constants(_final(report))
