"""Regression tests for issue 15's defects in inspect / jit (5: RNN modules, 9: keyword arguments,
and the deep-copy message of defect 2). Expected values come from eager PyTorch run here."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import trace_lab
from trace_lab.errors import TraceLabError


# -- defect 9: keyword arguments reach fn ------------------------------------------------------------
def test_inspect_passes_fn_keywords_its_signature_names():
    torch.manual_seed(0)
    x = torch.randn(4, 6, requires_grad=True)
    report = trace_lab.inspect(F.softmax, x, dim=0, executor="eager", runs=1)
    assert report.comparison["ok"] and report.comparison["checked"]["outputs"] == 1, report.warnings
    # the compiled program is softmax over dim 0: its printed text runs and gives eager's dim-0 result
    final = report.traces("forward")[-1]
    out = final.python_callable()(x.detach())
    out = out[0] if isinstance(out, (tuple, list)) else out
    torch.testing.assert_close(out, torch.softmax(x.detach(), dim=0))
    assert not torch.allclose(out, torch.softmax(x.detach(), dim=-1))


def test_keywords_reach_the_reference_the_compiled_and_the_measured_runs():
    seen = []

    def scaled(x, *, scale, shift=0.0):
        out = x * scale + shift
        seen.append((scale, shift, out.tolist()))  # no tensors: the closure stays out of the comparison
        return out

    x = torch.arange(5.0)
    report = trace_lab.inspect(scaled, x, kwargs={"scale": 3.0}, shift=1.0, executor="eager", runs=2)
    assert report.comparison["ok"], report.warnings
    # eager reference + first call + measured call + 2 timed calls, all with the keywords
    assert len(seen) >= 5
    for scale, shift, out in seen:
        assert (scale, shift) == (3.0, 1.0)
        assert out == (x * 3.0 + 1.0).tolist()


def test_keyword_that_is_neither_an_option_nor_a_parameter_names_both():
    x = torch.randn(3)
    with pytest.raises(TypeError) as e:
        trace_lab.inspect(F.softmax, x, dimm=0, runs=0)
    msg = str(e.value)
    assert "'dimm'" in msg and "trace_lab option" in msg and "softmax" in msg and "kwargs=" in msg
    assert "'dim'" in msg  # the near miss among fn's parameters
    with pytest.raises(TypeError, match="'fusoin'.*'fusion'"):
        trace_lab.inspect(F.softmax, x, fusoin="memory", runs=0)
    with pytest.raises(TypeError, match="both"):
        trace_lab.inspect(F.softmax, x, kwargs={"dim": 0}, dim=0, runs=0)


# -- deep-copy failures say which argument and why ------------------------------------------------
def test_reference_skip_names_the_argument_that_cannot_be_copied():
    def fn(a, activations):
        return a * 2 + activations

    w = torch.randn(3, requires_grad=True)
    non_leaf = w * 3  # produced by autograd: deepcopy refuses it
    report = trace_lab.inspect(fn, torch.ones(3), non_leaf, executor="eager", runs=0, backward=False)
    skipped = [m for m in report.warnings if "reference skipped" in m]
    assert skipped and report.comparison is None
    assert "'activations'" in skipped[0] and "argument 1" in skipped[0]
    assert "leaf" in skipped[0] and ".detach()" in skipped[0]  # why, and what to do


# -- defect 5: RNN modules that Dynamo skips --------------------------------------------------------
def test_lstm_that_dynamo_skips_is_explained_by_last_traces_and_inspect():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 5, batch_first=True)
    x = torch.randn(2, 3, 4)
    jfn = trace_lab.jit(lstm, executor="eager")
    out, _ = jfn(x)
    torch.testing.assert_close(out, lstm(x)[0])  # it ran (eagerly), correctly
    with pytest.raises(TraceLabError) as e:
        trace_lab.last_traces(jfn)
    msg = str(e.value)
    assert "nothing has run yet" not in msg
    assert "LSTM" in msg and "allow_rnn" in msg and "LSTMCell" in msg
    # a second jit of the same module: Dynamo now skips its code without reporting it again
    report = trace_lab.inspect(lstm, x, executor="eager", runs=0)
    text = " ".join(report.warnings)
    assert "no program was compiled" in text and "LSTM" in text and "allow_rnn" in text
    assert "ran no tensor operations" not in text


def test_the_suggested_allow_rnn_setting_captures_a_gru():
    torch.manual_seed(0)
    gru = torch.nn.GRU(4, 5)
    x = torch.randn(3, 2, 4)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(allow_rnn=True):
        report = trace_lab.inspect(gru, x, executor="eager", runs=0)
    torch._dynamo.reset()
    assert report.programs and report.comparison["ok"] and report.comparison["checked"]["grads"] >= 4


def test_explicit_cells_in_a_loop_are_captured():
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(4, 5)
    xs = torch.randn(3, 2, 4)

    def run(cell, xs):
        h = c = torch.zeros(2, 5)
        for t in range(xs.shape[0]):
            h, c = cell(xs[t], (h, c))
        return h

    report = trace_lab.inspect(run, cell, xs, executor="eager", runs=0)
    assert report.programs and report.comparison["ok"] and report.comparison["checked"]["grads"] >= 4
