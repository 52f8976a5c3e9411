"""%%thunder_trace --nproc N [--fsdp ...] in IPython's test shell: 2 gloo processes on the CPU.

Expected values come from eager PyTorch run here, on a fresh instance of the same
seeded model, never from the code under test.
"""
from __future__ import annotations

import math
import re
from html import unescape

import pytest
import torch
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from examples import workloads
from trace_lab.report.table import report_row

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def ip():
    shell = InteractiveShell.instance()
    shell.display_pub.publish = lambda *a, **k: None
    shell.run_line_magic("load_ext", "trace_lab")
    shell.run_cell("import torch")
    return shell


def views(ip):
    return ip.magics_manager.registry["ThunderTraceMagics"].views


def visible(ns):
    return {k: v for k, v in ns.items() if not k.startswith("_") and k not in ("In", "Out", "exit", "quit",
                                                                                "get_ipython")}


def text_of(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", html))


def test_fsdp_zero3_cell_on_two_ranks(ip):
    model, (x,) = workloads.get("llama2").make("cpu", "small")
    ref_model, (ref_x,) = workloads.get("llama2").make("cpu", "small")
    ref_loss = ref_model(ref_x).sum().item()  # single-process eager, same seeded model
    params_before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ip.user_ns.update(model=model, x=x, loss="old")
    result = ip.run_cell("%%thunder_trace --nproc 2 --fsdp zero3 --executor eager --runs 1 -o drep\n"
                         "loss = model(x).sum()\nloss.backward()")
    assert result.success, result.error_in_exec
    rep = ip.user_ns["drep"]
    # every rank computed the single-process loss (full batch, parameters gathered from shards)
    assert [r["rank"] for r in rep.ranks] == [0, 1]
    for r in rep.ranks:
        assert math.isclose(r["scalars"]["loss"], ref_loss, rel_tol=1e-5), (r, ref_loss)
        assert r["ok"] is True and r["steady_seconds"] is not None and len(r["run_seconds"]) == 1
    # nothing came back into the notebook: the names and the model are as they were
    assert ip.user_ns["loss"] == "old"
    assert {n: p for n, p in model.named_parameters()}.keys() == params_before.keys()
    for n, p in model.named_parameters():
        assert torch.equal(p, params_before[n]) and p.grad is None, n
    # the output: per-rank rows, the note, the timeline (table + plots), rank 0's traces with collectives
    view = views(ip)[-1]
    summary = text_of(view.summary.value)
    assert re.search(r"rank 0\s*first run", summary) and re.search(r"rank 1\s*first run", summary)
    assert "NOT written back" in summary and "ZeRO-3" in summary
    assert "gather hidden" in summary and "#0 forward" in summary and "#0 backward" in summary
    assert view.summary.value.count("<svg") == 2  # one timeline plot per program part
    trace = text_of(view.trace.value)
    assert "all_gather_into_tensor" in trace and "wait_tensor" in trace and "| live" in trace
    assert [o[0] for o in view.stage_select.options] == ["0: as captured", "1: fsdp", "2: sort_waits", "3: fusion"]
    view.kind_select.value = "backward"
    assert "reduce_scatter_tensor" in text_of(view.trace.value)
    view.tabs.selected_index = 2  # the graph tab lays out the DOT the worker sent
    panes = view.graph_view.panes
    assert [p["side"] for p in panes] == ["before", "after"] and all("<svg" in p["svg"] or p["dot"] for p in panes)
    assert "graph view failed" not in view.graph.value and not any(p["note"].startswith("graph view failed")
                                                                 for p in panes)
    assert "memory" in view.memory.value.lower() and "<svg" in view.memory.value
    assert view.table.value.count('class="tl-row"') == 1
    assert "gather hidden" in str(rep)  # the text form carries the timeline too
    bundle = view._repr_mimebundle_()
    assert "NOT written back" in bundle["text/plain"] and "all_gather_into_tensor" in bundle["text/html"]


class TwoLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_no_sort_waits_and_an_optimizer_moved_onto_the_shards(ip):
    torch.manual_seed(0)
    net, inp = TwoLinear(), torch.randn(4, 8)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    ref = TwoLinear()
    ref.load_state_dict(net.state_dict())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    ref_opt.zero_grad()
    ref(inp).square().sum().backward()
    ref_opt.step()
    expected = ref(inp).square().sum().item()  # the loss after one step, single process
    ip.user_ns.update(net=net, inp=inp, opt=opt)
    ip.user_ns.pop("after", None)  # one shell per process: another test file may have bound it
    result = ip.run_cell("%%thunder_trace --nproc 2 --fsdp zero2 --no-sort-waits --executor eager --runs 0 -o r2\n"
                         "opt.zero_grad()\nl = net(inp).square().sum()\nl.backward()\nopt.step()\n"
                         "after = net(inp).square().sum()")
    assert result.success, result.error_in_exec
    rep = ip.user_ns["r2"]
    assert rep.options["sort_waits"] is False and rep.options["fsdp"] == "zero2"
    stages = [o[0] for o in views(ip)[-1].stage_select.options]
    assert "1: fsdp" in stages and not any("sort_waits" in s for s in stages)
    # the cell ran twice in each rank (eager reference on copies + the compiled run): the step on the
    # shards, then the loss on the stepped model equals one single-process step
    for r in rep.ranks:
        assert math.isclose(r["scalars"]["after"], expected, rel_tol=1e-5), (r, expected)
    assert "after" not in ip.user_ns and ip.user_ns["opt"] is opt
    # notebook 05's "Try it yourself": the same cell with wait sorting, rerun with **sort waits** unticked,
    # gives the unsorted run's programs again (the same lines, kernels and predicted peaks)
    result = ip.run_cell("%%thunder_trace --nproc 2 --fsdp zero2 --executor eager --runs 0 -o r2s\n"
                         "opt.zero_grad()\nl = net(inp).square().sum()\nl.backward()\nopt.step()\n"
                         "after = net(inp).square().sum()")
    assert result.success, result.error_in_exec
    view = views(ip)[-1]
    assert any("sort_waits" in o[0] for o in view.stage_select.options)
    view.controls["sort_waits"].value = False
    assert view.rerun() and view.wait(120) and view.last_error is None, view.last_error
    rerun = view.runs.runs[-1].report
    assert rerun.options["sort_waits"] is False and rerun.launch["nproc"] == 2

    def program(r):
        lines = {part: str(r.stored_traces(part)[-1]).splitlines()[1:] for part in ("forward #0", "backward #0")}
        return lines, report_row(r)["kernels"], [(m["kind"], m["predicted_peak_above_inputs_bytes"]) for m in r.memory]

    assert program(rerun) == program(rep)
    assert program(ip.user_ns["r2s"])[0] != program(rep)[0]  # sorting did move lines: the check can fail


def test_replicated_without_fsdp_and_errors_keep_state(ip):
    ip.user_ns.update(a=torch.arange(4.0))
    result = ip.run_cell("%%thunder_trace --nproc 2 --executor eager --runs 0 -o r3\ns = (a * 2).sum()")
    assert result.success, result.error_in_exec
    rep = ip.user_ns["r3"]
    assert [r["scalars"]["s"] for r in rep.ranks] == [12.0, 12.0]
    view = views(ip)[-1]
    assert "replicated" in text_of(view.summary.value)
    # Rerun (background thread) keeps --nproc and takes the controls' options
    view.controls["runs"].value = 1
    assert view.rerun() and view.wait(120) and view.last_error is None, view.last_error
    assert len(view.runs) == 2 and view.runs.runs[-1].report.launch["nproc"] == 2
    assert [len(r["run_seconds"]) for r in view.runs.runs[-1].report.ranks] == [1, 1]
    before = dict(visible(ip.user_ns))
    n_views = len(views(ip))
    result = ip.run_cell("%%thunder_trace --nproc 2 --executor eager --runs 0\n"
                         "a = a * 3\nnew_name = a.sum()\nraise ValueError('bug in the cell')")
    err = result.error_in_exec
    assert isinstance(err, UsageError)
    assert "rank 0 of 2 failed: ValueError: bug in the cell" in str(err) and "Nothing was written back" in str(err)
    after = visible(ip.user_ns)
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
    assert len(views(ip)) == n_views
    # an option that cannot work is refused before any process starts
    result = ip.run_cell("%%thunder_trace --nproc 2 --fsdp zero3 --executor eager\ns = (a * 2).sum()")
    assert isinstance(result.error_in_exec, UsageError) and "no nn.Module" in str(result.error_in_exec)


def test_unforkable_kernel_sends_a_notebook_class_by_value(ip, monkeypatch):
    """Where a fork could not run autograd (some torch builds after a backward), the cell and a module whose
    class was defined in the notebook travel by value to forkserver workers; losses match eager here."""
    import trace_lab.notebook.distributed as nd

    monkeypatch.setattr(nd, "autograd_survives_fork", lambda: False)
    assert ip.run_cell("class NotebookNet(torch.nn.Module):\n"
                       "    def __init__(self):\n        super().__init__()\n"
                       "        self.lin = torch.nn.Linear(8, 4)\n"
                       "    def forward(self, x):\n        return torch.tanh(self.lin(x))\n"
                       "torch.manual_seed(0)\nnet = NotebookNet()\nxin = torch.randn(3, 8)").success
    expected = torch.tanh(ip.user_ns["net"].lin(ip.user_ns["xin"])).sum().item()  # eager, here
    result = ip.run_cell("%%thunder_trace --nproc 2 --executor eager --runs 1 -o prep\n"
                         "out = net(xin).sum()\nout.backward()")
    assert result.success, result.error_in_exec
    for r in ip.user_ns["prep"].ranks:
        assert math.isclose(r["scalars"]["out"], expected, rel_tol=1e-6) and r["ok"] is True, r

