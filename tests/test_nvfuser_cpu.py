"""nvFuser executor pieces that need no GPU: the op table, the splitter, errors, auto."""
from __future__ import annotations

import pytest
import torch

from trace_lab.errors import MissingDependencyError
from trace_lab.executors import get_executor, resolve_executor
from trace_lab.executors import nvfuser_import
from trace_lab.executors.nvfuser_ops import FUSIBLE, LATE_ENTRIES, fusible_reason
from trace_lab.executors.nvfuser_region import segment_signature, split_region

from tests.nvfuser_support import fake_cuda_graph

aten = torch.ops.aten


def test_every_table_entry_is_a_real_overload():
    for op in FUSIBLE:
        assert isinstance(op, torch._ops.OpOverload), op
        assert op.namespace in ("aten", "prims"), op
        assert op._schema.name.split("::")[1] == op._opname, op
    for name in LATE_ENTRIES:
        ns, opname, overload = name.split(".")
        assert ns == "prims" and overload == "default"


def _block(x, w, b):
    h = torch.nn.functional.layer_norm(x, (x.shape[-1],), b, b)
    y = torch.softmax(h @ w, dim=-1)
    return torch.nn.functional.gelu(y * 2 + 1).sum(-1)


def test_can_fuse_agrees_with_the_table():
    gm = fake_cuda_graph(_block, (4, 8), (8, 8), (8,))
    seen = set()
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        seen.add(n.target)
        assert (fusible_reason(n) is None) == (n.target in FUSIBLE), (n.target, fusible_reason(n))
    assert aten.mm.default in seen and aten.mm.default not in FUSIBLE
    mm = next(n for n in gm.graph.nodes if n.target == aten.mm.default)
    assert "library op" in fusible_reason(mm)  # glue strategies: between regions; a layer's region takes it
    assert fusible_reason(mm, library=True) is None


def test_cat_fuses_where_its_pieces_match_the_result_and_says_why_not_elsewhere():
    ok = fake_cuda_graph(lambda a, b: torch.cat([a, b], -1), (2, 3), (2, 5))
    legacy = fake_cuda_graph(lambda a, b: torch.cat([a, b]), (2, 3), (0,))  # aten skips a 1-d empty piece
    empty = fake_cuda_graph(lambda a, b: torch.cat([a, b]), (2, 3), (0, 3))
    (cat,), (legacy_cat,), (empty_cat,) = ([n for n in g.graph.nodes if n.target == aten.cat.default]
                                           for g in (ok, legacy, empty))
    assert fusible_reason(cat) is None
    assert "rank 1 in a rank-2 result" in fusible_reason(legacy_cat)
    assert "an empty piece" in fusible_reason(empty_cat)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opinfo_cat_samples_through_nvfuser_match_eager_forward_and_backward(monkeypatch, dtype):
    """Every OpInfo ``cat`` sample, jitted with ``executor="nvfuser"`` on the CPU stand-in: output and the pieces'
    gradients against eager. The samples the check refuses (legacy or empty pieces) run through torch; the rest
    are lowered through ``fd.ops.cat`` (counted, so the test fails if none is)."""
    import trace_lab
    from torch.testing._internal.common_methods_invocations import op_db

    import trace_lab.executors.nvfuser_ops as ops
    from tests.nvfuser_cpu import cpu_nvfuser

    cpu_nvfuser(monkeypatch)
    entry, lowered = FUSIBLE[aten.cat.default], []
    monkeypatch.setitem(FUSIBLE, aten.cat.default,
                        ops.OpEntry(lambda b, n: lowered.append(n) or entry.build(b, n), entry.check))
    op = next(o for o in op_db if o.name == "cat")
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=True))
    for sample in samples:
        pieces = list(sample.input)

        def cat(*ts, args=sample.args, kwargs=sample.kwargs):
            return torch.cat(list(ts), *args, **kwargs)

        want = cat(*pieces)
        grad = torch.randn_like(want)
        leaves = [p.detach().clone().requires_grad_() for p in pieces]
        got = trace_lab.jit(cat, fusion="dataflow", executor="nvfuser")(*leaves)
        torch.testing.assert_close(got, want)
        for g, w in zip(torch.autograd.grad(got, leaves, grad), torch.autograd.grad(want, pieces, grad)):
            torch.testing.assert_close(g, w)
    assert lowered, "no cat sample was lowered through fd.ops.cat"
    for n in lowered:  # what reached the lowering: pieces of the result's rank, none empty (the check's refusals)
        result = n.meta["val"]
        assert all(p.meta["val"].dim() == result.dim() and p.meta["val"].numel() for p in n.args[0]), n.args


