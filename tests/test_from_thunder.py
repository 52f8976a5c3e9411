"""trace_lab.from_thunder: lightning-thunder's own traces in the lab's views (issue 20 item 4).

Every figure is checked against something outside the model: the predicted peak of Thunder's
forward and backward against the measured peak of Thunder's own compiled programs, the outputs
and gradients against eager PyTorch, the regions against the fusions in Thunder's trace, the
model's release points against Thunder's ``del`` lines. Where lightning-thunder does not import
(the main suite's torch is newer than Thunder 0.2.6 supports) the rest skip; CI runs them in its Thunder leg,
``python3 dev.py test --thunder`` (torch 2.10, Thunder 0.2.6, CPU executors), where a skip is a failure. The GPU
run was on torch 2.11 with Thunder 0.2.6 (``benchmarks/results/*thunder-view*``).
"""
from __future__ import annotations

import os
import sys

import pytest
import torch

import trace_lab


def _thunder():
    try:
        import thunder
    except Exception as e:  # noqa: BLE001 - ImportError, or Thunder 0.2.6 on a torch it does not support
        why = f"lightning-thunder does not import here ({type(e).__name__}: {e})"
        if os.environ.get("TRACE_LAB_REQUIRE_THUNDER"):  # `dev.py test --thunder`: CI's Thunder leg must run these
            pytest.fail(why)
        pytest.skip(why)
    return thunder


def _close(predicted: int, measured: int) -> bool:
    return abs(predicted - measured) <= 0.01 * measured + 1024  # the README's stated tolerance


def test_without_thunder_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "thunder", None)  # import thunder now raises ImportError
    with pytest.raises(ImportError, match="lightning-thunder"):
        trace_lab.from_thunder(lambda x: x)


def _mlp_run(thunder, **jit_options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    jm = thunder.jit(model, **jit_options)
    x = torch.randn(32, 64, requires_grad=True)
    jm(x).sum().backward()
    return jm, x


def test_module_on_torch_executor_predicted_equals_measured_and_matches_eager():
    thunder = _thunder()
    jm, x = _mlp_run(thunder)
    report = trace_lab.from_thunder(jm, x)
    assert report.comparison is not None and report.comparison["ok"], report.comparison
    assert report.comparison["checked"]["grads"] == 5  # x, two weights, two biases
    kinds = {m["kind"]: m for m in report.memory}
    assert set(kinds) == {"forward", "backward"}
    for m in kinds.values():
        assert m["measured_peak_above_inputs_bytes"] is not None, m
        assert _close(m["predicted_peak_above_inputs_bytes"], m["measured_peak_above_inputs_bytes"]), m
    # one stage per trace Thunder's passes made, named by Thunder's provenance
    assert len(report.traces("forward")) == len(thunder.last_traces(jm))
    assert len(report.traces("backward")) == len(thunder.last_backward_traces(jm))
    final = report.traces("forward")[-1]
    assert final.stage == "Delete Last Used"
    text, thunder_text = str(final), str(thunder.last_traces(jm)[-1])
    assert "t_0_weight" in text and "| live" in text
    for node in final.ops:  # every line calls what Thunder's own program calls, on Thunder's names
        call = f"{final.name(node)} = {node.target!r}("
        assert call in thunder_text, call
    # the model frees every value where Thunder's del lines do
    assert not [w for w in report.warnings if "del " in w], report.warnings


def test_fusions_become_regions_named_as_thunder_formed_them():
    thunder = _thunder()
    from thunder.executors.torch_compile import torch_compile_ex

    def f(x, w):
        return torch.nn.functional.gelu(x @ w).sum(-1)

    jf = thunder.jit(f, executors=[torch_compile_ex])
    x, w = torch.randn(64, 128, requires_grad=True), torch.randn(128, 256, requires_grad=True)
    jf(x, w).sum().backward()
    report = trace_lab.from_thunder(jf, x, w)
    for kind, traces in (("forward", thunder.last_traces(jf)), ("backward", thunder.last_backward_traces(jf))):
        fusions = [str(b.sym.name) for b in traces[-1].bound_symbols if b.sym.is_fusion]
        regions = [str(n.target) for n in report.traces(kind)[-1].ops if n.op == "call_module"]
        assert fusions and regions == fusions, (kind, regions, fusions)
    assert report.comparison["ok"], report.comparison
    for m in report.memory:  # the backward fusion's scratch (measured alone) is on its line
        assert _close(m["predicted_peak_above_inputs_bytes"], m["measured_peak_above_inputs_bytes"]), m


def test_a_reshape_that_copies_allocates_and_one_that_views_does_not():
    thunder = _thunder()

    def f(x):
        return x.t().reshape(-1) * 2 + x.reshape(-1)

    jf = thunder.jit(f)
    x = torch.randn(64, 32)
    jf(x)
    report = trace_lab.from_thunder(jf, x)
    lines = {ln.name: ln for ln in report.traces("forward")[-1].liveness().lines}
    reshapes = [ln for ln in lines.values() if "reshape" in str(ln.node.target)]
    allocated = sorted(ln.allocated for ln in reshapes)
    assert allocated == [0, 64 * 32 * 4], allocated  # x.reshape views x; x.t().reshape copies
    (m,) = report.memory
    assert _close(m["predicted_peak_above_inputs_bytes"], m["measured_peak_above_inputs_bytes"]), m
    assert report.comparison["ok"]


def test_a_trace_object_opens_without_running_anything():
    thunder = _thunder()

    def f(x):
        return torch.relu(x) * 3

    jf = thunder.jit(f)
    jf(torch.randn(8, 8))
    trace = thunder.last_traces(jf)[-1]
    report = trace_lab.from_thunder(trace, name="<b>relu</b>")
    assert report.memory == [] and report.comparison is None
    (stage,) = report.traces("forward")
    assert stage.liveness().peak_above_inputs_bytes == 8 * 8 * 4 * 2  # relu's output and the product
    html = report._repr_html_()
    assert "&lt;b&gt;relu&lt;/b&gt;" in html and "<b>relu</b>" not in html


def test_a_function_that_never_ran_is_a_clear_error():
    thunder = _thunder()
    jf = thunder.jit(lambda x: x + 1)
    with pytest.raises(ValueError, match="has no Thunder traces"):
        trace_lab.from_thunder(jf)
