"""nvFuser executor on a GPU: every workload x fusion strategy against eager.

Checks per run: outputs, gradients and updated values against an eager run of a
deep copy (``compare_runs``: assert_close's dtype defaults x100, i.e. f32 rtol
1.3e-4 / atol 1e-3, bf16 rtol 1.6 / atol 1e-3), plus a relative-error check per
tensor, ||a-b|| <= tol * ||b|| with tol 1e-4 for f32 and 2e-2 for bf16 (bf16
rounds at every op and reductions reorder); no segment may fall back to torch;
measured peak memory at most 1.5x + 1 MiB of the liveness prediction (a region's
prediction counts all its outputs live at once, so measured may be lower).
Skipped cleanly without CUDA or nvfuser_direct.
"""
from __future__ import annotations

import json
import os

import pytest
import torch

from trace_lab.run import compare
from trace_lab.executors.nvfuser_import import unavailable_reason
from trace_lab.run.jit import FUSION_STRATEGIES, jit
from trace_lab.passes import PASSES, _load_passes

from examples.workloads import WORKLOADS
from tests.nvfuser_support import record_definitions, whole_program_region

pytestmark = [pytest.mark.nvfuser, pytest.mark.gpu]
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)
if unavailable_reason() is not None:
    pytest.skip(f"nvFuser not usable: {unavailable_reason()}", allow_module_level=True)

_load_passes()
HAVE_FUSION_PASS = "fusion" in PASSES
# "none" makes no region, so nothing reaches nvFuser: that strategy is the eager program
STRATEGIES = tuple(s for s in FUSION_STRATEGIES if s != "none") if HAVE_FUSION_PASS else ()
# every strategy at the small size is tests/test_gpu_workloads.py's matrix (through inspect); here: one
# program-sized region per workload, and the full sizes of two workloads
CASES = [(w, "whole", "small") for w in WORKLOADS]
CASES += [("llama2", s, "full") for s in ("whole", "memory", "layers") if s == "whole" or s in STRATEGIES]
# (adam_step full: 320 s of one 200-param fusion)
LOG = os.environ.get("TRACE_LAB_NVFUSER_LOG")


@pytest.fixture
def strategy_pass(monkeypatch):
    def use(strategy):
        if strategy == "whole":
            monkeypatch.setitem(PASSES, "fusion", whole_program_region)
            return "dataflow"  # any valid name: the pass above ignores it
        return strategy
    return use


def _rel_errors(a: compare.Snapshot, b: compare.Snapshot) -> list[tuple[str, float, torch.dtype]]:
    out = []
    for kind in ("outputs", "grads", "values"):
        for i, (x, y) in enumerate(zip(getattr(a, kind), getattr(b, kind))):
            if x is None or y is None or not x.is_floating_point():
                continue
            den = y.double().norm().item()
            err = (x.double() - y.double()).norm().item() / (den if den > 0 else 1.0)
            out.append((f"{kind}[{i}]", err, x.dtype))
    return out


