"""trace_lab.diff (issue 17 item 2): what a pass changed between two stages, and why the peak moved.

memory_peak is ten independent paths x -> relu -> mm -> relu (Thunder #1337), built so the answers
are known: horizontal fusion merges the ten first ReLUs into one region and the ten second ReLUs into
another, which keeps all ten paths' buffers alive at once (5 MiB) where the unfused program holds three
256 KiB buffers (768 KiB); the matmuls are never fused.
"""
from __future__ import annotations

import pytest

import trace_lab
from examples import workloads
from trace_lab.analysis.diff import alive_during

KIB = 1024
BUF = 256 * 256 * 4  # one f32[256, 256]


def _stages(name, fusion, backward=False):
    fn, args = workloads.get(name).make("cpu", "small")
    jfn = trace_lab.jit(fn, fusion=fusion, executor="eager")
    out = jfn(*args)
    if backward:
        out.sum().backward()
    return jfn


def test_horizontal_fusion_on_memory_peak():
    jfn = _stages("memory_peak", "horizontal")
    stages = trace_lab.last_traces(jfn)
    d = trace_lab.diff(stages[0], stages[-1])
    first = sorted(f"relu_{2 * i}" if i else "relu" for i in range(10))
    second = sorted(f"relu_{2 * i + 1}" for i in range(10))
    assert sorted(sorted(ops) for ops in d.fused.values()) == sorted([first, second])
    assert not d.removed and not d.added and not d.unfused
    assert not any(n.startswith("mm") for ops in d.fused.values() for n in ops)  # matmuls are never fused
    assert {m.name for m in d.memory} >= {f"mm_{i}" if i else "mm" for i in range(20)}
    assert d.peak_a["bytes"] == 3 * BUF and d.peak_b["bytes"] == 20 * BUF
    # the reason: at the new peak every path's buffer is alive
    assert sum(b for _, b in d.alive_only_at_b_peak) >= 20 * BUF - 3 * BUF
    text = str(d)
    assert "fused into" in text and "peak: 768.00 KiB" in text and "-> " in text and "5.00 MiB" in text


def test_memory_strategy_keeps_the_peak():
    jfn = _stages("memory_peak", "memory")
    stages = trace_lab.last_traces(jfn)
    d = trace_lab.diff(stages[0], stages[-1])
    assert d.peak_b["bytes"] == d.peak_a["bytes"] == 3 * BUF


def test_two_runs_of_the_same_program_compare_by_op_name():
    none, horizontal = _stages("memory_peak", "none"), _stages("memory_peak", "horizontal")
    d = trace_lab.diff(none, horizontal)
    assert len(d.fused) == 2 and d.peak_b["bytes"] > d.peak_a["bytes"]
    same = trace_lab.diff(none, _stages("memory_peak", "none"))
    assert not same.fused and not same.moved and not same.added and not same.removed
    assert all(m.delta == 0 for m in same.memory)


@pytest.mark.parametrize("name,fusion", [("memory_peak", "none"), ("memory_peak", "horizontal"),
                                         ("llama2", "none"), ("llama2", "horizontal"), ("llama2", "memory")])
def test_values_alive_at_the_peak_add_up_to_the_peak(name, fusion):
    """The values listed at a forward's peak line are its peak: their bytes plus the line's workspace."""
    jfn = _stages(name, fusion)
    for t in trace_lab.last_traces(jfn):
        live = t.liveness()
        alive = alive_during(t, live, live.peak_index)
        assert sum(b for _, b in alive.values()) + live.peak_line.workspace == live.peak_above_inputs_bytes


def test_a_backward_diff_counts_handed_over_inputs():
    jfn = _stages("llama2", "none", backward=True)
    bw = trace_lab.last_backward_traces(jfn)[-1]
    live = bw.liveness()
    alive = alive_during(bw, live, live.peak_index)
    owned = sum(b for k, (_, b) in alive_during(bw, live, -1).items())  # handed-over inputs at entry
    assert sum(b for _, b in alive.values()) - owned == live.peak_above_inputs_bytes - live.peak_line.workspace
    assert str(trace_lab.diff(jfn, _stages("llama2", "memory", backward=True), kind="backward")).startswith("diff: backward")


def test_a_function_that_has_not_run_says_so():
    fn, _ = workloads.get("memory_peak").make("cpu", "small")
    with pytest.raises(trace_lab.TraceLabError, match="call the jitted function first"):
        trace_lab.diff(trace_lab.jit(fn), trace_lab.jit(fn))
