"""Issue 26 item 6: ``predict`` on the meta device.

* ``predict(..., executor="inductor")`` built every strategy's program with the eager executor, whose
  regions materialise their inner values, so the memory strategy merged by the wrong model (a weight-tied
  MLP's backward: other regions, a higher peak than the run measures). The strategies now plan with the
  requested executor's rules; the reference is a real run of the same options, measured.
* On a conv net the scratch of the convolutions is unknown on meta (it is measured on a real device):
  the figure is a lower bound, and the row now says so as the trace marks such lines (``>=`` and a note
  naming the ops). The measured run is at least the bound.
"""
from __future__ import annotations

import torch

import trace_lab


class TiedMLP(torch.nn.Module):
    """One weight used up and down (tied), three times."""

    def __init__(self, d=16, h=64, layers=3):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(h, d) * 0.1)
        self.layers = layers

    def forward(self, x):
        for _ in range(self.layers):
            h = torch.tanh(x @ self.w.t())
            x = (h @ self.w) * torch.sigmoid(x) + x
        return x.relu()


def _measured(model, x, **options):
    """{kind: measured peak above inputs} of a real run (the second call: the first compiles), checked
    against eager."""
    jfn = trace_lab.jit(model, **options)
    out = jfn(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    out.sum().backward()
    with jfn.measuring() as runs:
        jfn(x).sum().backward()
    got = {r.kind: r.measured_peak_above_inputs for r in runs}
    assert all(v is not None for v in got.values()), runs
    return jfn, got


def _within(predicted, measured):  # the CPU suite's tolerance: 1% + 1 KiB (scalar temporaries)
    return abs(predicted - measured) <= 0.01 * measured + 1024


def test_predict_plans_with_the_requested_executor():
    torch.manual_seed(0)
    model, x = TiedMLP(), torch.randn(32, 16)
    pred = trace_lab.predict(model, x, strategies=["memory"], device="cpu", executor="inductor")
    # a prediction compiles nothing, so it cannot see a region free or overwrite its inputs (donation): it is the
    # peak without it, exactly, and an upper bound with it
    jfn, measured = _measured(model, x, fusion="memory", executor="inductor", donate_inputs=False)
    _donating, donated = _measured(model, x, fusion="memory", executor="inductor")
    for kind, peak in donated.items():
        assert peak <= pred.peak("memory", kind, 0), (kind, peak, pred.peak("memory", kind, 0))
    for program in jfn.programs:
        for part in program.parts:
            real = part.traces[-1].liveness(False).peak_above_inputs_bytes  # the real run's own model
            assert pred.peak("memory", part.kind, program.index) == real, part.kind
            assert _within(pred.peak("memory", part.kind, program.index), measured[part.kind]), \
                (part.kind, pred.peak("memory", part.kind, program.index), measured[part.kind])
    assert all(not p.lower_bound for p in pred.parts) and ">=" not in str(pred)  # exact: no op scratch here


def test_a_conv_net_row_is_marked_as_a_lower_bound():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3, padding=1))
    x = torch.randn(4, 3, 16, 16)
    pred = trace_lab.predict(model, x, strategies=["none"], device="cpu", executor="eager")
    _, measured = _measured(model, x, fusion="none", executor="eager")
    text = str(pred)
    for kind, op in (("forward", "aten.convolution.default"), ("backward", "aten.convolution_backward.default")):
        row = pred.part("none", kind)
        assert op in row.lower_bound  # the op whose scratch is unknown on meta
        assert measured[kind] >= row.peak_above_inputs - 1024  # a lower bound indeed
        line = next(ln for ln in text.splitlines() if ln.startswith("none") and f"{kind} #0" in ln)
        assert line.count(">= ") == 2, line  # both figures of the row
        assert f"none {kind} #0 is a lower bound (>=): " in text
    assert "&gt;= " in pred._repr_html_()
