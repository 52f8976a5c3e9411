"""nvFuser regions free and overwrite their dying inputs (``donate_inputs``, ``donate_inplace``), on the CPU.

Planning: :func:`~trace_lab.executors.nvfuser_region.plan_in_place` pairs a segment's output with an input it may
write over only where every op is elementwise in flat order at that input's size, the input dies in the segment
and the two have one dtype and a dense layout; the cases below say by hand which pairs are allowed.
A region program handed its inputs in a list (``RegionProgram.boxed``) drops each after its last read, so a
later step's allocation comes after that input is gone. End to end, the executor runs through the
``nvfuser_direct`` stand-in (tests/nvfuser_cpu.py): outputs and gradients against eager PyTorch, the regions'
outputs in their dying inputs' storage, and the measured peak equal to the predicted one.
tests/test_nvfuser_gpu.py runs the same on real nvFuser.
"""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import trace_lab
from examples.llama import MLP, LlamaStack
from fusion_support import assert_report_peaks_match
from trace_lab.executors.nvfuser_region import (RegionProgram, build_definition, output_places, plan_in_place,
                                                split_region)
from trace_lab.runtime.call_memory import measure_workspace

from tests import nvfuser_mock
from trace_lab.executors.nvfuser_ops import METADATA_OPS
from tests.nvfuser_cpu import cpu_nvfuser


def _region(fn, *shapes, dtype=torch.float32):
    """(GraphModule, its split steps) of ``fn`` traced on meta tensors (every op fusible, as on a GPU)."""
    gm = make_fx(fn)(*[torch.empty(s, dtype=dtype, device="meta") for s in shapes])
    return gm, split_region(gm)[0]


def _pairs(gm, steps, writable=(0,)):
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    written = plan_in_place(gm, steps, {places[i] for i in writable})
    pairs = {o.name: x.name for kind, seg in steps if kind == "fuse" for o, x in seg.in_place.items()}
    return pairs, {places.index(x) for x in written}


def test_an_elementwise_segment_writes_its_output_over_a_dying_input():
    gm, steps = _region(lambda a, b: (torch.relu(a * 2 + b),), (8, 16), (8, 16))
    pairs, written = _pairs(gm, steps)
    assert list(pairs.values()) == ["a_1"] and written == {0}
    gm, steps = _region(lambda a, b: (torch.relu(a * 2 + b),), (8, 16), (8, 16))
    assert _pairs(gm, steps, writable=())[0] == {}  # nothing handed over: nothing written


def test_a_reduction_a_permute_another_dtype_or_a_later_read_keeps_the_output_fresh():
    cases = {
        "reduction": (lambda a: (a * a.sum(-1, keepdim=True),), [(8, 16)]),
        "permute": (lambda a: (a.t() * 2,), [(16, 16)]),
        "dtype": (lambda a: ((a * 2).to(torch.float64),), [(8, 16)]),
        "read later": (lambda a, w: (torch.mm(torch.relu(a), w) + a.sum(),), [(16, 16), (16, 16)]),
    }
    for name, (fn, shapes) in cases.items():
        gm, steps = _region(fn, *shapes)
        assert _pairs(gm, steps) == ({}, set()), name


def _swiglu_grads(g, a, b, w):
    """SwiGLU's backward as a region hands it on: the gradients of both branches, their 2-D views and transposes
    for the weight-gradient matmuls, and a weight's transpose (views that only pass values out)."""
    s = torch.sigmoid(a)
    db = g * a * s
    da = g * b * s * (1 + a * (1 - s))
    return w.t(), db.view(64, 16), db.view(64, 16).t(), da.view(64, 16), da.view(64, 16).t()