def test_the_benchmarks_nocat_variant_leaves_cat_to_torch_and_restores_it(monkeypatch):
    """``steady_interleaved.py``'s ``~nocat`` (an A/B of nvFuser's ``aten.cat``, session 46): compiled inside the
    variant, the op next to elementwise work is no definition's op and the result still matches eager; outside it,
    the same function's op is lowered through nvFuser again. (A softmax cannot be left so: the capture
    decomposes it.)"""
    import sys
    from pathlib import Path

    import trace_lab
    import trace_lab.executors.nvfuser_ops as ops
    from tests.nvfuser_cpu import cpu_nvfuser

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import steady_interleaved as si

    def fn(a, b):
        return torch.cat([a.sin() * 2, b.exp()], -1) + 1

    variant, op = "nocat", aten.cat.default
    cpu_nvfuser(monkeypatch)
    entry, lowered = FUSIBLE[op], []
    monkeypatch.setitem(FUSIBLE, op, ops.OpEntry(lambda b, n: lowered.append(n) or entry.build(b, n), entry.check))
    a, b = torch.randn(4, 3), torch.randn(4, 5)
    assert si.split_variant(f"dataflow-nvfuser~{variant}") == ("dataflow-nvfuser", variant)
    with si.variant_of(variant):
        assert op not in FUSIBLE
        without = trace_lab.jit(fn, fusion="dataflow", executor="nvfuser")
        torch.testing.assert_close(without(a, b), fn(a, b))
    assert not lowered and FUSIBLE[op].check is entry.check
    with_op = trace_lab.jit(fn, fusion="dataflow", executor="nvfuser")
    torch.testing.assert_close(with_op(a, b), fn(a, b))
    assert lowered, "outside the variant the op is a definition's op again"


def test_cpu_results_do_not_fuse():
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda x: (x * 2).exp())(torch.ones(3))
    reasons = [fusible_reason(n) for n in gm.graph.nodes if n.op == "call_function"]
    assert all(r is not None and "CPU" in r for r in reasons), reasons


def _two_softmaxes(x, w, v):
    a = torch.relu(x) * 3
    m = v @ w  # independent of `a`: hoisted, does not split the fused part
    b = a.exp() + 1
    c = b @ w  # reads the fused part: splits
    return torch.softmax(c, -1) + m


def test_split_hoists_independent_torch_ops_and_splits_on_dependences():
    gm = fake_cuda_graph(_two_softmaxes, (4, 4), (4, 4), (4, 4))
    steps, notes = split_region(gm)
    kinds = [k if k == "torch" else f"fuse{len(s.ops)}" for k, s in steps]
    torch_ops = [s.target for k, s in steps if k == "torch"]
    assert torch_ops == [aten.mm.default, aten.mm.default]
    assert kinds[0] == "torch" and kinds[1].startswith("fuse") and kinds[2] == "torch" and kinds[3].startswith("fuse")
    assert len(notes) == 2 and all("mm" in n for n in notes)
    first = steps[1][1]
    assert [n.target for n in first.ops] == [aten.relu.default, aten.mul.Tensor, aten.exp.default, aten.add.Tensor]
    assert len(first.outputs) == 1 and len(first.inputs) == 1


def test_signature_is_structural():
    def f(x, y):
        return (x * 2 + y).sum(0)

    def g(p, q):  # same computation, other names
        return (p * 2 + q).sum(0)

    seg = lambda fn, *shapes: [s for k, s in split_region(fake_cuda_graph(fn, *shapes))[0] if k == "fuse"][0]
    assert segment_signature(seg(f, (4, 4), (4, 4))) == segment_signature(seg(g, (4, 4), (4, 4)))
    assert segment_signature(seg(f, (4, 4), (4, 4))) != segment_signature(seg(f, (4, 8), (4, 8)))
    assert segment_signature(seg(f, (4, 4), (4, 4))) != segment_signature(seg(lambda x, y: (x * 3 + y).sum(0),
                                                                              (4, 4), (4, 4)))


