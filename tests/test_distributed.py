"""FSDP trace transform + sort_waits on 2 gloo processes (CPU), against single-process eager.

One ``run_distributed`` call runs every scenario in both workers (process start
and compilation dominate the cost); the tests assert on the plain data it returns.
"""
from __future__ import annotations

import collections
import contextlib
import math
import re

import pytest
import torch

import trace_lab
import trace_lab.distributed as tld
from examples import workloads
from tests.dist_helpers import collective_bytes as _collective_bytes, schedule_facts

pytestmark = pytest.mark.distributed

CONFIGS = [("zero2", False), ("zero2", True), ("zero3", False), ("zero3", True)]


def _projection(shape):
    g = torch.Generator().manual_seed(1)
    return torch.randn(shape, generator=g)


def _decoder_scenarios():
    """Runs in each worker: eager reference once, then every FSDP configuration."""
    ctx = tld.current()
    ref_model, (x,) = workloads.get("llama2").make("cpu", "small")
    proj = _projection(ref_model(x).shape)
    ref_model.zero_grad()
    ref_loss = (ref_model(x) * proj).sum() / x.shape[0]
    ref_loss.backward()
    ref = {n: tld.shard_of(p.grad, ctx.rank, ctx.world_size) for n, p in ref_model.named_parameters()}
    xs, ps = x.chunk(ctx.world_size)[ctx.rank], proj.chunk(ctx.world_size)[ctx.rank]
    out = {"ref_loss": ref_loss.item(), "configs": {}}
    for mode, sort in CONFIGS:
        model, _ = workloads.get("llama2").make("cpu", "small")
        tld.shard_module(model)
        jfn = trace_lab.jit(model, fsdp=mode, sort_waits=sort, executor="eager")
        loss = (jfn(xs) * ps).sum() / xs.shape[0]
        loss.backward()
        mean_loss = loss.detach().clone()
        torch.distributed.all_reduce(mean_loss)
        shards = tld.sharded_parameters(model)
        fw, bw = trace_lab.last_traces(jfn), trace_lab.last_backward_traces(jfn)
        out["configs"][(mode, sort)] = {
            "loss": mean_loss.item() / ctx.world_size,
            "grads": {n: s.grad.clone() for n, s in shards.items()},
            "stages": ([t.stage for t in fw], [t.stage for t in bw]),
            "forward": schedule_facts(fw[-1]), "backward": schedule_facts(bw[-1]),
            "forward_text": str(fw[-1]) if ctx.rank == 0 else "",
            "peaks": (fw[-1].liveness(True).peak_above_inputs_bytes, bw[-1].liveness(True).peak_above_inputs_bytes),
            "n_params": len(shards),
        }
    out["ref_grads"] = ref
    layer_of = (lambda name: re.match(r"layers\.\d+\.", name))
    per_layer = collections.Counter(layer_of(n).group(0) for n, _ in ref_model.named_parameters() if layer_of(n))
    out["weights_per_layer"] = max(per_layer.values())
    return out


@pytest.fixture(scope="module")
def decoder_runs():
    run = tld.run_distributed(_decoder_scenarios, nproc=2, device="cpu", timeout_s=240)
    assert [r.rank for r in run.results] == [0, 1]
    return run.values


@pytest.mark.parametrize("mode,sort", CONFIGS)
def test_fsdp_decoder_matches_single_process_eager(decoder_runs, mode, sort):
    for rank, v in enumerate(decoder_runs):
        c = v["configs"][(mode, sort)]
        assert math.isclose(c["loss"], v["ref_loss"], rel_tol=1e-5, abs_tol=1e-6), (rank, c["loss"], v["ref_loss"])
        assert set(c["grads"]) == set(v["ref_grads"]) and c["n_params"] == 15
        for name, g in c["grads"].items():
            torch.testing.assert_close(g, v["ref_grads"][name], rtol=1e-4, atol=1e-5, msg=f"rank {rank} {name}")


