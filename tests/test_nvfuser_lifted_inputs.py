"""A segment that writes over inputs takes its 0-d inputs as [1]-shaped tensors with broadcast dims.

nvFuser's SegmentInplaceUpdate pass gives every output written over an input a kernel of its own when it meets a
broadcast op; Adam's per-parameter update broadcast its 0-d step count and lerp weight, so it ran as 4 kernels
(benchmarks/nvfuser_inplace_segments_probe.py). :func:`~trace_lab.executors.nvfuser_region.lifted_inputs` picks the
0-d inputs to hand over as ``t.view(1)`` instead, and the builder then needs no broadcast op for them. On the CPU
through the ``nvfuser_direct`` stand-in: which inputs are lifted, no broadcast built for them, Adam against eager.
A lifted input a ``copy_`` writes is returned fresh and copied back by the runner (``written_back``: an aliased
broadcast-only output costs a no-op segment, benchmarks/nvfuser_horizontal_probe.py).
"""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import trace_lab
from examples import workloads
from tests import nvfuser_mock
from tests.nvfuser_cpu import cpu_nvfuser
from tests.nvfuser_support import record_definitions
from trace_lab.executors.nvfuser_region import lifted_inputs, split_region


def _state(opt):
    return [t.detach().clone() for g in opt.param_groups for p in g["params"]
            for t in (p, *opt.state[p].values())]


@pytest.mark.parametrize("fusion", ["dataflow", "horizontal"])
def test_adam_updates_lift_their_0d_inputs_build_no_broadcast_and_match_eager(monkeypatch, fusion):
    """dataflow: one definition per parameter, shared by all four (its step count and two folded constants lifted);
    horizontal: the four updates in one definition, as bench.py's capped Adam regions hold ten."""
    cpu_nvfuser(monkeypatch)
    calls, broadcasts = record_definitions(monkeypatch), []
    real_bid = nvfuser_mock._Ops.broadcast_in_dim
    monkeypatch.setattr(nvfuser_mock._Ops, "broadcast_in_dim",
                        staticmethod(lambda *a: broadcasts.append(a) or real_bid(*a)))
    fn, _ = workloads.make_adam_step("cpu", "small", n_params=4)
    ref, _ = workloads.make_adam_step("cpu", "small", n_params=4)
    # (unbatched: batched, horizontal's four updates are one stacked definition, tests/test_nvfuser_batch.py)
    jfn = trace_lab.jit(fn, fusion=fusion, executor="nvfuser", batch_updates=False)
    for _ in range(3):
        jfn()
        ref()
    for got, want in zip(_state(fn.__self__), _state(ref.__self__), strict=True):
        torch.testing.assert_close(got, want)
    built = [d for d, hit in calls if not hit]
    lifted = 3 if fusion == "dataflow" else 4 + 2  # each step count, and the two folded constants once
    assert len(built) == 1 and built[0].lift[0] == 1 and len(built[0].lift[1]) == lifted, [d.lift for d in built]
    assert broadcasts == []  # the step count and lerp's weight and test meet the 1-D tensors as they are
    # each step count comes back as a fresh output the runner copies back, never as an output aliased to it
    d = built[0]
    steps = 1 if fusion == "dataflow" else 4
    assert len(d.back_into) == steps and set(d.back_into) <= set(d.lift[1]), (d.back_into, d.lift)
    assert d.back_from == list(range(d.n_visible, d.n_visible + steps))
    aliased = {id(dest) for _, dest in d.fd._aliases}
    assert aliased and not aliased & {id(d.fd._inputs[i]) for i in d.back_into}


def test_a_segment_that_writes_over_nothing_keeps_its_0d_inputs():
    gm = make_fx(lambda s, x: (x * s + 1,))(torch.empty((), device="meta"), torch.empty(8, device="meta"))
    steps, _ = split_region(gm)
    (seg,) = [s for kind, s in steps if kind == "fuse"]
    assert lifted_inputs(seg) == (0, ())


def test_a_0d_value_that_is_not_lifted_keeps_the_inputs_as_they_are():
    """A host 0-d tensor (``torch.ones(())``: a scalar to nvFuser, never lifted) would meet the lifted step count
    at another rank in the 0-d ``add``: no lifting."""
    def fn(s, x):
        s.copy_(s + torch.ones(()))
        return (x * s,)

    gm = make_fx(fn)(torch.empty((), device="meta"), torch.empty(8, device="meta"))
    steps, _ = split_region(gm)
    segs = [s for kind, s in steps if kind == "fuse"]
    assert segs and all(lifted_inputs(s) == (0, ()) for s in segs), [s.ops for s in segs]


def test_a_0d_output_of_a_lifted_segment_comes_back_0d(monkeypatch):
    """The segment writes over the 0-d ``s`` (so ``s`` is lifted) and also returns the 0-d ``s * 2``: computed at
    [1] inside the definition, it must reach the program as the 0-d tensor eager returns."""
    cpu_nvfuser(monkeypatch)
    calls = record_definitions(monkeypatch)

    def fn(s, x):
        s.copy_(s + 1)
        return x * s, s * 2

    s, x = torch.tensor(3.0), torch.randn(8)
    s_ref = s.clone()
    got = trace_lab.jit(fn, fusion="dataflow", executor="nvfuser")(s, x)
    want = fn(s_ref, x)
    assert [d.lift for d, _ in calls] == [(1, (0,))], [d.lift for d, _ in calls]
    torch.testing.assert_close(got, want)  # shapes too: the 0-d output stays 0-d
    torch.testing.assert_close(s, s_ref)