def test_edge_views_move_after_the_segment_where_that_lets_it_write_in_place():
    shapes = [(4, 16, 16), (4, 16, 16), (4, 16, 16), (16, 8)]
    gm, steps = _region(_swiglu_grads, *shapes)
    pairs, written = _pairs(gm, steps, writable=(0, 1, 2))
    assert len(pairs) == 2 and len(written) == 2 and written <= {0, 1, 2}, pairs
    kinds = [kind for kind, _ in steps]
    assert kinds[0] == "fuse" and set(kinds[1:]) == {"torch"}, kinds  # the views, after the segment
    assert all(n.target in METADATA_OPS for _, n in steps[1:])
    assert not any(n.target in METADATA_OPS and n.target is not torch.ops.aten.view.default
                   for n in steps[0][1].ops)  # no permute left in the segment

    gm, steps = _region(_swiglu_grads, *shapes)
    assert _pairs(gm, steps, writable=()) == ({}, set())  # nothing handed over: nothing written over
    # each gradient leaves as a 2-D view and that view's transpose, so those views are torch steps whatever is
    # handed over (the segment writes each gradient once); so is the weight's transpose, a view of an input
    kinds = [kind for kind, _ in steps]
    assert kinds[0] == "fuse" and set(kinds[1:]) == {"torch"}, kinds
    assert all(n.target in METADATA_OPS for _, n in steps[1:])
    assert [n.target for _, n in steps[1:]].count(torch.ops.aten.t.default) == 3
    assert any(n.target is torch.ops.aten.t.default and n.args[0].op == "placeholder" for _, n in steps[1:])
    assert len(steps[0][1].outputs) == 2 and not any(n.target in METADATA_OPS for n in steps[0][1].ops)

    def a_view_passed_out(g, a, b, w):
        return (*_swiglu_grads(g, a, b, w), a.view(64, 16))

    gm, steps = _region(a_view_passed_out, *shapes)
    pairs, written = _pairs(gm, steps, writable=(1,))
    assert written == set(), pairs  # ``a`` is read after the segment (its view goes out): never written over


def _transposed_then_read(x, w):
    """``x.t()`` reaches a matmul, so it is a torch step; the segment after it reads both ``x`` and that view."""
    v = x.t()
    m = v @ w
    return (x + v * 2 + m,)


def _transposed_not_read(x, w):
    m = x.t() @ w
    return (x * 2 + m,)


def test_a_dying_input_the_segment_also_reads_through_a_view_is_not_written_over():
    """Writing flat element i over ``x`` while the segment reads ``x.t()`` (element i of it is another element of
    ``x``) would read values already written: no pair. Without the view read the same input is written over."""
    gm, steps = _region(_transposed_then_read, (16, 16), (16, 16))
    assert [kind for kind, _ in steps] == ["torch", "torch", "fuse"] and steps[0][1].target is torch.ops.aten.t.default
    assert _pairs(gm, steps, writable=(0,)) == ({}, set())
    gm, steps = _region(_transposed_not_read, (16, 16), (16, 16))
    assert _pairs(gm, steps, writable=(0,))[1] == {0}


def test_an_input_the_segment_also_reads_through_a_slice_is_not_written_over():
    """``x - x[:, 0:1]``: the slice is a torch step (no nvFuser lowering) whose result views ``x``; writing the
    difference over ``x`` would change column 0 while other elements still read it. Another input's slice: written."""
    gm, steps = _region(lambda x: (x - x[:, 0:1],), (16, 16))
    assert [kind for kind, _ in steps] == ["torch", "fuse"] and steps[0][1].target is torch.ops.aten.slice.Tensor
    assert _pairs(gm, steps, writable=(0,)) == ({}, set())
    gm, steps = _region(lambda x, y: (x - y[:, 0:1],), (16, 16), (16, 16))
    assert _pairs(gm, steps, writable=(0,))[1] == {0}


def test_an_input_whose_view_the_region_returns_is_not_written_over():
    """The region returns ``x.t()`` (a torch step before the segment): writing over ``x`` would change it."""
    def fn(x, w):
        v = x.t()
        m = v @ w
        return (x * 2 + m, v)

    gm, steps = _region(fn, (16, 16), (16, 16))
    assert [kind for kind, _ in steps] == ["torch", "torch", "fuse"]
    assert _pairs(gm, steps, writable=(0,)) == ({}, set())
    gm, steps = _region(_transposed_not_read, (16, 16), (16, 16))  # the view not returned: written over
    assert _pairs(gm, steps, writable=(0,))[1] == {0}


def test_a_view_of_an_input_passed_out_stays_a_view_of_it():
    """A segment's view of an input that no op of the segment reads is a torch step after it: the region hands out
    a view of the input in eager's layout, not nvFuser's copy in its own layout (a region downstream, compiled for
    the recorded layout, would otherwise run op by op)."""
    def fn(a, b):
        return torch.relu(a) + b, a.permute(1, 0).expand(16, 8)

    gm, steps = _region(fn, (8, 16), (8, 16))
    assert [kind for kind, _ in steps] == ["fuse", "torch", "torch"]
    assert [n.target for _, n in steps[1:]] == [torch.ops.aten.permute.default, torch.ops.aten.expand.default]
    runners = {id(s): (lambda ins, fd=build_definition(s, nvfuser_mock.module): fd.execute(ins))
               for kind, s in steps if kind == "fuse"}
    program = RegionProgram(gm, steps, runners, multi=True)
    for _ in range(2):  # the checked first call, then the folded views
        a, b = torch.randn(8, 16), torch.randn(8, 16)
        got = program(a, b)
        want = fn(a, b)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)
        assert got[1].data_ptr() == a.data_ptr() and got[1].stride() == want[1].stride()


