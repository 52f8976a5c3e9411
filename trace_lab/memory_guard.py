"""The memory strategy's compile feedback: keep its promise after the executor has spoken.

The ``memory`` fusion strategy plans with the captured program: it accepts a merge only
where the predicted peak does not rise, and so never predicts more than the unfused
program. What a region really costs is known only once an executor has compiled it
(:mod:`trace_lab.executors.workspace`): a compiler may return views in storages of their
own (Inductor on CUDA gives the k/v views of an attention in-projection their own
buffer) or allocate scratch inside the call. When that lifts the compiled program's
predicted peak above the unfused program's, :func:`overrunning_regions` names the
regions that cost more than planned, largest excess first; :func:`keep_promise` leaves the ops of
the worst one unfused (``PassContext.keep_unfused``), plans and compiles again (unchanged
regions hit the fusion cache), and repeats while the peak is still above, at most
:data:`MAX_ROUNDS` times. Every round is said in the compiled program's notes.
"""
from __future__ import annotations

from .analysis.liveness import CUDA_ROUNDING, region_output_bytes, region_workspace
from .printer import format_bytes

__all__ = ["MAX_ROUNDS", "keep_promise", "overrunning_regions", "unfused_baseline", "peak_above_inputs"]

MAX_ROUNDS = 3


def peak_above_inputs(trace, materialized: bool) -> int:
    return trace.liveness(materialized).peak_above_inputs_bytes


def unfused_baseline(stages):
    """The stage the fusion pass started from (the program as ``fusion='none'`` runs it)."""
    for i, st in enumerate(stages):
        if st.stage.startswith("fusion") and i > 0:
            return stages[i - 1]
    return None


def overrunning_regions(trace, rounding: int) -> list[tuple[int, str, list[str]]]:
    """(excess bytes, region name, its op names) for every region whose compiled outputs
    and workspace take more than the fusion plan assumed, largest excess first."""
    out = []
    for n in trace.ops:
        if n.op != "call_module":
            continue
        region = n.meta.get("region") or {}
        planned = region.get("planned_output_bytes")
        if planned is None:
            continue
        excess = region_output_bytes(n, rounding) + region_workspace(n, rounding) - int(planned)
        if excess > 0 and region.get("nodes"):
            out.append((excess, str(n.target), list(region["nodes"])))
    return sorted(out, key=lambda r: -r[0])


def keep_promise(part, executor, compiled, replan):
    """fusion='memory', after compiling: while the compiled peak of ``part`` is above the unfused
    program's, leave the worst overrunning region unfused, ``replan(keep_unfused)`` (-> stages) and
    compile again; the rounds, and any overrun that remains, are said in the compiled notes."""
    base = unfused_baseline(part.traces)
    if base is None:
        return compiled
    limit = peak_above_inputs(base, False)
    rounding = CUDA_ROUNDING if part.traces[-1].device.type == "cuda" else 1
    keep_unfused: set[str] = set()
    said: list[str] = []
    for _ in range(MAX_ROUNDS):
        peak = peak_above_inputs(part.traces[-1], False)
        if peak <= limit:
            break
        over = [r for r in overrunning_regions(part.traces[-1], rounding) if not set(r[2]) <= keep_unfused]
        if not over:
            break
        excess, name, nodes = over[0]
        keep_unfused |= set(nodes)
        said.append(f"memory strategy: compiled peak {format_bytes(peak)} was above the unfused program's "
                    f"{format_bytes(limit)} because {name}'s compiled code takes {format_bytes(excess)} more than "
                    f"planned; its {len(nodes)} ops are left unfused and the program re-planned")
        part.traces = replan(frozenset(keep_unfused))
        compiled = executor.compile(part.traces[-1])
    peak = peak_above_inputs(part.traces[-1], False)
    if peak > limit:
        after = f" after {len(said)} re-plan{'s' if len(said) != 1 else ''}" if said else ""
        said.append(f"memory strategy: compiled peak {format_bytes(peak)} is still above the unfused program's "
                    f"{format_bytes(limit)}{after}: the rest is what compiled regions allocate beyond the plan "
                    "(scratch inside their call; the plain ops they replace may allocate scratch too, which the "
                    "model does not count)")
    compiled.notes = said + list(compiled.notes)
    return compiled
