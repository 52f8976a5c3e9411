"""Fusion passes on hand-built programs (expected partitions and peaks worked out by hand
in each test) and on every workload in examples/ (memory never above none or dataflow).

Sizes: an f32[8, 8] tensor is B = 256 bytes, an f32[8, 1] is s = 32 bytes.
"""
from __future__ import annotations

import re

import pytest
import torch

import trace_lab
from examples import workloads
from fusion_support import STRATEGIES, StubExecutor, captured, fuse, hand_trace, ops_of
from trace_lab.executors.eager import EagerExecutor, interpret
from trace_lab.executors.inductor import InductorExecutor
from trace_lab.passes.fusion import plan_units
from trace_lab.passes.partition import OpGraph, _Groups
from trace_lab.passes.regions import build_trace
from trace_lab.passes.schedule import MemoryModel

B, S = 256, 32
INDUCTOR_LIKE = StubExecutor()  # Inductor's fusibility table, regions keep inner values inside


def peak(trace, executor=INDUCTOR_LIKE) -> int:
    return trace.liveness(executor.materializes_regions).peak_above_inputs_bytes


def x8(n=8, m=8, seed=0):
    return torch.randn(n, m, generator=torch.Generator().manual_seed(seed))


# -- dataflow: the cycle check ----------------------------------------------------------------
def cyclic(x, w):
    t1 = torch.relu(x)
    t2 = torch.mm(t1, w)  # not fusible: it sits between relu and add
    t3 = torch.sin(t1)
    return t2 + t3


def test_dataflow_refuses_a_merge_that_would_make_a_cycle():
    trace = hand_trace(cyclic, x8(), x8(seed=1))
    # relu->sin merges (sin's only producer is relu); relu->add would need mm both before
    # and after the merged group, so add stays on its own.
    fused = fuse(trace, "dataflow", INDUCTOR_LIKE)
    assert ops_of(fused) == [("relu", "sin"), "mm", ("add",)]
    fused.gm.graph.lint()

    graph = OpGraph(trace, INDUCTOR_LIKE.can_fuse)
    groups = _Groups(graph)
    relu, mm, sin, add = (graph.pos[n] for n in graph.ops)
    groups.merge(relu, sin)
    assert groups.creates_cycle(relu, add)
    groups.merge(relu, add)  # forced, without the check: the group graph now has a cycle
    assert mm in groups.parents[relu] and mm in groups.children[relu]


def test_fused_programs_compute_what_the_original_computes():
    x, w = x8(), x8(seed=1)
    trace = hand_trace(cyclic, x, w)
    expected = interpret(trace)([x, w])
    for strategy in STRATEGIES:
        fused = fuse(trace, strategy, INDUCTOR_LIKE)
        torch.testing.assert_close(fused.python_callable()(x, w), expected)  # the printed text runs
        torch.testing.assert_close(interpret(fused)([x, w]), expected)


# -- horizontal: Thunder's FIFO Kahn pass on three parallel paths --------------------------------
def paths(x0, x1, x2, a):
    for t0 in (x0, x1, x2):
        t1 = torch.relu(t0)
        t2 = torch.mm(t1, t1)
        t3 = torch.relu(t2)
        a = torch.mm(t3, a)
    return a


@pytest.fixture(scope="module")
def paths_trace():
    return hand_trace(paths, x8(seed=0), x8(seed=1), x8(seed=2), x8(seed=3))


def test_horizontal_pulls_every_ready_fusible_op_into_one_region(paths_trace):
    fused = fuse(paths_trace, "horizontal", INDUCTOR_LIKE)
    relu3 = ("relu", "relu", "relu")
    assert ops_of(fused) == [relu3, "mm", "mm", "mm", relu3, "mm", "mm", "mm"]
    # by hand: fusion1 holds 3 mm outputs and writes 3 relu outputs: 6 B at once.
    # Original order: at worst chain value + relu + mm output = 3 B.
    assert peak(fused) == 6 * B
    assert peak(fuse(paths_trace, "none", INDUCTOR_LIKE)) == 3 * B
    assert peak(fuse(paths_trace, "dataflow", INDUCTOR_LIKE)) == 3 * B
    # 3 B is optimal: each chain step needs the previous chain value, a relu output and its own output.
    assert peak(fuse(paths_trace, "memory", INDUCTOR_LIKE)) == 3 * B


def test_regions_print_thunder_style_and_the_text_runs(paths_trace):
    fused = fuse(paths_trace, "horizontal", INDUCTOR_LIKE)
    text = str(fused)
    m = re.search(r"^  \((t\d+), (t\d+), (t\d+)\) = fusion0\(x0, x1, x2\)  # .*$", text, re.M)
    assert m, text
    body = text[m.end():].splitlines()[1:4]
    for name, line in zip(m.groups(), body):
        assert re.fullmatch(rf'    # {name} = aten\.relu\.default\(x\d\)  # {name}: "cpu f32\[8, 8\]"', line), line
    args = [x8(seed=i) for i in range(4)]
    torch.testing.assert_close(fused.python_callable()(*args), interpret(paths_trace)(args))
    # every name is defined once: region temporaries and outputs never collide with program names
    names = [fused.name(n) for n in fused.graph.nodes if n.op != "output" and fused.name(n).startswith("t")]
    assert len(names) == len(set(names))


# -- memory: reordering lowers the peak ------------------------------------------------------------
def two_reductions(x1, x2, v):
    t1 = torch.relu(x1)
    t2 = torch.relu(x2)
    m1 = torch.mm(t1, v)
    m2 = torch.mm(t2, v)
    return m1 + m2


