"""%%thunder_trace in-process, with IPython's own shell: options, write-back, errors, Rerun.

Expected values come from running the same cell text as plain Python (a normal
IPython cell) in a separate namespace, never from the code under test.
"""
from __future__ import annotations

import copy
import time

import pytest
import torch
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic_arguments import parse_argstring

from trace_lab.notebook import kernel_session
from trace_lab.notebook.magics import ThunderTraceMagics, split_line

OPTION_NAMES = ["--fusion", "--executor", "--no-fusion-cache", "--no-sort-waits", "--runs", "--compare", "--name",
                "-o", "--nproc", "--fsdp", "--max-inflight", "--max-region-ops"]


@pytest.fixture(scope="module")
def ip():
    shell = InteractiveShell.instance()
    shell.display_pub.publish = lambda *a, **k: None  # no frontend: keep test output quiet
    shell.run_line_magic("load_ext", "trace_lab")
    shell.run_cell("import torch")
    return shell


def magics(ip) -> ThunderTraceMagics:
    return ip.magics_manager.registry["ThunderTraceMagics"]


def visible(ns: dict) -> dict:
    """The notebook's user-visible names (IPython's and Dynamo's own dunder/underscore names excluded)."""
    return {k: v for k, v in ns.items() if not k.startswith("_") and k not in ("In", "Out", "exit", "quit",
                                                                                "get_ipython")}


def run(ip, cell):
    result = ip.run_cell(cell)
    return result


# -- options ------------------------------------------------------------------------------
def test_options_parse():
    fn = ThunderTraceMagics.thunder_trace
    a = parse_argstring(fn, "--fusion horizontal --executor eager --no-fusion-cache --no-sort-waits --runs 0 "
                            "--compare --name first -o rep --nproc 2 --fsdp zero3")
    assert (a.fusion, a.executor, a.no_fusion_cache, a.no_sort_waits, a.runs, a.compare, a.name, a.output, a.nproc,
            a.fsdp) == ("horizontal", "eager", True, True, 0, True, "first", "rep", 2, "zero3")
    d = parse_argstring(fn, "")
    assert (d.fusion, d.executor, d.no_fusion_cache, d.no_sort_waits, d.runs, d.compare) == ("auto", None, False,
                                                                                           False, 3, False)
    for bad in ("--fusion greedy", "--executor tvm", "--fsdp zero1", "--runs many"):
        with pytest.raises(UsageError):
            parse_argstring(fn, bad)
    assert split_line('--fusion memory -o r f(x,  "a b")') == ("--fusion memory -o r ", 'f(x,  "a b")')
    assert split_line("--runs=2 -x + 1") == ("--runs=2 ", "-x + 1")
    assert split_line("model(x)") == ("", "model(x)")


def test_help_documents_every_option(ip, capsys):
    doc = ip.find_cell_magic("thunder_trace").__doc__
    for opt in OPTION_NAMES:
        assert opt in doc, opt
    for choice in ("none", "dataflow", "horizontal", "memory", "auto", "nvfuser", "inductor", "eager", "zero2"):
        assert choice in doc
    assert "REPEAT" in doc and "0 = run the compiled cell" in doc  # --runs says side effects repeat
    assert "NOT written back" in doc  # --nproc says the workers' names do not come back
    ip.run_cell("%%thunder_trace?")  # IPython's help path (pinfo) prints the same page
    out = capsys.readouterr().out
    assert "--no-fusion-cache" in out and "--fsdp" in out


# -- namespace write-back -------------------------------------------------------------------
CELL = """\
h = torch.relu(x @ w)
x = x * 2
loss = (h * x).sum()
loss.backward()
if flag:
    never = 1
del tmp
def scale(t):
    return t * factor
"""


