"""Donation: an Inductor region frees the inputs that die on its line inside its call.

The liveness model says which region arguments can go inside the call (``LineMemory.donatable``: the one value
holding a buffer nobody else holds, read last on that line); the Inductor executor hands them over in a list its
compiled code clears (``fn.boxed``), measures the region that way (a signed workspace: peak above entry - outputs)
and the generated program drops its own names before the call. Checked against eager PyTorch through ``inspect``
(outputs, gradients), with the measured peak equal to the predicted one, with donation on and off.
"""
from __future__ import annotations

import warnings

import pytest
import torch

import trace_lab
from examples.llama import LlamaStack
from fusion_support import StubExecutor, assert_report_peaks_match, fuse, hand_trace
from trace_lab.runtime.call_memory import measure_workspace
from trace_lab.runtime.dtype_guard import dtype_guarded


def _mm_relu_mm(x, w):
    a = torch.mm(x, w)
    b = torch.relu(a) + 1
    return (torch.mm(b, w),)


def _mm_relu_mm_keeps_a(x, w):
    a = torch.mm(x, w)
    b = torch.relu(a) + 1
    return (torch.mm(b, w) + a,)


def _region_line(fn):
    trace = hand_trace(fn, torch.randn(8, 8), torch.randn(8, 8))
    fused = fuse(trace, "dataflow", StubExecutor())
    live = fused.liveness(False)
    first_mm = next(n for n in fused.ops if n.op == "call_function" and "mm" in str(n.target))
    return next(ln for ln in live.lines if ln.node.op == "call_module" and first_mm in ln.node.args)


def test_a_region_argument_that_dies_on_its_line_is_donatable_and_an_input_or_a_later_read_is_not():
    line = _region_line(_mm_relu_mm)
    args = list(line.node.args)
    mm = [i for i, a in enumerate(args) if a.op == "call_function" and "mm" in str(a.target)][:1]
    assert line.donatable == tuple(mm) and mm  # the product dies in the region; x and w are the caller's
    assert _region_line(_mm_relu_mm_keeps_a).donatable == ()  # the product is read again after the region