def test_memory_strategy_reorders_to_the_lower_peak():
    trace = hand_trace(two_reductions, x8(), x8(seed=1), x8(8, 1, seed=2))
    # original order holds t1 and t2 together: 2B + s. Running each relu right before its
    # mm holds one B at a time: relu2 while m1 lives, then m2 with m1 and t2: B + 2s.
    for strategy in ("none", "dataflow", "horizontal"):
        assert peak(fuse(trace, strategy, INDUCTOR_LIKE)) == 2 * B + S, strategy
    fused = fuse(trace, "memory", INDUCTOR_LIKE)
    assert peak(fused) == B + 2 * S
    assert ops_of(fused) == [("relu",), "mm", ("relu",), "mm", ("add",)]


def chain(x):
    e1 = torch.exp(x)
    e2 = torch.exp(e1)
    return e2.sum()


def test_materialized_regions_add_their_inner_peak():
    trace = hand_trace(chain, x8())
    kept_inside = fuse(trace, "dataflow", INDUCTOR_LIKE)
    assert ops_of(kept_inside) == [("exp", "exp", "sum")]
    assert peak(kept_inside) == 4  # only the f32 scalar leaves the region
    op_by_op = StubExecutor(materializes_regions=True)
    # run op by op: e1 and e2 coexist while exp(e1) runs: 2 B
    assert peak(fuse(trace, "dataflow", op_by_op), op_by_op) == 2 * B


def test_region_outputs_that_are_views_share_buffers():
    def views(x):
        y = torch.relu(x)
        return x.t(), y, y.t()

    trace = hand_trace(views, x8())
    fused = fuse(trace, "horizontal", INDUCTOR_LIKE)
    (region,) = [n for n in fused.ops if n.op == "call_module"]
    # outputs in order of production: y, x.t(), y.t()
    assert region.meta["region"]["aliases"] == [None, ("input", 0), ("output", 0)]
    assert peak(fused) == B  # one new buffer: relu's


def test_unknown_strategy_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="none, dataflow, horizontal, memory"):
        trace_lab.jit(chain, fusion="vertical")
    with pytest.raises(ValueError, match="memory"):
        plan_units(hand_trace(chain, x8()), "vertical", INDUCTOR_LIKE.can_fuse, False)


# -- every workload in examples/ ---------------------------------------------------------------------
@pytest.mark.parametrize("name", list(workloads.WORKLOADS))
def test_memory_is_never_above_none_or_dataflow(name):
    for executor in (InductorExecutor(), EagerExecutor()):
        for part in captured(name):
            graph = OpGraph(part.trace, executor.can_fuse)
            model = MemoryModel(part.trace, graph, executor.materializes_regions)
            peaks = {"none": peak(part.trace, executor)}
            for strategy in STRATEGIES[1:]:
                units = plan_units(part.trace, strategy, executor.can_fuse, executor.materializes_regions)
                peaks[strategy] = peak(build_trace(part.trace, units, strategy), executor)
                # the scheduler's model prices orders exactly as the liveness of the built trace
                assert model.peak(units) == peaks[strategy], (name, part.kind, strategy)
            where = f"{name} {part.kind} {executor.name}: {peaks}"
            assert peaks["memory"] <= peaks["none"], where
            assert peaks["memory"] <= peaks["dataflow"], where


def test_memory_peak_workload_horizontal_vs_memory():
    (part,) = captured("memory_peak")
    mib = 1 << 20
    # 10 paths of f32[256, 256] (256 KiB each). Original order: chain value + relu + mm output.
    # Horizontal: fusion1 reads the 10 mm outputs while writing 10 relu outputs: 20 buffers.
    assert peak(fuse(part.trace, "none", INDUCTOR_LIKE)) == 3 * mib // 4
    assert peak(fuse(part.trace, "horizontal", INDUCTOR_LIKE)) == 5 * mib
    assert peak(fuse(part.trace, "memory", INDUCTOR_LIKE)) == 3 * mib // 4


def test_fusing_an_already_fused_program_keeps_its_regions(paths_trace):
    once = fuse(paths_trace, "horizontal", INDUCTOR_LIKE)
    op_by_op = StubExecutor(materializes_regions=True)
    for executor in (INDUCTOR_LIKE, op_by_op):
        twice = fuse(once, "memory", executor)
        assert [n.target for n in twice.ops if n.op == "call_module"] == ["fusion0", "fusion1"]
        assert peak(twice, executor) <= peak(once, executor)
        graph = OpGraph(once, executor.can_fuse)
        units = plan_units(once, "memory", executor.can_fuse, executor.materializes_regions)
        assert MemoryModel(once, graph, executor.materializes_regions).peak(units) == peak(twice, executor)
    args = [x8(seed=i) for i in range(4)]
    torch.testing.assert_close(twice.python_callable()(*args), interpret(paths_trace)(args))


def test_max_region_ops_bounds_horizontal_regions(paths_trace):
    from trace_lab.run.jit import Options
    from trace_lab.passes import PassContext
    from trace_lab.passes.fusion import fusion_pass

    fused = fusion_pass(paths_trace, PassContext(Options(fusion="horizontal", max_region_ops=2),
                                                 INDUCTOR_LIKE))
    # by hand (FIFO queue, a ready relu joins only while the region holds <= 2 ops):
    # relu0 pulls relu1, relu2 waits for its own region; the mms; then the same for the second relus.
    relu2, relu1 = ("relu", "relu"), ("relu",)
    assert ops_of(fused) == [relu2, relu1, "mm", "mm", "mm", relu2, relu1, "mm", "mm", "mm"]
    xs = [x8(seed=i) for i in range(4)]
    jf = trace_lab.jit(paths, fusion="horizontal", executor="eager", max_region_ops=2)
    torch.testing.assert_close(jf(*xs), paths(*xs))
    with pytest.raises(ValueError, match="max_region_ops"):
        Options(fusion="horizontal", max_region_ops=0)