@pytest.mark.parametrize("mode", ["zero2", "zero3"])
def test_sort_waits_changes_order_not_results(decoder_runs, mode):
    for v in decoder_runs:
        on, off = v["configs"][(mode, True)], v["configs"][(mode, False)]
        assert on["loss"] == off["loss"]
        for name in on["grads"]:
            assert torch.equal(on["grads"][name], off["grads"][name]), name
        # the fusion pass (when present) always runs last; the collectives' passes come first
        def passes(stages):
            return tuple([s for s in st if s != "fusion"] for st in stages)

        assert passes(off["stages"]) == (["as captured", "fsdp"], ["as captured", "fsdp"])
        assert passes(on["stages"]) == (["as captured", "fsdp", "sort_waits"], ["as captured", "fsdp", "sort_waits"])
        for part in ("forward", "backward"):
            f_off, f_on = off[part], on[part]
            assert f_off["waits"] and len(f_off["waits"]) == len(f_on["waits"])
            # off: every wait right after its collective
            assert all(w["wait_pos"] == w["collective_pos"] + 1 for w in f_off["waits"])
            # on: every wait just before its first consumer (only its own views between)
            assert all(w["only_views_between"] for w in f_on["waits"])
            assert any(w["wait_pos"] > w["collective_pos"] + 1 for w in f_on["waits"])
            # gathers issued in the order their results are consumed
            assert f_on["gather_consumer_order"] == sorted(f_on["gather_consumer_order"])


def test_zero2_and_zero3_collectives(decoder_runs):
    v = decoder_runs[0]["configs"]
    z2, z3 = v[("zero2", True)], v[("zero3", True)]
    assert z2["forward"]["gathers"] == z3["forward"]["gathers"] == 15
    assert z2["backward"]["gathers"] == 0  # ZeRO-2 keeps gathered parameters for the backward
    assert z3["backward"]["gathers"] >= 14  # ZeRO-3 gathers again (the last norm weight is not needed)
    assert z2["backward"]["reduce_scatters"] == z3["backward"]["reduce_scatters"] == 15
    # ZeRO-3's default in-flight limit is one layer's gathers: llama2's layers each read 7 weights (attn_norm,
    # wqkv, wo, mlp_norm, w1, w3, w2), counted here from the parameter names; ZeRO-2 issues every gather up front
    per_layer = decoder_runs[0]["weights_per_layer"]
    assert per_layer == 7
    assert z3["forward"]["peak_inflight_gathers"] == per_layer and z3["backward"]["peak_inflight_gathers"] <= per_layer
    assert z2["forward"]["peak_inflight_gathers"] == 15
    assert "all_gather_into_tensor" in z3["forward_text"] and "wait_tensor" in z3["forward_text"]


class _Chain(torch.nn.Module):
    """8 bias-free Linear(64, 64): each weight 16 KiB gathered, 8 KiB per shard."""

    def __init__(self, layers=8, d=64):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(d, d, bias=False) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def _memory_scenarios():
    ctx = tld.current()
    out = {}
    for mode, limit in (("zero2", None), ("zero3", 1), ("zero3", 2), ("zero3", None)):
        torch.manual_seed(0)
        model = tld.shard_module(_Chain())
        x = torch.randn(4, 64)
        report = trace_lab.inspect(model, x, fsdp=mode, executor="eager", runs=0, max_inflight_gathers=limit)
        fw, bw = report.traces("forward")[-1], report.traces("backward")[-1]
        out[(mode, limit)] = {"fw": fw.liveness(True).peak_above_inputs_bytes,
                              "bw": bw.liveness(True).peak_above_inputs_bytes,
                              "bw_high_water": bw.liveness(True).peak_bytes,
                              "comm_bytes": {"forward": _collective_bytes(fw), "backward": _collective_bytes(bw)},
                              "ok": report.ok, "memory": report.memory, "rank": ctx.rank}
    # the notebook path: a source string run in each worker, with the report sent back
    return out