def test_a_segment_writing_two_outputs_over_two_inputs_matches_eager():
    """Each written output reads the other's input: the definition reads before it writes (as nvFuser does), and
    the region's steps, the views after the segment included, give eager's results."""
    shapes = [(4, 16, 16), (4, 16, 16), (4, 16, 16), (16, 8)]
    gm, steps = _region(_swiglu_grads, *shapes)
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    plan_in_place(gm, steps, {places[i] for i in (0, 1, 2)})
    torch.manual_seed(0)
    args = [torch.randn(s) for s in shapes]
    expected = _swiglu_grads(*args)
    env = dict(zip(places, [a.clone() for a in args]))
    written = set()
    for kind, item in steps:
        if kind == "torch":
            env[item] = item.target(*[env[a] if isinstance(a, torch.fx.Node) else a for a in item.args])
            continue
        ins = [env[x] for x in item.inputs]
        fresh = build_definition(item, nvfuser_mock.module).execute(ins)
        for o, (where, k, shape) in zip(item.outputs, output_places(item)[1]):
            env[o] = (ins[k] if shape is None else ins[k].view(shape)) if where == "in" else fresh[k]
            if where == "in":
                written.add(ins[k].data_ptr())
    assert len(written) == 2
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    results = [env[n] for n in out_node.args[0]]
    for got, want in zip(results, expected, strict=True):
        torch.testing.assert_close(got, want)
    assert {results[1].data_ptr(), results[3].data_ptr()} == written  # both gradients in dying inputs' storage


def test_an_output_of_another_shape_is_written_in_flat_order_and_seen_in_its_own_shape():
    gm, steps = _region(lambda a: ((a * 2).view(128),), (8, 16))
    pairs, written = _pairs(gm, steps)
    assert written == {0} and len(pairs) == 1
    seg = next(s for kind, s in steps if kind == "fuse")
    assert output_places(seg) == (0, [("in", 0, (128,))])
    assert output_places(seg, in_place=False) == (1, [("out", 0, None)])
    a = torch.randn(8, 16)
    expected = (a * 2).view(128)
    fd = build_definition(seg, nvfuser_mock.module)
    assert fd.execute([a]) == []  # the aliased output is not returned: it is in ``a`` now
    torch.testing.assert_close(a.view(128), expected)


def test_a_boxed_region_drops_an_input_after_its_last_read():
    """``a`` (64 KiB) is read by the first step only; the region's peak comes later (the product and the output,
    256 KiB each). Handed over, ``a`` is gone by then: the signed workspace is 64 KiB lower than when the caller
    keeps it."""
    def fn(a, w):
        b = torch.relu(a) * 2
        return (torch.mm(b, w) + 1,)

    gm, steps = _region(fn, (128, 128), (128, 512))
    runners = {id(s): (lambda ins, fd=build_definition(s, nvfuser_mock.module): fd.execute(ins))
               for kind, s in steps if kind == "fuse"}
    program = RegionProgram(gm, steps, runners, multi=True)
    vals = [torch.empty(128, 128), torch.empty(128, 512)]
    kept, _, _ = measure_workspace(program, vals, rounding=1)
    handed, _, _ = measure_workspace(program, vals, rounding=1, donate=(0,))
    assert kept - handed == 128 * 128 * 4, (kept, handed)
    args = [torch.randn(128, 128), torch.randn(128, 512)]
    expected = fn(*args)
    got = program.boxed(list(args))
    torch.testing.assert_close(got[0], expected[0])


