"""CompilationRecord: what compiling one program part made, in one object the views read.

Design: the jit (:mod:`.jit`) makes one record per program part (forward, backward or inference of
one Dynamo graph) when it has compiled it: the pass stages (Traces, ``[0]`` as captured, ``[-1]`` the
program that runs, joined to its regions' records), the executor and fusion strategy chosen and why,
the :class:`~trace_lab.executors.interface.CompiledProgram` (regions, generated source, the memory
guard's re-plans), the run stage's own notes (CUDA graphs left off, ...), the CUDA-graph wrapper, and
the timings (capture, each pass, the executor, each region, the whole compile's wall time). Nothing is
patched onto the compiled program afterwards.

A :class:`~trace_lab.report.report.Report` keeps its run's records (``Report.compilations``) and every
view and notebook tool (the Diff picker, the Regions tab's code and repro, the graph window control)
reads those: no view reaches a live :class:`~trace_lab.run.jit.JitFunction`. A record answers what the
report's walkers read of a program part (``kind``, ``traces``, ``compiled``, ``capture_seconds``), and
:func:`program_records` groups records by program the way ``capture.session.program_parts`` walks a
JitFunction.
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CompilationRecord", "ProgramRecords", "program_records"]


@dataclass
class CompilationRecord:
    program: int  # the Dynamo graph's index (Program.index)
    kind: str  # 'forward', 'backward' or 'inference'
    stages: list  # Traces, one per pass stage
    executor: str = ""
    fusion: str = ""  # the strategy that ran (auto resolved)
    reasons: list[str] = field(default_factory=list)  # why this executor and strategy
    compiled: object = None  # the CompiledProgram (None: Thunder's programs, or compiling failed)
    notes: list[str] = field(default_factory=list)  # the run stage's own notes on this part
    graphs: object = None  # cuda_graphs=True on CUDA: the GraphedRun that replays it
    capture_seconds: float = 0.0  # AOTAutograd's capture (joint graph, partition): the forward's; 0 for a backward,
    # whose graph came out of the forward's capture
    compile_wall_seconds: float = 0.0  # passes + executor + scratch measurement, wall clock
    scratch_seconds: float = 0.0  # measuring the ops' scratch (runtime/op_scratch.py), part of the wall time
    aligned_saves: dict | None = None  # the forward's: where the partition ran again to align layers' saves
    # (passes/layer_saves.py's ALIGNED_META: marked layers and values, kept, seconds); part of capture_seconds

    @property
    def traces(self) -> list:
        """The stages (the name the program-part walkers read)."""
        return self.stages

    @property
    def label(self) -> str:
        return f"{self.kind} #{self.program}"

    @property
    def materialized_regions(self) -> bool:
        return bool(self.stages and self.stages[-1].materialized_regions)

    def all_notes(self) -> list[str]:
        """The executor's notes, the run stage's, and the CUDA graphs' (recorded, replayed, run without)."""
        graphs = [] if self.graphs is None else [self.graphs.summary()] + list(self.graphs.notes)
        return list(getattr(self.compiled, "notes", []) or []) + list(self.notes) + graphs

    def timings(self) -> dict:
        """Where this part's compile time went (JSON-ready): AOTAutograd's capture, each pass stage, measuring
        the ops' scratch, the executor and each of its regions (seconds, cache hit), recording the CUDA graph
        (its second call), and the wall time of the whole compile (passes, scratch and executor)."""
        compiled = self.compiled
        return {"capture": self.capture_seconds,
                "passes": [[t.stage, t.pass_seconds] for t in self.stages],
                "op_scratch": self.scratch_seconds,
                "executor": getattr(compiled, "compile_seconds", 0.0),
                "regions": [[r.name, r.compile_seconds, r.cache_hit]
                            for r in (getattr(compiled, "regions", None) or {}).values()],
                "graph_recording": getattr(self.graphs, "record_seconds", 0.0),
                "aligned_saves": self.aligned_saves,
                "wall": self.compile_wall_seconds}


@dataclass
class ProgramRecords:
    """The records of one program, as ``capture.session.Program`` holds its parts."""

    index: int
    forward: CompilationRecord | None = None  # forward or inference
    backward: CompilationRecord | None = None

    @property
    def parts(self) -> list[CompilationRecord]:
        return [p for p in (self.forward, self.backward) if p is not None]


def program_records(records) -> list[ProgramRecords]:
    """Records grouped by program, in program order (the order the records were made in)."""
    programs: dict[int, ProgramRecords] = {}
    for r in records or []:
        p = programs.setdefault(r.program, ProgramRecords(r.program))
        if r.kind == "backward":
            p.backward = r
        else:
            p.forward = r
    return list(programs.values())
