"""Identical independent updates of a segment run as one stacked definition (``batch_updates``,
trace_lab/executors/nvfuser_batch.py).

nvFuser runs each independent update of a horizontal region as a kernel of its own
(benchmarks/nvfuser_horizontal_probe.py); batched, a group of N updates is one definition over inputs stacked
to ``[N, ...]`` and one ``torch._foreach_copy_`` writes the results back. On the CPU through the ``nvfuser_direct``
stand-in: an optimizer over parameters of two shapes against eager, the groups it forms, predicted against
measured memory, and the segments the plan must refuse (each refusal is a case where batching would change the
result or the memory model). The GPU half is in tests/test_nvfuser_gpu.py.
"""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import trace_lab
from tests.nvfuser_cpu import cpu_nvfuser
from trace_lab.executors import nvfuser_batch
from trace_lab.executors.nvfuser_region import split_region


def _adam(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)
    opt = torch.optim.Adam(params, lr=1e-2, foreach=False)
    return opt


def _state(opt):
    return [t.detach().clone() for g in opt.param_groups for p in g["params"] for t in (p, *opt.state[p].values())]


SHAPES = [(4, 8), (16,), (4, 8), (16,), (4, 8)]


def _three_steps_against_eager(monkeypatch, seen, **options) -> list:
    """Adam over :data:`SHAPES` through the stand-in, horizontal nvFuser with ``options``: three steps checked
    against eager's (parameters, both moments, step counts); returns ``seen(runner)`` for each batched call."""
    cpu_nvfuser(monkeypatch)
    calls = []
    real_call = nvfuser_batch.BatchedRunner.__call__
    monkeypatch.setattr(nvfuser_batch.BatchedRunner, "__call__",
                        lambda self, ins: calls.append(seen(self)) or real_call(self, ins))
    opt, ref = _adam(SHAPES), _adam(SHAPES)
    jfn = trace_lab.jit(opt.step, fusion="horizontal", executor="nvfuser", **options)
    for _ in range(3):
        jfn()
        ref.step()
    for got, want in zip(_state(opt), _state(ref), strict=True):
        torch.testing.assert_close(got, want)
    return calls


@pytest.mark.parametrize("batch", [True, False])
def test_adam_over_two_shapes_batches_by_shape_and_matches_eager(monkeypatch, batch):
    """Five parameters of two shapes in one horizontal region: two groups (3 and 2 updates), each one definition;
    three steps equal eager's (parameters and both moments, and the step counts). Off: no batched runner."""
    groups = _three_steps_against_eager(monkeypatch, lambda runner: sorted(g.n for g in runner.plan.groups),
                                        batch_updates=batch)
    # (the first call also runs the program once more to check it)
    assert (len(groups) >= 3 and all(g == [2, 3] for g in groups)) if batch else groups == [], groups


def test_batched_updates_predict_their_memory_and_say_so(monkeypatch):
    """The stacks are the region's workspace: the predicted peak equals the measured one (the stand-in measures
    its own allocations exactly), and the compile notes name the batching."""
    cpu_nvfuser(monkeypatch)
    report = trace_lab.inspect(_adam(SHAPES).step, fusion="horizontal", executor="nvfuser", runs=1)
    assert report.ok
    assert report.predicted_peak() == report.measured_peak() > 0
    notes = report.compilation("forward", 0).all_notes()
    assert any("5 identical updates run as 2 batched definitions (batch_updates)" in n for n in notes), notes


def test_batched_adam_builds_no_broadcast_that_would_split_its_writes(monkeypatch):
    """nvFuser's SegmentInplaceUpdate pass moves a result written over its input into a copy kernel of its own,
    with a fresh intermediate of the stack's size, when its path crosses a broadcast op (the stand-in counts such
    writes: ``split_writes``). Batched Adam's step counts come as [N, 1] stacks whose size-1 dim nvFuser holds as a
    broadcast dim (``Segment.ones_broadcast``), so the bias corrections meet the [N, |S|] stacks without one: each
    group writes its parameters and both moments over their stacks, and none is split. (On the H200 at 1694aeb
    the parameters' write was split, a fifth stack where predict priced four.)"""
    runners = _three_steps_against_eager(monkeypatch, lambda runner: runner)
    fds = [d.fd for d in runners[-1].definitions]
    assert len(fds) == 2 and all(len(fd._aliases) == 3 for fd in fds), [len(fd._aliases) for fd in fds]
    assert [fd.split_writes for fd in fds] == [0, 0]