@pytest.mark.parametrize("name,strategy,size", CASES, ids=[f"{w}-{s}-{z}" for w, s, z in CASES])
def test_workload_matches_eager(name, strategy, size, strategy_pass):
    wl = WORKLOADS[name]
    fn, args = wl.make("cuda", size)
    ref_fn, ref_args = wl.make("cuda", size)  # a second, identical seeded instance

    def call(f, a):
        out = f(*a)
        if wl.backward:
            out.float().sum().backward()
        return out

    eager = compare.snapshot(call(ref_fn, ref_args), ref_fn, ref_args)
    jfn = jit(fn, fusion=strategy_pass(strategy), executor="nvfuser")
    got = compare.snapshot(call(jfn, args), fn, args)
    cmp = compare.compare_runs(got, eager)
    rel = _rel_errors(got, eager)
    regions = [r for p in jfn.programs for part in p.parts for r in part.compiled.regions.values()]
    fallbacks = [s["fallback"] for r in regions for s in r.details["segments"] if "fallback" in s]
    with jfn.measuring():
        call(jfn, args)
    mem = [(m.kind, m.predicted_peak_above_inputs, m.measured_peak_above_inputs) for m in jfn.measurements]
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps({"case": f"{name}-{strategy}-{size}", "ok": cmp.ok, "problems": cmp.problems[:3],
                                "max_rel": max((e for _, e, _ in rel), default=0.0), "fallbacks": fallbacks[:3],
                                "regions": len(regions), "mem": mem,
                                "notes": [n for p in jfn.programs for part in p.parts
                                          for n in part.compiled.notes][:6]}) + "\n")
    assert not fallbacks, fallbacks
    assert regions, "no fused region reached the nvFuser executor"
    assert cmp.ok, cmp.problems[:5]
    for where, err, dtype in rel:
        assert err <= (2e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-4), (where, err, dtype)
    for kind, predicted, measured in mem:
        assert measured is not None
        if strategy == "whole":
            continue  # one program-sized region predicts only its outputs; its inner segments allocate more
        assert measured <= 1.5 * predicted + (1 << 20), (kind, predicted, measured)


@pytest.mark.parametrize("strategy", ["dataflow", "layers"])
def test_cache_builds_each_layer_once(strategy):
    """4 identical layers: with the cache on, definitions are built as for 2 layers (8 layers took 208 s) and the
    repeats are hits; off (dataflow), every region builds its own. (A region holding the whole program is one definition since nvFuser takes the
    matmuls a region holds: its segments no longer repeat per layer, so the strategies' regions are used here.)"""
    from examples.workloads import make_llama

    built = {}
    runs = ((2, True), (4, True), (4, False)) if strategy == "dataflow" else ((2, True), (4, True))  # (GPU check time)
    for layers, cache in runs:
        model, (x,) = make_llama(layers)("cuda", "small")
        jfn = jit(model, fusion=strategy, executor="nvfuser", fusion_cache=cache)
        jfn(x).sum().backward()
        ex = jfn._executors["nvfuser"]
        built[(layers, cache)] = (ex.misses, ex.hits)
    assert built[(4, True)][0] == built[(2, True)][0] and built[(4, True)][1] > built[(2, True)][1], built
    if (4, False) in built:
        assert built[(4, False)][0] > built[(4, True)][0] and built[(4, False)][1] == 0, built