def test_zero3_predicted_peak_below_zero2_by_hand():
    run = tld.run_distributed(_memory_scenarios, nproc=2, device="cpu", timeout_s=180)
    v = run.values[0]
    W = 64 * 64 * 4  # one gathered weight, 16 KiB
    act = 4 * 64 * 4  # one activation, 1 KiB
    for key, r in v.items():
        assert r["ok"], key  # differential check against eager of the same sharded module
    z2, z3_1, z3_2, z3_inf = v[("zero2", None)], v[("zero3", 1)], v[("zero3", 2)], v[("zero3", None)]
    # ZeRO-2 forward keeps all 8 gathered weights (saved for the backward): at least 8 W above inputs.
    assert z2["fw"] >= 8 * W
    # ZeRO-3 forward with limit k holds the weight in use plus k in flight: (k + 1) W plus activations
    # (8 saved relu outputs + 1 temporary, 1 KiB each), never more.
    assert z3_1["fw"] <= 2 * W + 9 * act
    assert z3_2["fw"] <= 3 * W + 9 * act
    assert z3_1["fw"] < z3_2["fw"] < z3_inf["fw"] <= z2["fw"]
    # backward: ZeRO-2 is handed all 8 gathered weights (saved for it) and frees each after its last use;
    # ZeRO-3 re-gathers them. Compared by high-water mark, inputs included ('above inputs' no longer
    # compares: ZeRO-2's inputs die during the call). The in-flight limit orders the forward's gathers
    # only, so every ZeRO-3 backward peaks alike, above ZeRO-2's (whose weights die one by one) by less
    # than the 8 weights it re-gathers.
    assert z2["bw_high_water"] >= 8 * W
    assert z3_1["bw_high_water"] == z3_2["bw_high_water"] == z3_inf["bw_high_water"]
    assert z2["bw_high_water"] < z3_1["bw_high_water"] <= z2["bw_high_water"] + 8 * W
    # predicted vs measured (CPU allocator events) for every program. gloo stages collectives through
    # its own buffers, allocated on the caller's allocator and released by its worker thread when the
    # work completes; the model cannot see those, so measured may exceed predicted by at most the
    # program's collective bytes, and the model must never over-predict.
    for r in v.values():
        assert len(r["memory"]) == 2
        for m in r["memory"]:
            measured, predicted = m["measured_peak_above_inputs_bytes"], m["predicted_peak_above_inputs_bytes"]
            assert measured is not None, m
            assert predicted - 4096 <= measured <= predicted + r["comm_bytes"][m["kind"]] + 4096, m


def test_run_distributed_source_and_report():
    source = (
        "import torch, trace_lab, trace_lab.distributed as tld\n"
        "t = torch.full((3,), float(rank + 1))\n"
        "torch.distributed.all_reduce(t)\n"
        "torch.manual_seed(0)\n"
        "model = tld.shard_module(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)))\n"
        "report = trace_lab.inspect(model, x, fsdp='zero3', executor='eager', runs=2)\n"
        "result = {'sum': t.tolist(), 'rank': rank, 'world': world_size}\n"
    )
    run = tld.run_distributed(source, nproc=2, namespace={"x": torch.randn(2, 8)}, device="cpu", timeout_s=120)
    assert run.backend == "gloo" and run.nproc == 2
    assert [v["sum"] for v in run.values] == [[3.0, 3.0, 3.0]] * 2
    assert [v["rank"] for v in run.values] == [0, 1]
    rep = run.report
    assert rep["options"]["fsdp"] == "zero3" and rep["comparison"]["ok"]
    tl = rep["view"]["timeline"]["programs"]  # the view model carries the timeline
    assert [t["kind"] for t in tl] == ["forward", "backward"]
    assert tl[0]["comm_seconds"] > 0 and 0 <= tl[0]["overlap_fraction"] <= 1
    assert "gather hidden" in rep["view"]["timeline"]["table"]
    assert set(run.timings) == {0, 1} and all(len(t["run_seconds"]) == 2 for t in run.timings.values())


def _fails():
    if tld.current().rank == 1:
        raise ValueError("boom on rank 1")
    return 1


def test_the_error_quoted_is_the_failing_ranks_not_the_peer_that_lost_it():
    """CI, 2026-11-29: rank 1 raised in the target and exited while rank 0 was still connecting; rank 0 then failed
    with gloo's "Connection closed by peer ... typically caused by a remote worker crashing", and the launcher quoted
    rank 0 (the lower rank) instead of the error that caused it. Where every rank fails on its own, the lowest
    is quoted, as before."""
    from trace_lab.distributed.launcher import RankResult, _first_failure

    lost = RankResult(rank=0, error="RuntimeError: Gloo connectFullMesh failed with ... Connection closed by peer "
                                    "[127.0.0.1]:61618. This is typically caused by a remote worker crashing.")
    boom = RankResult(rank=1, error="ValueError: boom on rank 1")
    assert _first_failure([lost, boom]) is boom and _first_failure([boom, lost]) is boom
    a, b = RankResult(rank=0, error="ValueError: a"), RankResult(rank=1, error="ValueError: b")
    assert _first_failure([b, a]) is a
    assert _first_failure([lost]) is lost


def test_run_distributed_reports_a_failing_rank():
    with pytest.raises(trace_lab.TraceLabError, match="(?s)rank 1 failed.*boom on rank 1"):
        tld.run_distributed(_fails, nproc=2, device="cpu", timeout_s=60)


def _waits_for_rank_0():
    """Rank 1 never reaches the barrier rank 0 waits in: a hang in a collective."""
    import time

    import torch.distributed as dist

    if tld.current().rank == 0:
        dist.barrier()
    else:
        time.sleep(60)