def test_nvfuser_regions_write_over_dying_inputs_match_eager_and_measure_as_predicted(monkeypatch):
    cpu_nvfuser(monkeypatch)
    torch.manual_seed(0)
    model = MLP(64, 128)  # a SwiGLU feed-forward
    x = torch.randn(4, 32, 64, requires_grad=True)
    reports = {}
    for in_place in (True, False):
        reports[in_place] = r = trace_lab.inspect(model, x, fusion="dataflow", executor="nvfuser", runs=1,
                                                  donate_inplace=in_place)
        assert r.ok, r.comparison
        assert r.comparison["checked"]["grads"] == 4
        assert_report_peaks_match(r)
    over = {r.name: r for r in reports[True].traces("backward")[-1].compiled_regions.values()
            if r.details.get("in_place_over")}
    assert over, "no backward region wrote an output over a dying input"
    for r in over.values():  # each written-over position holds an output now, and was handed over
        assert set(r.details["in_place_over"]) <= set(r.donated)
        assert {a[1] for a in r.aliases if a and a[0] == "input"} >= set(r.details["in_place_over"]), r
    backward = reports[True].traces("backward")[-1]
    assert " over " in str(backward)  # the trace says which output went over which input
    assert not [r for r in reports[False].traces("backward")[-1].compiled_regions.values()
                if r.details.get("in_place_over")]


def test_llama_layers_with_donation_match_eager_and_measure_as_predicted(monkeypatch):

    cpu_nvfuser(monkeypatch)
    torch.manual_seed(0)
    model = LlamaStack(layers=3, dim=64, heads=2)
    x = torch.randn(2, 16, 64, requires_grad=True)
    for donate in (True, False):
        r = trace_lab.inspect(model, x, fusion="layers", executor="nvfuser", runs=1, donate_inputs=donate)
        assert r.ok, r.comparison
        assert_report_peaks_match(r)
        donating = [g for g in r.traces("backward")[-1].compiled_regions.values() if g.donated]
        assert bool(donating) is donate
        # the program drops its names of the handed-over inputs and calls the region's boxed entry with the list
        lines = r.compilation("backward", 0).compiled.source.splitlines()
        handed = [i for i, ln in enumerate(lines) if ln.strip().startswith("_d = [")]
        assert bool(handed) is donate, "\n".join(lines)
        for i in handed:
            assert lines[i + 1].strip().startswith("del ") and lines[i + 2].rstrip().endswith("(_d)"), lines[i:i + 3]


def test_a_refused_alias_leaves_fresh_outputs_not_a_torch_fallback(monkeypatch):
    """Where nvFuser refuses an output written over an input, the segment is built again with fresh outputs (not
    run through torch), the notes say so, and the program still matches eager and measures as predicted."""
    cpu_nvfuser(monkeypatch)
    plain = nvfuser_mock.FusionDefinition.add_output

    def refuse_aliases(self, v, alias_input=None):
        if alias_input is not None:
            raise ValueError("alias refused by the stand-in")
        return plain(self, v)

    monkeypatch.setattr(nvfuser_mock.FusionDefinition, "add_output", refuse_aliases)
    torch.manual_seed(0)
    r = trace_lab.inspect(MLP(64, 128), torch.randn(4, 32, 64, requires_grad=True), fusion="dataflow",
                          executor="nvfuser", runs=1)
    assert r.ok, r.comparison
    assert_report_peaks_match(r)
    compiled = r.compilation("backward", 0).compiled
    assert not [g for g in compiled.regions.values() if g.details.get("in_place_over")]
    assert any("refused" in n and "fresh buffers" in n for n in compiled.notes), compiled.notes
    assert not [n for n in compiled.notes if "runs through torch" in n], compiled.notes


def test_in_place_writing_leaves_the_first_layers_covers_in_place(monkeypatch):
    """The first layer's backward (its input needs no gradient) runs its repeats' region programs whether or not
    their segments write over inputs: a cover is refused only for an input the covering code really writes
    (``NvFuserExecutor._written_over``), and these backward regions (matmuls, reductions) write over none."""
    cpu_nvfuser(monkeypatch)
    covered = {}
    for in_place in (True, False):
        torch.manual_seed(0)
        r = trace_lab.inspect(LlamaStack(layers=3, dim=32, heads=4), torch.randn(4, 16, 32), fusion="layers",
                              executor="nvfuser", runs=1, cover_regions=True, donate_inplace=in_place)
        assert r.ok, r.comparison
        assert_report_peaks_match(r)
        regions = list(r.compilation("backward", 0).compiled.regions.values())
        covered[in_place] = [(g.name, g.details.get("runs_code_of")) for g in regions if g.details.get("runs_code_of")]
        n = len(covered[in_place])
        assert n >= 1 and [name for name, _ in covered[in_place]] == [g.name for g in regions][-n:], covered
    assert covered[True] == covered[False], covered
