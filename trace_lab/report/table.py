"""Comparison table: one row of plain numbers per run, the best value per column, and what to show.

A row is read from a Report's plain data only (never re-measured), so the
notebook's Compare tab, ``Session.to_dataframe()`` and the static HTML agree.
Columns (``COLUMNS``): the run's label and options, then

* ``sort_waits``     - the option, None where it changes nothing (no fsdp, one process: no collectives
  to sort)
* ``compile_s``      - capture + passes + executor seconds (Report.compile_seconds['total'])
* ``first_run_s``    - wall time of the first call (compile included); ``first_run_noisy`` why it (and
  ``compile_s``) is not to be trusted (other processes competed for the CPUs: ``Report.first_run_noise``),
  drawn in its cell; such a row gets neither column's star
* ``steady_ms``      - median of the timed runs (None when ``runs=0``); ``steady_min_ms`` / ``steady_max_ms``
  their spread, and ``steady_noisy`` why the time is not to be trusted (the runs spread over 1.5x, or other
  processes competed for the CPUs while they ran: ``Report.timing_noise``), None when it is. The table
  shows the spread and the flag inside the steady cell (:data:`IN_STEADY_CELL`); a noisy run never gets the
  column's star
* ``forward_peak_predicted`` / ``backward_peak_predicted`` - the largest predicted peak of the forward
  (inference) / backward programs (bytes; None when the run has no such program)
* ``forward_peak_measured`` / ``backward_peak_measured`` - the same, measured (None if not measured)
* ``step_peak_measured`` - the peak of the whole call, forward and backward together (measured for a
  ``--baseline`` peer, and for trace_lab's run beside one: ``inspect(..., measure_step=True)``)
* ``kernels``        - lines of the final traces (each op or fused region is one launch)
* ``fusions``        - fused regions in the final traces
* ``cache_hits``     - regions whose compiled kernel came from the fusion cache (None if unknown)
* ``matches_eager``  - the differential check (None when it was skipped)

**Peak** means one thing everywhere in trace_lab (the Summary, this table, the Memory tab, the Trace
header): the peak *above inputs* - the most memory a program allocates beyond what was allocated
when it was called (measured: ``torch.cuda.max_memory_allocated()`` minus the bytes allocated before
the call; CPU: the profiler's allocator events). Forward and backward are separate columns: a
backward's inputs hold what the forward saved, so the two peaks are not comparable and their
maximum says nothing (notebook 04: checkpointing lowers the forward's peak and raises the
backward's). The row also keeps ``peak_predicted`` / ``peak_measured`` (the largest over all
programs, for scripts); the table does not show them.

Lower is better, on its own, for every column in ``LOWER_IS_BETTER`` (times and peaks; not kernels or
fusions, which are neither good nor bad alone: horizontal fusion launches the fewest and holds the
highest peak); ``best_rows`` marks the lowest value (ties all marked) in each such column that has at
least two values that are not all equal; a run whose steady time is noisy is left out of that column. :func:`shown_columns` drops the columns a table does not
need (every value empty, or an option every run shares: said once above the table instead), so the
table fits a notebook panel.
"""
from __future__ import annotations

from ..options import SCHEMA
from .parts import summary_parts

__all__ = ["IN_STEADY_CELL", "COLUMNS", "OPTION_COLUMNS", "OPTION_SCHEMA", "PEAK_COLUMNS", "LOWER_IS_BETTER", "report_row",
           "best_rows", "shown_columns", "option_title"]

OPTION_COLUMNS = ["fusion", "executor", "fusion_cache", "sort_waits"]  # the options a row shows (SCHEMA's names)
OPTION_SCHEMA = {o.name: o for o in SCHEMA if o.name in OPTION_COLUMNS}  # their schema entries: titles, types
PEAK_COLUMNS = ["forward_peak_predicted", "forward_peak_measured", "backward_peak_predicted", "backward_peak_measured",
                "step_peak_measured"]
IN_STEADY_CELL = ["steady_min_ms", "steady_max_ms", "steady_noisy"]  # drawn in the steady cell, not as columns
NOT_COLUMNS = [*IN_STEADY_CELL, "first_run_noisy"]  # drawn inside another column's cell
COLUMNS = ["run", *OPTION_COLUMNS, "compile_s", "first_run_s", "first_run_noisy", "steady_ms", *IN_STEADY_CELL, *PEAK_COLUMNS,
           "kernels", "fusions", "cache_hits", "matches_eager"]
# columns where the lowest value is the better run on its own (issue 18: "fewest kernels" is not: horizontal
# fusion launches the fewest and holds the highest peak, so a star there made the worst-memory run look best)
LOWER_IS_BETTER = ["compile_s", "first_run_s", "steady_ms", *PEAK_COLUMNS]
_FORWARD_KINDS = ("forward", "inference")


def _parts(report):
    return [part for _, _, part in summary_parts(report.programs)]