def _segment(fn, *shapes):
    gm = make_fx(fn)(*(torch.empty(s, device="meta") for s in shapes))
    steps, _ = split_region(gm)
    (seg,) = [s for kind, s in steps if kind == "fuse"]
    return seg


def _two_updates(a, b, x, y):
    a.copy_(a * 2 + x)
    b.copy_(b * 2 + y)
    return ()


def test_two_identical_updates_form_one_group_of_two():
    seg = _segment(_two_updates, (8,), (8,), (8,), (8,))
    plan = nvfuser_batch.batch_plan(seg)
    assert plan is not None and [g.n for g in plan.groups] == [2]
    (group,) = plan.groups
    # stacked inputs: a's and b's, x's and y's; the one write goes back into a and b
    at = {x.name: i for i, x in enumerate(seg.inputs)}
    assert [(kind, which) for kind, which, _ in group.inputs] == [
        ("stack", [at["a_1"], at["b_1"]]), ("stack", [at["x_1"], at["y_1"]])]
    assert group.outputs == [((2, 8), [at["a_1"], at["b_1"]])]
    assert [tuple(x.meta["val"].shape) for x in group.seg.inputs] == [(2, 8), (2, 8)]


def test_each_result_is_written_over_its_own_input_stack():
    """The one result of the two updates goes over the stack of a and b (the inputs it updates), so a call holds
    two stacks of two float32 [8] members (64 B each) where fresh results would make it three; the stack of x and
    y is only read."""
    seg = _segment(_two_updates, (8,), (8,), (8,), (8,))
    plan = nvfuser_batch.batch_plan(seg)
    (group,) = plan.groups
    assert group.seg.in_place == {group.seg.outputs[0]: group.seg.inputs[0]}
    values = [x.meta["val"] for x in seg.inputs]
    assert nvfuser_batch.stack_workspace(plan, values) == 2 * 64
    assert nvfuser_batch.stack_workspace(plan, values, write_over=False) == 3 * 64
    # two groups: the first group's results wait for the copy at the end, in its own stacks when written over
    seg = _segment(_two_shapes, (8,), (8,), (8,), (8,), (4, 8), (4, 8), (4, 8), (4, 8))
    plan = nvfuser_batch.batch_plan(seg)
    assert sorted(g.n for g in plan.groups) == [2, 2]
    values = [x.meta["val"] for x in seg.inputs]
    first, second = (2 * 8 * 4, 2 * 32 * 4) if plan.groups[0].seg.inputs[0].meta["val"].shape == (2, 8) else \
        (2 * 32 * 4, 2 * 8 * 4)
    assert nvfuser_batch.stack_workspace(plan, values) == max(2 * first, first + 2 * second)
    assert nvfuser_batch.stack_workspace(plan, values, write_over=False) == max(3 * first, first + 3 * second)


def _scaled_matrices(a, b, x, y, s):
    a.copy_(a * s + x)
    b.copy_(b * s + y)
    return ()


def test_members_of_any_rank_are_stacked_flat():
    """Two updates of [4, 8] matrices run over [2, 32] stacks (every group one two-dim pattern to nvFuser), the
    shared 0-d ``s`` as it is; each result goes back as [2, 4, 8] slices, written over the stack of a and b."""
    seg = _segment(_scaled_matrices, (4, 8), (4, 8), (4, 8), (4, 8), ())
    (group,) = nvfuser_batch.batch_plan(seg).groups
    at = {x.name: i for i, x in enumerate(seg.inputs)}
    shapes = {at["s_1"]: ()} | {i: (2, 32) for kind, which, _ in group.inputs if kind == "stack" for i in which}
    assert [tuple(x.meta["val"].shape) for x in group.seg.inputs] == [
        shapes[which[0] if kind == "stack" else which] for kind, which, _ in group.inputs]
    assert [view for _, _, view in group.inputs if view is not None] == [(2, 32), (2, 32)]
    assert group.outputs == [((2, 4, 8), [at["a_1"], at["b_1"]])]
    assert group.seg.in_place == {group.seg.outputs[0]: group.seg.inputs[[w for _, w, _ in group.inputs].index(
        [at["a_1"], at["b_1"]])]}


