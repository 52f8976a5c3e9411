"""A backward's regions compile in its forward's pool (trace_lab.executors.compile_ahead, issue 27 item 3).

AOTAutograd partitions forward and backward before the forward compiles but calls the backward's compiler only
inside the first backward(). With the fusion cache on, the Inductor executor compiles the backward's regions
beside the forward's: the first backward() then compiles nothing, its regions' records keep their own compile
seconds and say where they compiled (not a cache hit), and the results match eager, outputs and gradients. With
the cache off every region compiles when its part does, as before."""
from __future__ import annotations

import copy

import pytest
import torch

import trace_lab
from examples import workloads
from trace_lab.executors.compile_ahead import AheadRegions


def _compiles_by_phase(monkeypatch):
    import trace_lab.executors.inductor as inductor_module

    phase, counts = {"now": "forward"}, {"forward": 0, "backward": 0}
    real = inductor_module.compile_region

    def counting(*args, **kwargs):
        counts[phase["now"]] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(inductor_module, "compile_region", counting)
    return phase, counts


@pytest.mark.parametrize("fusion", ["layers", "dataflow"])
def test_the_first_backward_compiles_nothing_its_regions_compiled_in_the_forwards_pool(monkeypatch, fusion):
    phase, counts = _compiles_by_phase(monkeypatch)
    model, (x,) = workloads.make_llama(2)("cpu", "small")
    reference = copy.deepcopy(model)
    jfn = trace_lab.jit(model, executor="inductor", fusion=fusion)
    out = jfn(x)
    phase["now"] = "backward"
    out.sum().backward()
    expected = reference(x)
    expected.sum().backward()
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)

    assert counts["forward"] > 0 and counts["backward"] == 0, counts
    forward, backward = jfn.compilations()
    assert (forward.kind, backward.kind) == ("forward", "backward")
    rows = list(backward.compiled.regions.values())
    compiled = [r for r in rows if not r.cache_hit]
    assert compiled, "the backward's distinct regions are compiled ones, not cache hits"
    for r in compiled:
        assert r.details.get("compiled_ahead_with") == "forward #0", r.name
        assert r.compile_seconds > 0, r.name
    assert any("compiled ahead, in the pool of forward #0" in n for n in backward.compiled.notes)
    assert any("regions of the backward compiled in this pool too" in n for n in forward.compiled.notes)
    assert jfn.programs[0].partitioned_backward is None  # dropped once the backward compiled


def test_without_the_fusion_cache_each_part_compiles_its_own_regions(monkeypatch):
    phase, counts = _compiles_by_phase(monkeypatch)
    model, (x,) = workloads.make_llama(1)("cpu", "small")
    reference = copy.deepcopy(model)
    jfn = trace_lab.jit(model, executor="inductor", fusion="dataflow", fusion_cache=False)
    out = jfn(x)
    phase["now"] = "backward"
    out.sum().backward()
    reference(x).sum().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert counts["forward"] > 0 and counts["backward"] > 0, counts
    backward = jfn.compilations()[1]
    assert not any("compiled_ahead_with" in r.details for r in backward.compiled.regions.values())


def test_ahead_regions_keep_only_what_compiled_and_hand_each_out_once():
    ahead = AheadRegions()
    ahead.expect("trace", "forward #3")
    assert ahead.take_expected() == [("trace", "forward #3")] and ahead.take_expected() == []
    ahead.keep("forward #3", {"a": ("code a", 1.5), "bad": (RuntimeError("no"), 0.2)}, {"c": "call c"},
               {"a": ("fusion9", 16, 0)})
    assert "a" in ahead and "c" in ahead and "bad" not in ahead  # a failure is left to the part's own compile
    got = ahead.claim(["a", "a", "c", "x"])
    assert set(got) == {"a", "c"}
    assert (got["a"].fn, got["a"].seconds, got["a"].covered, got["a"].refused) == ("code a", 1.5, False,
                                                                                     ("fusion9", 16, 0))
    assert got["c"].covered and got["c"].seconds == 0.0 and got["c"].label == "forward #3"
    assert ahead.claim(["a", "c"]) == {}
