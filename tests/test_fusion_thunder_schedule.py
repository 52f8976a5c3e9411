"""``fusion="horizontal"`` reproduces the trace Thunder itself printed for #1337's function.

The expected structure is transcribed by hand from Thunder issue #1337 (comment by
kiya00, "the trace w/ horizontal merge"), for ``memory_peak_efficient_func`` with ten
paths of f32[256, 256]::

    [t2, t8, ..., t56] = nvFusion0(t0, t_0_1, ..., t_0_9)     # ten relus (gt + where)
    t3 = torch.matmul(t2, t2); del t2                          # ... ten of these, path order
    [t5, t11, ..., t59] = nvFusion1(t3, t9, ..., t57)          # ten relus
    del t3, t9, ..., t57
    t6 = torch.matmul(t5, a); del t5
    t12 = torch.matmul(t11, t6); del t11, t6                   # ... chain of ten with ``a``
    return t60

Thunder's relu is ``prims.gt`` + ``prims.where``; ours is one ``aten.relu``. Dynamo
orders our inputs ``t0s_0, a, t0s_1, ...``; they are matched by name, not position.
"""
from __future__ import annotations

import torch

import trace_lab
from examples.workloads import get
from fusion_support import SCALAR_SLACK
from trace_lab.ir.trace import is_getitem

PATHS = 10
Q = 256 * 256 * 4  # one f32[256, 256]: 0.25 MiB


def test_horizontal_reproduces_thunders_printed_trace_and_its_peak():
    """Peak above inputs of the thread's trace, worked out by hand (Q = 0.25 MiB, the
    eleven inputs are held by the caller and never counted):

    1. nvFusion0 writes ten relu outputs: live 10 Q (high water 10 Q = 2.50 MiB).
    2. matmul k allocates its result while all ten live values are held: high water
       11 Q = 2.75 MiB; ``del`` of its relu input brings live back to 10 Q. After the
       ten matmuls: ten matmul results live, 10 Q.
    3. nvFusion1 reads the ten matmul results and writes ten relu outputs: both sets
       are live during the call: high water 20 Q = 5.00 MiB; then ``del`` of the ten
       inputs: live 10 Q.
    4. chain matmul 0: 10 Q + 1 Q = 11 Q, ``del t5``: 10 Q; matmul k > 0 frees two
       values and allocates one, so the high water falls from 11 Q by one Q a step.

    Peak above inputs = 20 Q = 5.00 MiB, at nvFusion1.
    """
    fn, (t0s, a) = get("memory_peak").make("cpu", "small")
    # Thunder's regions write fresh outputs: no in-place donation, so the schedule is the thread's
    jfn = trace_lab.jit(fn, fusion="horizontal", executor="inductor", donate_inplace=False)
    jfn(t0s, a)  # compile first: a call that compiles Inductor regions is not measured on CPU (jit.measuring)
    with jfn.measuring() as measurements:
        out = jfn(t0s, a)
    eager_fn, (eager_t0s, eager_a) = get("memory_peak").make("cpu", "small")
    torch.testing.assert_close(out, eager_fn(eager_t0s, eager_a), rtol=1e-4, atol=1e-5)

    trace = trace_lab.last_traces(jfn)[-1]
    by_name = {trace.name(p): p for p in trace.inputs}
    paths = [by_name[f"t0s_{i}"] for i in range(PATHS)]
    a_in = by_name["a"]
    ops = trace.ops
    regions = [n for n in ops if n.op == "call_module"]
    assert len(regions) == 2
    assert len(ops) == 2 + 2 * PATHS

    def outputs(region):  # region outputs in order, through their getitem users
        got = sorted((u for u in region.users if is_getitem(u)), key=lambda g: g.args[1])
        assert [g.args[1] for g in got] == list(range(PATHS))
        return got

    def inner_ops(region):
        sub = trace.gm.get_submodule(region.target)
        return [m for m in sub.graph.nodes if m.op == "call_function"]

    def is_relu(m):
        return m.target is torch.ops.aten.relu.default

    def is_mm(n):
        return n.op == "call_function" and n.target is torch.ops.aten.mm.default

    live = {ln.node: ln for ln in trace.liveness().lines}

    # nvFusion0(t0, t_0_1, ..., t_0_9) -> ten relus, output k = relu(input k)
    f0 = ops[0]
    assert f0 is regions[0]
    assert list(f0.args) == paths
    assert len(inner_ops(f0)) == PATHS and all(is_relu(m) for m in inner_ops(f0))
    sub0 = trace.gm.get_submodule(f0.target)
    phs0 = [m for m in sub0.graph.nodes if m.op == "placeholder"]
    ret0 = next(m for m in sub0.graph.nodes if m.op == "output").args[0]
    assert [r.args[0] for r in ret0] == phs0
    r1 = outputs(f0)

    # t3 = matmul(t2, t2); del t2  (path order)
    mms = ops[1:1 + PATHS]
    for k, mm in enumerate(mms):
        assert is_mm(mm) and list(mm.args) == [r1[k], r1[k]], k
        assert live[mm].dead_nodes == [r1[k]], k

    # nvFusion1(t3, t9, ..., t57) -> ten relus; del t3, t9, ..., t57
    f1 = ops[1 + PATHS]
    assert f1 is regions[1]
    assert list(f1.args) == mms
    assert len(inner_ops(f1)) == PATHS and all(is_relu(m) for m in inner_ops(f1))
    assert set(live[f1].dead_nodes) == set(mms)
    r2 = outputs(f1)

    # t6 = matmul(t5, a); t12 = matmul(t11, t6); ...
    prev = a_in
    for k, mm in enumerate(ops[2 + PATHS:]):
        assert is_mm(mm) and list(mm.args) == [r2[k], prev], k
        prev = mm
    assert trace.output_node.args[0] == (prev,)

    liveness = trace.liveness()
    assert liveness.peak_above_inputs_bytes == 20 * Q  # 5.00 MiB, worked out above
    assert liveness.peak_line.node is f1
    (m,) = measurements
    assert m.predicted_peak_above_inputs == 20 * Q
    assert 0 <= m.measured_peak_above_inputs - m.predicted_peak_above_inputs <= SCALAR_SLACK, m