@pytest.fixture
def no_nvfuser(monkeypatch):
    monkeypatch.setitem(nvfuser_import._cache, "result", (None, "nvfuser_direct is not installed"))


def test_requesting_nvfuser_without_it_says_what_to_do(no_nvfuser):
    with pytest.raises(MissingDependencyError, match="executor='nvfuser' needs nvFuser.*not installed.*inductor"):
        get_executor("nvfuser")


def test_jit_with_nvfuser_without_it_raises_the_same(no_nvfuser):
    import trace_lab

    jfn = trace_lab.jit(lambda x: x * 2, executor="nvfuser")
    with pytest.raises(MissingDependencyError, match="needs nvFuser"):
        jfn(torch.ones(3))


def test_auto_falls_back_to_inductor_with_the_reason(no_nvfuser):
    name, reason = resolve_executor("auto", torch.device("cuda"))
    assert name == "inductor" and "nvfuser_direct is not installed" in reason and "Inductor" in reason
    assert resolve_executor("auto", torch.device("cpu"))[0] == "inductor"


def test_wheel_for_another_torch_is_explained():
    e = ImportError("/x/_C_DIRECT.so: undefined symbol: _ZN3c1013MessageLoggerC1EPKciib")
    why = nvfuser_import._explain(e)
    assert "built for torch" in why and "this is torch" in why and "undefined symbol" in why


@pytest.mark.parametrize("view", ["view", "_unsafe_view"])
def test_views_run_as_reshapes_where_an_executor_may_change_layouts(view):
    """nvFuser may return a region's value in another layout than eager's: the nvFuser
    executor's program runs ``view`` (and ``_unsafe_view``, which refuses the same layouts) as ``reshape``
    (same values, a copy where needed), in its program and in a region's torch steps."""
    from fusion_support import hand_trace
    from trace_lab.executors.eager import interpret
    from trace_lab.executors.nvfuser_region import torch_target

    op = getattr(torch.ops.aten, view).default

    def flat(x):
        return op(x, [-1]) * 2

    trace = hand_trace(flat, torch.randn(4, 6))
    step = next(n for n in trace.ops if n.target is op)
    assert torch_target(step) is torch.ops.aten.reshape.default
    strided = torch.randn(6, 4).t()  # same shape, a layout view() refuses
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        interpret(trace)([strided])
    (got,) = interpret(trace, views_as_reshape=True)([strided])
    torch.testing.assert_close(got, strided.reshape(-1) * 2)


def _sgd_update_region() -> torch.fx.GraphModule:
    """An optimizer's region: it only writes its input (p.copy_(p - 0.1 * g)) and returns nothing;
    built by hand with fake CUDA values (make_fx cannot trace a mutation of a fake CUDA input here)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    aten = torch.ops.aten
    g = torch.fx.Graph()
    with FakeTensorMode():
        vp, vg = torch.empty(8, device="cuda"), torch.empty(8, device="cuda")
        p_, g_ = g.placeholder("p"), g.placeholder("g")
        p_.meta["val"], g_.meta["val"] = vp, vg
        mul = g.call_function(aten.mul.Tensor, (g_, 0.1))
        mul.meta["val"] = vg * 0.1
        sub = g.call_function(aten.sub.Tensor, (p_, mul))
        sub.meta["val"] = vp - mul.meta["val"]
        cp = g.call_function(aten.copy_.default, (p_, sub))
        cp.meta["val"] = vp
    g.output(())
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_a_region_that_only_writes_its_inputs_runs_and_returns_nothing():
    """The GPU failure of 2026-11-23 (Adam regions: SyntaxError 'return (,)' in the generated region)."""
    from trace_lab.executors.nvfuser_region import RegionProgram

    gm = _sgd_update_region()
    steps, _ = split_region(gm)
    segments = [s for k, s in steps if k != "torch"]
    assert segments and any(s.copies for s in segments)

    def runner_for(seg):  # the segment's ops evaluated with torch on CPU (nvFuser's part on a GPU)
        def run(inputs):
            env = dict(zip(seg.inputs, inputs))
            for n in seg.ops:
                args = [env.get(a, a) if isinstance(a, torch.fx.Node) else a for a in n.args]
                env[n] = n.target(*args, **n.kwargs)
            return [env[o] for o in seg.outputs]
        return run

    program = RegionProgram(gm, steps, {id(s): runner_for(s) for s in segments}, multi=True)
    p, g = torch.randn(8), torch.randn(8)
    expected = p - 0.1 * g
    assert program(p, g) == ()
    torch.testing.assert_close(p, expected)


def test_a_matmul_nvfuser_cannot_take_says_why():
    """Inside a layer's region (``library=True``): a floating mm/bmm joins the definition, an integer one stays in
    torch with the reason."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def mms(dtype):
        gm = make_fx(lambda a, b: a @ b)(*[torch.ones(4, 4, dtype=dtype, device="meta") for _ in range(2)])
        return next(n for n in gm.graph.nodes if n.target == aten.mm.default)

    assert fusible_reason(mms(torch.bfloat16), library=True) is None
    why = fusible_reason(mms(torch.int64), library=True)
    assert why is not None and "one floating dtype" in why, why


