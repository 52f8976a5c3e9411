"""Measured communication (wait stalls + calibrated collectives) on 2 gloo processes.

Never asserts on time: only that the numbers exist, are finite and in range, that
one stall is recorded per executed wait (counted from the traces independently of
the hook), and that instrumenting changes no result.
"""
from __future__ import annotations

import math
import re

import pytest
import torch

import trace_lab
import trace_lab.distributed as tld
from examples import workloads

pytestmark = pytest.mark.distributed

WAIT = torch.ops._c10d_functional.wait_tensor.default


def _waits_in(trace) -> int:
    return sum(1 for n in trace.graph.nodes if n.op == "call_function" and n.target is WAIT)


def _projection(shape):
    return torch.randn(shape, generator=torch.Generator().manual_seed(1))


def _scenarios():
    from trace_lab.distributed.comm_measure import measure_comm
    import trace_lab.report.distributed_report  # noqa: F401 - a forkserver worker imports what it uses
    from trace_lab.runtime import wait_hook

    ctx = tld.current()
    ref_model, (x,) = workloads.get("llama2").make("cpu", "small")
    proj = _projection(ref_model(x).shape)
    ref_model.zero_grad()
    ((ref_model(x) * proj).sum() / x.shape[0]).backward()
    ref = {n: tld.shard_of(p.grad, ctx.rank, ctx.world_size) for n, p in ref_model.named_parameters()}
    xs, ps = x.chunk(ctx.world_size)[ctx.rank], proj.chunk(ctx.world_size)[ctx.rank]
    out = {"ref_grads": ref, "configs": {}}
    for mode, sort in (("zero3", True), ("zero2", False)):
        model, _ = workloads.get("llama2").make("cpu", "small")
        tld.shard_module(model)
        shards = tld.sharded_parameters(model)
        jfn = trace_lab.jit(model, fsdp=mode, sort_waits=sort, executor="eager")
        runs = []

        def step():
            for s in shards.values():
                s.grad = None
            loss = (jfn(xs) * ps).sum() / xs.shape[0]
            loss.backward()
            runs.append((loss.item(), {n: s.grad.clone() for n, s in shards.items()}))

        step()  # uninstrumented
        comm = measure_comm(step, "cpu", jfn=jfn, steps=2, reps=2, iter_seconds=0.5)
        fw, bw = trace_lab.last_traces(jfn)[-1], trace_lab.last_backward_traces(jfn)[-1]
        out["configs"][(mode, sort)] = {"runs": runs, "comm": comm, "waits": (_waits_in(fw), _waits_in(bw)),
                                        "hook_after": wait_hook.current_hook()}
    # the Report path: inspect in a multi-process run measures, the timeline carries it
    torch.manual_seed(0)
    small = tld.shard_module(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)))
    report = trace_lab.inspect(small, torch.randn(2, 8), fsdp="zero3", executor="eager", runs=1)
    out["report"] = report.to_dict()
    out["report_str"] = str(trace_lab.report.distributed_report.DistributedReport.from_ranks(
        [{"report": out["report"], "rank_summary": {"rank": 0, "first_run_seconds": 0.0}}],
        {"nproc": 2, "backend": "gloo", "device": "cpu", "fsdp": "zero3"}))
    return out


@pytest.fixture(scope="module")
def runs():
    import trace_lab.report.distributed_report  # noqa: F401 - used inside the workers

    return tld.run_distributed(_scenarios, nproc=2, device="cpu", timeout_s=240).values


def _finite(x):
    return isinstance(x, float) and math.isfinite(x)


@pytest.mark.parametrize("config", [("zero3", True), ("zero2", False)])
def test_instrumenting_changes_no_result(runs, config):
    for v in runs:
        c = v["configs"][config]
        assert len(c["runs"]) == 3  # 1 plain + 2 instrumented
        (loss0, grads0), *instrumented = c["runs"]
        for loss, grads in instrumented:
            assert loss == loss0
            assert all(torch.equal(grads[n], grads0[n]) for n in grads0)
        for name, g in grads0.items():  # and the plain run matches single-process eager
            torch.testing.assert_close(g, v["ref_grads"][name], rtol=1e-4, atol=1e-5, msg=name)
        assert c["hook_after"] is None  # the recorder uninstalled itself