def test_a_0d_input_read_by_a_shape_op_is_not_lifted(monkeypatch):
    """``s.unsqueeze(0)``'s lowering expects the 0-d ``s`` it recorded (``broadcast_in_dim`` with no kept dims), so
    a segment that reads a 0-d input through such an op keeps it 0-d; the step still matches eager."""
    def fn(s, x):
        s.copy_(s + 1)
        return (x * s.unsqueeze(0),)

    gm = make_fx(fn)(torch.empty((), device="meta"), torch.empty(8, device="meta"))
    steps, _ = split_region(gm)
    segs = [s for kind, s in steps if kind == "fuse"]
    assert any(n.target == torch.ops.aten.unsqueeze.default for s in segs for n in s.ops), [s.ops for s in segs]
    assert all(lifted_inputs(s) == (0, ()) for s in segs), [lifted_inputs(s) for s in segs]

    cpu_nvfuser(monkeypatch)
    s, x = torch.tensor(3.0), torch.randn(8)
    s_ref = s.clone()
    torch.testing.assert_close(trace_lab.jit(fn, fusion="dataflow", executor="nvfuser")(s, x), fn(s_ref, x))
    torch.testing.assert_close(s, s_ref)


def test_an_exported_nvfuser_call_hands_a_lifted_input_over_as_the_definition_takes_it(monkeypatch):
    """export_repro(executor='nvfuser') writes the call trace_lab makes: a region that writes over its dying
    input lifts its 0-d input, so the exported ``run_nvfuser`` must view it as [1, 1] too. Run here through the
    stand-in (which refuses inputs of other sizes than defined), its definition put in place of the printed one."""
    import sys
    import types

    from trace_lab.run.jit import compiled_of, final_stage
    from trace_lab.run.repro import nvfuser_call_text

    cpu_nvfuser(monkeypatch)
    calls = record_definitions(monkeypatch)

    def fn(s, x, w):
        return (x @ w * s + 1).relu() @ w

    s, x, w = torch.tensor(2.0), torch.randn(8, 8), torch.randn(8, 8)
    jfn = trace_lab.jit(fn, fusion="dataflow", executor="nvfuser")
    torch.testing.assert_close(jfn(s, x, w), fn(s, x, w))
    (d, _), = calls
    assert d.lift == (2, (1,)) and d.places == [("in", 0, None)], (d.lift, d.places)
    compiled = compiled_of(jfn, final_stage(jfn, "forward", None, "test"))
    (region,) = compiled.region_programs
    text = nvfuser_call_text(compiled, region)
    fake = types.ModuleType("nvfuser_direct")
    fake.FusionDefinition, fake.DataType = nvfuser_mock.FusionDefinition, nvfuser_mock.DataType
    monkeypatch.setitem(sys.modules, "nvfuser_direct", fake)
    scope = {"nvfuser_fusion": lambda fd: fd.__dict__.update(d.fd.__dict__)}
    exec(text, scope)
    y = x @ w
    (got,) = scope["run_nvfuser"](y.clone(), s)
    torch.testing.assert_close(got, (y * s + 1).relu())


def _written_over(x_shape, s_shape, unrelated=False) -> int:
    """One result ``x * s`` written over ``x`` (s broadcast to x's shape where it has fewer dims), on the stand-in;
    ``unrelated``: a second, fresh output broadcasts an input of its own. Returns the stand-in's split count."""
    fd = nvfuser_mock.FusionDefinition()
    x = fd.define_tensor(x_shape, [x_shape[1], 1], torch.float32)
    s = fd.define_tensor(s_shape, [1] * len(s_shape), torch.float32)
    if len(s_shape) < len(x_shape):
        s = fd.ops.broadcast_in_dim(s, [x_shape[0], 1], [0])
    fd.add_output(fd.ops.mul(x, s), alias_input=x)
    inputs = [torch.ones(x_shape), torch.ones(s_shape)]
    if unrelated:
        z = fd.define_tensor([4], [1], torch.float32)
        fd.add_output(fd.ops.broadcast_in_dim(z, [4, 1], [0]))
        inputs.append(torch.ones(4))
    fd.execute(inputs)
    return fd.split_writes


def test_the_stand_in_counts_the_writes_nvfusers_inplace_pass_would_split():
    """nvFuser's SegmentInplaceUpdate pass (csrc/preseg_passes/segment_inplace_update.cpp) moves a result written
    over an input into a copy kernel of its own when the result or the input lies on a path through a broadcast
    op; the stand-in counts those writes (``split_writes``). A [4] scale broadcast to [4, 1] before it scales the
    [4, 8] input it is written over: split. The same scale defined [4, 1] (its size-1 dim a broadcast dim, no
    op): not split; nor by a broadcast on another output's path only."""
    assert _written_over([4, 8], [4]) == 1
    assert _written_over([4, 8], [4, 1]) == 0
    assert _written_over([4, 8], [4, 1], unrelated=True) == 0
