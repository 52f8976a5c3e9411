"""The Memory tab: per program part, the live bytes above its inputs after each op, one curve per run.

Design: :func:`memory_plot_data` reads each run's view model (the final stage of the part: its curve,
peak and op line records) into plain data, :func:`~trace_lab.report.memory_plot.memory_curve_svg`
draws it, and a small table repeats the figures (readable where the SVG is not). Peaks are above
the inputs, as everywhere in trace_lab; a failing plot becomes a placeholder, never an exception.
"""
from __future__ import annotations

from ..ir.printer import format_bytes as _fmt_bytes
from .packing import esc

__all__ = ["memory_curves", "memory_plot_data", "memory_html"]


def memory_curves(runs, part_label: str) -> dict[str, list[int]]:
    """{run label: live-bytes curve of the final stage of ``part_label``} for each run that has it."""
    curves = {}
    for label, report in runs:
        part = report.view.part(part_label)
        if part is not None:
            curves[label] = part.stages[-1].curve()
    return curves


def _hover_texts(stage) -> list[str]:
    """Per point of a stage's curve (entry, then each op line): the op, its source line, its memory."""
    base = stage.entry_bytes
    out = [f"entry: the inputs, {_fmt_bytes(base)} (0 B above inputs)"]
    for k, ln in enumerate(stage.op_lines, 1):
        stmt = ln.text.split("  #", 1)[0].strip()
        stmt = stmt if len(stmt) <= 110 else stmt[:107] + "..."
        src = f"\n{ln.source}" if ln.source else ""
        out.append(f"op {k}: {stmt}{src}\nlive {_fmt_bytes(ln.live_after - base)} above inputs after it, "
                   f"{_fmt_bytes(ln.high_water - base)} while it runs" + ("  <- peak" if ln.peak else ""))
    return out


def memory_plot_data(runs, part_label: str) -> dict:
    """What the Memory tab draws for one program part, one curve per run that has it (final stage), all
    above the part's inputs: {"curves", "peaks" (the peak above inputs: the high water while the peak
    line runs), "peak_at" (the peak line's point), "hover" (per point: op, source line, bytes), "stages"}."""
    data = {"curves": {}, "peaks": {}, "peak_at": {}, "hover": {}, "stages": {}}
    for label, report in runs:
        part = report.view.part(part_label)
        if part is None:
            continue
        stage = part.stages[-1]
        base = stage.entry_bytes
        data["curves"][label] = [y - base for y in stage.curve()]
        data["peaks"][label] = stage.peak_above_inputs_bytes
        data["peak_at"][label] = next((k for k, ln in enumerate(stage.op_lines, 1) if ln.peak), 0)
        data["hover"][label] = _hover_texts(stage)
        data["stages"][label] = stage
    return data


def _memory_table(data: dict) -> str:
    rows = "".join(
        f"<tr><td>{esc(label)}</td><td class='tl-num'>{len(curve) - 1}</td>"
        f"<td class='tl-num'>{esc(_fmt_bytes(data['peaks'][label]))}</td><td class='tl-num'>{data['peak_at'][label]}</td>"
        f"<td class='tl-num'>{esc(_fmt_bytes(data['stages'][label].peak_bytes))}</td></tr>"
        for label, curve in data["curves"].items())
    return ("<table><tr><th>run</th><th>ops</th><th>peak above inputs</th><th>at op</th>"
            f"<th>high-water incl. inputs</th></tr>{rows}</table>")


def memory_html(runs, part_label: str | None = None) -> str:
    """The Memory tab: per program part, live bytes above its inputs after each op, one curve per run, each
    run's peak (above inputs, as everywhere) marked and labelled; hovering a step names its op and source."""
    from .memory_plot import memory_curve_svg
    from .optional_views import placeholder

    if not runs:
        return '<div class="tl-placeholder">no runs yet</div>'
    labels = [p.label for p in runs[-1][1].view.parts]
    if not labels:
        return '<div class="tl-placeholder">no program was compiled</div>'
    chosen = [part_label] if part_label else labels[:2]
    out = []
    for pl in chosen:
        data = memory_plot_data(runs, pl)
        if not data["curves"]:
            continue
        try:
            svg = memory_curve_svg(data["curves"], data["peaks"], title=f"{pl}: live memory above its inputs",
                                   xlabel="op (0 = entry)", ylabel="live above inputs", peak_at=data["peak_at"],
                                   hover=data["hover"])
        except Exception as e:  # noqa: BLE001 - a broken plot must not take the other tabs down
            svg = placeholder(f"memory plot failed: {type(e).__name__}: {e}")
        out.append(f"<h5>{esc(pl)}: live bytes above its inputs after each op, one curve per run; the peak is "
                   f"above inputs (hover a step for its op and source line)</h5><div class='tl-memplot'>{svg}</div>"
                   + _memory_table(data))
    return "".join(out)
