"""Timeline views: the Report's table and SVG of the lanes :mod:`trace_lab.analysis.timeline` computes.

``run_timeline`` estimates every program part of a run (final stage of each) and
attaches the measured communication of a multi-process run
(:mod:`trace_lab.distributed.comm_measure`) under the estimate; ``format_timeline``
and ``timeline_svg`` draw them.
"""
from __future__ import annotations

from ..analysis.timeline import CostModel, estimate_timeline
from .svg_compact import compact_svg

__all__ = ["report_timeline", "run_timeline", "format_timeline", "timeline_svg", "MEASURED_HEADING"]


def report_timeline(report, model: CostModel | None = None) -> dict:
    """Estimated timeline of every program part of a Report (final stage of each): :func:`run_timeline`
    of its compilation records and its measured communication (``report.comm``)."""
    return run_timeline(report.compilations, model, report.comm)


def run_timeline(records, model: CostModel | None = None, comm: dict | None = None) -> dict:
    """Estimated timeline of every program part of a run (final stage of each).

    When the run carries a measurement of its communication (``comm``, made by
    ``inspect`` in multi-process runs: :mod:`trace_lab.distributed.comm_measure`), it comes
    along as ``"measured"`` and the table shows it under the estimate: the measured rows are
    the ones to trust; the estimated lanes stay for the picture."""
    from .parts import materializes_regions, record_parts

    out = []
    for _, p, part in record_parts(records):
        tl = estimate_timeline(part.traces[-1], model, materializes_regions(part))
        tl["program"] = p.index
        out.append(tl)
    result = {"programs": out, "table": format_timeline(out)}
    if comm:
        from ..distributed.comm_measure import format_comm

        result["measured"] = comm
        result["table"] = (f"estimated (cost model):\n{result['table']}\n{MEASURED_HEADING}\n{format_comm(comm)}")
    return result


MEASURED_HEADING = ("measured (stall of the compute stream at each wait vs each collective replayed alone; "
                    "hidden = 1 - stall / intrinsic):")


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def format_timeline(timelines: list[dict]) -> str:
    """A text table: one row per program part."""
    from ..ir.printer import format_bytes

    # the liveness model's high-water mark including the program's inputs (the Summary's "peak" rows are above
    # the inputs, trace_lab's one meaning of peak): named so, not a bare "peak" beside them (issue 26 item 4)
    head = ("program", "span ms", "compute ms", "comm ms", "gather ms", "exposed ms", "overlap", "gather hidden",
            "high-water incl. inputs")
    rows = [head]
    for t in timelines:
        rows.append((f"#{t.get('program', 0)} {t['kind']} ({t['method']})", _ms(t["span_seconds"]),
                     _ms(t["compute_seconds"]), _ms(t["comm_seconds"]), _ms(t["all_gather_seconds"]),
                     _ms(t["exposed_comm_seconds"]), _pct(t["overlap_fraction"]),
                     _pct(t["all_gather_hidden_fraction"]),
                     format_bytes(t["peak_bytes"]) if t.get("peak_bytes") is not None else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _bars(intervals: list[dict], scale: float) -> list[tuple[float, float]]:
    """(start, width) bars of one lane and kind, scaled; intervals that touch or overlap are one bar (the
    same picture: the bars are filled and outlined in one colour) and the SVG stays small (issue 18)."""
    spans = sorted((x["start"], x["end"]) for x in intervals)
    merged: list[list[float]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1] + 1e-12:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a * scale, (b - a) * scale) for a, b in merged]


def timeline_svg(timeline: dict, title: str = "") -> str:
    """The two lanes and the memory curve of one timeline as an SVG string (matplotlib)."""
    import io

    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, (ax, mem) = plt.subplots(2, 1, figsize=(9, 3.2), sharex=True, gridspec_kw={"height_ratios": [1, 1.3]})
    ms = 1e3
    ax.broken_barh(_bars(timeline["compute"], ms), (10, 8), color="#4C72B0")
    colors = {"all_gather": "#DD8452", "reduce_scatter": "#55A868", "all_reduce": "#C44E52"}
    for kind, color in colors.items():
        ax.broken_barh(_bars([x for x in timeline["comm"] if x["kind"] == kind], ms), (0, 8), color=color, label=kind)
    ax.set_yticks([4, 14], ["comm", "compute"])
    ax.set_title(title or f"{timeline['kind']}: overlap {_pct(timeline['overlap_fraction'])}, exposed comm "
                 f"{_ms(timeline['exposed_comm_seconds'])} ms ({timeline['method']})", fontsize=9)
    if timeline["comm"]:
        ax.legend(fontsize=7, loc="upper right")
    if timeline.get("memory"):
        xs, ys = zip(*timeline["memory"])
        mem.step([x * ms for x in xs], [y / 2**20 for y in ys], where="post", color="#8172B3")
        mem.set_ylabel("live MiB", fontsize=8)
    mem.set_xlabel("ms", fontsize=8)
    buf = io.StringIO()
    fig.tight_layout()
    with matplotlib.rc_context({"svg.hashsalt": "trace_lab"}):  # the same timeline gives the same SVG
        fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    return compact_svg(buf.getvalue())