class _FreesFirst:
    """A stand-in for a compiled region that drops its input before it allocates its 16-byte output."""

    def __call__(self, x):
        return (torch.zeros(4),)

    def boxed(self, args):
        (x,) = args
        args.clear()
        n = x.numel()
        del x
        return (torch.zeros(n // 16),)


def test_a_donated_measurement_is_signed_and_sees_the_input_go():
    val = torch.empty(64)  # 256 bytes handed over
    workspace, out_bytes, (aliases, _) = measure_workspace(_FreesFirst(), [val], rounding=1, donate=(0,))
    # the input goes (-256) before the output comes (+16): the peak is the entry, so 0 - 16 below it
    assert (workspace, out_bytes, aliases) == (-16, 16, [None])
    kept, _, _ = measure_workspace(_FreesFirst(), [val], rounding=1)  # not donated: scratch never negative
    assert kept == 0


def test_the_guarded_region_falls_back_op_by_op_and_still_empties_the_list():
    trace = hand_trace(_mm_relu_mm, torch.randn(8, 8), torch.randn(8, 8))
    fused = fuse(trace, "dataflow", StubExecutor())
    (region,) = [n for n in fused.ops if n.op == "call_module"]
    fallback_calls = []

    def eager_region():
        def run(*args):
            fallback_calls.append(len(args))
            return (torch.relu(args[0]) + 1,)
        return run

    guarded = dtype_guarded(_FreesFirst(), fused, region, eager_region)
    handed = [torch.randn(8, 8, dtype=torch.float64)]  # recorded as float32: the guard refuses the compiled code
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (out,) = guarded.boxed(handed)
    assert fallback_calls == [1] and handed == [] and out.dtype == torch.float64
    assert any("runs op by op" in str(w.message) for w in caught)


def _llama(donate: bool):
    torch.manual_seed(0)
    model = LlamaStack(layers=3, dim=64, heads=2)
    x = torch.randn(2, 16, 64, requires_grad=True)
    return trace_lab.inspect(model, x, fusion="layers", executor="inductor", runs=1, donate_inputs=donate)


def test_layers_backward_frees_dying_inputs_inside_its_regions_and_the_peak_falls_as_predicted():
    on, off = _llama(True), _llama(False)
    for report in (on, off):
        assert report.ok, report.comparison
        assert report.comparison["checked"]["grads"] > 0
        assert_report_peaks_match(report)
    back_on, back_off = (r.memory[-1]["measured_peak_above_inputs_bytes"] for r in (on, off))
    assert back_on < back_off, (back_on, back_off)
    trace = on.traces("backward")[-1]
    donating = [r for r in trace.compiled_regions.values() if r.donated]
    assert donating and all(r.workspace_bytes is not None for r in donating)
    assert not [r for r in off.traces("backward")[-1].compiled_regions.values() if r.donated]
    assert any(r.workspace_bytes < 0 for r in donating)  # some layer frees more than it allocates before its peak
    assert "freed inside" in str(trace)


def test_the_generated_backward_drops_its_names_before_the_donating_call():
    torch.manual_seed(0)
    model = LlamaStack(layers=2, dim=32, heads=2)
    x = torch.randn(2, 8, 32, requires_grad=True)
    reference = LlamaStack(layers=2, dim=32, heads=2)
    reference.load_state_dict(model.state_dict())
    x_ref = x.detach().clone().requires_grad_(True)
    jfn = trace_lab.jit(model, fusion="layers", executor="inductor")
    jfn(x).sum().backward()
    reference(x_ref).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    lines = jfn.programs[0].backward.compiled.source.splitlines()
    handed = [i for i, ln in enumerate(lines) if ln.strip().startswith("_d = [")]
    assert handed, "\n".join(lines)
    for i in handed:  # _d = [...]; del <donated>; <outputs> = region.boxed(_d)
        assert lines[i + 1].strip().startswith("del ") and lines[i + 2].rstrip().endswith("(_d)"), lines[i:i + 3]


def _relu_twice_plus(a, b):
    return (torch.relu(a) * 2 + b,)


def test_a_region_compiled_over_a_donated_input_writes_there_and_nowhere_else():
    """``donate_inplace``: Inductor's DonatedBuffer reuse on a region: the output goes into the handed-over input, and
    a compile of the same graph handed another input, or none, keeps the inputs it was not handed intact. (Inductor's
    FX graph cache, asked for here, bypasses these compiles today: 'No shape env'. Its key does not hold the donated
    indices; the compile's cache tag does, for a torch where it would serve them.)"""
    import torch._inductor.config as inductor_config
    from torch.fx.experimental.proxy_tensor import make_fx

    from trace_lab.executors.inductor import compile_region

    examples = [torch.randn(64, 64), torch.randn(64, 64)]
    gm = make_fx(_relu_twice_plus)(*examples)
    with inductor_config.patch({"fx_graph_cache": True}):
        compiled = [(compile_region(gm, examples, donated=over), over) for over in ((0,), (1,), ())]
    for fn, over in compiled:
        a, b = torch.randn(64, 64), torch.randn(64, 64)
        kept = {0: a.clone(), 1: b.clone()}
        expected = torch.relu(a) * 2 + b
        (out,) = fn(a, b)
        torch.testing.assert_close(out, expected)
        for j, t in enumerate((a, b)):
            assert (out.data_ptr() == t.data_ptr()) is (j in over), (over, j)
            if j not in over:
                torch.testing.assert_close(t, kept[j])  # an input not handed over is untouched


def test_in_place_donation_matches_eager_and_measures_as_predicted():
    torch.manual_seed(0)
    model = LlamaStack(layers=3, dim=64, heads=2)
    x = torch.randn(2, 16, 64, requires_grad=True)
    reports = {}
    for in_place in (True, False):
        reports[in_place] = r = trace_lab.inspect(model, x, fusion="dataflow", executor="inductor", runs=1,
                                                  donate_inplace=in_place)
        assert r.ok, r.comparison
        assert r.comparison["checked"]["grads"] > 0
        assert_report_peaks_match(r)
    regions = reports[True].traces("forward")[-1].compiled_regions.values()
    over = [r for r in regions if r.details.get("in_place_over")]
    assert any(a and a[0] == "input" for r in over for a in (r.aliases or ()))  # an output in a donated input
    for kind in (0, 1):
        assert reports[True].memory[kind]["measured_peak_above_inputs_bytes"] <= \
            reports[False].memory[kind]["measured_peak_above_inputs_bytes"]