def test_channels_last_parameters_batch_and_keep_their_layout(monkeypatch):
    """Adam over four-dim parameters in channels_last (a vision model after ``.to(memory_format=...)``): torch.stack
    keeps their layout, so the runner makes each stack dense before the definition reads it flat; three steps
    equal eager's, and the parameters stay channels_last."""
    cpu_nvfuser(monkeypatch)

    def make():
        opt = _adam([(3, 4, 2, 2)] * 3, seed=2)
        for p in opt.param_groups[0]["params"]:
            p.data = p.data.to(memory_format=torch.channels_last)
            p.grad = p.grad.to(memory_format=torch.channels_last)
        return opt

    opt, ref = make(), make()
    jfn = trace_lab.jit(opt.step, fusion="horizontal", executor="nvfuser")
    for _ in range(3):
        jfn()
        ref.step()
    for got, want in zip(_state(opt), _state(ref), strict=True):
        torch.testing.assert_close(got, want)
    assert all(p.is_contiguous(memory_format=torch.channels_last) for p in opt.param_groups[0]["params"])
    assert any("batched definition" in n for r in jfn.compilations() for n in r.all_notes())


def _updates(ps, gs):
    for p, g in zip(ps, gs):
        p.mul_(0.9).add_(g, alpha=0.1)


def test_channels_last_stacks_are_made_dense_and_priced_as_any(monkeypatch):
    """Three updates of channels_last [3, 4, 2, 2] float32 tensors (192 B each): ``predict`` prices two stacks of
    576 B (the result written over the first), as for any layout; the runner hands the definition dense stacks
    (it reads them flat) and the results equal eager's. (The stand-in computes through torch and measures its own
    temporaries, not nvFuser's: the device compares the price with a measurement, in test_nvfuser_gpu.)"""
    cpu_nvfuser(monkeypatch)

    def make():
        g = torch.Generator().manual_seed(4)
        return [[torch.randn(3, 4, 2, 2, generator=g).to(memory_format=torch.channels_last) for _ in range(3)]
                for _ in range(2)]

    ps, gs = make()
    pred = trace_lab.predict(_updates, ps, gs, strategies=["horizontal"], executor="nvfuser", device="cpu")
    assert pred.peak("horizontal", "inference") == 2 * 3 * 192, str(pred)
    given = []
    real_stack = nvfuser_batch._dense_stack
    monkeypatch.setattr(nvfuser_batch, "_dense_stack", lambda members: given.append(real_stack(members)) or given[-1])
    trace_lab.jit(_updates, fusion="horizontal", executor="nvfuser")(ps, gs)
    assert given and all(t.is_contiguous() and t.shape == (3, 3, 4, 2, 2) for t in given), given
    want, grads = make()
    _updates(want, grads)
    for got, w in zip(ps, want, strict=True):
        torch.testing.assert_close(got, w)
        assert got.is_contiguous(memory_format=torch.channels_last)


def _two_shapes(a, b, x, y, c, d, u, v):
    a.copy_(a * 2 + x)
    b.copy_(b * 2 + y)
    c.copy_(c * 2 + u)
    d.copy_(d * 2 + v)
    return ()


@pytest.mark.parametrize("over", [True, False])
def test_adam_writes_its_results_over_the_stacks_with_donate_inplace_and_matches_eager(monkeypatch, over):
    """Adam's batched results of a parameter's shape (the parameter, both moments) are written over their own
    input stacks with ``donate_inplace`` (the runner hands the stack on), and none without. The step counts'
    ``[N, 1]`` stack is read broadcast over every element of the update, so its result is always fresh (written
    over, nvFuser splits the definition: three kernels and a fifth stack on the H200). Three steps equal eager's
    either way."""
    def kinds(runner):  # (place kind, member rank) of every result, per group
        return [(kind, len(shape) - 1) for g, d in zip(runner.plan.groups, runner.definitions)
                for (kind, _, _), (shape, _) in zip(d.places, g.outputs)]

    places = _three_steps_against_eager(monkeypatch, kinds, donate_inplace=over)
    assert places and all(len(p) == 2 * 4 for p in places), places  # two groups, four results each
    # per group of SHAPES' two ranks: parameter and moments (the group's rank), the step count (0-d)
    kind = "in" if over else "out"
    want = sorted([(kind, 1)] * 3 + [(kind, 2)] * 3 + [("out", 0)] * 2)
    assert all(sorted(p) == want for p in places), places


def _other_constants(a, b, x, y):
    a.copy_(a * 2 + x)
    b.copy_(b * 3 + y)
    return ()


def _visible_output(a, b, x, y):
    u, v = a * 2 + x, b * 2 + y
    a.copy_(u)
    b.copy_(v)
    return (u, v)


def _scaled(s, a, b):
    s.copy_(s + 1)
    a.copy_(a * s)
    b.copy_(b * s)
    return ()


def _reduction(a, b, x, y):
    a.copy_(a * x.sum(0, keepdim=True))
    b.copy_(b * y.sum(0, keepdim=True))
    return ()