@pytest.mark.parametrize("config", [("zero3", True), ("zero2", False)])
def test_one_stall_per_executed_wait_and_finite_fractions(runs, config):
    for v in runs:
        c = v["configs"][config]
        comm, (fw_waits, bw_waits) = c["comm"], c["waits"]
        assert comm["steps"] == 2 and fw_waits > 0 and bw_waits > 0
        assert len(comm["waits"]) == comm["total"]["waits"] == 2 * (fw_waits + bw_waits)
        by_part = {p["kind"]: p for p in comm["parts"]}
        assert by_part["forward"]["waits"] == 2 * fw_waits and by_part["backward"]["waits"] == 2 * bw_waits
        assert {p["program"] for p in comm["parts"]} == {0}
        assert all(_finite(w["stall_seconds"]) and w["stall_seconds"] >= 0 for w in comm["waits"])
        assert {w["collective"] for w in comm["waits"]} == {"all_gather", "reduce_scatter"}
        # an all-gather reads a parameter shard (the fsdp pass's placeholders are named <parameter>_shard)
        assert all(w["reads"].endswith("_shard") for w in comm["waits"] if w["collective"] == "all_gather"), \
            sorted({w["reads"] for w in comm["waits"] if w["collective"] == "all_gather"})
        # the most exposed waits are executed waits, ranked by stall
        exposed = comm["most_exposed"]
        # each named as the printed trace names its line (t<n>), as the trace view shows it
        assert all(re.fullmatch(r"t\d+", e["line"]) for e in exposed), [e["line"] for e in exposed]
        assert exposed and {e["wait"] for e in exposed} <= {w["wait"] for w in comm["waits"]}
        assert [e["stall_seconds"] for e in exposed] == sorted((e["stall_seconds"] for e in exposed), reverse=True)
        # ZeRO-2 gathers only in the forward; ZeRO-3 gathers again in the backward
        bw_gathers = by_part["backward"]["waits_by_kind"]["all_gather"]
        assert (bw_gathers > 0) if config[0] == "zero3" else (bw_gathers == 0)
        # every executed collective was calibrated (same kind, shape, dtype, group), each time > 0
        assert sum(k["executed"] for k in comm["calibration"]) == len(comm["waits"])
        assert all(_finite(k["seconds"]) and k["seconds"] > 0 for k in comm["calibration"])
        for part in comm["parts"] + [comm["total"]]:
            assert _finite(part["exposed_comm_seconds"]) and _finite(part["intrinsic_comm_seconds"])
            for key in ("hidden_fraction", "all_gather_hidden_fraction"):
                if part is comm["total"] or part["waits_by_kind"]["all_gather"]:
                    assert 0.0 <= part[key] <= 1.0, (key, part[key])
        assert comm["iter_seconds"] == 0.5 and len(comm["instrumented_step_seconds"]) == 2


@pytest.mark.parametrize("config", [("zero3", True), ("zero2", False)])
def test_the_peer_free_stall_is_each_waits_least_over_the_ranks(runs, config):
    """Both ranks compute the same peer-free total, and no wait's stall in it exceeds either rank's own."""
    mine = [v["configs"][config]["comm"] for v in runs]
    free = [c["total_min_over_ranks"] for c in mine]
    assert free[0] is not None and free[0] == free[1]
    for c in mine:
        for kind, stall in free[0]["stall_seconds"].items():
            assert 0.0 <= stall <= c["total"]["stall_seconds"][kind] + 1e-12, (kind, stall)
        assert free[0]["intrinsic_seconds"] == c["total"]["intrinsic_seconds"]
        assert free[0]["waits"] == c["total"]["waits"]
    ranks = [[w["stall_seconds"] for w in c["waits"]] for c in mine]
    assert free[0]["exposed_comm_seconds"] == pytest.approx(sum(map(min, zip(*ranks))) / 2)  # 2 steps


def test_multi_process_report_timeline_carries_the_measurement(runs):
    rep = runs[0]["report"]
    assert rep["comparison"]["ok"]
    assert rep["comm"]["total"]["waits"] > 0
    tl = rep["view"]["timeline"]  # the view model carries the timeline
    assert tl["measured"]["total"]["waits"] == rep["comm"]["total"]["waits"]
    assert [t["kind"] for t in tl["programs"]] == ["forward", "backward"]  # the estimated lanes stay
    assert "#0 forward (estimated)" in tl["table"] and "#0 forward (measured)" in tl["table"]
    assert "step total" in tl["table"]
    assert "timeline (rank 0, estimated, measured)" in runs[0]["report_str"]


def test_one_process_report_has_no_measurement():
    from trace_lab.report.timeline import report_timeline

    report = trace_lab.inspect(lambda x: x.sin() * 2, torch.randn(3), runs=0, check=False)
    assert report.comm is None and "measured" not in report_timeline(report)


def test_no_hook_call_for_programs_without_waits():
    from trace_lab.distributed.comm_measure import WaitStallRecorder

    jfn = trace_lab.jit(lambda x: x.cos() + 1, executor="eager")
    x = torch.randn(4)
    expected = jfn(x)
    with WaitStallRecorder("cpu") as rec:
        got = jfn(x)
    assert torch.equal(got, expected)
    assert rec.resolve() == ([], [])
