"""One memory model: the scheduler prices an order of units as the liveness model prices the
Trace built from it, because both are made of the same primitives (trace_lab.analysis.buffers).

Hand-made programs where the two models used to disagree: a backward whose handed-over
inputs share a storage group or are never read (released with the argument list at the
first line), and a collective whose input is read until its wait. Every valid order of
their ops is priced both ways; the order as written is also worked out by hand here.
"""
from __future__ import annotations

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

from fusion_support import StubExecutor
from trace_lab.analysis.buffers import Buffers, released_at_first_line
from trace_lab.passes.fusion import STRATEGIES, plan_units
from trace_lab.passes.partition import OpGraph, Unit
from trace_lab.passes.regions import build_trace
from trace_lab.passes.schedule import MemoryModel
from trace_lab.ir.trace import Trace

aten = torch.ops.aten
C10D = torch.ops._c10d_functional
N = 64 * 4  # bytes of an f32[64]
INDUCTOR_LIKE = StubExecutor()  # Inductor's fusibility table; regions keep inner values inside


class Program:
    """A hand-built fx program whose values carry fake tensors."""

    def __init__(self):
        self.g, self.fake = fx.Graph(), FakeTensorMode()

    def arg(self, name, *shape):
        node = self.g.placeholder(name)
        with self.fake:
            node.meta["val"] = torch.empty(*shape)
        return node

    def call(self, target, *args):
        node = self.g.call_function(target, args)
        with self.fake:
            node.meta["val"] = target(*fx.node.map_arg(args, lambda a: a.meta["val"]))
        return node

    def done(self, outputs, kind="inference", owned=None) -> Trace:
        self.g.output(tuple(outputs))
        return Trace(fx.GraphModule(torch.nn.Module(), self.g), kind, owned_inputs=owned)


def handed_over_backward() -> Trace:
    """g: an incoming gradient; s1, s2: two saved views of one forward value (one storage group);
    u: a saved value nothing reads (4 KiB); w: held by the caller."""
    p = Program()
    g, s1, s2, u, w = p.arg("g", 64), p.arg("s1", 64), p.arg("s2", 64), p.arg("u", 1024), p.arg("w", 64)
    a = p.call(aten.mul.Tensor, g, s1)
    b = p.call(aten.relu.default, s2)
    c = p.call(aten.add.Tensor, a, b)
    col = p.call(aten.view.default, c, [64, 1])
    row = p.call(aten.view.default, c, [1, 64])
    big = p.call(aten.mul.Tensor, col, row)  # f32[64, 64]: 16 KiB
    d = p.call(aten.neg.default, w)
    del u
    return p.done([big, d], "backward", owned={0: "tangent 0", 1: "a", 2: "a", 3: "b"})


def collective_then_wait() -> Trace:
    """relu's output goes to an all_reduce; independent ops (a 4 KiB temporary) run before the wait."""
    p = Program()
    x, v = p.arg("x", 64), p.arg("v", 1024)
    y = p.call(aten.relu.default, x)
    reduced = p.call(C10D.all_reduce.default, y, "sum", "0")
    z = p.call(aten.neg.default, v)
    total = p.call(aten.sum.default, z)  # f32[]: 4 B
    waited = p.call(C10D.wait_tensor.default, reduced)
    return p.done([p.call(aten.add.Tensor, waited, total)])


def all_orders(graph: OpGraph):
    """Every order of the trace's ops that respects its edges (small programs only)."""
    def extend(done, left):
        if not left:
            yield list(done)
            return
        for n in left:
            if all(p in done for p in graph.preds[n]):
                yield from extend(done + [n], [m for m in left if m is not n])
    yield from extend([], list(graph.ops))


def predicted_both_ways(trace, units, materialized=False):
    built = build_trace(trace, units, "order")
    model = MemoryModel(trace, OpGraph(trace, INDUCTOR_LIKE.can_fuse), materialized)
    return model.peak(units), built.liveness(materialized).peak_above_inputs_bytes


def test_handed_over_inputs_by_hand():
    trace = handed_over_backward()
    buffers = Buffers(trace)
    # g, the group of s1 and s2 (one buffer), u and w: 4 buffers at entry
    assert buffers.entry_bytes == N + N + 4096 + N and len(buffers.owned) == 3
    assert [n.name for n in released_at_first_line(trace)] == ["u"]
    live = trace.liveness(False)
    # line a = g * s1: entry + N, then g dies and u is released with the argument list: s1/s2's group,
    # w and a are live (3 N). b = relu(s2): + N, the group dies (3 N). c = a + b: + N, a and b die (2 N:
    # c and w). big = col * row adds 16 KiB on top of those 2 N: 16896 B, 12032 B above the 4864 B entry.
    assert [ln.live_after for ln in live.lines][:3] == [3 * N, 3 * N, 2 * N]
    assert live.peak_bytes == 2 * N + 64 * 64 * 4 and live.peak_above_inputs_bytes == 2 * N + 16384 - 4864
    singles = [Unit((n,), False) for n in trace.ops]
    assert predicted_both_ways(trace, singles) == (12032, 12032)


def test_collective_input_is_read_until_its_wait_by_hand():
    trace = collective_then_wait()
    singles = [Unit((n,), False) for n in trace.ops]
    # while the sum runs: y (read by the all_reduce until its wait), the reduced buffer, z and the sum
    assert predicted_both_ways(trace, singles) == (N + N + 4096 + 4, N + N + 4096 + 4)


def test_every_order_is_priced_the_same_both_ways():
    for trace in (handed_over_backward(), collective_then_wait()):
        graph = OpGraph(trace, INDUCTOR_LIKE.can_fuse)
        peaks = set()
        for order in all_orders(graph):
            units = [Unit((n,), False) for n in order]
            model, built = predicted_both_ways(trace, units)
            assert model == built, ([n.name for n in order], model, built)
            peaks.add(built)
        assert len(peaks) > 1  # the orders differ in peak: the comparison is not between constants


def test_every_strategy_is_priced_the_same_both_ways():
    for trace in (handed_over_backward(), collective_then_wait()):
        for executor in (INDUCTOR_LIKE, StubExecutor(materializes_regions=True)):
            for strategy in STRATEGIES:
                units = plan_units(trace, strategy, executor.can_fuse, executor.materializes_regions)
                model, built = predicted_both_ways(trace, units, executor.materializes_regions)
                assert model == built, (strategy, executor.materializes_regions, model, built)