def test_namespace_write_back_matches_a_normal_run(ip):
    torch.manual_seed(0)
    start = {"x": torch.randn(4, 4), "w": torch.randn(4, 4, requires_grad=True), "flag": False, "never": "old",
             "tmp": 5, "factor": 3.0}
    plain = {"torch": torch, **copy.deepcopy(start)}
    exec(CELL, plain)  # what a normal cell run leaves behind
    ip.user_ns.update(copy.deepcopy(start))
    w_before = ip.user_ns["w"]
    result = run(ip, "%%thunder_trace --executor eager --runs 0 -o rep_wb\n" + CELL)
    assert result.success, result.error_in_exec
    ns = ip.user_ns
    assert "tmp" not in ns and "tmp" not in plain
    assert ns["never"] == plain["never"] == "old"  # a binding that did not run leaves the old value
    for name in ("h", "x", "loss"):
        torch.testing.assert_close(ns[name], plain[name])
    assert ns["w"] is w_before  # read, not rebound: the same object
    torch.testing.assert_close(ns["w"].grad, plain["w"].grad)  # the compiled backward ran once on the real w
    assert ns["scale"](torch.ones(1)).item() == 3.0 and ns["scale"].__qualname__ == "scale"
    ns["factor"] = 5.0  # a function defined in the cell reads notebook globals like a normal one
    assert ns["scale"](torch.ones(1)).item() == 5.0
    rep = ns["rep_wb"]
    program = rep.programs[0]
    assert "forward" in program and "backward" in program  # forward and backward both recorded
    assert rep.ok


def test_max_region_ops_caps_horizontal_regions(ip):
    ip.user_ns.update(x0=torch.randn(4, 4), x1=torch.randn(4, 4))
    cell = "out = torch.relu(x0) @ torch.relu(x1)\n"
    regions = {}
    for cap in ("", "--max-region-ops 1"):
        result = run(ip, f"%%thunder_trace --fusion horizontal --executor eager --runs 0 {cap} -o rep_cap\n" + cell)
        assert result.success, result.error_in_exec
        final = ip.user_ns["rep_cap"].traces("forward")[-1]
        regions[cap] = [n for n in final.ops if n.op == "call_module"]
        torch.testing.assert_close(ip.user_ns["out"], torch.relu(ip.user_ns["x0"]) @ torch.relu(ip.user_ns["x1"]))
    # the two independent relus: one region unbounded (Thunder), one region each when capped at 1 op
    assert len(regions[""]) == 1 and len(regions["--max-region-ops 1"]) == 2


def test_line_form_returns_the_value(ip):
    ip.user_ns["a"] = torch.arange(6.0)
    result = run(ip, "v = %thunder_trace --executor eager --runs 0 torch.relu(a - 2).sum()")
    assert result.success, result.error_in_exec
    assert ip.user_ns["v"].item() == float(torch.relu(torch.arange(6.0) - 2).sum())
    assert "__thunder_trace_value__" not in ip.user_ns


# -- errors keep state ------------------------------------------------------------------------
def test_error_in_cell_keeps_notebook_and_earlier_runs(ip):
    ip.user_ns.update(x=torch.ones(3), kept="before")
    run(ip, "%%thunder_trace --executor eager --runs 0 --compare --name ok-run\ny = x + 1")
    before = dict(visible(ip.user_ns))
    n_views, n_rows = len(magics(ip).views), len(kernel_session())
    result = run(ip, "%%thunder_trace --executor eager --runs 0 --compare\n"
                     "kept = 'after'\nx = x * 3\nnew_name = x.sum()\nraise ValueError('bug in the cell')")
    assert isinstance(result.error_in_exec, ValueError) and "bug in the cell" in str(result.error_in_exec)
    after = visible(ip.user_ns)
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
    assert len(magics(ip).views) == n_views and len(kernel_session()) == n_rows


def test_compiler_failure_is_one_clear_line_and_keeps_state(ip, monkeypatch):
    from trace_lab.errors import UnsupportedOpError
    from trace_lab.executors import base

    eager_cls = base.get_executor("eager").__class__

    class Refusing(eager_cls):
        def compile(self, trace):
            raise UnsupportedOpError("no executor in use can run aten.relu (test executor refuses everything)")

    monkeypatch.setitem(base.EXECUTORS, "eager", Refusing)
    ip.user_ns.update(x=torch.ones(3))
    before = dict(visible(ip.user_ns))
    result = run(ip, "%%thunder_trace --executor eager --runs 0\nz = torch.relu(x)")
    assert isinstance(result.error_in_exec, UsageError)
    assert "UnsupportedOpError" in str(result.error_in_exec) and "aten.relu" in str(result.error_in_exec)
    after = visible(ip.user_ns)
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)


