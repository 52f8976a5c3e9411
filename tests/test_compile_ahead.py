"""The backward's regions compiled with the forward's (trace_lab/run/compile_ahead.py).

Checked against eager PyTorch (outputs and gradients); the backward's records say which regions were compiled
ahead, and a plan that fails ahead costs nothing but the head start.
"""
from __future__ import annotations

import torch

import trace_lab
import trace_lab.run.compile_ahead as compile_ahead
from examples.llama import LlamaStack


def _run(**options):
    torch.manual_seed(0)
    model = LlamaStack(layers=2, dim=32, heads=2)
    reference = LlamaStack(layers=2, dim=32, heads=2)
    reference.load_state_dict(model.state_dict())
    x = torch.randn(2, 8, 32, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    jfn = trace_lab.jit(model, fusion="layers", executor="inductor", **options)
    out = jfn(x)
    out.sum().backward()
    expected = reference(x_ref)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x.grad, x_ref.grad)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    forward, backward = jfn.compilations()
    return forward, backward


def _ahead(record):
    return [r for r in record.compiled.regions.values() if r.details.get("compiled_ahead")]


def test_the_backwards_regions_compile_with_the_forwards_and_are_found_when_it_runs():
    forward, backward = _run()
    ahead = _ahead(backward)
    distinct = {r.signature for r in backward.compiled.regions.values()}
    assert ahead and {r.signature for r in ahead} | {r.signature for r in backward.compiled.regions.values()
                                                    if r.cache_hit} == distinct
    assert all(not r.cache_hit and r.compile_seconds > 0 for r in ahead)  # compiled, in the forward's batch
    assert any("of the backward's regions compiled with this program's" in n for n in forward.compiled.notes)
    assert any("compiled ahead, with the forward's regions" in n for n in backward.compiled.notes)


def test_without_the_fusion_cache_nothing_is_compiled_ahead():
    forward, backward = _run(fusion_cache=False)
    assert not _ahead(backward)
    assert not any("compiled with this program's" in n for n in forward.compiled.notes)


def test_a_plan_that_fails_ahead_leaves_the_backward_to_compile_when_it_runs(monkeypatch):
    def refuse(trace, context):
        raise RuntimeError("no plan today")

    monkeypatch.setattr(compile_ahead, "run_pipeline", refuse)
    forward, backward = _run()
    assert not _ahead(backward)
    assert any("not planned ahead (RuntimeError: no plan today)" in n for n in forward.compiled.notes)
