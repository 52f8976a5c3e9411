"""Notebook panels for the peak explainer and the sweep (issue 28 items 2 and 3), ipywidgets 8.

:class:`PeakPanel`: the remedies of a :class:`trace_lab.lab.peak.PeakExplanation`, one row each (predicted saving,
measured saving, whether the rerun matched eager, why) with a **Try** button that runs ``try_remedy`` and puts the
measured saving beside the predicted one. A displayed ``trace_lab.explain_peak(...)`` is this panel; in a
``%%thunder_trace`` output it heads the Peak tab with a **price remedies** button (``explain``: the cell run again
through ``trace_lab.explain_peak``, nothing written back) before the rows appear.

:class:`SweepView` (``trace_lab.sweep_view(fn, *args, ...)``, the arguments of ``trace_lab.sweep``): the sweep run
in the background, a progress bar and label per configuration, the rows and the plot (measured and predicted peak)
drawn as each configuration ends; ``result`` is the :class:`trace_lab.lab.sweep.Sweep` once it is done.

Both run their work in a background thread (as LabView's Rerun does, so the kernel stays free and the widgets
update), one job at a time; a failing job shows its error in the panel's status row and keeps everything shown
before it. ``wait()`` blocks until the job ends (tests, scripts). Bad arguments raise
:class:`trace_lab.TraceLabError` at once, before anything runs.
"""
from __future__ import annotations

import threading
import time

from ..errors import TraceLabError
from ..report.html import error_html
from ..report.packing import esc

__all__ = ["PeakPanel", "SweepView", "sweep_view"]


class _Job:
    """One background job at a time; its error goes to ``status`` (HTML) and ``last_error``."""

    def __init__(self, status, step):
        self.status, self.step = status, step
        self.last_error: BaseException | None = None
        self._worker: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    def start(self, what: str, work, done=None) -> bool:
        """Run ``work()`` in a thread, then ``done(result)``; False (nothing started) while a job runs."""
        if self.running:
            return False
        self.last_error, self.status.value = None, ""
        self.step.value = f"{what}..."
        started = time.perf_counter()

        def run():
            try:
                result = work()
            except BaseException as e:  # noqa: BLE001 - shown in the panel; the kernel carries on
                self.last_error = e
                self.step.value = ""
                self.status.value = error_html(f"{what} failed ({type(e).__name__})",
                                               f"{e}\nEverything shown before is kept.")
                if done is not None:
                    done(None)
                return
            self.step.value = f"{what}: done in {time.perf_counter() - started:.1f} s"
            if done is not None:
                done(result)

        self._worker = threading.Thread(target=run, name="trace_lab-panel", daemon=True)
        self._worker.start()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        worker = self._worker
        if worker is not None:
            worker.join(timeout)
        return not self.running


class PeakPanel:
    """The remedies of ``explanation`` with a Try button each; ``explain(progress) -> PeakExplanation`` (optional)
    is what **price remedies** runs to get one."""

    def __init__(self, explanation=None, explain=None):
        import ipywidgets as W

        self._W = W
        self.explanation = None
        self._explain = explain
        self.explain_button = W.Button(description="price remedies", icon="calculator",
                                       tooltip="run the cell again through trace_lab.explain_peak: the remedies for "
                                               "this part's peak, priced on the meta device (nothing written back)",
                                       layout=W.Layout(width="150px", display=None if explain else "none"))
        self.progress = W.IntProgress(min=0, max=1, value=0, layout=W.Layout(width="120px", display="none"))
        self.step = W.Label("")
        self.status = W.HTML("")
        self.rows = W.VBox([])
        self.buttons: dict = {}  # remedy name -> its Try button
        self.cells: dict = {}  # remedy name -> its row's HTML
        self.widget = W.VBox([W.HBox([self.explain_button, self.progress, self.step],
                                     layout=W.Layout(align_items="center")), self.status, self.rows])
        self.widget.add_class("tl-peak-tools")
        self.job = _Job(self.status, self.step)
        self.explain_button.on_click(lambda _b: self.explain())
        self.part = None  # what ``explain`` is asked about (set by the LabView)
        if explanation is not None:
            self.show(explanation)

    @property
    def last_error(self):
        return self.job.last_error

    def wait(self, timeout: float | None = None) -> bool:
        return self.job.wait(timeout)

    def clear(self) -> None:
        """Forget the rows (another part was selected); a running job finishes and is then shown."""
        if not self.job.running:
            self.explanation, self.rows.children, self.buttons, self.cells = None, (), {}, {}
            self.status.value = self.step.value = ""

    def show(self, explanation) -> None:
        """One row per remedy priced, largest predicted saving first, each with its Try button."""
        from ..report.depth_html import REMEDY_HEAD

        W = self._W
        self.explanation = explanation
        ranked = sorted(explanation.considered, key=lambda r: -r.predicted_saving)
        self.buttons, self.cells = {}, {}
        rows = [W.HTML(f"<div class='tl-report'><b>{esc(str(explanation.breakdown).splitlines()[0])}</b>; remedies "
                       f"({' · '.join(REMEDY_HEAD[1:4])}), <b>Try</b> reruns with one and measures:</div>")]
        for r in ranked:
            button = W.Button(description="Try", icon="play", layout=W.Layout(width="70px"),
                              tooltip=f"rerun with {r.name} and measure this part's peak" if r.measurable else
                              "predicted only: it needs more than this process to run (see why)",
                              disabled=not r.measurable)
            button.on_click(lambda _b, name=r.name: self.try_remedy(name))
            self.buttons[r.name], self.cells[r.name] = button, W.HTML(self._cells(r))
            rows.append(W.HBox([button, self.cells[r.name]], layout=W.Layout(align_items="center")))
        if not ranked:
            rows.append(W.HTML('<div class="tl-placeholder">no remedy was priced for this part</div>'))
        notes = "".join(f"<li>{esc(n)}</li>" for n in explanation.notes)
        rows.append(W.HTML(f"<div class='tl-report'><ul>{notes}</ul></div>"))
        self.rows.children = tuple(rows)

    @staticmethod
    def _cells(r) -> str:
        from ..report.depth_html import remedy_cells

        name, predicted, measured, ok, why = remedy_cells(r)
        return (f"<div class='tl-report'><b>{esc(name)}</b>: predicted {esc(predicted)}, measured {esc(measured)}"
                f"{'' if r.ok is None else ', matches eager ' + esc(ok)} <span class='tl-dim'>({esc(why)})</span></div>")

    def _busy(self, busy: bool) -> None:
        measurable = {b: self.explanation.remedy(n).measurable for n, b in self.buttons.items()} if self.explanation else {}
        for b in [*self.buttons.values(), self.explain_button]:
            b.disabled = busy or not measurable.get(b, True)  # a predicted-only remedy's Try stays off
        self.progress.layout.display = None if busy else "none"
        self.progress.bar_style = "info" if busy else ""
        self.progress.value = 0

    def try_remedy(self, name: str) -> bool:
        """Rerun with remedy ``name`` in the background (the Try button's handler); its row then shows the measured
        saving beside the predicted one. False when nothing started (a job is running)."""
        if self.explanation is None:
            raise TraceLabError("PeakPanel: no remedies yet (price them first)")
        explanation = self.explanation
        remedy = explanation.remedy(name)

        def done(_result):
            self._busy(False)
            self.cells[name].value = self._cells(remedy)

        if self.job.running:
            return False
        self._busy(True)
        self.cells[name].value = self._cells(remedy).replace("measured -", "measured: running...", 1)
        return self.job.start(f"trying {name}", lambda: explanation.try_remedy(name, progress=self._say), done)

    def explain(self) -> bool:
        """Price the remedies of the LabView's selected part (``explain``) in the background."""
        if self._explain is None:
            raise TraceLabError("PeakPanel: nothing to explain (made without an explain callable)")

        def done(result):
            self._busy(False)
            if result is not None:
                self.show(result)

        if self.job.running:
            return False
        self._busy(True)
        return self.job.start("pricing remedies", lambda: self._explain(self._say), done)

    def _say(self, message: str) -> None:  # inspect's progress: its steps
        self.step.value = str(message)


