"""The Diff tab's picker: diff any two stages of the selected program part, of this run or of two runs.

The view model carries one diff per part (its first stage against its last, :mod:`trace_lab.report.depth`).
Here the user picks **from** and **to** among every stage of the selected part (``forward #0``) in
every run the output holds (the cell's runs and its reruns, e.g. ``fusion=dataflow`` against
``fusion=memory``), and the tab shows :func:`trace_lab.analysis.diff.diff_traces` of the two, drawn by
the same renderer (:func:`trace_lab.report.depth_html.diff_html`). Diffing needs the runs' live Traces
from the run's compilation records (``Report.compilations``; a report loaded from JSON or sent back by a
``--nproc`` worker has none and offers only its stored first -> last diff).
"""
from __future__ import annotations

from ..report.depth_html import diff_html

__all__ = ["DiffPicker"]


def _live_stages(report, label: str) -> list:
    """The live Traces of part ``label`` ('forward #0') of ``report`` (its compilation record), or []."""
    kind, _, index = label.partition(" #")
    record = report.compilation(kind, int(index or 0)) if hasattr(report, "compilation") else None
    return list(record.stages) if record is not None and record.kind == kind else []


class DiffPicker:
    """Two dropdowns (from, to) over the stages of one part in several runs; ``widget`` heads the Diff tab."""

    def __init__(self, W):
        self.source = W.Dropdown(description="from", layout=W.Layout(width="420px"))
        self.target = W.Dropdown(description="to", layout=W.Layout(width="420px"))
        self.out = W.HTML()
        self.widget = W.VBox([W.HBox([self.source, self.target], layout=W.Layout(flex_flow="row wrap")), self.out])
        self._traces: dict = {}
        for w in (self.source, self.target):
            w.observe(lambda _c: self.render(), names="value")

    def show(self, runs, label: str | None, current=None) -> None:
        """Offer every stage of part ``label`` in each of ``runs`` ([(run label, Report)]); start at the first and
        last stage of ``current`` (a Report among them)."""
        self._traces, options = {}, []
        for run_label, report in runs:
            for k, trace in enumerate(_live_stages(report, label) if label else []):
                key = (run_label, k)
                self._traces[key] = trace
                options.append((f"{run_label}: {k} {trace.stage}", key))
        for w in (self.source, self.target):
            w.unobserve_all(name="value")
        self.source.options = self.target.options = options
        mine = [key for key in self._traces if any(r is current and rl == key[0] for rl, r in runs)] or list(self._traces)
        self.source.value = mine[0] if mine else None
        self.target.value = mine[-1] if mine else None
        for w in (self.source, self.target):
            w.observe(lambda _c: self.render(), names="value")
        self.widget.layout.display = None if options else "none"
        self.render()

    def render(self) -> str:
        from ..analysis.diff import diff_traces

        a, b = self._traces.get(self.source.value), self._traces.get(self.target.value)
        if a is None or b is None:
            self.out.value = ""
            return ""
        try:
            d = diff_traces(a, b)
            body = diff_html({"diff": {"data": d.to_dict(), "text": str(d)}})
        except Exception as e:  # noqa: BLE001 - two stages that cannot be matched: say why
            body = f'<div class="tl-warn">{type(e).__name__}: {e}</div>'
        self.out.value = f'<div class="tl-report">{body}</div>'
        return self.out.value
