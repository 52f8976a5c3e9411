"""Random ops (issue 15, defect 3): the eager check must not raise false alarms on them.

The eager reference and the compiled run start from the same generator state
(``compare.RandomState``: CPU and, once initialised, CUDA), and every fusion
strategy keeps ops tagged ``torch.Tag.nondeterministic_seeded`` in program order
relative to each other (``passes.partition.OpGraph``), so the compiled program
draws eager's exact random stream: the comparison stays exact. A compiled program
that is wrong still fails it, and where the streams cannot be the same (the
generator ends in another state) the comparison is statistical and says so.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import trace_lab
from fusion_support import SCALAR_SLACK
from trace_lab.run import compare
from trace_lab.passes import PASSES

STRATEGIES = ("none", "dataflow", "horizontal", "memory", "layers")
EXECUTORS = ("eager", "inductor")


class DropNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 64)
        self.drop = torch.nn.Dropout(0.5)
        self.fc2 = torch.nn.Linear(64, 32)

    def forward(self, x):
        h = self.drop(torch.relu(self.fc1(x)))
        noise = torch.randn(h.shape)  # a second random op, independent of the first
        y = self.fc2(h * (1 + 0.1 * noise))
        return F.dropout(y, 0.25, training=True) + torch.rand_like(y)


def _model_and_input():
    torch.manual_seed(0)
    model = DropNet().train()
    return model, torch.randn(16, 32, requires_grad=True)


def _assert_memory(report):
    assert report.memory, report.warnings
    for m in report.memory:
        measured, predicted = m["measured_peak_above_inputs_bytes"], m["predicted_peak_above_inputs_bytes"]
        assert measured is not None, m
        assert 0 <= measured - predicted <= SCALAR_SLACK, m


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("fusion", STRATEGIES)
def test_dropout_and_randn_match_eager_exactly(fusion, executor):
    model, x = _model_and_input()
    report = trace_lab.inspect(model, x, fusion=fusion, executor=executor, runs=0)
    c = report.comparison
    assert c["ok"], c
    assert c["mode"] == "exact", c  # the same random stream, not a weaker statistical check
    assert c["checked"]["outputs"] == 1 and c["checked"]["grads"] == 5, c  # 4 parameters and x
    assert not [w for w in report.warnings if "differs" in w], report.warnings
    _assert_memory(report)


@pytest.mark.parametrize("fusion", STRATEGIES)
def test_a_seeded_run_reproduces_eager_under_every_strategy(fusion):
    """Regression: fusion='horizontal' used to move random ops past each other."""
    def two_draws(x):
        a = torch.rand_like(x.exp() * 2) * x  # the first draw waits for fusible work ...
        b = torch.randn(x.shape) + x  # ... the second is ready at once
        return a.exp() + b.sin() * 2

    x = torch.randn(64, 64)
    jfn = trace_lab.jit(two_draws, fusion=fusion, executor="eager")
    jfn(x)  # compile
    torch.manual_seed(7)
    expected = two_draws(x)
    torch.manual_seed(7)
    got = jfn(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    final = trace_lab.last_traces(jfn)[-1]
    # the random ops keep their program order in the final trace (regions included)
    names = [str(n.target) for n in _flat_ops(final) if _random(n)]
    assert names == ["aten.rand_like.default", "aten.randn.default"], names


def _random(node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in node.target.tags


def _flat_ops(trace):
    for n in trace.ops:
        if n.op == "call_module":
            yield from (m for m in trace.gm.get_submodule(n.target).graph.nodes if m.op == "call_function")
        else:
            yield n


def test_the_generator_is_where_one_eager_call_leaves_it():
    """inspect consumes random numbers as one call of the function would (the reference's
    draws are given back), so a seeded notebook stays reproducible."""
    model, x = _model_and_input()
    torch.manual_seed(3)
    trace_lab.inspect(model, x, fusion="none", executor="eager", runs=0, measure_memory=False)
    after_inspect = torch.rand(4)
    model2, x2 = _model_and_input()
    torch.manual_seed(3)
    model2(x2).sum().backward()
    torch.testing.assert_close(after_inspect, torch.rand(4), rtol=0, atol=0)


def test_a_wrong_random_program_still_fails(monkeypatch):
    """A compiled program that drops out with the wrong probability: same random stream,
    wrong values, so the (exact) comparison must fail."""
    fusion = PASSES["fusion"]

    def wrong_fusion(trace, ctx):
        new = fusion(trace, ctx)
        for n in new.gm.graph.nodes:
            if n.target is torch.ops.aten.native_dropout.default:
                n.args = (n.args[0], 0.4) + tuple(n.args[2:])  # 0.5 in the model
        new.gm.recompile()
        return new

    monkeypatch.setitem(PASSES, "fusion", wrong_fusion)
    model, x = _model_and_input()
    report = trace_lab.inspect(model, x, fusion="none", executor="eager", runs=0, measure_memory=False)
    c = report.comparison
    assert not c["ok"] and c["mode"] == "exact", c
    assert any(p.startswith("outputs[0]") for p in c["problems"]), c
    assert any("differs from eager" in w for w in report.warnings), report.warnings


def _snap(outputs, state):
    return compare.Snapshot(outputs=outputs, grads=[], values=[], random_state=state)


def test_diverged_random_streams_are_compared_statistically_and_say_so():
    """When the generator ends in different states the two runs drew different random numbers:
    the comparison falls back to distribution statistics (and says so) instead of 'differs'."""
    torch.manual_seed(0)
    eager = torch.nn.functional.dropout(torch.randn(256, 256) + 1, 0.5)
    state_eager = compare.RandomState.capture()
    compiled = torch.nn.functional.dropout(torch.randn(256, 256) + 1, 0.5)  # another draw of the same law
    state_compiled = compare.RandomState.capture()
    assert state_compiled != state_eager
    exact = compare.compare_runs(_snap([compiled], state_eager), _snap([eager], state_eager))
    assert not exact.ok and exact.mode == "exact"  # same end state: exact, and these differ
    c = compare.compare_runs(_snap([compiled], state_compiled), _snap([eager], state_eager))
    assert c.ok and c.mode == "statistical", c
    assert "random" in c.note and "statistic" in c.note, c.note
    # statistics still catch a wrong program: wrong scale, wrong dropout rate, wrong shape
    for wrong in (compiled * 1.2, torch.nn.functional.dropout(torch.randn(256, 256) + 1, 0.3),
                  compiled[:128]):
        bad = compare.compare_runs(_snap([wrong], state_compiled), _snap([eager], state_eager))
        assert not bad.ok and bad.mode == "statistical", bad
    # integers / bools are never compared statistically
    bad = compare.compare_runs(_snap([torch.arange(4)], state_compiled), _snap([torch.arange(4) + 1], state_eager))
    assert not bad.ok