@pytest.mark.parametrize("line, message", [
    ("--runs -1", "negative"),
    ("--nproc 0", "at least one process"),
    ("--max-inflight 2", "needs --fsdp"),
    ("--max-region-ops 0", "ops >= 1"),
    ("-o 'not a name'", "variable name"),
])
def test_bad_options_are_usage_errors(ip, line, message):
    before = dict(visible(ip.user_ns))
    result = run(ip, f"%%thunder_trace --executor eager {line}\nqq = 1")
    assert isinstance(result.error_in_exec, UsageError) and message in str(result.error_in_exec)
    assert "qq" not in ip.user_ns and visible(ip.user_ns).keys() == before.keys()


# -- widgets and Rerun ---------------------------------------------------------------------------
def test_rerun_appends_a_compare_row(ip):
    ip.user_ns.update(p=torch.randn(8, 8), q=torch.randn(8, 8))
    kernel_session().clear()
    assert run(ip, "%%thunder_trace --executor eager --runs 1 --compare --name base\nr = torch.relu(p @ q)").success
    view = magics(ip).views[-1]
    assert view.table.value.count('class="tl-row"') == 1
    assert [t for t in view.tabs.titles] == ["Summary", "Trace", "Graph", "Memory", "Compare", "Peak", "Saved", "Diff", "Regions", "Timeline"]
    assert "tl-code" in view.trace.value and "| live" in view.trace.value
    view.controls["fusion"].value = "dataflow"
    view.controls["fusion_cache"].value = False
    view.controls["runs"].value = 0
    ip.user_ns["p"] = ip.user_ns["p"] * 2  # a rerun reads the notebook as it is now
    assert view.rerun()
    assert view.wait(120) and view.last_error is None
    rows = kernel_session().rows()
    assert len(rows) == 2 and len(view.runs) == 2
    assert (rows[1]["fusion"], rows[1]["fusion_cache"], rows[1]["steady_ms"]) == ("dataflow", False, None)
    assert view.table.value.count('class="tl-row"') == 2
    assert view.run_select.label == "rerun of base with fusion=dataflow, cache off, runs=0"
    torch.testing.assert_close(ip.user_ns["r"], torch.relu(ip.user_ns["p"] @ ip.user_ns["q"]))  # written back
    assert not view.rerun_button.disabled and view.stop_button.disabled
    bundle = view._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and bundle["text/html"].count('class="tl-row"') == 2


@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace")
def test_failed_or_stopped_rerun_keeps_rows_and_names(ip):
    ip.user_ns.update(p=torch.randn(4, 4))
    assert run(ip, "%%thunder_trace --executor eager --runs 0\nr2 = p + 1\nimport time\n"
                   "for _ in range(250):\n    time.sleep(0.01)").success
    view = magics(ip).views[-1]
    r2 = ip.user_ns["r2"]
    # stopped: the Stop button lands a KeyboardInterrupt in the worker within a few ms
    assert view.rerun()
    time.sleep(0.5)
    assert view.running
    view.stop()
    assert view.wait(30)
    assert isinstance(view.last_error, KeyboardInterrupt) and "stopped" in view.status.value
    assert len(view.runs) == 1 and ip.user_ns["r2"] is r2
    # failed: an input disappeared from the notebook
    del ip.user_ns["p"]
    assert view.rerun()
    assert view.wait(60)
    assert isinstance(view.last_error, NameError) and "rerun failed" in view.status.value
    assert len(view.runs) == 1 and ip.user_ns["r2"] is r2 and not view.rerun_button.disabled


def test_session_dataframe_and_fallback(ip, monkeypatch):
    import sys

    from trace_lab.report.table import COLUMNS

    kernel_session().clear()
    ip.user_ns.update(p=torch.randn(4, 4))
    assert run(ip, "%%thunder_trace --executor eager --runs 0 --compare --name one\ns = p.sum()").success
    rows = kernel_session().rows()
    try:
        import pandas  # noqa: F401
    except ImportError:
        pandas = None
    if pandas is not None:
        df = kernel_session().to_dataframe()
        assert list(df.columns) == COLUMNS and df.loc[0, "run"] == "one"
    monkeypatch.setitem(sys.modules, "pandas", None)  # import fails: plain rows
    assert kernel_session().to_dataframe() == rows