def test_first_layer_backward_runs_its_repeats_definitions():
    """cover_regions with nvFuser (fusion="layers"): in a stack whose input needs no gradient, the first layer's
    backward is its repeats' minus that gradient; with the cover its regions run the repeats' region programs (fewer
    definitions built), without it they compile their own. Both against eager (outputs, gradients), memory as above."""
    from examples.llama import LlamaStack

    built, covered, compiled_names, compiled, names = {}, {}, {}, {}, {}
    for cover in (True, False):
        torch.manual_seed(0)
        model = LlamaStack(layers=3, dim=32, heads=4).cuda()
        ref = LlamaStack(layers=3, dim=32, heads=4).cuda()
        ref.load_state_dict(model.state_dict())
        x = torch.randn(4, 128, 32, device="cuda")  # needs no gradient

        def call(f, m):
            out = f(x)
            out.float().sum().backward()
            return compare.snapshot(out, m, (x,))

        eager = call(ref, ref)
        jfn = jit(model, fusion="layers", executor="nvfuser", cover_regions=cover)
        got = call(jfn, model)
        cmp = compare.compare_runs(got, eager)
        assert cmp.ok, (cover, cmp.problems[:5])
        assert any(where.startswith("grads") for where, _, _ in _rel_errors(got, eager))
        for where, err, dtype in _rel_errors(got, eager):
            assert err <= 1e-4, (cover, where, err)
        model.zero_grad(set_to_none=True)
        with jfn.measuring():
            jfn(x).float().sum().backward()
        for m in jfn.measurements:
            assert m.measured_peak_above_inputs is not None
            assert m.measured_peak_above_inputs <= 1.5 * m.predicted_peak_above_inputs + (1 << 20), m
        built[cover] = jfn._executors["nvfuser"].misses
        rows = list(jfn.programs[0].backward.compiled.regions.values())
        covered[cover] = [(r.name, r.details.get("runs_code_of"), r.details.get("drops_outputs")) for r in rows
                          if r.details.get("runs_code_of")]
        compiled_names[cover] = {r.name for r in rows if not r.cache_hit}
        compiled[cover], names[cover] = len(compiled_names[cover]), [r.name for r in rows]
    n = len(covered[True])  # the first layer's backward regions (nvFuser may split a layer's backward in two)
    assert n >= 1 and [c[0] for c in covered[True]] == names[True][-n:], covered  # it runs last in the backward
    assert all(by in compiled_names[True] and dropped == 1 for _, by, dropped in covered[True]), covered
    assert compiled[False] - compiled[True] == n, compiled  # each covered region is one compile fewer
    assert covered[False] == [] and built[True] < built[False], (covered, built)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_regions_write_over_dying_inputs_on_real_nvfuser(dtype):
    """donate_inputs / donate_inplace with nvFuser (dataflow, a SwiGLU MLP's backward): outputs and gradients
    against eager, some backward region's output in the storage of an input that dies in it (alias_input, the
    record's measured layout), none with donate_inplace off, and the measured peak within 1% of the predicted
    one either way (the outputs written in place are not counted twice)."""
    from examples.llama import MLP  # a SwiGLU feed-forward

    written = {}
    for in_place in (True, False):
        torch.manual_seed(0)
        model = MLP(256, 688).to("cuda", dtype)
        ref = MLP(256, 688).to("cuda", dtype)
        ref.load_state_dict(model.state_dict())
        x = torch.randn(4, 512, 256, device="cuda", dtype=dtype, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_(True)

        def call(f, m, inp):
            out = f(inp)
            out.float().sum().backward()
            return compare.snapshot(out, m, (inp,))

        eager = call(ref, ref, x_ref)
        jfn = jit(model, fusion="dataflow", executor="nvfuser", donate_inplace=in_place)
        got = call(jfn, model, x)
        cmp = compare.compare_runs(got, eager)
        assert cmp.ok, (in_place, cmp.problems[:5])
        tol = 1e-4 if dtype == torch.float32 else 2e-2
        for where, err, _ in _rel_errors(got, eager):
            assert err <= tol, (in_place, where, err)
        model.zero_grad(set_to_none=True)
        x.grad = None
        with jfn.measuring():
            jfn(x).float().sum().backward()
        for m in jfn.measurements:
            assert m.measured_peak_above_inputs is not None
            assert abs(m.measured_peak_above_inputs - m.predicted_peak_above_inputs) <= \
                0.01 * m.predicted_peak_above_inputs + 4096, m
        rows = list(jfn.programs[0].backward.compiled.regions.values())
        written[in_place] = [(r.name, r.details["in_place_over"], r.aliases) for r in rows
                             if r.details.get("in_place_over")]
        for _name, over, aliases in written[in_place]:
            assert set(over) <= {a[1] for a in aliases if a and a[0] == "input"}, (over, aliases)
    assert written[True] and not written[False], written


def test_definition_text_on_request(strategy_pass):
    from trace_lab.executors.nvfuser import region_definitions

    fn, args = WORKLOADS["memory_peak"].make("cuda", "small")
    jfn = jit(fn, fusion=strategy_pass("whole"), executor="nvfuser")
    jfn(*args)
    compiled = jfn.programs[0].forward.compiled
    text = region_definitions(compiled, next(iter(compiled.regions.values())).name)
    assert "fd.ops" in text or "define_tensor" in text, text[:300]


GRAPH_CASES = [("llama2", "dataflow"), ("adam_step", "dataflow"), ("adam_step", "horizontal"),
               ("memory_peak", "memory"), ("transformer_encoder", "horizontal")]


@pytest.mark.parametrize("name,strategy", GRAPH_CASES, ids=[f"{w}-{s}" for w, s in GRAPH_CASES])
def test_cuda_graphs_match_eager(name, strategy):
    """cuda_graphs=True: every one of four steps (warm-up, record + replay, two replays) equals eager's,
    and every program was replayed from its graph."""
    wl = WORKLOADS[name]
    fn, args = wl.make("cuda", "small")
    ref_fn, ref_args = wl.make("cuda", "small")
    jfn = jit(fn, fusion=strategy, executor="nvfuser", cuda_graphs=True)

    def step(f, func, a):
        out = f(*a)
        if wl.backward:
            out.float().sum().backward()
        snap = compare.snapshot(out, func, a)
        if wl.backward:
            for p in compare.reachable_tensors(func, a):
                p.grad = None
        return snap

    for i in range(4):
        got, eager = step(jfn, fn, args), step(ref_fn, ref_fn, ref_args)
        cmp = compare.compare_runs(got, eager)
        assert cmp.ok, (i, cmp.problems[:5])
        for where, err, dtype in _rel_errors(got, eager):
            assert err <= (2e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-4), (i, where, err, dtype)
    graphs = [r.graphs for r in jfn.compilations()]
    assert graphs and all(g.replays >= 2 and not g.notes for g in graphs), [g.summary() + str(g.notes) for g in graphs]


def _gelu_tanh(x, w):
    return torch.nn.functional.gelu(x * w + 1.0).tanh() * 0.5


def _scaled_relu_written_over(s, x, w):  # the region writes over x @ w, which dies in it, so s is lifted
    return (x @ w * s + 1).relu() @ w


@pytest.mark.parametrize("f", [_gelu_tanh, _scaled_relu_written_over], ids=["pointwise", "lifted-0d-input"])
def test_nvfuser_region_repro_runs_standalone(tmp_path, monkeypatch, f):
    """export_repro(executor='nvfuser'): a one-segment region as its FusionDefinition, run in a fresh interpreter
    against eager (issue 17 item 5); also a region whose 0-d input the definition takes as a [1, 1] view."""
    import subprocess
    import sys

    import trace_lab

    if f is _gelu_tanh:
        args = (torch.randn(64, 128, device="cuda"), torch.randn(128, device="cuda"))
    else:
        args = (torch.tensor(2.0, device="cuda"), *(torch.randn(64, 64, device="cuda") for _ in range(2)))
    calls = record_definitions(monkeypatch)
    jfn = jit(f, fusion="dataflow", executor="nvfuser")
    torch.testing.assert_close(jfn(*args), f(*args))
    assert [bool(d.lifted) for d, _ in calls] == [f is _scaled_relu_written_over], [d.lift for d, _ in calls]
    region = next(str(n.target) for n in trace_lab.last_traces(jfn)[-1].ops if n.op == "call_module")
    path = trace_lab.export_repro(jfn, tmp_path / "repro_nv.py", region=region, executor="nvfuser")
    text = open(path).read()
    assert "FusionDefinition" in text and "def nvfuser_fusion" in text
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "repro: matches eager" in run.stdout, run.stdout + run.stderr


def test_lifted_0d_inputs_on_cuda_write_over_the_step_and_return_a_0d_value(monkeypatch):
    """A segment that writes over a 0-d CUDA tensor takes it as a [1] tensor with a broadcast dim
    (``nvfuser_region.lifted_inputs``); real nvFuser must accept the ``t.view([1])`` the runner hands over, write the
    new count through it, and give back the 0-d ``s * 2`` squeezed to 0-d; all against eager, over three calls."""
    calls = record_definitions(monkeypatch)

    def fn(s, x):
        s.copy_(s + 1)
        return x * s, s * 2

    s, x = torch.tensor(3.0, device="cuda"), torch.randn(4096, device="cuda")
    s_ref = s.clone()
    jfn = jit(fn, fusion="dataflow", executor="nvfuser")
    for _ in range(3):
        got, want = jfn(s, x), fn(s_ref, x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(s, s_ref)
    assert (1, (0,)) in [d.lift for d, _ in calls], [d.lift for d, _ in calls]


def _adam_two_shapes():
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=g).cuda()) for s in [(256, 64)] * 6 + [(1000,)] * 4]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).cuda()
    return torch.optim.Adam(params, lr=1e-2, foreach=False)


