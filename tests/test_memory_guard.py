"""The memory strategy keeps its promise after compiling (trace_lab.memory_guard).

A compiler may lay a region's outputs out in more bytes than the fusion plan assumed
(Inductor on CUDA returns attention's k/v views in a storage of their own). Here an
Inductor executor that reports such a layout for every region holding a ``relu``
stands in for it on the CPU: the region's output is said to take 4x its bytes. It is
handed to the jit through ``JitFunction.use_executor``, and the tests read what the
guard did from ``CompiledProgram.memory_guard`` (numbers and flags), not from the notes.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from trace_lab.analysis.region_record import region_record
from trace_lab.executors.inductor import InductorExecutor
from trace_lab.run.jit import jit, last_traces

RELU = "aten.relu.default"


class InflatingInductor(InductorExecutor):
    """Inductor, but a region holding a relu says its first output takes 4x the bytes."""

    def compile(self, trace):
        program = super().compile(trace)
        for op, record in program.regions.items():
            if RELU in record.ops:
                sizes = list(record.output_storage_bytes)
                sizes[0] = 4 * sizes[0]
                program.regions[op] = replace(record, output_storage_bytes=tuple(sizes))
        return program


def scaled_relu_matmul(x, w):
    y = torch.relu(x) * 2.0
    return y @ w


def _run(executor=None):
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    jfn = jit(scaled_relu_matmul, fusion="memory", executor="inductor")
    if executor is not None:
        jfn.use_executor(executor)
    torch.testing.assert_close(jfn(x, w), scaled_relu_matmul(x, w))
    return jfn, last_traces(jfn), jfn.programs[0].forward.compiled


def _relu_regions(trace):
    return [n for n in trace.ops if n.op == "call_module" and RELU in region_record(trace, n).ops]


def test_regions_that_cost_more_than_planned_are_left_unfused():
    jfn, stages, compiled = _run(InflatingInductor())
    unfused = next(s for s in stages if s.stage == "sort_waits" or s.stage == "as captured")
    limit = unfused.liveness(False).peak_above_inputs_bytes
    final = stages[-1]
    guard = compiled.memory_guard
    assert guard.limit == limit
    assert guard.final_peak == final.liveness(False).peak_above_inputs_bytes <= limit and guard.kept
    (replan,) = guard.replans
    # 64 x 64 f32 = 16 KiB: the relu region's output said to take 4x, 48 KiB over the plan
    assert (replan.region, replan.excess) == ("fusion0", 3 * 64 * 64 * 4)
    assert replan.peak > limit and RELU.split(".")[1] in " ".join(replan.ops)
    assert not _relu_regions(final)


def test_without_overrun_the_plan_stands():
    jfn, stages, compiled = _run()
    final = stages[-1]
    assert _relu_regions(final), str(final)
    guard = compiled.memory_guard
    assert guard.replans == () and guard.kept and guard.final_peak <= guard.limit
    # the final stage is joined to what compiling found: every region's record is the compiled one
    assert all(region_record(final, n) is compiled.regions[n.name] for n in final.ops if n.op == "call_module")


def test_an_overrun_left_in_place_is_said(monkeypatch):
    import trace_lab.run.memory_guard as guard

    monkeypatch.setattr(guard, "MAX_ROUNDS", 0)  # no re-plans allowed: the overrun stays
    jfn, stages, compiled = _run(InflatingInductor())
    result = compiled.memory_guard
    assert result.replans == () and not result.kept
    assert result.final_peak == stages[-1].liveness(False).peak_above_inputs_bytes > result.limit
    assert _relu_regions(stages[-1])
    # the overrun is said once, after the executor's own notes are kept
    assert guard.guard_notes(result) == compiled.notes[:1]


class SegmentingInductor(InductorExecutor):
    """Inductor, but a region holding several independent chains says it keeps each chain's intermediate
    alive inside its call (as nvFuser does for one fusion of eight Adam updates, segmented into kernels
    whose intermediates all live until it returns): workspace = one chain's output bytes per chain."""

    def compile(self, trace):
        program = super().compile(trace)
        for op, record in program.regions.items():
            chains = sum(1 for o in record.ops if o == "aten.sin.default")
            if chains > 1:
                program.regions[op] = replace(record, workspace_bytes=chains * 64 * 64 * 4)
        return program


def four_chains(a, b, c, d):
    return tuple(torch.sin(x) * 2.0 + 1.0 for x in (a, b, c, d))


def test_a_region_whose_chains_cost_more_together_is_planned_again_with_them_apart():
    args = [torch.randn(64, 64) for _ in range(4)]
    jfn = jit(four_chains, fusion="memory", executor="inductor")
    jfn.use_executor(SegmentingInductor())
    for got, want in zip(jfn(*args), four_chains(*args)):
        torch.testing.assert_close(got, want)
    stages, compiled = last_traces(jfn), jfn.programs[0].forward.compiled
    split = compiled.memory_guard.split
    assert split is not None and split.kept, compiled.memory_guard
    # planned: the four chains as one region (no region workspace is known before compiling); compiled, that
    # region keeps 4 x 16 KiB alive inside its call; kept apart, each chain's region keeps only its own
    regions = [n for n in stages[-1].ops if n.op == "call_module"]
    assert len(regions) == 4, str(stages[-1])
    assert split.excess == 4 * 64 * 64 * 4 and split.new_peak < split.peak
    assert split.new_peak == compiled.memory_guard.final_peak == stages[-1].liveness(False).peak_above_inputs_bytes
    assert any("kept apart" in note for note in compiled.notes)
    ends = stages[-1].info["region_ends"]
    assert any(e["kind"] == "memory" and "kept apart" in e["reason"] for rows in ends.values() for e in rows), ends


def test_without_a_costlier_merge_no_second_plan_is_made():
    args = [torch.randn(64, 64) for _ in range(4)]
    jfn = jit(four_chains, fusion="memory", executor="inductor")
    jfn(*args)
    assert jfn.programs[0].forward.compiled.memory_guard.split is None