def _other_shape(a, b, x, y):  # stacked, x's [2, 8] would not line up with a's [2, 4, 8]
    a.copy_(a * x)
    b.copy_(b * y)
    return ()


def _view(a, b, x, y):  # a view's shape argument would not hold for the stacked [2, 8]
    a.copy_(a * x.view(8))
    b.copy_(b * y.view(8))
    return ()


@pytest.mark.parametrize("fn,shapes", [
    (_other_constants, [(8,)] * 4),
    (_visible_output, [(8,)] * 4),
    (_reduction, [(8,)] * 4),
    (_view, [(8,)] * 4),
    (_other_shape, [(4, 8), (4, 8), (8,), (8,)]),
], ids=["no-two-alike", "visible-output", "reduction", "view", "two-shapes-in-an-update"])
def test_segments_batching_would_change_are_not_batched(fn, shapes):
    """No group of two (constants differ); values read after the segment (a slice would hold its stack alive);
    a reduction (another shape in the update), a view (not elementwise: its shape argument), an update over
    two shapes (stacked, they would broadcast against each other wrongly)."""
    assert nvfuser_batch.batch_plan(_segment(fn, *shapes)) is None


def test_an_input_one_update_writes_and_others_read_is_not_batched():
    """``s`` is written by its own update and read by two identical ones through the input itself (in program
    order they see the new value; batched, every read comes first)."""
    seg = _segment(_scaled, (), (8,), (8,))
    copy_s = seg.copies[0]
    s = copy_s.args[0]
    for n in seg.ops:  # (as traced they read the copy_, which joins all three into one update)
        if n.target is torch.ops.aten.mul.Tensor:
            n.args = (n.args[0], s)
    assert len(nvfuser_batch._components(seg)) == 3
    assert nvfuser_batch.batch_plan(seg) is None


def test_stacks_past_the_limit_are_not_batched(monkeypatch):
    """Two updates of 8 floats stack 2 x (a, x) inputs and 2 written values: 6 x 32 B = 192 B."""
    seg = _segment(_two_updates, (8,), (8,), (8,), (8,))
    monkeypatch.setattr(nvfuser_batch, "MAX_STACK_BYTES", 192)
    assert nvfuser_batch.batch_plan(seg) is not None
    monkeypatch.setattr(nvfuser_batch, "MAX_STACK_BYTES", 191)
    assert nvfuser_batch.batch_plan(seg) is None


def test_a_read_of_an_input_after_its_copy_is_not_batched():
    """An op after a ``copy_`` that reads the written input itself (not the ``copy_``) sees the new value in
    program order; batched, every read happens before every write."""
    def fn(a, b, x, y):
        a.copy_(a * 2 + x)
        b.copy_(b * 2 + y)
        return ()

    seg = _segment(fn, (8,), (8,), (8,), (8,))
    assert nvfuser_batch.batch_plan(seg) is not None
    graph = seg.ops[0].graph
    lates = []
    for copy in list(seg.copies):  # in each update: late = dest * value after the copy_, written into x
        dest, x = copy.args[0], copy.args[1].args[1]  # dest * 2 + x
        assert x in seg.inputs
        with graph.inserting_after(copy):
            late = graph.call_function(torch.ops.aten.mul.Tensor, (dest, copy.args[1]))  # (one update still)
        with graph.inserting_after(late):
            write = graph.call_function(torch.ops.aten.copy_.default, (x, late))
        late.meta["val"] = write.meta["val"] = dest.meta["val"]
        at = seg.ops.index(copy) + 1
        seg.ops[at:at] = [late, write]
        lates.append((late, copy))
    assert nvfuser_batch.batch_plan(seg) is None
    for late, copy in lates:  # reading the copy_ instead: the new value, as batched
        late.args = (copy, late.args[1])
    assert nvfuser_batch.batch_plan(seg) is not None


