"""The Inductor executor: regions compiled by TorchInductor (C++ on this CPU), checked
against the unfused program (outputs and gradients) and against measured memory; the
fusion cache (structural signatures, hits on identical layers, everything off).

Memory tolerance: see ``fusion_support.SCALAR_SLACK`` (measured - predicted in [0, 64] B).
A region allocates its outputs, plus the scratch buffers its compiled code allocates
inside the call (measured by the executor at compile time, counted on the region's
line: tests/test_region_workspace.py); anything else would show up as measured >
predicted and fail.
"""
from __future__ import annotations

import pytest
import torch

import trace_lab
from examples import workloads
from fusion_support import (STRATEGIES, Part, assert_peak_matches, captured, check_part, fuse, hand_trace)
from trace_lab.executors.fusion_cache import FusionCache, region_signature
from trace_lab.executors.inductor import InductorExecutor, inductor_can_fuse

MIB = 1 << 20


@pytest.fixture(scope="module")
def executors():
    # one executor per workload, shared by the strategies: its fusion cache then works as it
    # does inside one jitted function, and identical regions compile once
    return {}


# "layers" through Inductor (a whole layer compiled as one C++ region, ~1 minute on the CI machine) is checked the
# same way, on a 3-layer stack, by tests/test_layers_strategy.py
@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s != "layers"])
@pytest.mark.parametrize("name", ["memory_peak", "llama2"])
def test_inductor_matches_unfused_program_and_predicted_peak(name, strategy, executors):
    executor = executors.setdefault(name, InductorExecutor())
    for part in captured(name):
        r = check_part(part, strategy, executor)
        assert_peak_matches(r)
        assert bool(r["program"].regions) == (strategy != "none")


@pytest.mark.parametrize("name", ["llama2_ckpt", "transformer_encoder", "adam_step"])
def test_inductor_memory_strategy_on_more_workloads(name, executors):
    executor = executors.setdefault(name, InductorExecutor())
    for part in captured(name):
        assert_peak_matches(check_part(part, "memory", executor))


