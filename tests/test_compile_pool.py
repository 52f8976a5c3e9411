"""Distinct regions compiled side by side (trace_lab.executors.compile_pool, issue 27 item 3).

The pool: results by key, a failure handed back as the exception (not raised on a worker thread), progress
in the caller's thread, jobs interleaving only where the lock is let go. Inductor through it: a program
whose distinct regions compile on several threads matches eager (outputs and gradients) and measures as
predicted, with the fusion cache on and off; process-wide flags Inductor sets during a compile are as they
were afterwards; a failing region is still named in the error."""
from __future__ import annotations

import threading

import pytest
import torch

import trace_lab
from examples import workloads
from trace_lab.executors import compile_pool
from trace_lab.executors.compile_pool import compile_all


def test_results_by_key_failures_handed_back_progress_in_the_callers_thread():
    caller = threading.get_ident()
    progress = []

    def compile_one(job):
        if job == "bad":
            raise ValueError("cannot compile this one")
        return job.upper(), threading.get_ident()

    results = compile_all({1: "a", 2: "bad", 3: "c"}, compile_one, threads=3,
                          on_done=lambda done, total, key: progress.append((done, total, threading.get_ident())))
    assert results[1][0][0] == "A" and results[3][0][0] == "C"
    assert isinstance(results[2][0], ValueError) and "cannot compile" in str(results[2][0])
    assert all(seconds >= 0 for _, seconds in results.values())
    assert [p[:2] for p in progress] == [(1, 3), (2, 3), (3, 3)]
    assert {p[2] for p in progress} == {caller}
    assert results[1][0][1] != caller  # compiled on a pool thread


def test_jobs_interleave_only_where_the_lock_is_let_go():
    """The job that starts first lets the lock go while it waits for the other to finish; the other runs its
    whole body meanwhile. Without the release the first would wait forever (its 30 s timeout fails the test);
    with it the order is first-start, second-start, second-end, first-end."""
    order, ends = [], {"a": threading.Event(), "b": threading.Event()}
    holder = {}

    def releasing(lock):
        import contextlib

        holder["lock"] = lock
        return contextlib.nullcontext()

    def compile_one(job):
        first = not order
        order.append(f"{job}-start")
        if first:
            other = "b" if job == "a" else "a"
            with holder["lock"].released():
                assert ends[other].wait(timeout=30), f"{other} never ran while {job} waited"
        order.append(f"{job}-end")
        ends[job].set()
        return job

    results = compile_all({"a": "a", "b": "b"}, compile_one, threads=2, releasing=releasing)
    assert {k: v for k, (v, _) in results.items()} == {"a": "a", "b": "b"}
    x, y = order[0][0], order[1][0]
    assert x != y and order == [f"{x}-start", f"{y}-start", f"{y}-end", f"{x}-end"]


def _flags():
    import torch._functorch.config as functorch_config
    import torch.fx._lazy_graph_module as lazy
    import torch.fx.traceback as fx_traceback

    return (lazy._use_lazy_graph_module_flag, fx_traceback.should_preserve_node_meta,
            functorch_config.unlift_effect_tokens)


@pytest.mark.parametrize("fusion_cache", [True, False])
def test_llama_regions_compiled_side_by_side_match_eager_and_measure_as_predicted(monkeypatch, fusion_cache):
    monkeypatch.setattr(compile_pool, "THREADS", 4)
    import trace_lab.executors.inductor as inductor_module

    monkeypatch.setattr(inductor_module, "THREADS", 4)
    calls = []
    real = compile_pool.compile_all

    def counting(jobs, *a, **kw):
        calls.append(len(jobs))
        return real(jobs, *a, **kw)

    monkeypatch.setattr(inductor_module, "compile_all", counting)
    before = _flags()
    fn, args = workloads.get("llama2").make("cpu", "small")
    report = trace_lab.inspect(fn, *args, fusion="dataflow", executor="inductor", runs=0, fusion_cache=fusion_cache)
    assert report.ok, report.comparison  # outputs and every parameter's gradient against eager
    for m in report.memory:
        assert 0 <= m["measured_peak_above_inputs_bytes"] - m["predicted_peak_above_inputs_bytes"] <= 64, m
    assert _flags() == before
    assert calls and max(calls) > 1  # several regions went to the pool at once
    for kind in ("forward", "backward"):
        regions = report.programs[0][kind]["regions"]
        compiled = [r for r in regions if not r["cache_hit"]]
        # a compile is a signature and the inputs it writes over (in-place donation: at most two per signature)
        # (with the cache, a region that runs another's code compiles nothing: cover_regions)
        keys = {(r["signature"], tuple(r.get("in_place_over", ()))) for r in regions if not r.get("runs_code_of")}
        assert len(compiled) == (len(keys) if fusion_cache else len(regions)), kind
        assert all(r["compile_seconds"] > 0 for r in compiled), kind


def test_a_failing_region_in_the_pool_is_named(monkeypatch):
    import trace_lab.executors.inductor as inductor_module

    real = inductor_module.compile_region

    def second_fails(sub, input_vals, disable_inductor_caches=False, settings=True, donated=()):
        if any(n.target == torch.ops.aten.exp.default for n in sub.graph.nodes):
            raise RuntimeError("no kernel for exp\nmore")
        return real(sub, input_vals, disable_inductor_caches, settings, donated)

    monkeypatch.setattr(inductor_module, "compile_region", second_fails)

    def two_regions(x, w):
        return torch.exp(torch.mm(torch.relu(x), w)).sum()

    jfn = trace_lab.jit(two_regions, fusion="dataflow", executor="inductor")
    with pytest.raises(trace_lab.TraceLabError, match=r"Inductor could not compile fused region fusion\d+ .*aten.exp"
                                                      r".*RuntimeError: no kernel for exp\. executor='eager'"):
        jfn(torch.randn(8, 8), torch.randn(8, 8))