class SweepView:
    """``trace_lab.sweep(fn, *args, **options)`` in the background: progress per configuration, rows and plot."""

    def __init__(self, fn, *args, configs=None, **options):
        import ipywidgets as W

        from ..lab.sweep import Sweep, checked_configs, sweep

        configs = checked_configs(configs)  # a bad configuration list is the caller's error, said now
        self.progress = W.IntProgress(min=0, max=len(configs), value=0, layout=W.Layout(width="180px"))
        self.step = W.Label("")
        self.status = W.HTML("")
        self.out = W.HTML("")
        self.widget = W.VBox([W.HBox([W.Label("sweep:"), self.progress, self.step],
                                     layout=W.Layout(align_items="center")), self.status, self.out])
        self.widget.add_class("tl-sweep")
        self.result = None
        self.said: list = []  # every progress call, (done, total, label)
        self._partial = Sweep(notes=["running: the front is marked when every configuration has run"])
        self.job = _Job(self.status, self.step)

        def work():
            return sweep(fn, *args, configs=configs, progress=self._progress, on_row=self._row, **options)

        self.job.start(f"sweeping {len(configs)} configurations", work, self._done)

    @property
    def last_error(self):
        return self.job.last_error

    def wait(self, timeout: float | None = None) -> bool:
        return self.job.wait(timeout)

    def _progress(self, done: int, total: int, label: str) -> None:
        self.said.append((done, total, label))
        self.progress.max, self.progress.value = total, done
        self.step.value = f"{done}/{total}" + (f": running {label}" if label else ": done")

    def _row(self, row) -> None:
        self._partial.rows.append(row)
        self.out.value = self._partial._repr_html_()

    def _done(self, result) -> None:
        if result is not None:
            self.result = result
            self.out.value = result._repr_html_()
            self.progress.bar_style = "success"
        else:
            self.progress.bar_style = "danger"

    def _repr_mimebundle_(self, include=None, exclude=None):
        data = self.widget._repr_mimebundle_() or {}
        data["text/html"] = self.out.value or "<div class='tl-report'>sweep running</div>"
        data["text/plain"] = str(self.result) if self.result is not None else repr(self)
        return data

    def __repr__(self) -> str:
        return f"<SweepView: {len(self._partial.rows)} of {self.progress.max} configurations run>"


def sweep_view(fn, *args, **options) -> SweepView:
    """:class:`SweepView` of ``trace_lab.sweep(fn, *args, **options)``: display it (the last line of a cell)."""
    return SweepView(fn, *args, **options)


def _panel_bundle(explanation):
    """lab.peak.PANEL: a displayed explanation is its Peak panel (widget state beside the static HTML)."""
    return PeakPanel(explanation).widget._repr_mimebundle_()


def _register() -> None:
    from ..lab import peak

    peak.PANEL = _panel_bundle


_register()