def _head_layout(x, w):
    q = x @ w  # torch: a library op
    h = q.view(2, 4, 2, 4).permute(0, 2, 1, 3).clone(memory_format=torch.contiguous_format)  # lays q out by head
    s = h @ h.transpose(-1, -2)  # torch
    return (s * 2).exp()  # arithmetic: nvFuser's


def test_a_segment_that_only_lays_values_out_runs_through_torch():
    gm = fake_cuda_graph(_head_layout, (8, 8), (8, 8))
    steps, _ = split_region(gm)
    fused = [[n.target for n in s.ops] for k, s in steps if k == "fuse"]
    torch_ops = [s.target for k, s in steps if k == "torch"]
    assert aten.clone.default in torch_ops and aten.permute.default in torch_ops
    assert len(fused) == 1 and fused[0][-2:] == [aten.mul.Tensor, aten.exp.default], fused
    assert aten.clone.default not in fused[0] and aten.permute.default not in fused[0], fused


def test_llama_heads_laid_out_by_torch_and_views_folded_match_eager_and_measure_as_predicted(monkeypatch):
    """Layout-only segments run through torch; the region programs' view steps fold after their first call
    (tests/test_nvfuser_region_views.py); the second call runs folded and still matches eager."""
    import trace_lab
    from examples.llama import LlamaStack
    from fusion_support import assert_report_peaks_match
    from tests.nvfuser_cpu import cpu_nvfuser

    cpu_nvfuser(monkeypatch)
    torch.manual_seed(0)
    model = LlamaStack(layers=2, dim=64, heads=2)
    x = torch.randn(2, 16, 64, requires_grad=True)
    r = trace_lab.inspect(model, x, fusion="dataflow", executor="nvfuser", runs=2)
    assert r.ok, r.comparison
    assert r.comparison["checked"]["grads"] > 0
    assert_report_peaks_match(r)
    layout = {"aten.view.default", "aten.permute.default", "aten.clone.default", "aten.expand.default",
              "aten._unsafe_view.default", "aten.reshape.default", "aten.alias.default"}
    torch_ops, segments = [], []
    for direction in ("forward", "backward"):
        for g in r.traces(direction)[-1].compiled_regions.values():
            torch_ops += g.details.get("torch_ops", [])
            segments += [e["ops"] for e in g.details.get("segments", [])]
    assert "aten.clone.default" in torch_ops  # the heads' transposes ran through torch
    assert segments and not [ops for ops in segments if set(ops) <= layout], segments
    folded = [p for d in ("forward", "backward") for p in r.compilation(d, 0).compiled.region_programs.values()
              if p.views is not None and p.views.fast_chosen]
    assert folded, "no nvFuser region program folded its views"
    notes = r.compilation("backward", 0).compiled.notes
    assert any("fold" in n and "view steps" in n for n in notes), notes
    assert not any("stay aten calls" in n for n in notes), notes
