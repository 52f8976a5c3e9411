"""Issue 26 item 6: a syntax error in a ``%%thunder_trace`` cell reads as a plain cell's.

It showed 25 lines with five frames (IPython's run_code and run_cell_magic, magics.py, cell.py, ast.py)
where a plain cell shows the line, a caret and the message. The reference is IPython itself: the same
body run as a plain cell, and Python's own compile of the body for the message.
"""
from __future__ import annotations

import contextlib
import io
import re

import pytest

from tests.notebook.test_magic import ip  # noqa: F401 - the IPython test shell fixture (trace_lab loaded)

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _shown(ip, cell):
    """(what IPython printed for the cell, without colours; the run's result)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        result = ip.run_cell(cell)
    return ANSI.sub("", buf.getvalue()).strip(), result


def _error(body: str) -> SyntaxError:
    """Python's own verdict on the body."""
    try:
        compile(body, "<cell>", "exec")
    except SyntaxError as e:
        return e
    raise AssertionError("the body compiles")


@pytest.mark.parametrize("body", ["y = x +* 2\n", "y = (x +\nz = 1\n", "for i in range(2):\ny = x\n"])
def test_a_syntax_error_reads_as_a_plain_cells(ip, body):
    ip.run_cell("x = torch.randn(4)")
    ip.user_ns.pop("y", None)
    plain, plain_result = _shown(ip, body)
    shown, result = _shown(ip, "%%thunder_trace --executor eager\n" + body)
    lines = shown.splitlines()
    assert len(lines) <= len(plain.splitlines()) + 1, shown  # a few lines, as a plain cell's
    assert "Traceback" not in shown and "File " not in shown, shown  # no frames at all
    for internal in ("trace_lab", "magics.py", "cell.py", "ast.py", "interactiveshell"):
        assert internal not in shown, shown
    error = _error(body)
    assert lines[-1] == f"{type(error).__name__}: {error.msg}", shown  # Python's own verdict on the body
    assert re.search(rf"Cell In\[\d+\], line {error.lineno + 1}\b", shown), shown  # the cell's line (magic: 1)
    assert isinstance(plain_result.error_before_exec, SyntaxError)
    assert isinstance(result.error_before_exec, SyntaxError) and not result.success  # failed: Run All stops
    assert "y" not in ip.user_ns  # nothing ran, nothing written back


def test_a_valid_cell_still_runs(ip):
    ip.run_cell("x = torch.randn(4)")
    ip.user_ns.pop("y", None)
    shown, result = _shown(ip, "%%thunder_trace --executor eager --fusion none --runs 0\ny = x * 2 + 1\n")
    assert result.success, shown
    import torch

    torch.testing.assert_close(ip.user_ns["y"], ip.user_ns["x"] * 2 + 1)
    # the check is installed once, even when the extension is loaded again
    ip.run_line_magic("reload_ext", "trace_lab")
    assert sum(getattr(t, "trace_lab_syntax_check", False) for t in ip.input_transformers_cleanup) == 1