def _nvfuser_kernels(fn) -> int:
    """nvFuser kernels one call of ``fn`` launches (torch.profiler; nvFuser names its kernels ``nvfuser_...``)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "nvfuser" in e.name)


def test_batched_updates_on_cuda_match_eager_and_launch_fewer_kernels():
    """batch_updates (trace_lab/executors/nvfuser_batch.py) on real nvFuser: Adam over ten parameters of two shapes
    in one horizontal region runs as two stacked definitions; three steps equal eager's (parameters, moments,
    step counts), and a batched step launches one nvFuser kernel per group (its results written over their
    stacks, yet not split), where unbatched launches one or more per update. Also a shared weight that comes in
    strided (a matrix's column), taken dense."""
    kernels = {}
    for batch in (True, False):
        opt, ref = _adam_two_shapes(), _adam_two_shapes()
        jfn = jit(opt.step, fusion="horizontal", executor="nvfuser", batch_updates=batch)
        for _ in range(3):
            jfn()
            ref.step()
        for got, want in zip(_state(opt), _state(ref), strict=True):  # (compiled, Adam keeps its step count on
            torch.testing.assert_close(got.to(want.device), want)       # the parameter's device; eager, on the CPU)
        notes = [n for r in jfn.compilations() for n in r.all_notes() if "batched definitions (batch_updates)" in n]
        assert bool(notes) == batch, notes
        kernels[batch] = _nvfuser_kernels(jfn)
    print(f"nvFuser kernels a step: batched {kernels[True]}, unbatched {kernels[False]}")
    assert kernels[False] >= 10 and kernels[True] == 2, kernels

    def step(a, b, w, s):
        a.mul_(w * s)
        b.mul_(w * s)

    def make():
        g = torch.Generator().manual_seed(1)
        return tuple(t.cuda() for t in (torch.randn(64, generator=g), torch.randn(64, generator=g),
                                        torch.randn(64, 3, generator=g), torch.tensor(0.5)))

    got, want = make(), make()
    got, want = (*got[:2], got[2][:, 1], got[3]), (*want[:2], want[2][:, 1], want[3])
    jfn = jit(step, fusion="horizontal", executor="nvfuser")
    for _ in range(2):
        jfn(*got)
        step(*want)
    for x, y in zip(got, want, strict=True):
        torch.testing.assert_close(x, y)
    assert any("2 identical updates run as 1 batched definition" in n for r in jfn.compilations()
               for n in r.all_notes())


def _updates(ps, gs):
    for p, g in zip(ps, gs):
        p.mul_(0.9).add_(g, alpha=0.1)


def test_channels_last_parameters_batch_on_cuda_and_match_eager():
    """Adam over channels_last conv weights on real nvFuser: the runner makes their stacks dense as it makes them
    (nvfuser_batch.BatchedRunner), for the flat definition; three steps equal eager's, the weights stay
    channels_last, and the step runs batched. Plain updates of channels_last tensors: predict's price of their
    stacks is what the device measures."""
    def make():
        g = torch.Generator().manual_seed(3)
        params = [torch.nn.Parameter(torch.randn(8, 4, 3, 3, generator=g).cuda()
                                     .to(memory_format=torch.channels_last)) for _ in range(4)]
        for p in params:
            p.grad = torch.randn(p.shape, generator=g).cuda().to(memory_format=torch.channels_last)
        return torch.optim.Adam(params, lr=1e-2, foreach=False)

    opt, ref = make(), make()
    jfn = jit(opt.step, fusion="horizontal", executor="nvfuser")
    for _ in range(3):
        jfn()
        ref.step()
    for got, want in zip(_state(opt), _state(ref), strict=True):
        torch.testing.assert_close(got.to(want.device), want)
    assert all(p.is_contiguous(memory_format=torch.channels_last) for p in opt.param_groups[0]["params"])
    assert any("batched definition" in n for r in jfn.compilations() for n in r.all_notes())

    g = torch.Generator().manual_seed(5)
    lists = [[torch.randn(64, 32, 3, 3, generator=g).cuda().to(memory_format=torch.channels_last) for _ in range(4)]
             for _ in range(2)]
    copies = [[t.clone() for t in lst] for lst in lists]
    predicted, measured = _predicted_and_measured(_updates, lists, lambda: _updates(*copies))
    for got, want in zip(lists[0], copies[0], strict=True):
        torch.testing.assert_close(got, want)
    assert predicted > 0 and abs(predicted - measured) <= 0.01 * measured + 1024, (predicted, measured)


def _predicted_and_measured(fn, args, step_eager) -> tuple[int, int]:
    """(predict's horizontal + nvFuser peak of ``fn(*args)``, the peak a real run measures), the real run checked to
    batch; ``step_eager()`` takes the same steps eagerly beside it (the caller compares the results)."""
    import trace_lab

    pred = trace_lab.predict(fn, *args, strategies=["horizontal"], executor="nvfuser", device="cuda")
    jfn = jit(fn, fusion="horizontal", executor="nvfuser")
    jfn(*args)
    step_eager()
    with jfn.measuring():
        jfn(*args)
    step_eager()
    assert any("batched definition" in n for r in jfn.compilations() for n in r.all_notes())
    return pred.peak("horizontal", "inference"), jfn.measurements[-1].measured_peak_above_inputs


def test_predict_prices_batched_stacks_as_the_device_measures_them():
    """predict (run/predict.py) prices a horizontal region's batched updates by their stacks before anything
    compiles (nvfuser_batch.stack_workspace); a real run measures the region's workspace on the device. Adam over
    ten parameters of two shapes (two groups, whose results wait for one copy at the end), predicted through its
    bound step (a meta twin of the optimizer, made capturable as Dynamo makes the real one), and plain updates of
    a list; each predicted peak within the suite's tolerance of the measured one, and each real step equal to
    eager's."""

    opt, ref = _adam_two_shapes(), _adam_two_shapes()
    adam = _predicted_and_measured(opt.step, (), ref.step)
    for got, want in zip(_state(opt), _state(ref), strict=True):
        torch.testing.assert_close(got.to(want.device), want)

    g = torch.Generator().manual_seed(0)
    lists = [[torch.randn(1000, generator=g).cuda() for _ in range(6)] for _ in range(2)]
    copies = [[t.clone() for t in lst] for lst in lists]
    plain = _predicted_and_measured(_updates, lists, lambda: _updates(*copies))
    for got, want in zip(lists[0], copies[0], strict=True):
        torch.testing.assert_close(got, want)

    for predicted, measured in (adam, plain):
        assert predicted > 0 and abs(predicted - measured) <= 0.01 * measured + 1024, (predicted, measured)

def test_default_options_run_adam_as_batched_updates_on_cuda():
    """``fusion="auto"`` on CUDA with nvFuser: Adam.step's program is only identical updates, so auto picks
    horizontal regions (run/jit.py resolve_fusion) and the updates run batched; two steps equal eager's."""
    opt, ref = _adam_two_shapes(), _adam_two_shapes()
    jfn = jit(opt.step)
    for _ in range(2):
        jfn()
        ref.step()
    for got, want in zip(_state(opt), _state(ref), strict=True):
        torch.testing.assert_close(got.to(want.device), want)
    (record,) = jfn.compilations()
    assert record.executor == "nvfuser" and record.fusion == "horizontal", record.reasons
    assert "the program is 10 identical independent updates of its inputs" in record.reasons[1], record.reasons
    assert any("10 identical updates run as 2 batched definitions" in n for n in record.all_notes()), \
        record.all_notes()


def _state(opt):
    return [t.detach().clone() for g in opt.param_groups for p in g["params"] for t in (p, *opt.state[p].values())]
