"""Comparison table: one row of plain numbers per run, and the best value per column.

A row is read from a Report's plain data only (never re-measured), so the
notebook's Compare tab, ``Session.to_dataframe()`` and the static HTML agree.
Columns (``COLUMNS``): the run's label and options, then

* ``compile_s``      - capture + passes + executor seconds (Report.compile_seconds['total'])
* ``first_run_s``    - wall time of the first call (compile included)
* ``steady_ms``      - median of the timed runs (None when ``runs=0``)
* ``peak_predicted`` - largest predicted peak above inputs over all programs (bytes)
* ``peak_measured``  - largest measured peak above inputs (bytes, None if not measured)
* ``kernels``        - lines of the final traces (each op or fused region is one launch)
* ``fusions``        - fused regions in the final traces
* ``cache_hits``     - regions whose compiled kernel came from the fusion cache (None if unknown)
* ``matches_eager``  - the differential check (None when it was skipped)

Lower is better for every column in ``LOWER_IS_BETTER`` (times and peaks; not kernels or fusions, which
are neither good nor bad alone); ``best_rows`` marks the lowest
value (ties all marked) in each column that has at least two values that are not all equal.
"""
from __future__ import annotations

from .parts import summary_parts

__all__ = ["COLUMNS", "LOWER_IS_BETTER", "report_row", "best_rows"]

COLUMNS = ["run", "fusion", "executor", "fusion_cache", "sort_waits", "compile_s", "first_run_s", "steady_ms",
           "peak_predicted", "peak_measured", "kernels", "fusions", "cache_hits", "matches_eager"]
# columns where the lowest value is the better run on its own (issue 18: "fewest kernels" is not: horizontal
# fusion launches the fewest and holds the highest peak, so a star there made the worst-memory run look best)
LOWER_IS_BETTER = ["compile_s", "first_run_s", "steady_ms", "peak_predicted", "peak_measured"]


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


def report_row(report, label: str | None = None) -> dict:
    """The comparison row of one Report (plain numbers; bytes as ints)."""
    finals = [part["stages"][-1] for part in _parts(report) if part.get("stages")]
    measured = [m["measured_peak_above_inputs_bytes"] for m in report.memory
                if m.get("measured_peak_above_inputs_bytes") is not None]
    opts = report.options
    executors = sorted({part.get("executor") for part in _parts(report) if part.get("executor")})
    return {
        "run": label or report.name,
        "fusion": opts.get("fusion"),
        "executor": ",".join(executors) or opts.get("executor"),
        "fusion_cache": bool(opts.get("fusion_cache")),
        "sort_waits": bool(opts.get("sort_waits")),
        "compile_s": report.compile_seconds.get("total"),
        "first_run_s": report.first_run_seconds,
        "steady_ms": report.steady_seconds * 1e3 if report.steady_seconds is not None else None,
        "peak_predicted": max((s["predicted_peak_above_inputs_bytes"] for s in finals), default=None),
        "peak_measured": max(measured, default=None),
        "kernels": sum(s["ops"] for s in finals),
        "fusions": sum(s["regions"] for s in finals),
        "cache_hits": _cache_hits(report),
        "matches_eager": None if report.comparison is None else bool(report.comparison["ok"]),
    }


def best_rows(rows: list[dict]) -> dict[str, set[int]]:
    """For each lower-is-better column, the rows holding its minimum (ties all marked); columns with
    fewer than two values, or where every value ties, get no mark."""
    best: dict[str, set[int]] = {}
    if len(rows) < 2:
        return best
    for col in LOWER_IS_BETTER:
        vals = [(i, r[col]) for i, r in enumerate(rows) if isinstance(r.get(col), (int, float))]
        if len(vals) < 2:
            continue
        low = min(v for _, v in vals)
        if all(v == low for _, v in vals):
            continue  # every run ties: nothing to point at
        best[col] = {i for i, v in vals if v == low}
    return best
