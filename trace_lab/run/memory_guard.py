"""The memory strategy's compile feedback: keep its promise after the executor has spoken.

The ``memory`` fusion strategy plans with the captured program: it accepts a merge only
where the predicted peak does not rise, and so never predicts more than the unfused
program. What a region really costs is known only once an executor has compiled it
(:mod:`trace_lab.executors.workspace`): a compiler may return views in storages of their
own (Inductor on CUDA gives the k/v views of an attention in-projection their own
buffer) or allocate scratch inside the call. When that lifts the compiled program's
predicted peak above what was planned, two remedies follow, gentlest first:

* **Split.** When the worst overrunning region holds several of the dataflow groups the merge
  pass joined (nvFuser segments one fusion of eight Adam updates into kernels whose
  intermediates are all alive: 4 MiB measured where the plan saw none; one update per region,
  514 KiB), :func:`keep_promise` plans once more with that region's ops kept apart
  (``PassContext.keep_apart``: the merge pass does not join their units) and compiles; the new
  program is kept only if its compiled peak is lower (a :class:`Split`).
* **Unfuse.** While the compiled peak is above the unfused program's,
  :func:`overrunning_regions` names the regions that cost more than planned, largest excess first
  (from the regions' compiled records, :mod:`trace_lab.analysis.region_record`); the ops of the
  worst one are left unfused (``PassContext.keep_unfused``), and the program is planned and
  compiled again (unchanged regions hit the fusion cache), at most :data:`MAX_ROUNDS` times.

What it did comes back as data, a :class:`GuardResult` on the compiled program
(``CompiledProgram.memory_guard``: the limit, the split, each re-plan's peak, region, excess and
ops, the final peak), and is said in the compiled program's notes
(:func:`guard_notes`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..analysis.buffers import default_rounding, region_output_bytes, region_workspace
from ..analysis.region_record import region_record
from ..ir.printer import format_bytes

__all__ = ["MAX_ROUNDS", "keep_promise", "overrunning_regions", "unfused_baseline", "peak_above_inputs",
           "planned_peak", "Replan", "Split", "GuardResult", "guard_notes"]

MAX_ROUNDS = 3


@dataclass(frozen=True)
class Replan:
    """One round: the compiled peak that was above the limit, and the region left unfused for it."""

    peak: int  # compiled peak above inputs before this re-plan
    region: str  # the region whose ops are left unfused
    excess: int  # bytes its compiled code takes beyond the plan
    ops: tuple  # fx names of those ops


@dataclass(frozen=True)
class Split:
    """The re-plan with one overrunning region's ops kept apart, and what it measured."""

    planned: int  # the plan's predicted peak before compiling
    peak: int  # the compiled peak it was above by
    region: str
    excess: int
    ops: tuple  # fx names kept apart
    new_peak: int  # the compiled peak of the program planned with them apart
    kept: bool  # new_peak < peak: the new program replaced the old one


@dataclass(frozen=True)
class GuardResult:
    limit: int  # the unfused program's predicted peak above inputs
    replans: tuple  # Replan per round, in order
    final_peak: int  # the compiled program's predicted peak above inputs at the end
    split: Split | None = None

    @property
    def kept(self) -> bool:
        """Is the compiled program's peak at or below the unfused program's?"""
        return self.final_peak <= self.limit


def peak_above_inputs(trace, materialized: bool) -> int:
    return trace.liveness(materialized).peak_above_inputs_bytes


def planned_peak(stages) -> int | None:
    """The fusion stage's predicted peak as planned, before compiling (its ``info``), or None."""
    for st in reversed(stages):
        if st.stage.startswith("fusion"):
            return st.info.get("predicted_peak_above_inputs_bytes")
    return None


def unfused_baseline(stages):
    """The stage the fusion pass started from (the program as ``fusion='none'`` runs it)."""
    for i, st in enumerate(stages):
        if st.stage.startswith("fusion") and i > 0:
            return stages[i - 1]
    return None


def overrunning_regions(trace, rounding: int) -> list[tuple[int, str, list[str]]]:
    """(excess bytes, region name, its op names) for every compiled region of ``trace`` (a stage
    joined to its compiled program) whose outputs and workspace take more than the fusion plan
    assumed, largest excess first."""
    out = []
    for n in trace.ops:
        record = region_record(trace, n)
        if record is None or record.planned_output_bytes is None:
            continue
        excess = (region_output_bytes(n, rounding, record) + region_workspace(n, rounding, record)
                  - int(record.planned_output_bytes))
        if excess > 0 and record.nodes:
            out.append((excess, str(n.target), list(record.nodes)))
    return sorted(out, key=lambda r: -r[0])


