"""LabView: the live output of ``%%thunder_trace`` (ipywidgets 8), with a static twin.

Layout: controls (one per option that trace_lab.options offers to widgets, in schema
order), Rerun and Stop, a status row (progress bar, step, errors), a run / program / kind picker,
and eight tabs: Summary, Trace (stage picker, highlighted trace with live-bytes
bars; a stage longer than ``LAZY_LINES`` shows a window around its head, peak
and tail until "whole trace" is pressed, so the widget state stays small), Graph (before/after fusion, rendered when the tab is opened), Memory
(one curve per run), Compare (one row per run, best values starred), and the selected part's
depth views (:mod:`trace_lab.report.depth_html`): Saved (for backward), Diff (first -> last
stage, or any two stages of this run or two runs picked above it: :mod:`.diff_picker`), Peak (the peak line's
buffers; **price remedies** runs the cell through trace_lab.explain_peak and each remedy's **Try** reruns and
measures it: :mod:`.lab_panels`), Regions (why each fused region ends, with a region picker whose **show code** and
**export repro** buttons give its generated code and a standalone repro file: :mod:`.region_tools`); and Timeline (a ``--profile`` run's lines timed on
a host and a device lane, :mod:`trace_lab.report.line_timeline`; the Trace tab then shows each
line's time).

Displaying a LabView gives a MIME bundle with the widget view *and* the same
content as static HTML (``trace_lab.report.html.report_html``) plus the text
summary, so saved notebooks and exports without widget state still show it.

Rerun and the kernel. A Rerun compiles in a **background thread**, not on the
kernel's main thread: torch.compile of a large model can take minutes, and a
click handler that ran it inline would hold the kernel's shell channel so no
other cell could run, and the widgets (progress, Stop) would not update from
the frontend either. In the worker the kernel stays free, progress arrives
through inspect's ``progress`` callback and jit's compile events (a
:class:`.progress.RunProgress`: step, program part, region k of N, elapsed
seconds), and Dynamo's global compile lock
serialises it with any compile the user starts meanwhile. Stopping: the Stop
button, or the kernel's Interrupt while the kernel is otherwise idle (a SIGINT
hook installed through ipykernel's idle handler slot), set a cancel flag checked
at every progress step and compile event (so between two regions) and raise KeyboardInterrupt asynchronously in the worker
(``PyThreadState_SetAsyncExc``), which lands at the next Python bytecode; a long
native call (a C++ compile) finishes first. One rerun per view at a time. A
failed or stopped rerun shows its error in the status row, writes nothing back
and keeps every earlier run. The first run of a cell is synchronous (it *is*
the cell's execution, interruptible like any cell).

Parts: this module is the LabView itself (layout, reruns, views, display); the option
controls and the progress bar are :mod:`.lab_controls`, stopping a background rerun (the
worker interrupt, the kernel's idle SIGINT hook) :mod:`.rerun_interrupt`.
"""
from __future__ import annotations

import threading
import time

from ..errors import TraceLabError
from ..options import SCHEMA
from ..report.html import (BARS_LEGEND, LAZY_LINES, code_html, compare_html, css, error_html, esc, memory_html,
                           report_parts, report_html, summary_html)
from ..report.depth_html import DEPTH_VIEWS, part_depth_html
from ..report.html import stage_times
from ..report.line_timeline import timeline_html
from .graph_widget import GraphView
from .diff_picker import DiffPicker
from .region_tools import RegionTools
from .lab_panels import PeakPanel
from .progress import RunProgress
from .runner import RunOptions
from .session import Session
from .lab_controls import _BAR_MAX, WIDGET_OPTIONS, _control, _control_value, _shower, progress_widget
from .rerun_interrupt import _ACTIVE, _async_raise, _install_interrupt_hook, _wait_for_timing

__all__ = ["LabView", "progress_widget"]


def _wrap(body: str) -> str:
    return f'<div class="tl-report">{body}</div>'


