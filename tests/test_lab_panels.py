"""The notebook panels of issue 28 items 2 and 3 (trace_lab.notebook.lab_panels): the Peak tab's remedies with a Try
button each, and the sweep's view with progress per configuration and its plot of measured and predicted peaks.

The Try button is pressed through its click handler; its row then shows what ``try_remedy`` measured beside what
was predicted (a stand-in explanation checks the wiring, the full tier a real one on the Peak tab of a LabView). The
plot's two series are read back from the matplotlib figure and compared with the rows' figures."""
from __future__ import annotations

import html
import re

import pytest
import torch

import trace_lab
from trace_lab.analysis.peak import PeakBreakdown
from trace_lab.ir.printer import format_bytes
from trace_lab.lab.peak import PeakExplanation, Remedy
from trace_lab.lab.sweep import SweepRow


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


class _Explained(PeakExplanation):
    """A PeakExplanation whose try_remedy measures from a table (or fails), and records each call and its thread."""

    def __init__(self, measured: dict):
        super().__init__(PeakBreakdown("forward", 0, 3, "t3", 12288), 12288, notes=["a note <b>escaped</b>"])
        self.considered = [Remedy("fusion=memory", {"fusion": "memory"}, "reorders", 4096),
                           Remedy("recompute <t1>", {}, "saved <t1>", 2048)]
        self.remedies = list(self.considered)
        self.measured, self.calls = measured, []

    def try_remedy(self, name, progress=None):
        import threading

        self.calls.append((name, threading.current_thread().name))
        if progress is not None:
            progress("running the compiled program")
        remedy = self.remedy(name)
        if isinstance(self.measured[name], Exception):
            raise self.measured[name]
        remedy.measured_peak = self.measured_peak - self.measured[name]
        remedy.measured_saving, remedy.ok = self.measured[name], True
        return remedy


def test_try_button_runs_try_remedy_and_shows_the_measured_saving_beside_the_predicted():
    from trace_lab.notebook.lab_panels import PeakPanel

    e = _Explained({"fusion=memory": 4000, "recompute <t1>": trace_lab.TraceLabError("the rerun split <x>")})
    panel = PeakPanel(e)
    assert list(panel.buttons) == ["fusion=memory", "recompute <t1>"]  # largest predicted saving first
    assert "measured -" in _text(panel.cells["fusion=memory"].value)
    panel.buttons["fusion=memory"].click()  # the Try button's click handler
    assert panel.wait(30)
    assert e.calls == [("fusion=memory", "trace_lab-panel")]  # in the background, not on the kernel's thread
    row = _text(panel.cells["fusion=memory"].value)
    assert f"predicted {format_bytes(4096)}, measured {format_bytes(4000)}" in row and "matches eager yes" in row
    assert not panel.buttons["fusion=memory"].disabled and panel.last_error is None
    # a failing remedy: its error in the panel's status row, the other row's measurement kept, names escaped
    panel.buttons["recompute <t1>"].click()
    assert panel.wait(30)
    assert isinstance(panel.last_error, trace_lab.TraceLabError)
    assert "the rerun split &lt;x&gt;" in panel.status.value and "<x>" not in panel.status.value
    assert "measured -" in _text(panel.cells["recompute <t1>"].value)
    assert f"measured {format_bytes(4000)}" in _text(panel.cells["fusion=memory"].value)
    assert "<t1>" not in panel.cells["recompute <t1>"].value
    assert "a note &lt;b&gt;escaped&lt;/b&gt;" in panel.rows.children[-1].value
    with pytest.raises(trace_lab.TraceLabError, match="no remedy 'bogus'"):
        panel.try_remedy("bogus")


def test_a_predicted_only_remedy_has_no_live_try_button():
    """FSDP's remedy needs N processes: its Try stays disabled, before and after another remedy's run."""
    from trace_lab.notebook.lab_panels import PeakPanel

    e = _Explained({"fusion=memory": 4096})
    e.considered.append(Remedy("fsdp zero3 on 2 ranks", {"fsdp": "zero3"}, "predicted only", 8192, measurable=False))
    panel = PeakPanel(e)
    assert panel.buttons["fsdp zero3 on 2 ranks"].disabled and not panel.buttons["fusion=memory"].disabled
    panel.buttons["fusion=memory"].click()
    assert panel.wait(30) and panel.last_error is None
    assert panel.buttons["fsdp zero3 on 2 ranks"].disabled and not panel.buttons["fusion=memory"].disabled


def test_a_displayed_explanation_is_the_panel_with_a_static_copy():
    e = _Explained({})
    bundle = e._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    page = bundle["text/html"]
    assert "fusion=memory" in page and "recompute &lt;t1&gt;" in page and "<t1>" not in page
    assert bundle["text/plain"] == str(e)


