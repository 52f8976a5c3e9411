"""FSDP in one call: ``trace_lab.jit(model, fsdp="zero3")`` on a plain nn.Module shards it (issue 20, item 3).

Two gloo processes: each builds the same plain module, jit shards it in place (as torch's
``fully_shard`` does) and the sharded run's loss and gradient shards equal single-process eager.
Without a process group, jit / inspect raise a TraceLabError that says what to call.
"""
from __future__ import annotations

import math

import pytest
import torch

import trace_lab
import trace_lab.distributed as tld


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 5)  # 85 elements: odd, so rank 1's shard is padded

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _make():
    torch.manual_seed(0)
    return _Net(), torch.randn(6, 8), torch.randn(6, 5)


def _errors(fn) -> str:
    try:
        fn()
    except trace_lab.TraceLabError as e:
        return str(e)
    return "no error"


def _gathers(stages) -> int:
    """All-gathers in the program's final trace, counted on its ops."""
    gather = torch.ops._c10d_functional.all_gather_into_tensor.default
    return sum(1 for n in stages[-1].ops if n.op == "call_function" and n.target is gather)


def _one_call_scenarios():
    ctx = tld.current()
    ref_model, x, proj = _make()  # single-process eager on the whole batch
    ref_loss = (ref_model(x) * proj).sum() / x.shape[0]
    ref_loss.backward()
    ref = {n: tld.shard_of(p.grad, ctx.rank, ctx.world_size) for n, p in ref_model.named_parameters()}

    model, _, _ = _make()
    jfn = trace_lab.jit(model, fsdp="zero3", executor="eager")  # a plain module, never passed to shard_module
    shards = tld.sharded_parameters(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # built after jit, as after fully_shard: on the shards
    xs, ps = x.chunk(ctx.world_size)[ctx.rank], proj.chunk(ctx.world_size)[ctx.rank]
    loss = (jfn(xs) * ps).sum() / xs.shape[0]
    loss.backward()
    mean_loss = loss.detach().clone()
    torch.distributed.all_reduce(mean_loss)
    fw, bw = trace_lab.last_traces(jfn), trace_lab.last_backward_traces(jfn)

    # a function whose module nobody sharded: after its call, an error instead of an unsharded run
    other, _, _ = _make()
    fn_error = _errors(lambda: trace_lab.jit(lambda t: other(t), fsdp="zero3", executor="eager")(xs))
    # sharded in part (a submodule only): an error naming what is not sharded
    part, _, _ = _make()
    tld.shard_module(part.fc1)
    part_error = _errors(lambda: trace_lab.jit(part, fsdp="zero2"))
    # inspect on a plain module: sharded by the same call, checked against eager of the same inputs
    insp, _, _ = _make()
    report = trace_lab.inspect(insp, xs, fsdp="zero3", executor="eager", runs=0)
    return {
        "same_module": jfn.fn is model,
        "param_names": sorted(n for n, _ in model.named_parameters()),
        "shard_names": sorted(shards), "shard_numels": {n: s.numel() for n, s in shards.items()},
        "opt_on_shards": {id(p) for p in opt.param_groups[0]["params"]} == {id(s) for s in shards.values()},
        "loss": mean_loss.item() / ctx.world_size, "ref_loss": ref_loss.item(),
        "grads": {n: s.grad.clone() for n, s in shards.items()}, "ref_grads": ref,
        "fw_gathers": _gathers(fw), "bw_gathers": _gathers(bw),
        "fn_error": fn_error, "part_error": part_error,
        "inspect_ok": report.ok, "inspect_sharded": sorted(tld.sharded_parameters(insp)),
    }


@pytest.mark.distributed
def test_jit_fsdp_shards_a_plain_module_like_eager():
    run = tld.run_distributed(_one_call_scenarios, nproc=2, device="cpu", timeout_s=180)
    names = ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    for rank, v in enumerate(run.values):
        # sharded in place: jit returns a wrapper of the very module, whose parameters are now the shards
        assert v["same_module"] and v["shard_names"] == names
        assert v["param_names"] == [f"{n.rsplit('.', 1)[0]}.parametrizations.{n.rsplit('.', 1)[1]}.original"
                                    for n in names]
        assert v["shard_numels"] == {"fc1.bias": 8, "fc1.weight": 64, "fc2.bias": 3, "fc2.weight": 40}
        assert v["opt_on_shards"]
        # the collectives are in the programs: one gather per parameter; ZeRO-3 gathers fc2.weight again in the
        # backward (fc1's output gradient needs it; nothing else reads a parameter there)
        assert v["fw_gathers"] == 4 and v["bw_gathers"] == 1
        assert math.isclose(v["loss"], v["ref_loss"], rel_tol=1e-5, abs_tol=1e-6), (rank, v["loss"], v["ref_loss"])
        assert set(v["grads"]) == set(v["ref_grads"])
        for name, g in v["grads"].items():
            torch.testing.assert_close(g, v["ref_grads"][name], rtol=1e-4, atol=1e-5, msg=f"rank {rank} {name}")
        assert "no sharded parameter reached" in v["fn_error"] and "shard_module" in v["fn_error"]
        assert "sharded only in part" in v["part_error"] and "fc2.weight" in v["part_error"]
        assert v["inspect_ok"] and v["inspect_sharded"] == names


def test_jit_fsdp_without_a_process_group_says_what_to_call():
    assert not torch.distributed.is_initialized()
    model = _Net()
    before = dict(model.named_parameters())
    for target in (model, lambda x: model(x)):
        with pytest.raises(trace_lab.TraceLabError, match=r"fsdp='zero3'.*init_process_group.*run_distributed"):
            trace_lab.jit(target, fsdp="zero3")
    with pytest.raises(trace_lab.TraceLabError, match=r"fsdp='zero2'.*init_process_group"):
        trace_lab.jit(fsdp="zero2")(model)  # the decorator form
    with pytest.raises(trace_lab.TraceLabError, match=r"init_process_group"):
        trace_lab.inspect(model, torch.randn(2, 8), fsdp="zero3")
    assert dict(model.named_parameters()) == before  # untouched


def test_jit_without_fsdp_leaves_the_module_alone():
    model = _Net()
    before = dict(model.named_parameters())
    jfn = trace_lab.jit(model, executor="eager")
    torch.testing.assert_close(jfn(torch.ones(2, 8)), model(torch.ones(2, 8)))
    assert dict(model.named_parameters()) == before and not tld.sharded_parameters(model)


# -- the magic: %%thunder_trace --nproc 2 --fsdp zero3 shards the cell's input modules as jit does --------------
from tests.notebook.test_magic_distributed import ip  # noqa: E402,F401 - the IPython test shell fixture


@pytest.mark.distributed
def test_magic_fsdp_shards_a_module_and_its_submodule_once(ip):
    net, x, _ = _make()
    ref_net, ref_x, _ = _make()
    ref_loss = (ref_net.fc1(ref_x).sum() + ref_net(ref_x).sum()).item()  # single-process eager
    ip.user_ns.update(net=net, first=net.fc1, x=x)  # the cell reads a module and one of its submodules
    result = ip.run_cell("%%thunder_trace --nproc 2 --fsdp zero3 --executor eager --runs 0 -o frep\n"
                         "loss = first(x).sum() + net(x).sum()\nloss.backward()")
    assert result.success, result.error_in_exec
    for r in ip.user_ns["frep"].ranks:
        assert math.isclose(r["scalars"]["loss"], ref_loss, rel_tol=1e-5), (r, ref_loss)
        assert r["ok"] is True


@pytest.mark.distributed
def test_magic_fsdp_refuses_a_cell_whose_model_was_not_sharded(ip):
    from types import SimpleNamespace

    from IPython.core.error import UsageError

    net, x, _ = _make()
    # the only input module has no parameters; the model is reached through a plain object, so nothing is sharded
    ip.user_ns.update(holder=SimpleNamespace(model=net), act=torch.nn.ReLU(), x=x)
    result = ip.run_cell("%%thunder_trace --nproc 2 --fsdp zero3 --executor eager --runs 0\n"
                         "loss = act(holder.model(x)).sum()")
    err = result.error_in_exec
    assert isinstance(err, UsageError), err
    assert "no sharded parameter reached" in str(err) and "Nothing was written back" in str(err)