def test_a_launch_that_times_out_says_where_each_rank_was():
    with pytest.raises(trace_lab.TraceLabError) as err:
        tld.run_distributed(_waits_for_rank_0, nproc=2, device="cpu", timeout_s=8)
    text = str(err.value)
    assert "timed out after 8 s with 2 rank(s) still running" in text, text
    assert re.search(r"(?s)rank 0 was at:.*barrier.*_waits_for_rank_0", text), text
    assert re.search(r"(?s)rank 1 was at:.*_waits_for_rank_0", text), text


def _threads():
    return torch.get_num_threads()


def test_cpu_ranks_take_no_more_threads_than_the_launcher(monkeypatch):
    """Each CPU rank gets its share of the cores, and no more threads than the process that launched it uses."""
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 16)  # the GPU host's: 8 a rank before (session 33)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)  # as the launcher reads it; the ranks read their own
    run = tld.run_distributed(_threads, nproc=2, device="cpu", timeout_s=60)
    assert run.values == [1, 1], run.values


def _aborts_once(marker):
    """Rank 1 aborts (SIGABRT, as a gloo rank's heap check once did) the first time only."""
    import os
    import pathlib

    if tld.current().rank == 1 and not pathlib.Path(marker).exists():
        pathlib.Path(marker).write_text("aborted once")
        os.abort()
    return tld.current().rank


def test_a_rank_killed_by_a_signal_runs_the_launch_again_once_and_says_so(tmp_path):
    run = tld.run_distributed(_aborts_once, nproc=2, args=(str(tmp_path / "a"),), device="cpu", timeout_s=60)
    assert run.values == [0, 1]
    assert len(run.notes) == 1 and "rank 1 died (exit code -6: SIGABRT) without reporting on attempt 1" in run.notes[0]
    with pytest.raises(trace_lab.TraceLabError, match=r"rank 1 died \(exit code -6: SIGABRT\) without reporting$"):
        tld.run_distributed(_aborts_once, nproc=2, args=(str(tmp_path / "b"),), device="cpu", timeout_s=60,
                            retry_crashed=0)


def _says_then_aborts_once(marker):
    """Rank 0 warns on stderr; rank 1 writes a native message to stderr and aborts, the first time only (a gloo
    rank's heap check wrote 'malloc(): unaligned tcache chunk detected', GPU check of 2026-12-07)."""
    import os
    import pathlib
    import sys

    if tld.current().rank == 0:
        print("rank 0 warns", file=sys.stderr)
    if tld.current().rank == 1 and not pathlib.Path(marker).exists():
        pathlib.Path(marker).write_text("aborted once")
        os.write(2, b"malloc(): unaligned tcache chunk detected\n")
        os.abort()
    return tld.current().rank


def test_a_crashed_attempts_stderr_goes_to_the_note_and_the_kept_attempts_to_the_caller(tmp_path, capfd):
    run = tld.run_distributed(_says_then_aborts_once, nproc=2, args=(str(tmp_path / "a"),), device="cpu",
                              timeout_s=60)
    assert run.values == [0, 1]
    assert len(run.notes) == 1 and ("rank 1 died (exit code -6: SIGABRT) without reporting (its last words on "
                                    "stderr: 'malloc(): unaligned tcache chunk detected') on attempt 1") in run.notes[0]
    err = capfd.readouterr().err
    assert "tcache" not in err, err  # the dead attempt's words are in the note, not on the caller's stderr
    assert err.count("rank 0 warns") == 1, err  # the attempt kept relays what its ranks wrote


def test_fsdp_needs_a_process_group_to_shard():
    with pytest.raises(trace_lab.TraceLabError, match="init_process_group"):
        tld.shard_module(torch.nn.Linear(2, 2))


def _module_level_target():
    return 1


def test_auto_start_method_forks_only_what_cannot_be_pickled():
    from trace_lab.distributed.launcher import _auto_start_method

    every = ["fork", "spawn", "forkserver"]
    assert _auto_start_method("cpu", (_module_level_target, (), None, None), every) == "forkserver"
    assert _auto_start_method("cpu", ("result = rank", (), None, {"n": 3}), every) == "forkserver"
    assert _auto_start_method("cpu", (lambda: 1, (), None, None), every) == "fork"  # a lambda does not pickle
    assert _auto_start_method("cpu", (_module_level_target, (), None, None), ["fork", "spawn"]) == "fork"
    assert _auto_start_method("cuda", (_module_level_target, (), None, None), every) == "spawn"