def test_a_shared_input_is_handed_over_as_it_is_and_the_result_matches_eager(monkeypatch):
    """Two updates that read one weight ``w`` (not stacked: each group reads it at its own shape) and a 0-d scale;
    ``w`` comes in strided (a column of a matrix) and the definition takes it dense."""
    cpu_nvfuser(monkeypatch)
    plans = []
    real_plan = nvfuser_batch.batch_plan
    monkeypatch.setattr("trace_lab.executors.nvfuser.batch_plan", lambda seg: plans.append(real_plan(seg)) or plans[-1])

    def step(a, b, w, s):
        a.mul_(w * s)
        b.mul_(w * s)

    def make():
        g = torch.Generator().manual_seed(1)
        return (torch.randn(8, generator=g), torch.randn(8, generator=g), torch.randn(8, 3, generator=g)[:, 1],
                torch.tensor(0.5))

    got, want = make(), make()
    jfn = trace_lab.jit(step, fusion="horizontal", executor="nvfuser")
    for _ in range(2):
        jfn(*got)
        step(*want)
    for x, y in zip(got, want, strict=True):
        torch.testing.assert_close(x, y)
    batched = [p for p in plans if p is not None]
    assert batched and [g.n for g in batched[0].groups] == [2]
    assert sorted(kind for kind, _, _ in batched[0].groups[0].inputs) == ["shared", "shared", "stack"]


def test_paths_that_update_no_input_are_not_batched(monkeypatch):
    """Notebook 01's shape: identical independent paths whose outputs are written over dying intermediates
    (donate_inplace) and that write no program input. They are not updates (the program reads their outputs);
    stacked, they would add their size again to the peak, so every segment runs unbatched, the outputs equal
    eager's, and the predicted peak is measured."""
    cpu_nvfuser(monkeypatch)
    plans = []
    real_plan = nvfuser_batch.batch_plan
    monkeypatch.setattr("trace_lab.executors.nvfuser.batch_plan", lambda seg: plans.append(real_plan(seg)) or plans[-1])

    def f(a, b, w):
        u, v = a @ w, b @ w
        return (u * 2 + 1, v * 2 + 1)

    args = [torch.randn(8, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    got = trace_lab.jit(f, fusion="horizontal", executor="nvfuser")(*args)
    for x, y in zip(got, f(*args), strict=True):
        torch.testing.assert_close(x, y)
    assert plans and all(p is None for p in plans), plans
    report = trace_lab.inspect(f, *args, fusion="horizontal", executor="nvfuser", runs=1)
    assert report.ok and report.predicted_peak() == report.measured_peak() > 0


def test_exporting_a_batched_region_names_the_switch():
    from types import SimpleNamespace

    from trace_lab.errors import TraceLabError
    from trace_lab.run.repro import nvfuser_call_text

    seg = _segment(_two_updates, (8,), (8,), (8,), (8,))
    runner = nvfuser_batch.BatchedRunner(nvfuser_batch.batch_plan(seg), [])
    program = SimpleNamespace(plan=[("fuse", (seg, runner), [])])
    compiled = SimpleNamespace(region_programs={"fusion0": program}, regions={})
    with pytest.raises(TraceLabError, match=r"fusion0 runs 2 updates batched into 1 stacked definition\(s\); not "
                                            r"written\. Export it with jit\(\.\.\., batch_updates=False\)"):
        nvfuser_call_text(compiled, "fusion0")


def test_auto_fusion_picks_horizontal_for_a_program_of_batched_updates(monkeypatch):
    """``fusion="auto"`` where it would pick dataflow (CUDA; here the CPU, through the stand-in, with the CPU's
    choice set to dataflow) picks horizontal for Adam.step, whose whole program is identical updates nvFuser
    batches, and says why; the step equals eager's. With ``batch_updates=False`` it stays dataflow, and a
    forward with an output (not only updates) stays dataflow too."""
    from trace_lab.run import jit as jit_module

    cpu_nvfuser(monkeypatch)
    monkeypatch.setitem(jit_module.AUTO_FUSION, "cpu", "dataflow")
    for batch, want in ((True, "horizontal"), (False, "dataflow")):
        opt, ref = _adam(SHAPES), _adam(SHAPES)
        jfn = trace_lab.jit(opt.step, executor="nvfuser", batch_updates=batch)
        for _ in range(2):
            jfn()
            ref.step()
        for got, expected in zip(_state(opt), _state(ref), strict=True):
            torch.testing.assert_close(got, expected)
        (record,) = jfn.compilations()
        assert record.fusion == want, record.reasons
        if batch:
            assert "the program is 5 identical independent updates of its inputs" in record.reasons[1], record.reasons
            assert "as 2 batched definitions" in record.reasons[1], record.reasons
            # what the reason promised is what compiling did
            assert any("5 identical updates run as 2 batched definitions" in n for n in record.all_notes())

    def f(a, b, x, y):
        a.copy_(a * 2 + x)
        b.copy_(b * 2 + y)
        return a + b

    args = [torch.randn(8) for _ in range(4)]
    jfn = trace_lab.jit(f, executor="nvfuser")
    jfn(*args)
    assert [r.fusion for r in jfn.compilations()] == ["dataflow"]