class LabView:
    """Controls + tabs for one cell's runs; ``runs`` is this cell's Session, ``compare``
    the kernel-wide one when the cell was marked ``--compare``."""

    def __init__(self, runner, options: RunOptions, runs: Session, compare: Session | None = None,
                 base_label: str = "cell", shell=None):
        import ipywidgets as W

        self.runner = runner
        self.options = options
        self.runs = runs
        self.compare = compare
        self.base_label = base_label
        self.shell = shell
        self.display_handle = None
        self.last_error: BaseException | None = None
        self._worker: threading.Thread | None = None
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._graph_cache: dict = {}
        self._shown = None  # the Run on display

        self.controls = {o.name: _control(W, o, getattr(options, o.name)) for o in WIDGET_OPTIONS}
        self.rerun_button = W.Button(description="Rerun", button_style="primary", icon="refresh",
                                     tooltip="compile the same cell again with these options; adds a Compare row",
                                     layout=W.Layout(width="100px"))
        self.stop_button = W.Button(description="Stop", icon="stop", disabled=True, layout=W.Layout(width="80px"),
                                    tooltip="stop the running rerun (the kernel's Interrupt does the same)")
        self.progress = W.IntProgress(min=0, max=_BAR_MAX, value=0, layout=W.Layout(width="160px"))
        self._run_progress: RunProgress | None = None
        self.step = W.Label("")
        self.status = W.HTML("")
        self.run_select = W.Dropdown(description="showing", layout=W.Layout(width="320px"))
        self.kind_select = W.ToggleButtons(options=["forward", "backward"], value="forward",
                                           style={"button_width": "92px"})
        self.program_select = W.Dropdown(description="program", layout=W.Layout(width="260px"))
        self.stage_select = W.Dropdown(description="stage", layout=W.Layout(width="320px"))
        self.whole_trace = W.ToggleButton(value=False, description="whole trace", icon="expand",
                                          tooltip=f"a stage longer than {LAZY_LINES} lines shows its first lines, "
                                                  "those around the peak and its last lines; press to draw every line",
                                          layout=W.Layout(width="130px", display="none"))
        self.summary = W.HTML()
        self.trace = W.HTML()
        self.graph = W.HTML()  # the Graph tab's heading (or why there is no graph)
        self.graph_view = GraphView()  # the graphs themselves: a widget with its own front end (pan, zoom)
        self.memory = W.HTML()
        self.table = W.HTML()
        self.depth = {view: W.HTML() for view in DEPTH_VIEWS}  # Saved, Diff, Regions of the selected part
        self.region_tools = RegionTools(W)  # a region's generated code and repro file, above the Regions view
        self.timeline = W.HTML()  # the shown run's lines timed on two lanes (a --profile run)
        self.diff_picker = DiffPicker(W)  # any two stages of the selected part, in this run or two runs
        # the selected part's remedies: price remedies runs trace_lab.explain_peak on the cell, Try measures one
        self.peak_tools = PeakPanel(explain=self._explain_part)
        heads = {"Regions": self.region_tools.widget, "Diff": self.diff_picker.widget, "Peak": self.peak_tools.widget}
        depth_tabs = [W.VBox([heads[view], w]) if view in heads else w for view, w in self.depth.items()]
        # the hooks tests and user CSS use: the whole tab where a picker heads it (the diff is drawn by the picker)
        self.depth_areas = dict(zip(self.depth, depth_tabs))
        self.tabs = W.Tab(children=[self.summary, W.VBox([W.HBox([self.stage_select, self.whole_trace]), self.trace]),
                                    W.VBox([self.graph, self.graph_view]), self.memory,
                                    self.table, *depth_tabs, self.timeline])
        self.tabs.titles = ("Summary", "Trace", "Graph", "Memory", "Compare", *DEPTH_VIEWS, "Timeline")
        self.widget = W.VBox([
            W.HTML(f"<style>{css()}</style>"),
            W.HBox([*self.controls.values(), self.rerun_button, self.stop_button],
                   layout=W.Layout(flex_flow="row wrap", align_items="center")),
            W.HBox([self.progress, self.step, self.status], layout=W.Layout(align_items="center")),
            W.HBox([self.run_select, self.program_select, self.kind_select], layout=W.Layout(flex_flow="row wrap")),
            self.tabs,
        ])
        self.widget.add_class("tl-lab")
        for w, cls in ((self.summary, "tl-summary-area"), (self.trace, "tl-trace-area"), (self.graph, "tl-graph-area"),
                       (self.memory, "tl-memory-area"), (self.table, "tl-compare-area"), (self.status, "tl-status"),
                       *((w, f"tl-{view.lower()}-area") for view, w in self.depth_areas.items()),
                       (self.timeline, "tl-timeline-area")):
            w.add_class(cls)  # stable hooks for browser tests and user CSS
        self.progress.layout.display = "none"
        self.rerun_button.on_click(lambda _b: self.rerun())
        self.stop_button.on_click(lambda _b: self.stop())
        self.run_select.observe(self._on_run, names="value")
        self.program_select.observe(self._on_part, names="value")
        self.kind_select.observe(self._on_part, names="value")
        self.stage_select.observe(self._on_stage, names="value")
        self.whole_trace.observe(self._on_stage, names="value")
        self.tabs.observe(self._on_tab, names="selected_index")
        self._refresh_suspended = False
        self.table_session.subscribe(self)
        _ACTIVE.add(self)

    # -- runs ---------------------------------------------------------------------------
    @property
    def table_session(self) -> Session:
        return self.compare if self.compare is not None else self.runs

    @property
    def running(self) -> bool:
        return self._worker is not None and self._worker.is_alive()

    def add_run(self, label: str, report):
        self._refresh_suspended = True
        try:
            run = self.runs.add(label, report)
            if self.compare is not None:
                self.compare.add(label, report)
        finally:
            self._refresh_suspended = False
        self._refresh_runs(show=run)
        return run

    def on_session_change(self, session) -> None:
        """Another output sharing the kernel-wide table added a run: refresh Compare and Memory."""
        if self._refresh_suspended or self._shown is None:
            return
        self.table.value = _wrap(compare_html([r.row() for r in self.table_session.runs]))
        self._refresh_memory(self._current_part())

    def options_from_controls(self) -> RunOptions:
        return self.options.changed(**{o.name: _control_value(o, self.controls[o.name]) for o in WIDGET_OPTIONS})

    def rerun(self, options: RunOptions | None = None) -> bool:
        """Start a rerun in the background with the controls' options; False if one is running."""
        with self._lock:
            if self.running:
                return False
            try:
                opts = options or self.options_from_controls()
            except Exception as e:  # noqa: BLE001 - bad option values: say so, keep the view
                self.status.value = error_html("cannot rerun", str(e))
                return False
            _install_interrupt_hook(self.shell)
            self._cancel.clear()
            self.last_error = None
            self._set_running(True, f"rerun: {opts.describe()}")
            self._worker = threading.Thread(target=self._work, args=(opts,), name="trace_lab-rerun", daemon=True)
            self._worker.start()
            return True

    def stop(self) -> None:
        """Stop the running rerun (cancel flag + KeyboardInterrupt in the worker)."""
        worker = self._worker
        if worker is None or not worker.is_alive():
            return
        self._cancel.set()
        if self._run_progress is not None:
            self._run_progress.stop()  # no tick may overwrite what Stop says
        self.step.value = "stopping..."
        _async_raise(worker)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the running rerun ends (tests, scripts); True if none is running afterwards."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)
        return not self.running

    def _rerun_label(self, opts: RunOptions) -> str:
        """A rerun's Compare label: 'rerun of NAME with CHANGES' ('rerun of horizontal with fusion=dataflow'),
        so the cell's name and the options it was rerun with are not read as one setting."""
        changes = self._changes(opts)
        return f"rerun of {self.base_label}" + (f" with {changes}" if changes != "rerun" else "")

    def _changes(self, opts: RunOptions) -> str:
        """What a rerun changed, e.g. 'fusion=memory, no cache'."""
        first, new = self.options.to_dict(), opts.to_dict()
        words = [f"{o.word} {'on' if new[o.name] else 'off'}" if o.type is bool else f"{o.name}={new[o.name]}"
                 for o in SCHEMA if o.name in new and first[o.name] != new[o.name]]
        return ", ".join(words) or "rerun"

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            raise KeyboardInterrupt("stopped")

    def _work(self, opts: RunOptions) -> None:
        started = time.perf_counter()
        label = self.table_session.unique_label(self._rerun_label(opts))
        progress = self._run_progress = RunProgress(_shower(self.progress, self.step), check=self._check_cancel)
        try:
            try:
                report, _ = self.runner.run(opts, label=label, progress=progress)
            except KeyboardInterrupt:
                progress.stop()
                self.last_error = KeyboardInterrupt("stopped")
                self.step.value = ""  # "stopping..." is over: the status row says what happened
                self.status.value = error_html("rerun stopped", "nothing was written back; earlier runs are kept")
                return
            except BaseException as e:  # noqa: BLE001 - shown in the view; the kernel carries on
                progress.stop()
                self.last_error = e
                self.step.value = ""
                self.status.value = error_html(f"rerun failed ({type(e).__name__})",
                                               f"{e}\nNotebook variables are unchanged; earlier runs are kept.")
                return
            _wait_for_timing()  # another cell's program is being timed: draw after it (issue 26 item 3)
            self.add_run(label, report)
            self.status.value = ""
            self.step.value = f"done in {time.perf_counter() - started:.1f} s: {label}"
            self.progress.value = self.progress.max
            self.refresh_display()
        except KeyboardInterrupt:  # a Stop that landed after the run finished
            self.last_error = KeyboardInterrupt("stopped")
            self.step.value = ""
        finally:
            progress.stop()
            self._run_progress = None
            self._set_running(False)

    def _set_running(self, running: bool, msg: str = "") -> None:
        self.rerun_button.disabled = running
        self.stop_button.disabled = not running
        self.progress.layout.display = None if running else "none"
        if running:
            self.progress.value = 0
            self.step.value = msg
            self.status.value = ""

    # -- views ---------------------------------------------------------------------------
    def _refresh_runs(self, show=None) -> None:
        runs = self.table_session.runs
        mine = self.runs.runs
        options = [(r.label, i) for i, r in enumerate(mine)]
        if show is None:
            show = mine[-1] if mine else None
        self._shown = show
        self.run_select.unobserve(self._on_run, names="value")
        self.run_select.options = options
        self.run_select.value = mine.index(show) if show in mine else None
        self.run_select.observe(self._on_run, names="value")
        self.table.value = _wrap(compare_html([r.row() for r in runs]))
        self._show_run(show)

    def _on_run(self, change) -> None:
        mine = self.runs.runs
        if change["new"] is not None and change["new"] < len(mine):
            self._show_run(mine[change["new"]])

    def _show_run(self, run) -> None:
        self._shown = run
        if run is None:
            return
        report = run.report
        self.summary.value = _wrap(summary_html(report))
        self.timeline.value = _wrap(timeline_html(report))
        parts = report_parts(report)
        programs = sorted({p.label.split(" #")[1] for p in parts}, key=int)
        self.program_select.unobserve(self._on_part, names="value")
        self.program_select.options = [(f"#{p}" + self._program_reason(report, int(p)), p) for p in programs]
        if programs:
            self.program_select.value = programs[0]
        self.program_select.layout.display = None if len(programs) > 1 else "none"
        self.program_select.observe(self._on_part, names="value")
        has_backward = any(p.kind == "backward" for p in parts)
        self.kind_select.unobserve(self._on_part, names="value")
        if not has_backward:
            self.kind_select.value = "forward"
        self.kind_select.disabled = not has_backward  # nothing needed a gradient: forward (inference) only
        self.kind_select.observe(self._on_part, names="value")
        self._on_part()

    @staticmethod
    def _program_reason(report, index: int) -> str:
        for p in report.programs:
            if p["index"] == index and p.get("reason") and p["reason"] != "first compile":
                return f" ({p['reason'][:60]})"
        return ""

    def _current_part(self):
        """The shown run's selected program part (its view model's PartView), or None."""
        if self._shown is None:
            return None
        parts = {p.label: p for p in report_parts(self._shown.report)}
        kind = self.kind_select.value
        prog = self.program_select.value
        for k in ((kind,) if kind == "backward" else ("forward", "inference")):
            label = f"{k} #{prog}"
            if label in parts:
                return parts[label]
        return None

    def _on_part(self, change=None) -> None:
        part = self._current_part()
        self.stage_select.unobserve(self._on_stage, names="value")
        if part is None:
            self.stage_select.options = []
            self.trace.value = _wrap(f'<div class="tl-placeholder">no {esc(self.kind_select.value)} program here '
                                     "(the cell computed nothing that needs a gradient, or it did not call "
                                     ".backward())</div>")
        else:
            stages = part.stages
            # an unchanged sort_waits stage (no collectives) is not listed, as in the static view
            self.stage_select.options = [(f"{i}: {t.stage}", i) for i, t in part.listed_stages()]
            self.stage_select.value = len(stages) - 1
            self._on_stage()
        self.stage_select.observe(self._on_stage, names="value")
        self._refresh_memory(part)
        for view, w in self.depth.items():
            w.value = _wrap(part_depth_html(view, part))
        self.region_tools.show(self._shown.report if self._shown is not None else None, part)
        self.peak_tools.clear()
        self.peak_tools.part = part
        self.diff_picker.show([(r.label, r.report) for r in self.table_session.runs], part.label if part else None,
                              self._shown.report if self._shown is not None else None)
        if self.diff_picker.out.value:  # the picker draws the diff; the stored first -> last one would repeat it
            self.depth["Diff"].value = ""
        self.graph.value = ""
        self.graph_view.clear()
        if self.tabs.selected_index == 2:
            self._render_graph()

    def _explain_part(self, progress):
        """``trace_lab.explain_peak`` of the cell for the selected part, with the shown run's options (the Peak
        tab's **price remedies**; in the panel's thread)."""
        part, run = self.peak_tools.part, self._shown
        if part is None or run is None:
            raise TraceLabError("no program part selected")
        if getattr(run.report, "peer", None):
            raise TraceLabError(f"{run.label} is a --baseline peer's run: it traces nothing to explain")
        if not hasattr(self.runner, "explain_peak"):
            raise TraceLabError("this output's runner cannot run the cell again to explain its peak")
        shown = {k: v for k, v in run.report.options.items() if k in self.options.to_dict()}
        positions = sorted(p["index"] for p in run.report.programs)
        return self.runner.explain_peak(self.options.changed(**shown), "backward" if part.kind == "backward"
                                        else "forward", positions.index(part.program), progress)

    def _refresh_memory(self, part) -> None:
        self.memory.value = _wrap(memory_html([(r.label, r.report) for r in self.table_session.runs],
                                              part.label if part else None))

    def _on_stage(self, change=None) -> None:
        part = self._current_part()
        if part is None or self.stage_select.value is None:
            return
        stage = part.stages[self.stage_select.value]
        long = len(stage.lines) > LAZY_LINES
        self.whole_trace.layout.display = None if long else "none"
        hint = ("Press <b>whole trace</b> above to draw every line; the text of any stage: "
                "<code>print(report.traces(kind)[k])</code> (keep the Report with <code>-o report</code>).")
        self.trace.value = _wrap(f'<div class="tl-placeholder">{BARS_LEGEND}</div>'
                                 + code_html(stage, None if self.whole_trace.value else LAZY_LINES,
                                             how_to_see_all=hint, anchor=f"tlw{id(self):x}-peak",
                                             times=stage_times(self._shown.report, part)
                                             if self.stage_select.value == len(part.stages) - 1 else None))

    def _on_tab(self, change) -> None:
        if change["new"] == 2 and not self.graph.value:
            self._render_graph()

    def _render_graph(self) -> None:
        part = self._current_part()
        if part is None:
            self.graph_view.clear()
            self.graph.value = _wrap('<div class="tl-placeholder">no program for this selection</div>')
            return
        stages = part.stages
        self.graph.value = _wrap(
            f"<h5>{esc(self._shown.label)} &middot; {esc(part.label)}: {esc(stages[0].stage)} ({stages[0].n_ops} "
            f"lines) &rarr; {esc(stages[-1].stage)} ({stages[-1].n_ops} lines)</h5>")
        key = (id(self._shown), part.label)
        if key not in self._graph_cache:  # dot runs once per part; the window control needs the live traces
            try:
                traces = self._shown.report.traces(part.kind, part.program)
                traces = (traces[0], traces[-1]) if traces else None
            except Exception:  # noqa: BLE001 - a report loaded from JSON has no traces: no window control
                traces = None
            self.graph_view.show(part.graphs, traces)
            self._graph_cache[key] = self.graph_view.snapshot()
        else:
            self.graph_view.restore(self._graph_cache[key])

    # -- display ---------------------------------------------------------------------------
    def static_html(self) -> str:
        run = self._shown
        if run is None:
            return _wrap('<div class="tl-placeholder">no runs yet</div>')
        return report_html(run.report, [(r.label, r.report) for r in self.table_session.runs])

    def _repr_mimebundle_(self, include=None, exclude=None):
        data = self.widget._repr_mimebundle_() or {}
        data["text/html"] = self.static_html()
        data["text/plain"] = str(self._shown.report) if self._shown is not None else repr(self)
        return data

    def refresh_display(self) -> None:
        """Refresh the saved (static) copy of this output after a rerun."""
        if self.display_handle is not None:
            try:
                self.display_handle.update(self)
            except Exception:  # noqa: BLE001 - a frontend without display updates keeps the old copy
                pass

    def __repr__(self) -> str:
        return f"<LabView {self.base_label!r}: {len(self.runs)} runs>"