def _rows():
    rows = [SweepRow("a", {}, step_ms=1.0, predicted_peak=3 << 20, measured_peak=3 << 20, front=True),
            SweepRow("b", {}, step_ms=2.0, predicted_peak=1 << 20, measured_peak=(1 << 20) + 4096, front=True),
            SweepRow("c", {}, step_ms=3.0, predicted_peak=2 << 20, measured_peak=2 << 20),
            SweepRow("bad", {}, error="TraceLabError: no")]
    return rows


def test_the_sweep_plot_has_the_measured_and_the_predicted_series():
    from trace_lab.report.sweep_plot import sweep_figure, sweep_svg

    rows = _rows()
    ax = sweep_figure(rows).axes[0]
    series = {c.get_label(): c.get_offsets().tolist() for c in ax.collections}
    plotted = [r for r in rows if r.error is None]
    assert series["measured"] == [[r.step_ms, r.measured_peak / 2 ** 20] for r in plotted]
    assert series["predicted"] == [[r.step_ms, r.predicted_peak / 2 ** 20] for r in plotted]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["measured", "predicted"]
    assert "MiB" in ax.get_ylabel()
    assert sweep_svg(rows).startswith("<svg")


def test_sweep_view_shows_progress_per_configuration_rows_errors_and_the_plot():
    from trace_lab.notebook.lab_panels import SweepView

    def f(x):
        return (x.exp() * x.sin()).sum()

    configs = [{"fusion": "none"}, {"fusion": "bogus"}]
    view = trace_lab.sweep_view(f, torch.randn(32, requires_grad=True), runs=1, executor="eager", configs=configs)
    assert isinstance(view, SweepView) and view.wait(120) and view.last_error is None
    assert [(d, n) for d, n, _ in view.said] == [(0, 2), (1, 2), (2, 2)]
    assert (view.progress.value, view.progress.max) == (2, 2)
    good, bad = view.result.rows
    assert good.ok and good.error is None and bad.error and "bogus" in bad.error
    assert "<svg" in view.out.value and "error: " in view.out.value
    assert view._repr_mimebundle_()["text/plain"] == str(view.result)


def test_bad_input_is_a_clear_error_before_anything_runs():
    from trace_lab.notebook.lab_panels import PeakPanel, SweepView

    with pytest.raises(trace_lab.TraceLabError, match="at least one configuration"):
        SweepView(lambda x: x, torch.randn(2), configs=[])
    with pytest.raises(trace_lab.TraceLabError, match="each configuration is a dict"):
        trace_lab.sweep_view(lambda x: x, torch.randn(2), configs=["memory"])
    with pytest.raises(trace_lab.TraceLabError, match="no remedies yet"):
        PeakPanel().try_remedy("fusion=memory")
    with pytest.raises(trace_lab.TraceLabError, match="nothing to explain"):
        PeakPanel().explain()


def _swiglu_then_more(x, w1, w3, w2):
    m = torch.nn.functional.silu(x @ w1) * (x @ w3)
    return (m @ w2).sin()


def test_peak_tab_prices_the_remedies_and_try_measures_one():
    """The LabView's Peak tab: **price remedies** runs the runner's explain_peak for the selected part (here the
    function itself, as CellRunner does for a cell), then Try on each remedy measures it; the row shows the measured
    saving, which is within the explainer's tolerance of the predicted one."""
    from trace_lab.notebook.runner import RunOptions
    from trace_lab.notebook.session import Session
    from trace_lab.notebook.widgets import LabView

    torch.manual_seed(0)
    args = (torch.randn(64, 16, requires_grad=True), torch.randn(16, 96, requires_grad=True),
            torch.randn(16, 96, requires_grad=True), torch.randn(96, 512, requires_grad=True))
    report = trace_lab.inspect(_swiglu_then_more, *args, fusion="none", executor="eager", runs=0)

    class Runner:
        asked = []

        def explain_peak(self, options, kind, program, progress):
            self.asked.append((options.fusion, kind, program))
            return trace_lab.explain_peak(_swiglu_then_more, *args, kind=kind, program=program, fusion=options.fusion,
                                          executor=options.executor, progress=progress)

    view = LabView(runner=Runner(), options=RunOptions(executor="eager"), runs=Session())
    view.add_run("run 1", report)
    assert view.kind_select.value == "forward"
    view.peak_tools.explain_button.click()
    assert view.peak_tools.wait(300) and view.peak_tools.last_error is None, view.peak_tools.status.value
    assert Runner.asked == [("none", "forward", 0)]
    e = view.peak_tools.explanation
    recompute = next(r for r in e.considered if r.name.startswith("recompute "))
    view.peak_tools.buttons[recompute.name].click()
    assert view.peak_tools.wait(300) and view.peak_tools.last_error is None, view.peak_tools.status.value
    assert abs(recompute.measured_saving - recompute.predicted_saving) <= 64, recompute.to_dict()
    assert f"measured {format_bytes(recompute.measured_saving)}" in _text(view.peak_tools.cells[recompute.name].value)
    view.kind_select.value = "backward"  # another part: its remedies are priced anew
    assert not view.peak_tools.buttons and view.peak_tools.explanation is None
