"""The translator's logic against torch itself, on the CPU, through a stand-in nvFuser API.

Graphs are traced on fake CUDA tensors (so every op is fusible as on a GPU),
split into segments, built into definitions with :mod:`tests.nvfuser_mock`
and run on real CPU tensors next to the graph itself. This checks the
decompositions (softmax, layer norm, GELU, SiLU backward), casts and
broadcasting bookkeeping; tests/test_nvfuser_gpu.py checks real nvFuser.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._decomp import core_aten_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

from trace_lab.executors.nvfuser_region import RegionProgram, build_definition, split_region

from tests import nvfuser_mock


def _graph(fn, inputs):
    # meta tensors: not CPU, so every op is as fusible as on a GPU (and autograd works on them)
    metas = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in inputs]
    gm = make_fx(fn, decomposition_table=core_aten_decompositions())(*metas)
    for n in gm.graph.nodes:  # factories run on the CPU when the graph itself is the reference
        if n.kwargs.get("device") is not None:
            n.kwargs = {**n.kwargs, "device": torch.device("cpu")}
    gm.recompile()
    return gm


def _rms_mlp(x, w1, w3, g):
    xf = x.float()
    h = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * g
    return F.silu(h @ w1) * (h @ w3)


def _attention(q, k, mask):
    s = (q @ k.transpose(-2, -1)) / 4.0
    s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s.float(), dim=-1).to(q.dtype)


def _layer_norm_gelu(x, w, b):
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b)) + F.gelu(x, approximate="tanh")


def _heads_cat(q, k, v):
    """llama's backward lays the q/k/v gradients out as [B, T, H*D] and concatenates them (k's a transpose)."""
    b, h, t, d = 2, 3, 5, 4
    heads = (q.view(b, h, t, d).permute(0, 2, 1, 3), k.view(b, h, d, t).permute(0, 3, 1, 2),
             v.view(b, h, t, d).permute(0, 2, 1, 3))
    return torch.cat([x.clone(memory_format=torch.contiguous_format).view(b, t, h * d) for x in heads], 2) * 0.5


def _with_grad(fn):
    def run(*args):
        args = [a.requires_grad_() if a.is_floating_point() else a for a in args]
        out = fn(*args)
        grads = torch.autograd.grad(out.float().sum(), [a for a in args if a.requires_grad])
        return (out, *grads)
    return run


def _adam_like(p, g, m, v):
    m.mul_(0.9).add_(g, alpha=0.1)
    v.mul_(0.999).addcmul_(g, g, value=0.001)
    p.addcdiv_(m, v.sqrt().add_(1e-8), value=-1e-3)
    return p


CASES = {
    "rms_mlp": (_rms_mlp, lambda dt: [torch.randn(2, 5, 8, dtype=dt), torch.randn(8, 12, dtype=dt),
                                      torch.randn(8, 12, dtype=dt), torch.randn(8, dtype=dt)]),
    "attention": (_attention, lambda dt: [torch.randn(2, 3, 6, 4, dtype=dt), torch.randn(2, 3, 6, 4, dtype=dt),
                                          torch.ones(6, 6, dtype=torch.bool).tril()]),
    "layer_norm_gelu": (_layer_norm_gelu, lambda dt: [torch.randn(3, 7, 16, dtype=dt), torch.randn(16, dtype=dt),
                                                      torch.randn(16, dtype=dt)]),
    "heads_cat": (_heads_cat, lambda dt: [torch.randn(6, 5, 4, dtype=dt), torch.randn(6, 4, 5, dtype=dt),
                                          torch.randn(6, 5, 4, dtype=dt)]),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "fwd+bwd"])
@pytest.mark.parametrize("case", list(CASES))
def test_translated_segments_compute_what_the_graph_computes(case, backward, dtype):
    fn, make = CASES[case]
    fn = _with_grad(fn) if backward else fn
    torch.manual_seed(0)
    inputs = make(dtype)
    gm = _graph(fn, inputs)
    steps, _ = split_region(gm)
    segs = [s for k, s in steps if k == "fuse"]
    assert segs, "nothing was fused"
    runners = {}
    for s in segs:
        fd = build_definition(s, nvfuser_mock.module)
        runners[id(s)] = lambda ins, fd=fd: fd.execute(ins)
    program = RegionProgram(gm, steps, runners, multi=True)
    got = program(*[t.clone() for t in inputs])
    want = gm(*[t.clone() for t in inputs])
    want = want if isinstance(want, (list, tuple)) else [want]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        if dtype == torch.float32:  # same op-by-op rounding as eager: f32 agrees to reassociation error
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        else:  # bf16 backward sums cancel (torch 2.10: one gradient element 10 ulps off): the lab's own check
            from trace_lab.run.compare import _close

            assert _close(a, b, 1.0) is None, _close(a, b, 1.0)


def test_in_place_updates_become_aliased_outputs():
    torch.manual_seed(0)
    inputs = [torch.randn(64) for _ in range(3)] + [torch.rand(64)]  # v >= 0
    gm = _graph(torch.func.functionalize(_adam_like, remove="mutations_and_views"), inputs)
    steps, notes = split_region(gm)
    segs = [s for k, s in steps if k == "fuse"]
    assert len(segs) == 1 and not notes, (steps, notes)
    assert len(segs[0].copies) == 3  # p, m, v written in place
    fd = build_definition(segs[0], nvfuser_mock.module)
    program = RegionProgram(gm, steps, {id(segs[0]): fd.execute}, multi=True)
    mine, ref = [t.clone() for t in inputs], [t.clone() for t in inputs]
    program(*mine)
    _adam_like(*ref)
    for a, b in zip(mine, ref):
        torch.testing.assert_close(a, b)


def _causal_scores(s, pos):
    """The decoder's causal mask as the captured llama builds it: an outer difference of one arange."""
    mask = (pos.unsqueeze(-2) - pos.unsqueeze(-1)) <= 0
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)


