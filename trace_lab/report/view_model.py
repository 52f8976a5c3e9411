"""View model: what the views of one run show, as plain data, built once while its Traces are live.

:func:`build_view` walks the run's program parts (their compilation records, :func:`~.parts.record_parts`) and
keeps, per part (``"forward #0"``, ``"backward #0"``, ...):

* per stage, the printed lines as records made by the printer itself
  (:func:`trace_lab.ir.printer.trace_lines`: text, op, region, memory figures, peak,
  recomputed, source line) with the stage's entry and peak bytes; the text of a
  stage is its lines joined, so text and views cannot disagree;
* the before/after graphs as data (:func:`.graph.graph_data`; DOT on demand with
  :func:`.graph.digraph`), or why there are none;
* the depth data (:mod:`.depth`): the diff of its first and last stage, why each fused
  region ends, a forward's saved-for-backward table;

and, for the run, the estimated compute/communication timeline
(:mod:`.timeline`, with the measured stalls when the run has them). The
comparison with eager, the per-program summary and the measured memory are the
Report's own plain fields. The HTML, the notebook widget, the CLI and the
``--nproc`` path read only this model and those fields; ``to_dict`` /
``from_dict`` carry it through JSON unchanged, so a saved report renders the
same. Only str/int/float/bool/None/list/dict inside.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..ir.printer import Line, trace_lines
from .parts import record_parts

__all__ = ["StageView", "PartView", "ViewModel", "build_view", "stage_view", "graphs_of", "line_region", "LINE_FIELDS"]

LINE_FIELDS = [f.name for f in fields(Line)]  # the order of a saved line's row


def line_region(line: Line) -> str | None:
    """The fused region a printed line belongs to (its region's line or one of its ops), or None.

    The one place the views ask; today the printer names the region module."""
    return line.region


@dataclass
class StageView:
    """One stage of one program part: its printed lines and memory (``str()`` is the trace text)."""

    kind: str
    stage: str
    n_ops: int
    entry_bytes: int
    peak_bytes: int
    lines: list[Line] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(ln.text for ln in self.lines) + "\n"

    @property
    def peak_above_inputs_bytes(self) -> int:
        return self.peak_bytes - self.entry_bytes

    @property
    def op_lines(self) -> list[Line]:
        """The lines that carry memory figures (one per op of the stage)."""
        return [ln for ln in self.lines if ln.has_memory]

    def curve(self) -> list[int]:
        """Live bytes at entry and after each op line (the Memory tab's curve)."""
        return [self.entry_bytes] + [ln.live_after for ln in self.op_lines]

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"<StageView {self.kind} '{self.stage}': {self.n_ops} ops>"

    def to_dict(self) -> dict:
        """Plain data; each line a row of :class:`~trace_lab.printer.Line`'s fields in order (``line_fields``)."""
        return {"kind": self.kind, "stage": self.stage, "n_ops": self.n_ops, "entry_bytes": self.entry_bytes,
                "peak_bytes": self.peak_bytes, "line_fields": LINE_FIELDS, "lines": [ln.to_row() for ln in self.lines]}

    @classmethod
    def from_dict(cls, data: dict) -> "StageView":
        if data.get("line_fields", LINE_FIELDS) != LINE_FIELDS:
            raise ValueError(f"stage lines saved with fields {data['line_fields']}, this trace_lab reads {LINE_FIELDS}")
        return cls(data["kind"], data["stage"], data["n_ops"], data["entry_bytes"], data["peak_bytes"],
                   [Line.from_row(row) for row in data["lines"]])


@dataclass
class PartView:
    """One program part: ``label`` ('forward #0'), its program's index and position in the run."""

    label: str
    kind: str
    program: int
    position: int
    stages: list[StageView]
    graphs: dict  # {"before": graph data, "after": graph data} or {"error": why there are none}
    # what the depth views read (.depth): "diff" (first -> last stage), "region_ends" (why each region ends),
    # "saved" (a forward's saved-for-backward table); each plain data, or {"error": why there is none}
    depth: dict = field(default_factory=dict)

    def listed_stages(self) -> list[tuple[int, "StageView"]]:
        """(index, stage) of the stages the views list: all but a ``sort_waits`` stage that changed nothing
        (a program without collectives, e.g. every single-process run: its lines are the stage before's)."""
        return [(k, st) for k, st in enumerate(self.stages) if not self.unchanged_sort_waits(k)]

    def unchanged_sort_waits(self, k: int) -> bool:
        st = self.stages[k]
        return (k > 0 and st.stage == "sort_waits" and len(self.stages) > k + 1
                and st.lines[1:] == self.stages[k - 1].lines[1:])

    def to_dict(self) -> dict:
        """Plain data; a stage whose lines equal an earlier stage's (a pass that changed nothing but the
        title line, or nothing at all) stores ``{"like": j}`` and its own title line only."""
        stages = []
        for k, st in enumerate(self.stages):
            same = next((j for j in range(k) if self.stages[j].lines[1:] == st.lines[1:]), None)
            if same is not None and st.lines:
                d = StageView(st.kind, st.stage, st.n_ops, st.entry_bytes, st.peak_bytes, st.lines[:1]).to_dict()
                d["lines"] = {"like": same, "title": d["lines"][0]}
            else:
                d = st.to_dict()
            stages.append(d)
        return {"label": self.label, "kind": self.kind, "program": self.program, "position": self.position,
                "stages": stages, "graphs": self.graphs, "depth": self.depth}

    @classmethod
    def from_dict(cls, data: dict) -> "PartView":
        stages = []
        for d in data["stages"]:
            if isinstance(d["lines"], dict):  # as stage ``like``'s lines under its own title
                like = data["stages"][d["lines"]["like"]]["lines"]
                d = {**d, "lines": [d["lines"]["title"], *like[1:]]}
            stages.append(StageView.from_dict(d))
        return cls(**{**data, "stages": stages})


@dataclass
class ViewModel:
    parts: list[PartView] = field(default_factory=list)
    timeline: dict | None = None  # {"programs": [...], "table": str, "measured"?: ...} or {"error": ...}

    def part(self, label: str) -> PartView | None:
        return next((p for p in self.parts if p.label == label), None)

    def stages(self, kind: str = "forward", program: int = -1) -> list[StageView]:
        """As :meth:`Report.traces`: the stages of one part of the ``program``-th program ('forward' also
        finds an inference program)."""
        positions = sorted({p.position for p in self.parts})
        if not positions:
            return []
        pos = positions[program]
        kinds = ("forward", "inference") if kind in ("forward", "inference") else ("backward",)
        part = next((p for p in self.parts if p.position == pos and p.kind in kinds), None)
        return list(part.stages) if part else []

    def to_dict(self) -> dict:
        return {"parts": [p.to_dict() for p in self.parts], "timeline": self.timeline}

    @classmethod
    def from_dict(cls, data: dict | None) -> "ViewModel":
        data = data or {}
        return cls([PartView.from_dict(p) for p in data.get("parts", [])], data.get("timeline"))


def stage_view(trace) -> StageView:
    live = trace.liveness()
    return StageView(trace.kind, trace.stage, len(trace.ops), live.entry_bytes, live.peak_bytes, trace_lines(trace))


def graphs_of(before, after) -> dict:
    """The before/after graph data of one part (first and last stage), or why there are none."""
    try:
        from .graph import before_after_data

        g_before, g_after = before_after_data(before, after)
    except Exception as e:  # noqa: BLE001 - no graphs must not lose the report
        return {"error": f"{type(e).__name__}: {e}"}
    return {"before": g_before, "after": g_after}


def _timeline(records, comm) -> dict:
    from .timeline import run_timeline

    try:
        return run_timeline(records, comm=comm)
    except Exception as e:  # noqa: BLE001 - a timeline failure must not lose the report
        return {"error": f"{type(e).__name__}: {e}"}


def build_view(records, comm: dict | None = None) -> ViewModel:
    """The view model of a run (see the module docstring) from its compilation records
    (:class:`trace_lab.run.compilation.CompilationRecord`, one per program part)."""
    from .depth import depth_of

    parts = [PartView(f"{part.kind} #{program.index}", part.kind, program.index, pos,
                      [stage_view(t) for t in part.traces], graphs_of(part.traces[0], part.traces[-1]),
                      depth_of(program, part))
             for pos, program, part in record_parts(records)]
    return ViewModel(parts, _timeline(records, comm))
