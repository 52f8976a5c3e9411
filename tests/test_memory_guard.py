"""The memory strategy keeps its promise after compiling (trace_lab.memory_guard).

A compiler may lay a region's outputs out in more bytes than the fusion plan assumed
(Inductor on CUDA returns attention's k/v views in a storage of their own). Here an
Inductor executor that reports such a layout for every region holding a ``relu``
stands in for it on the CPU: the region's output is said to take 4x its bytes.
"""
from __future__ import annotations

import torch

from trace_lab.executors.inductor import InductorExecutor
from trace_lab.jit import jit, last_traces


class InflatingInductor(InductorExecutor):
    def compile(self, trace):
        program = super().compile(trace)
        for n in trace.ops:
            region = n.meta.get("region") if n.op == "call_module" else None
            if region and "aten.relu.default" in region["ops"]:
                sizes = list(region["output_storage_bytes"])
                sizes[0] = 4 * sizes[0]
                n.meta["region"] = {**region, "output_storage_bytes": sizes}
        return program


def scaled_relu_matmul(x, w):
    y = torch.relu(x) * 2.0
    return y @ w


def test_regions_that_cost_more_than_planned_are_left_unfused():
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    jfn = jit(scaled_relu_matmul, fusion="memory", executor="inductor")
    jfn._executors["inductor"] = InflatingInductor()
    torch.testing.assert_close(jfn(x, w), scaled_relu_matmul(x, w))
    stages = last_traces(jfn)
    unfused = next(s for s in stages if s.stage == "sort_waits" or s.stage == "as captured")
    final = stages[-1]
    limit = unfused.liveness(False).peak_above_inputs_bytes
    assert final.liveness(False).peak_above_inputs_bytes <= limit
    assert not any(n.op == "call_module" and "aten.relu.default" in n.meta["region"]["ops"] for n in final.ops)
    notes = jfn.programs[0].forward.compiled.notes
    assert any("left unfused" in note and "fusion0" in note for note in notes), notes


def test_without_overrun_the_plan_stands():
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    jfn = jit(scaled_relu_matmul, fusion="memory", executor="inductor")
    torch.testing.assert_close(jfn(x, w), scaled_relu_matmul(x, w))
    final = last_traces(jfn)[-1]
    assert any(n.op == "call_module" for n in final.ops), str(final)
    assert not any("left unfused" in note for note in jfn.programs[0].forward.compiled.notes)


def test_an_overrun_left_in_place_is_said(monkeypatch):
    import trace_lab.memory_guard as guard

    monkeypatch.setattr(guard, "MAX_ROUNDS", 0)  # no re-plans allowed: the overrun stays
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    jfn = jit(scaled_relu_matmul, fusion="memory", executor="inductor")
    jfn._executors["inductor"] = InflatingInductor()
    torch.testing.assert_close(jfn(x, w), scaled_relu_matmul(x, w))
    notes = jfn.programs[0].forward.compiled.notes
    assert any("still above the unfused program's" in note for note in notes), notes
    assert not any("left unfused" in note for note in notes)
