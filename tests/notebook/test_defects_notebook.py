"""Regression tests for the notebook defects of issue 15 (2, 6, 8).

Expected values come from running the same cell text as plain Python in a separate
namespace (what a normal IPython cell leaves behind), never from the code under test.
"""
from __future__ import annotations

import copy

import pytest
import torch
from IPython.core.error import UsageError

from test_magic import ip, visible  # noqa: F401 - the shared in-process shell fixture

from trace_lab.notebook.cell import CellProgram


def plain_run(cell: str, start: dict, times: int = 1) -> dict:
    ns = {"torch": torch, **copy.deepcopy(start)}
    for _ in range(times):
        exec(cell, ns)
    return ns


# -- defect 2: rerunning a training cell keeps the eager check ---------------------------------
TRAIN_CELL = "out = model(x)\nloss = out.sum()\nloss.backward()\n"


def test_rerun_of_a_training_cell_is_still_checked_against_eager(ip):
    torch.manual_seed(0)
    start = {"model": torch.nn.Linear(4, 3), "x": torch.randn(2, 4)}
    plain = plain_run(TRAIN_CELL, start, times=2)
    ip.user_ns.update(copy.deepcopy(start))
    for _ in range(2):
        result = ip.run_cell("%%thunder_trace --executor eager --runs 0 -o rep_train\n" + TRAIN_CELL)
        assert result.success, result.error_in_exec
        rep = ip.user_ns["rep_train"]
        # the second run has `out` and `loss` (non-leaf tensors) in the notebook: they are not inputs
        assert not any("skipped" in w for w in rep.warnings), rep.warnings
        assert rep.comparison is not None and rep.comparison["ok"], rep.comparison
        assert rep.comparison["checked"]["grads"] >= 2
    ns = ip.user_ns
    for name in ("out", "loss"):
        torch.testing.assert_close(ns[name], plain[name])
    torch.testing.assert_close(ns["model"].weight.grad, plain["model"].weight.grad)  # two backwards accumulated


# each cell: (start values, cell); the names read before their (definite) binding keep the old value
FLOW_CELLS = [
    ({"x": torch.ones(3)}, "x = x + 1\ny = x * 2\n"),
    ({"y": torch.full((2,), 10.0), "flag": False}, "if flag:\n    y = torch.zeros(2)\nz = y + 1\n"),
    ({"y": torch.full((2,), 10.0), "flag": True}, "if flag:\n    y = torch.zeros(2)\nelse:\n    y = y * 3\nz = y + 1\n"),
    ({"acc": torch.zeros(2)}, "for i in range(3):\n    acc = acc + i\n"),
    ({"h": torch.ones(2)}, "for i in range(2):\n    g = h * 2\n    h = g + i\n"),
    ({"h": torch.ones(2), "w": torch.ones(2)}, "with torch.no_grad():\n    h = w * 5\ng = h + 1\n"),
    ({"a": torch.ones(2), "b": torch.ones(2)}, "try:\n    b = a * 4\nexcept ValueError:\n    pass\nc = b + 1\n"),
    ({"n": torch.ones(2)}, "m = [n * k for k in range(2)]\nn = m[1] + 1\n"),
    ({"t": torch.ones(2)}, "t += 1\nu = t * 2\n"),
    ({"p": torch.ones(2)}, "while p.sum() < 10:\n    p = p * 2\nq = p + 1\n"),
]


@pytest.mark.parametrize("start, cell", FLOW_CELLS)
def test_names_assigned_before_read_are_not_inputs_and_results_match_a_plain_run(ip, start, cell):
    plain = plain_run(cell, start)
    ip.user_ns.update(copy.deepcopy(start))
    # stale values of every name the cell binds: a cell that reads one too early would show it
    bound = [n for n in CellProgram.from_cell(cell).assigned if n not in start and n != "i" and n != "k"]
    for n in bound:
        ip.user_ns[n] = torch.full((2,), -99.0)
    result = ip.run_cell("%%thunder_trace --executor eager --runs 0 -o rep_flow\n" + cell)
    assert result.success, result.error_in_exec
    assert ip.user_ns["rep_flow"].comparison["ok"]
    for n in set(plain) - {"torch", "__builtins__"}:
        if isinstance(plain[n], torch.Tensor):
            torch.testing.assert_close(ip.user_ns[n], plain[n], msg=n)


def test_inputs_exclude_names_bound_before_they_are_read():
    ns = {"out": torch.ones(1), "loss": torch.ones(1), "model": torch.nn.Linear(1, 1), "x": torch.ones(1),
          "flag": True, "acc": torch.ones(1)}
    assert CellProgram.from_cell(TRAIN_CELL).inputs(ns) == ["model", "x"]
    # a read that may come before the binding keeps the name an input
    assert "acc" in CellProgram.from_cell("if flag:\n    acc = 1\nprint(acc)\n").inputs(ns)
    assert "acc" in CellProgram.from_cell("for i in range(2):\n    print(acc)\n    acc = i\n").inputs(ns)
    assert "out" not in CellProgram.from_cell("out = x\nfor i in range(2):\n    out = out + i\n").inputs(ns)
    assert "out" in CellProgram.from_cell("print(out, (out := 2))\n").inputs(ns)


# -- defect 6: %time x = f(y) writes x back -------------------------------------------------------
def test_time_magic_assignment_is_written_back(ip):
    ip.user_ns.update(y6=torch.arange(4.0))
    ip.user_ns.pop("x6", None)
    ip.user_ns.pop("z6", None)
    result = ip.run_cell("%%thunder_trace --executor eager --runs 0 -o rep6\n"
                         "z6 = y6 * 2\n%time x6 = torch.sin(z6) + y6\nw6 = x6 + 1\nv6 = %time torch.cos(z6)\n")
    assert result.success, result.error_in_exec
    ns = ip.user_ns
    expected_x = torch.sin(torch.arange(4.0) * 2) + torch.arange(4.0)
    torch.testing.assert_close(ns["x6"], expected_x)
    torch.testing.assert_close(ns["w6"], expected_x + 1)
    torch.testing.assert_close(ns["v6"], torch.cos(torch.arange(4.0) * 2))
    assert ns["rep6"].comparison["ok"]


def test_time_magic_reads_the_old_value_and_timeit_leaves_the_notebook_alone(ip):
    ip.user_ns.update(c6=torch.ones(3))
    before = set(visible(ip.user_ns))
    result = ip.run_cell("%%thunder_trace --executor eager --runs 0\n"
                         "%time c6 = c6 * 3\nloc6 = c6 + 1\n%timeit -n1 -r1 loc6 + 1\n")
    assert result.success, result.error_in_exec
    torch.testing.assert_close(ip.user_ns["c6"], torch.full((3,), 3.0))
    torch.testing.assert_close(ip.user_ns["loc6"], torch.full((3,), 4.0))
    assert set(visible(ip.user_ns)) == before | {"loc6"}  # %timeit put no cell local into the notebook


# -- defect 8: -o must name a variable one can use ------------------------------------------------
@pytest.mark.parametrize("target", ["class", "None", "def", "1x", "a.b"])
def test_output_name_that_is_not_a_usable_variable_is_rejected(ip, target):
    ip.user_ns.update(x8=torch.ones(2))
    before = dict(visible(ip.user_ns))
    result = ip.run_cell(f"%%thunder_trace --executor eager --runs 0 -o {target}\nqq8 = x8 + 1")
    assert isinstance(result.error_in_exec, UsageError)
    assert target in str(result.error_in_exec) and "variable name" in str(result.error_in_exec)
    after = visible(ip.user_ns)
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
    assert target not in ip.user_ns