def _cache_hits(report):
    hits, known = 0, False
    for part in _parts(report):
        for region in part.get("regions", []):
            for key in ("cache_hit", "hit"):
                if key in region:
                    known = True
                    hits += bool(region[key])
                    break
    return hits if known else None


def _largest(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _noise(report) -> str | None:
    noise = getattr(report, "timing_noise", None)
    return noise() if callable(noise) else None


def _first_noise(report) -> str | None:
    noise = getattr(report, "first_run_noise", None)
    return noise() if callable(noise) else None


def report_row(report, label: str | None = None) -> dict:
    """The comparison row of one Report (plain numbers; bytes as ints)."""
    parts = list(summary_parts(report.programs))
    finals = [part["stages"][-1] for _, _, part in parts if part.get("stages")]

    def predicted(kinds):
        return _largest(part["stages"][-1]["predicted_peak_above_inputs_bytes"] for _, kind, part in parts
                        if kind in kinds and part.get("stages"))

    def measured(kinds):
        return _largest(m.get("measured_peak_above_inputs_bytes") for m in report.memory if m.get("kind") in kinds)

    opts = report.options
    runs = [t for t in (getattr(report, "run_seconds", None) or []) if t is not None]
    collectives = bool(opts.get("fsdp")) or ((getattr(report, "launch", None) or {}).get("nproc") or 1) > 1
    executors = sorted({part.get("executor") for _, _, part in parts if part.get("executor")})
    row = {
        "run": label or report.name,
        "fusion": opts.get("fusion"),
        "executor": ",".join(executors) or opts.get("executor"),
        "fusion_cache": bool(opts.get("fusion_cache")),
        # wait sorting reorders collectives: a single-process run without fsdp has none, so it means nothing there
        "sort_waits": bool(opts.get("sort_waits")) if collectives else None,
        "compile_s": report.compile_seconds.get("total"),
        "first_run_s": report.first_run_seconds,
        "first_run_noisy": _first_noise(report),
        "steady_ms": report.steady_seconds * 1e3 if report.steady_seconds is not None else None,
        "steady_min_ms": min(runs) * 1e3 if runs else None,
        "steady_max_ms": max(runs) * 1e3 if runs else None,
        "steady_noisy": _noise(report) if runs else None,
        "forward_peak_predicted": predicted(_FORWARD_KINDS),
        "forward_peak_measured": measured(_FORWARD_KINDS),
        "backward_peak_predicted": predicted(("backward",)),
        "backward_peak_measured": measured(("backward",)),
        "step_peak_measured": (getattr(report, "step_peak", None) or {}).get("measured_bytes"),
        "kernels": sum(s["ops"] for s in finals),
        "fusions": sum(s["regions"] for s in finals),
        "cache_hits": _cache_hits(report),
        "matches_eager": None if report.comparison is None else bool(report.comparison["ok"]),
    }
    if getattr(report, "peer", None):  # a --baseline peer traces nothing: no kernels, regions or cache to count
        row.update(fusion_cache=None, kernels=None, fusions=None)
    row["peak_predicted"] = _largest([row["forward_peak_predicted"], row["backward_peak_predicted"]])
    row["peak_measured"] = _largest([row["forward_peak_measured"], row["backward_peak_measured"],
                                     row["step_peak_measured"]])
    return row


def best_rows(rows: list[dict]) -> dict[str, set[int]]:
    """For each lower-is-better column, the rows holding its minimum (ties all marked); columns with
    fewer than two values, or where every value ties, get no mark."""
    best: dict[str, set[int]] = {}
    if len(rows) < 2:
        return best
    for col in LOWER_IS_BETTER:
        vals = [(i, r[col]) for i, r in enumerate(rows)
                if isinstance(r.get(col), (int, float)) and not isinstance(r.get(col), bool)
                and not (col == "steady_ms" and r.get("steady_noisy"))  # a noisy time is no one's best
                and not (col in ("compile_s", "first_run_s") and r.get("first_run_noisy"))]
        if len(vals) < 2:
            continue
        low = min(v for _, v in vals)
        if all(v == low for _, v in vals):
            continue  # every run ties: nothing to point at
        best[col] = {i for i, v in vals if v == low}
    return best


def shown_columns(rows: list[dict]) -> tuple[list[str], dict[str, object]]:
    """(the columns a table of ``rows`` shows, {option column: the value every run shares}).

    Dropped: a column whose every value is empty (None), and, with two or more runs, an option column
    whose value every run shares (returned, to be said once). One run keeps its options."""
    shown, shared = [], {}
    for col in COLUMNS:
        if col in NOT_COLUMNS:
            continue
        values = [r.get(col) for r in rows]
        if col != "run" and all(v is None for v in values):
            continue
        if col in OPTION_COLUMNS and len(rows) > 1 and all(v == values[0] for v in values):
            shared[col] = values[0]
            continue
        shown.append(col)
    return shown, shared


def option_title(col: str) -> str:
    """An option column's title, from the options schema: the option's label (what the widget's control
    says, 'fusion cache'), else its name ('fusion')."""
    opt = OPTION_SCHEMA[col]
    return opt.label or opt.name