def _keep_last_scenario():
    """Runs in each worker: llama2 under ZeRO-3 + sorting, with and without fsdp_bench's ``+keeplast`` hook."""
    from trace_lab.run.jit import joint_graph_hook
    from script_loader import load_script

    bench = load_script("benchmarks/fsdp_bench.py")
    ctx = tld.current()
    ref_model, (x,) = workloads.get("llama2").make("cpu", "small")
    proj = _projection(ref_model(x).shape)
    ((ref_model(x) * proj).sum() / x.shape[0]).backward()  # eager PyTorch, one process, the whole batch
    out = {"ref_grads": {n: tld.shard_of(p.grad, ctx.rank, ctx.world_size) for n, p in ref_model.named_parameters()}}
    xs, ps = x.chunk(ctx.world_size)[ctx.rank], proj.chunk(ctx.world_size)[ctx.rank]
    for keep in (False, True):
        model, _ = workloads.get("llama2").make("cpu", "small")
        tld.shard_module(model)
        with joint_graph_hook(bench.keep_last_layer_gathered) if keep else contextlib.nullcontext():
            jfn = trace_lab.jit(model, fsdp="zero3", executor="eager")
        ((jfn(xs) * ps).sum() / xs.shape[0]).backward()
        bw = trace_lab.last_backward_traces(jfn)[-1]
        gathered = sorted(bw.name(n.args[0]) for n in bw.ops if n.op == "call_function"
                          and n.target is torch.ops._c10d_functional.all_gather_into_tensor.default)
        out[keep] = {"grads": {n: s.grad.clone() for n, s in tld.sharded_parameters(model).items()},
                     "backward_gathers": gathered}
    return out


def test_fsdp_bench_keeplast_saves_the_last_layers_gathers_and_changes_no_gradient():
    """fsdp_bench's ``zero3+sort+keeplast`` experiment: the backward no longer gathers any of layer 1's weights
    (llama2's last layer; plain ZeRO-3 gathers both layers' 7 again, 14), so at most 7 gathers are left (which ones
    is the partitioner's choice); every shard's gradient is the plain ZeRO-3 run's and eager PyTorch's."""
    run = tld.run_distributed(_keep_last_scenario, nproc=2, device="cpu", timeout_s=240)
    for v in run.values:
        plain, kept = v[False], v[True]
        assert len(plain["backward_gathers"]) == 14 and sum("layers_1_" in n for n in plain["backward_gathers"]) == 7
        assert not any("layers_1_" in name for name in kept["backward_gathers"]), kept["backward_gathers"]
        assert 0 < len(kept["backward_gathers"]) <= 7, kept["backward_gathers"]
        for name, g in plain["grads"].items():
            torch.testing.assert_close(kept["grads"][name], g, rtol=1e-5, atol=1e-6, msg=name)
            torch.testing.assert_close(kept["grads"][name], v["ref_grads"][name], rtol=1e-4, atol=1e-5, msg=name)


def _rank():
    return tld.current().rank


def test_a_rendezvous_that_loses_a_peer_runs_the_launch_again_once_and_says_so(tmp_path, monkeypatch):
    """Rank 1 loses its peer while connecting, the first time only (what gloo said in CI); no target ran, so the
    launch runs again. Forked ranks see this process's patch of init_process_group."""
    import pathlib

    import torch.distributed as dist

    real = dist.init_process_group
    marker = pathlib.Path(tmp_path / "lost")

    def init(*a, rank=None, **k):
        if rank == 1 and not marker.exists():
            marker.write_text("lost once")
            raise RuntimeError("Gloo connectFullMesh failed with ... Connection closed by peer [127.0.0.1]:1")
        return real(*a, rank=rank, **k)

    monkeypatch.setattr(dist, "init_process_group", init)
    run = tld.run_distributed(_rank, nproc=2, device="cpu", timeout_s=60, start_method="fork")
    assert run.values == [0, 1]
    assert len(run.notes) == 1 and "rendezvous failed before the target ran" in run.notes[0], run.notes
    assert "Connection closed by peer" in run.notes[0] and "the launch ran again" in run.notes[0]


def _fails_with_a_lost_peer():
    raise RuntimeError("Connection closed by peer")  # said by the target itself, after the rendezvous


def test_a_target_that_fails_with_a_lost_peer_is_not_run_again():
    with pytest.raises(trace_lab.TraceLabError, match=r"(?s)rank 0 failed:.*Connection closed by peer") as e:
        tld.run_distributed(_fails_with_a_lost_peer, nproc=2, device="cpu", timeout_s=60)
    assert "ran again" not in str(e.value)
