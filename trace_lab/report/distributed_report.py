"""DistributedReport: rank 0's Report of a multi-process run, rebuilt from plain data, plus every rank.

A ``--nproc`` run compiles and runs the cell in worker processes; only plain data
comes back (see :mod:`trace_lab.notebook.distributed`): rank 0's ``Report.to_dict()``,
whose view model (:mod:`trace_lab.report.view_model`) holds its printed stages, graphs
and estimated timeline (:mod:`trace_lab.report.timeline`), and per rank its timings,
differential check and the scalar values the cell bound. A :class:`DistributedReport`
is a :class:`~trace_lab.report.Report` built from that data (``compilations`` is None;
``stored_traces(part)`` and ``traces()`` give the model's stages): every view reads the
model as for a local run; the Summary gains how the run was launched, one row per rank, the
line saying that names are not written back, and the timeline (table and one SVG per
program part: compute and communication lanes, exposed communication, overlap).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .report import Report

__all__ = ["DistributedReport", "NOT_WRITTEN_BACK"]

NOT_WRITTEN_BACK = ("names assigned by the cell are NOT written back to the notebook: they lived in the worker "
                    "processes (numbers and one-element tensors are listed per rank)")


def _scalar_text(scalars: dict) -> str:
    return ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in scalars.items())


@dataclass
class DistributedReport(Report):
    launch: dict = field(default_factory=dict)  # nproc, backend, device, fsdp
    ranks: list[dict] = field(default_factory=list)  # per rank: timings, ok, max_abs_diff, scalars

    @classmethod
    def from_ranks(cls, values: list[dict], launch: dict) -> "DistributedReport":
        """From the workers' return values (rank order; rank 0 carries ``report``: its ``to_dict()``)."""
        return cls.from_dict(values[0]["report"], launch=dict(launch), ranks=[v["rank_summary"] for v in values])

    @property
    def timeline(self) -> dict | None:
        """Rank 0's timeline (view model): {"programs": [...], "table": str, "measured"?} or {"error": ...}."""
        return self.view.timeline

    def stored_traces(self, part: str = "forward #0") -> list:
        """Rank 0's stages of one program part (``"forward #0"``, ``"backward #0"``, ...) as
        :class:`~trace_lab.report.view_model.StageView` (``str()`` is the trace text); [] if absent."""
        found = self.view.part(part)
        return list(found.stages) if found else []

    def stage_access(self, label: str, kind: str, position: int, k: int) -> str:
        return f"report.stored_traces({label!r})[{k}]"

    def launch_note(self) -> str:
        la = self.launch
        how = (f"parameters of every nn.Module input sharded {la['fsdp'].upper().replace('ZERO', 'ZeRO-')} across "
               f"the {la['nproc']} ranks" if la.get("fsdp") else
               "replicated: no sharding and no gradient averaging (unless the cell calls torch.distributed)")
        notes = "".join(f"; {n}" for n in la.get("notes") or ())
        return (f"{la.get('nproc')} processes ({la.get('backend')} on {la.get('device')}); every rank ran the whole "
                f"cell on the same inputs, {how}; the programs shown are rank 0's{notes}")

    def summary_rows(self) -> list[tuple[str, str]]:
        rows = [("processes", self.launch_note()), ("notebook", NOT_WRITTEN_BACK)]
        rows += super().summary_rows()
        for r in self.ranks:
            steady = r.get("steady_seconds")
            check = r.get("ok")
            text = (f"first run {r['first_run_seconds']:.3f} s, steady "
                    + (f"{steady * 1e3:.3f} ms" if steady is not None else "not timed")
                    + f", wall {r.get('wall_seconds', 0.0):.2f} s, vs eager "
                    + ("-" if check is None else "matches" if check else "DIFFERS"))
            if r.get("scalars"):
                text += f"; {_scalar_text(r['scalars'])}"
            rows.append((f"rank {r['rank']}", text))
        return rows

    def timeline_text(self) -> str:
        tl = self.timeline or {}
        return tl.get("table") or f"timeline unavailable: {tl.get('error', 'not computed')}"

    def __str__(self) -> str:
        return super().__str__() + f"\n  timeline (rank 0, {_method(self)}):\n" + "\n".join(
            "    " + ln for ln in self.timeline_text().splitlines())

    def summary_extra_html(self) -> str:
        """The timeline of rank 0's programs: the text table and one SVG per program part (cached)."""
        cached = self.__dict__.get("_timeline_html")
        if cached is None:
            cached = self.__dict__["_timeline_html"] = _timeline_html(self)
        return cached


def _timeline_html(report: DistributedReport) -> str:
    from .html import esc

    parts = [f"<h5>timeline (rank 0, {esc(_method(report))})</h5><pre class='tl-timeline'>"
             f"{esc(report.timeline_text())}</pre>"]
    try:
        from .timeline import timeline_svg
    except ImportError as e:  # matplotlib absent: the table stays
        return parts[0] + f'<div class="tl-placeholder">timeline plot needs matplotlib ({esc(e)})</div>'
    for tl in (report.timeline or {}).get("programs", []):
        try:
            svg = timeline_svg(tl, title=f"#{tl.get('program', 0)} {tl['kind']}: overlap "
                                         f"{_pct(tl.get('overlap_fraction'))}, exposed comm "
                                         f"{tl['exposed_comm_seconds'] * 1e3:.3f} ms ({tl['method']})")
        except Exception as e:  # noqa: BLE001 - a broken plot must not take the summary down
            svg = f'<div class="tl-placeholder">timeline plot failed: {esc(type(e).__name__)}: {esc(e)}</div>'
        parts.append(f'<div class="tl-timeline-plot">{svg[svg.find("<svg"):] if "<svg" in svg else svg}</div>')
    return "".join(parts)


def _method(report) -> str:
    methods = {tl.get("method") for tl in (report.timeline or {}).get("programs", [])}
    if (report.timeline or {}).get("measured"):
        methods.add("measured")
    return ", ".join(sorted(m for m in methods if m)) or "no programs"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"