@pytest.mark.parametrize("in_place", [False, True], ids=["copying", "in-place"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_inspect_memory_peak_under_inductor(strategy, in_place):
    fn, args = workloads.get("memory_peak").make("cpu", "small")
    report = trace_lab.inspect(fn, *args, fusion=strategy, executor="inductor", runs=0, donate_inplace=in_place)
    assert report.ok, report.comparison
    (m,) = report.memory
    # worked out by hand in test_fusion_passes: 3 buffers of 256 KiB, or 20 for horizontal (its second region
    # writes ten relus while their ten matmul inputs are alive). In place, that region writes each relu over its
    # dying input, so horizontal's peak is the matmul chain's: ten values live + one result = 11 buffers.
    horizontal = 11 * MIB // 4 if in_place else 5 * MIB
    assert m["predicted_peak_above_inputs_bytes"] == (horizontal if strategy == "horizontal" else 3 * MIB // 4)
    if strategy == "horizontal":  # the second region's printed line says which outputs went over which inputs
        line = next(ln for ln in str(report.traces("inference")[-1]).splitlines() if "= fusion1(" in ln)
        assert line.count(" over ") == (10 if in_place else 0) and ("in place: " in line) == in_place, line
    assert 0 <= m["measured_peak_above_inputs_bytes"] - m["predicted_peak_above_inputs_bytes"] <= 64
    rows = dict(report.summary_rows())
    if strategy == "none":
        assert "regions inference #0" not in rows
    else:
        assert "unique signature" in rows["regions inference #0"]  # "1 unique signature", "3 unique signatures"


def test_llama_layers_share_compiled_regions():
    fn, args = workloads.get("llama2").make("cpu", "small")
    report = trace_lab.inspect(fn, *args, fusion="dataflow", executor="inductor", runs=0)
    assert report.ok, report.comparison  # outputs and every parameter's gradient
    for m in report.memory:
        assert 0 <= m["measured_peak_above_inputs_bytes"] - m["predicted_peak_above_inputs_bytes"] <= 64, m
    for kind in ("forward", "backward"):
        regions = report.programs[0][kind]["regions"]
        # a compile is one signature and the inputs it writes over (in-place donation: a region of the caller's
        # inputs runs the plain compile, its twins over dying values the in-place one)
        # (a region that runs another's code, cover_regions, compiles nothing: the forward's last norm, which runs
        # the norm between the layers with its flattening view undone)
        keys = {(r["signature"], tuple(r.get("in_place_over", ()))) for r in regions if not r.get("runs_code_of")}
        hits = [r for r in regions if r["cache_hit"]]
        if kind == "forward":
            (covered,) = [r for r in regions if r.get("runs_code_of")]
            assert covered["unviewed_outputs"] == 1 and covered is regions[-1], covered
        # two identical decoder layers: layer 1's regions reuse layer 0's compiled code
        assert len(keys) < len(regions), kind
        assert len(hits) == len(regions) - len(keys), kind
        assert len(keys) <= 2 * len({r["signature"] for r in regions}), kind
        assert all(r["compile_seconds"] == 0.0 for r in hits)
        first = {}
        for r in regions:
            first.setdefault(r["signature"], r)
        assert all(r["ops"] == first[r["signature"]]["ops"] for r in hits)


def two_paths(x0, x1, a):
    for t0 in (x0, x1):
        a = torch.mm(torch.relu(torch.mm(torch.relu(t0), a)), a)
    return a


def test_fusion_cache_off_compiles_every_region_with_inductor_caches_off(monkeypatch):
    import torch._inductor.compile_fx as compile_fx
    import torch._inductor.config as inductor_config

    seen = []
    real = compile_fx.compile_fx_inner  # what a region's compile reaches (executors/inductor.compile_region)

    def spy(gm, example_inputs, *a, **kw):
        seen.append((inductor_config.force_disable_caches, inductor_config.fx_graph_cache,
                     inductor_config.autotune_local_cache))
        return real(gm, example_inputs, *a, **kw)

    monkeypatch.setattr(compile_fx, "compile_fx_inner", spy)
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(8, 8, generator=g) for _ in range(3)]
    expected = two_paths(*args)

    cached = trace_lab.jit(two_paths, fusion="dataflow", executor="inductor", donate_inplace=False)
    torch.testing.assert_close(cached(*args), expected)
    regions = list(cached.programs[0].forward.compiled.regions.values())
    assert len(regions) == 4 and len({r.signature for r in regions}) == 1  # relu on f32[8, 8], 4 times
    assert [r.cache_hit for r in regions] == [False, True, True, True]
    assert len(seen) == 1

    # in place (the default): the relus of the caller's inputs and those of the dying matmul results (written
    # over them) are two compiles of the one signature
    seen.clear()
    in_place = trace_lab.jit(two_paths, fusion="dataflow", executor="inductor")
    torch.testing.assert_close(in_place(*args), expected)
    regions = list(in_place.programs[0].forward.compiled.regions.values())
    assert [r.details.get("in_place_over", []) for r in regions] == [[], [0], [], [0]]
    assert [r.cache_hit for r in regions] == [False, False, True, True]
    assert len(seen) == 2

    seen.clear()
    uncached = trace_lab.jit(two_paths, fusion="dataflow", executor="inductor", fusion_cache=False)
    torch.testing.assert_close(uncached(*args), expected)
    regions = list(uncached.programs[0].forward.compiled.regions.values())
    assert [r.cache_hit for r in regions] == [False] * 4
    assert seen == [(True, False, False)] * 4  # each compiled with Inductor's own caches off


# -- hand-worked programs --------------------------------------------------------------------------
def chain(x):
    return torch.exp(torch.exp(x)).sum()


def views(x):
    y = torch.relu(x)
    return x.t(), y, y.t()


@pytest.mark.parametrize("fn, strategy, predicted", [
    (chain, "dataflow", 4),  # exp, exp, sum in one kernel: only the f32 scalar is allocated
    (views, "horizontal", 256),  # relu's f32[8, 8]; x.t() and y.t() are views, no buffer
])
def test_hand_programs_measure_as_predicted(fn, strategy, predicted):
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(0))
    trace = hand_trace(fn, x)
    r = check_part(Part("hand", "inference", trace, [x]), strategy, InductorExecutor())
    assert r["predicted"] == predicted
    assert_peak_matches(r)


def test_inductor_fusibility_table():
    def prog(x, w):
        y = torch.relu(x).view(4, 16)
        z = torch.mm(y, w).sum(dim=0)
        return z, torch.rand_like(x), x.add_(1.0)

    x, w = torch.randn(8, 8), torch.randn(16, 4)
    trace = hand_trace(prog, x, w)
    verdict = {n.target._opname: inductor_can_fuse(n) for n in trace.ops}
    assert verdict["relu"] and verdict["view"] and verdict["sum"]
    assert not verdict["mm"]  # matmuls stay library calls, outside regions
    assert not verdict["rand_like"]  # random: values would differ from eager's
    assert not verdict["add_"]  # mutates an input


def test_signature_is_structural():
    def region_of(fn, *args):
        trace = hand_trace(fn, *args)
        (node,) = [n for n in fuse(trace, "dataflow", InductorExecutor()).ops if n.op == "call_module"]
        return node.meta["region"]["signature"]

    x = torch.randn(8, 8)
    base = region_of(lambda a: torch.relu(a) * 2.0, x)
    assert region_of(lambda b: torch.relu(b) * 2.0, x.clone()) == base  # names do not matter
    assert region_of(lambda a: torch.relu(a) * 3.0, x) != base  # constants do
    assert region_of(lambda a: torch.relu(a) * 2.0, x.double()) != base  # dtype
    assert region_of(lambda a: torch.relu(a) * 2.0, x.t().contiguous().t()) != base  # stride order
    assert region_of(lambda a: torch.relu(a) * 2.0, torch.randn(4, 16)) != base  # sizes
    assert region_of(lambda a: torch.sigmoid(a) * 2.0, x) != base  # ops


def test_fusion_cache_counts_and_bounds():
    cache = FusionCache(max_entries=2)
    made = []

    def compile_fn(tag):
        return lambda: made.append(tag) or tag

    assert cache.get_or_compile("a", compile_fn("a"))[:2] == ("a", False)
    assert cache.get_or_compile("a", compile_fn("a2"))[:2] == ("a", True)
    cache.get_or_compile("b", compile_fn("b"))
    cache.get_or_compile("c", compile_fn("c"))  # evicts the least recently used: "a"
    assert cache.get_or_compile("a", compile_fn("a3"))[:2] == ("a3", False)
    assert (cache.hits, cache.misses, made) == (1, 4, ["a", "b", "c", "a3"])
    off = FusionCache(enabled=False)
    off.get_or_compile("a", compile_fn("x"))
    assert off.get_or_compile("a", compile_fn("y"))[:2] == ("y", False) and len(off) == 0


def test_region_signature_lists_input_descriptors():
    trace = hand_trace(lambda a: torch.relu(a), torch.randn(8, 8))
    fused = fuse(trace, "dataflow", InductorExecutor())
    (node,) = [n for n in fused.ops if n.op == "call_module"]
    sub = fused.gm.get_submodule(node.target)
    text = region_signature(sub, [a.meta["val"] for a in node.args])
    assert text.splitlines()[0] == "in0: float32[8, 8] stride=[8, 1] order=[0, 1] aligned cpu"
    assert "aten.relu.default" in text


def test_a_region_inductor_cannot_compile_is_named_in_the_error(monkeypatch):
    import trace_lab.executors.inductor as inductor_module

    def broken(sub, input_vals, disable_inductor_caches=False, settings=True, donated=()):
        raise RuntimeError("no C++ compiler found\nmore detail")

    monkeypatch.setattr(inductor_module, "compile_region", broken)
    jfn = trace_lab.jit(chain, fusion="dataflow", executor="inductor")
    with pytest.raises(trace_lab.TraceLabError,
                       match=r"Inductor could not compile fused region fusion0 \(3 ops: aten.exp.default, "
                             r"aten.exp.default, aten.sum.dim_IntList\): RuntimeError: no C\+\+ compiler found\. "
                             r"executor='eager'"):
        jfn(torch.randn(8, 8))
