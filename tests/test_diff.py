"""trace_lab.diff (issue 17 item 2): what a pass changed between two stages, and why the peak moved.

memory_peak is ten independent paths x -> relu -> mm -> relu (Thunder #1337), built so the answers
are known: horizontal fusion merges the ten first ReLUs into one region and the ten second ReLUs into
another, which keeps all ten paths' buffers alive at once (5 MiB) where the unfused program holds three
256 KiB buffers (768 KiB); the matmuls are never fused.
"""
from __future__ import annotations

from pathlib import Path

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


def test_a_graph_break_makes_programs_each_of_which_can_be_diffed_and_its_region_ends_read():
    """A graph break makes one program per graph; ``program=i`` picks one (the default, the last run, is the
    second graph's forward here, the first graph's backward). The picked parts are read here straight from
    ``jfn.programs``, and what each graph holds is known: the relu before the break, the tanh after it."""
    import torch

    torch.manual_seed(0)
    lin1, lin2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def f(x):
        y = torch.relu(lin1(x)) * 3
        torch._dynamo.graph_break()
        return (torch.tanh(lin2(y)) * 2).sum(dim=-1)

    x = torch.randn(8, 16)
    fused, plain = (trace_lab.jit(f, fusion=s, executor="eager") for s in ("dataflow", "none"))
    for jfn in (fused, plain):
        jfn(x).sum().backward()
    assert len(fused.programs) == 2

    def final(jfn, i, kind):
        return next(part for part in jfn.programs[i].parts if part.kind == kind).traces[-1]

    for i, op in ((0, "relu"), (1, "tanh")):
        d = trace_lab.diff(fused, plain, program=i)
        assert str(d) == str(trace_lab.diff(final(fused, i, "forward"), final(plain, i, "forward")))
        assert op in str(d).splitlines()[1], str(d)  # "unfused (n): ..." names the graph's own ops
        assert trace_lab.region_ends(fused, program=i) == trace_lab.region_ends(final(fused, i, "forward"))
    assert str(trace_lab.diff(fused, plain)) == str(trace_lab.diff(fused, plain, program=1))  # the last run
    assert str(trace_lab.diff(fused, plain, kind="backward")) == str(
        trace_lab.diff(fused, plain, kind="backward", program=0))  # the backward ran in reverse: #0 last
    with pytest.raises(trace_lab.TraceLabError, match=r"program=2.*has 0 \(backward\), 0 \(forward\), 1"):
        trace_lab.diff(fused, plain, program=2)


def test_export_repro_takes_the_program_of_a_graph_break(tmp_path):
    """export_repro(jfn, program=i) writes the i-th graph's program: the file of program 0 computes the relu before
    the break, program 1's the tanh after it."""
    import torch

    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16)

    def f(x):
        y = torch.relu(lin(x))
        torch._dynamo.graph_break()
        return torch.tanh(y).sum()

    jfn = trace_lab.jit(f, fusion="none", executor="eager")
    jfn(torch.randn(4, 16))
    first = Path(trace_lab.export_repro(jfn, tmp_path / "p0.py", program=0)).read_text()
    second = Path(trace_lab.export_repro(jfn, tmp_path / "p1.py", program=1)).read_text()
    assert "aten.relu" in first and "aten.tanh" not in first
    assert "aten.tanh" in second and "aten.relu" not in second
    last = tmp_path / "last.py"
    trace_lab.export_repro(jfn, last)
    assert last.read_text() == second  # the default: the program that ran last