def test_index_math_stays_in_torch_and_the_rest_fuses():
    """The executor's default (index_math=False): the mask's integer/bool ops run in torch."""
    from trace_lab.executors.nvfuser_ops import fusible_reason

    s, pos = torch.randn(2, 6, 6), torch.arange(6)
    gm = _graph(_causal_scores, [s, pos])
    steps, notes = split_region(gm, lambda n: fusible_reason(n, index_math=False))
    in_torch = [x for k, x in steps if k == "torch"]
    fused = [x for k, x in steps if k == "fuse"]
    assert all(not x.meta["val"].is_floating_point() for x in in_torch), [x.target for x in in_torch]
    assert {torch.ops.aten.sub.Tensor, torch.ops.aten.le.Scalar} <= {x.target for x in in_torch}
    assert len(fused) == 1 and torch.ops.aten.where.self in {n.target for n in fused[0].ops}
    assert all(n.meta["val"].is_floating_point() for n in fused[0].ops if n.op == "call_function"
               and not isinstance(n.meta["val"], (list, tuple)))
    assert any("index math" in n for n in notes)
    fd = build_definition(fused[0], nvfuser_mock)
    got = RegionProgram(gm, steps, {id(fused[0]): fd.execute}, multi=False)(s, pos)
    torch.testing.assert_close(got, _causal_scores(s, pos))


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "fwd+bwd"])
@pytest.mark.parametrize("case", ["rms_mlp", "attention"])
def test_a_layers_region_holds_its_matmuls_in_one_definition(case, backward):
    """Under fusion="layers" (``library=True``) mm/bmm join the definition: the region splits only where a
    non-table op sits, and what it computes is the graph's (f32: to reassociation error)."""
    from trace_lab.executors.nvfuser_ops import fusible_reason

    fn, make = CASES[case]
    fn = _with_grad(fn) if backward else fn
    torch.manual_seed(0)
    inputs = make(torch.float32)
    gm = _graph(fn, inputs)
    matmuls = {torch.ops.aten.mm.default, torch.ops.aten.bmm.default}
    glue_steps, _ = split_region(gm, lambda n: fusible_reason(n, index_math=False))
    steps, _ = split_region(gm, lambda n: fusible_reason(n, index_math=False, library=True))
    assert any(k == "torch" and x.target in matmuls for k, x in glue_steps)  # the glue strategies leave them out
    assert not any(k == "torch" and x.target in matmuls for k, x in steps)
    segs = [s for k, s in steps if k == "fuse"]
    assert len(segs) <= len([s for k, s in glue_steps if k == "fuse"])
    assert any(n.target in matmuls for s in segs for n in s.ops)
    runners = {id(s): (lambda ins, fd=build_definition(s, nvfuser_mock.module): fd.execute(ins)) for s in segs}
    got = RegionProgram(gm, steps, runners, multi=True)(*[t.clone() for t in inputs])
    want = gm(*[t.clone() for t in inputs])
    want = want if isinstance(want, (list, tuple)) else [want]
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
