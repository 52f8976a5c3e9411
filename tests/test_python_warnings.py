"""Python warnings raised while the lab runs a cell are listed on its Report, once, not printed under the cell
(run/python_warnings.py): the GPU check saw Inductor's TF32 hint and Adam's capturable notice as stderr boxes."""
import threading
import warnings

import pytest
import torch

import trace_lab
from trace_lab.run.python_warnings import kept_on_report


def _warns(x):
    warnings.warn("the cell's own warning", UserWarning)
    return torch.relu(x) * 2


def _report_of(fn, x):
    return trace_lab.inspect(fn, x, runs=1, fusion="dataflow", executor="eager")


def test_a_warning_of_the_cell_is_on_its_report_once_and_not_printed():
    x = torch.randn(8, requires_grad=True)
    with warnings.catch_warnings(record=True) as outside:
        warnings.simplefilter("always")
        rep = _report_of(_warns, x)
    assert rep.comparison is not None and rep.comparison["ok"]
    mine = [w for w in rep.warnings if "the cell's own warning" in w]
    assert len(mine) == 1, rep.warnings
    assert mine[0].startswith("UserWarning raised at ") and "test_python_warnings.py:" in mine[0], mine
    assert not [w for w in outside if "the cell's own warning" in str(w.message)]
    assert "the cell's own warning" in str(rep)


def test_an_ignored_warning_stays_ignored():
    x = torch.randn(8, requires_grad=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="the cell's own warning")
        rep = _report_of(_warns, x)
    assert not [w for w in rep.warnings if "the cell's own warning" in w], rep.warnings


class _Rep:
    def __init__(self):
        self.warnings = ["earlier"]


def test_warnings_of_other_threads_are_kept_and_a_failed_run_shows_them():
    @kept_on_report
    def run(fail):
        t = threading.Thread(target=lambda: warnings.warn("from a compile thread", RuntimeWarning))
        t.start()
        t.join()
        if fail:
            raise ValueError("the run failed")
        return _Rep()

    rep = run(False)
    assert rep.warnings[0] == "earlier"
    assert len(rep.warnings) == 2 and rep.warnings[1].startswith("RuntimeWarning raised at ")
    assert rep.warnings[1].endswith(": from a compile thread")
    with warnings.catch_warnings(record=True) as outside:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="the run failed"):
            run(True)
    assert [str(w.message) for w in outside] == ["from a compile thread"]


def test_runs_that_overlap_keep_their_own_warnings_and_leave_warnings_working():
    """A widget's rerun runs in a thread beside the kernel's cells. Two runs that start A, B and end A, B: each
    keeps the warning its own thread raised, and afterwards a warning reaches the caller's handler again (with
    ``warnings.catch_warnings`` per run, B's exit restored A's recording state and later warnings vanished)."""
    entered = {k: threading.Event() for k in "AB"}
    go = {k: threading.Event() for k in "AB"}
    reports = {}

    @kept_on_report
    def run(name):
        entered[name].set()
        assert go[name].wait(10)
        warnings.warn(f"inside {name}", UserWarning)
        return _Rep()

    def start(name):
        t = threading.Thread(target=lambda: reports.__setitem__(name, run(name)))
        t.start()
        assert entered[name].wait(10)
        return t

    with warnings.catch_warnings(record=True) as outside:
        warnings.simplefilter("always")
        a = start("A")
        b = start("B")
        go["A"].set()
        a.join()
        go["B"].set()
        b.join()
        warnings.warn("after both runs", UserWarning)
    for name in "AB":
        assert [w.split(": ", 1)[1] for w in reports[name].warnings[1:]] == [f"inside {name}"], reports[name].warnings
    assert [str(w.message) for w in outside] == ["after both runs"]


def test_a_peer_and_torch_compiles_trace_keep_their_warnings_too():
    """``--baseline`` peers (lab/peers.py) and ``--peer-trace`` (lab/compile_view.py) are Reports of their own
    runs: what the cell's code warns while they run is on them, not under the cell."""
    from trace_lab.lab.compile_view import from_compile
    from trace_lab.lab.peers import run_peer

    x = torch.randn(8, requires_grad=True)
    with warnings.catch_warnings(record=True) as outside:
        warnings.simplefilter("always")
        peer = run_peer(_warns, (x,), "eager", runs=1, name="peer")
        compiled = from_compile(_warns, x, name="compiled")
    for rep in (peer, compiled):
        assert [w for w in rep.warnings if w.endswith(": the cell's own warning")], rep.warnings
    assert not [w for w in outside if "the cell's own warning" in str(w.message)]