def joined_groups(base, nodes, can_fuse) -> int:
    """How many of the dataflow groups (:func:`trace_lab.passes.partition.dataflow_groups`, after constant folding,
    as the memory strategy starts from them) the ops named ``nodes`` come from."""
    from ..passes.constant_fold import fold_constants
    from ..passes.partition import OpGraph, dataflow_groups

    groups = dataflow_groups(OpGraph(fold_constants(base), can_fuse))
    names = set(nodes)
    return sum(1 for members in groups.members.values() if any(n.name in names for n in members))


def keep_promise(stages, compiled, rebuild, can_fuse=None):
    """fusion='memory', after compiling: while the compiled peak of ``stages[-1]`` (joined to
    ``compiled``) is above the unfused program's, leave the worst overrunning region unfused and
    ``rebuild(keep_unfused, keep_apart)`` (-> stages, compiled: planned, compiled and joined again). Before
    that, with ``can_fuse`` (the executor's), the split of the module docstring. Returns the
    final (stages, compiled); ``compiled.memory_guard`` is the :class:`GuardResult`, and the rounds,
    and any overrun that remains, are said in its notes."""
    base = unfused_baseline(stages)
    if base is None:
        return stages, compiled
    limit = peak_above_inputs(base, False)
    rounding = default_rounding(stages[-1])
    split = None
    planned, peak = planned_peak(stages), peak_above_inputs(stages[-1], False)
    if planned is not None and peak > planned and can_fuse is not None:  # the gentler remedy first
        over = overrunning_regions(stages[-1], rounding)[:1]
        if over and joined_groups(base, over[0][2], can_fuse) > 1:
            excess, name, nodes = over[0]
            new_stages, new_compiled = rebuild(frozenset(), frozenset(nodes))
            new_peak = peak_above_inputs(new_stages[-1], False)
            split = Split(planned, peak, name, excess, tuple(nodes), new_peak, new_peak < peak)
            if split.kept:
                stages, compiled = new_stages, new_compiled
            else:  # the first plan again (its regions hit the fusion cache), so the stages and program agree
                stages, compiled = rebuild(frozenset())
    keep_apart = frozenset(split.ops) if split is not None and split.kept else frozenset()
    keep_unfused: set[str] = set()
    replans: list[Replan] = []
    for _ in range(MAX_ROUNDS):
        peak = peak_above_inputs(stages[-1], False)
        if peak <= limit:
            break
        over = [r for r in overrunning_regions(stages[-1], rounding) if not set(r[2]) <= keep_unfused]
        if not over:
            break
        excess, name, nodes = over[0]
        keep_unfused |= set(nodes)
        replans.append(Replan(peak, name, excess, tuple(nodes)))
        stages, compiled = rebuild(frozenset(keep_unfused), keep_apart)
    result = GuardResult(limit, tuple(replans), peak_above_inputs(stages[-1], False), split)
    compiled.memory_guard = result
    compiled.notes = guard_notes(result) + list(compiled.notes)
    return stages, compiled


def guard_notes(result: GuardResult) -> list[str]:
    """The compiled program's notes for what :func:`keep_promise` did."""
    said = [f"memory strategy: compiled peak {format_bytes(r.peak)} was above the unfused program's "
            f"{format_bytes(result.limit)} because {r.region}'s compiled code takes {format_bytes(r.excess)} more "
            f"than planned; its {len(r.ops)} ops are left unfused and the program re-planned" for r in result.replans]
    s = result.split
    if s is not None:
        said.append(f"memory strategy: compiled peak {format_bytes(s.peak)} was above the planned "
                    f"{format_bytes(s.planned)} because {s.region}'s compiled code takes {format_bytes(s.excess)} "
                    f"more than planned; planned again with its {len(s.ops)} ops kept apart (not merged into one "
                    f"region): {format_bytes(s.new_peak)}, "
                    + ("kept" if s.kept else "not lower, so the first plan stands"))
    if not result.kept:
        n = len(result.replans)
        after = f" after {n} re-plan{'s' if n != 1 else ''}" if n else ""
        said.append(f"memory strategy: compiled peak {format_bytes(result.final_peak)} is still above the unfused "
                    f"program's {format_bytes(result.limit)}{after}: the rest is what compiled regions allocate "
                    "beyond the plan (scratch inside their call; the plain ops they replace may allocate scratch "
                    "too, which the model does not count)")
    return said
