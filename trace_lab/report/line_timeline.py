"""Where the time goes, as views: each trace line's measured time, and one call on two lanes.

Reads ``report.line_times`` (:meth:`trace_lab.run.line_profile.LineProfile.to_dict`, recorded by
``inspect(..., profile=True)`` / ``%%thunder_trace --profile``): per line of each final stage its
host time (launching it: Python, dispatch) and, on CUDA, the device time of its kernels; and the
call's spans: the host lane (each line's range) and the device lane (each kernel). A host-bound
call shows it at a glance: the device lane has gaps between short kernels while the host lane is
full. :func:`line_times_of` gives the Trace tab's time column; :func:`timeline_html` the Timeline
tab (an SVG drawn here, no script: it shows in exports; every name escaped) with the slowest lines,
the fused regions' calls (on a GPU each marked host-bound or device-bound) and the sums per source line.
"""
from __future__ import annotations

from ..run.line_profile import line_cost
from ..runtime.measure import HOST_BOUND_RATIO, bound_of
from .packing import esc

__all__ = ["line_times_of", "timeline_html", "time_note"]

LANE_H, PAD, WIDTH = 26, 70, 900
NO_PROFILE = ("not timed: run the cell with <code>--profile</code> (or the <b>time lines</b> switch, or "
              "<code>inspect(..., profile=True)</code>) to time every line of one more call; on a GPU the "
              "device lane shows each line's kernels")


def line_times_of(report, part) -> dict[int, tuple[float, float]]:
    """{op index in the part's final stage: (host us, device us)}; empty when the run was not profiled."""
    data = getattr(report, "line_times", None) or {}
    return {ln["index"]: (ln["host_us"], ln["device_us"]) for ln in data.get("lines", [])
            if ln["program"] == part.program and ln["kind"] == part.kind}


def time_note(host_us: float, device_us: float, device: bool) -> str:
    """'12 us host, 30 us device' (CPU: the host time only)."""
    return f"{host_us:,.0f} us host" + (f", {device_us:,.0f} us device" if device else "")


def _lane_svg(spans: list, cut: int) -> str:
    if not spans:
        return ""
    end = max(s[2] + s[3] for s in spans) or 1.0
    lanes = [lane for lane in ("host", "device") if any(s[0] == lane for s in spans)]
    height = PAD // 2 + LANE_H * len(lanes) + 24
    scale = (WIDTH - PAD - 10) / end
    out = [f'<svg class="tl-timeline" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
           'xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="11">']
    for k, lane in enumerate(lanes):
        y = 10 + k * LANE_H
        out.append(f'<text x="4" y="{y + 14}">{lane}</text>'
                   f'<rect x="{PAD}" y="{y}" width="{WIDTH - PAD - 10}" height="{LANE_H - 6}" fill="#f6f8fa"/>')
        color = "#4c78a8" if lane == "host" else "#e45756"
        for _, name, start, dur in (s for s in spans if s[0] == lane):
            w = max(dur * scale, 0.5)
            out.append(f'<rect x="{PAD + start * scale:.1f}" y="{y}" width="{w:.1f}" height="{LANE_H - 6}" '
                       f'fill="{color}"><title>{esc(name)}: {dur:,.1f} us at {start:,.1f} us</title></rect>')
    y = 10 + len(lanes) * LANE_H + 12
    out.append(f'<text x="{PAD}" y="{y}">0</text><text x="{WIDTH - 10}" y="{y}" text-anchor="end">'
               f'{end / 1e3:,.3f} ms</text></svg>')
    busy = {lane: sum(s[3] for s in spans if s[0] == lane) for lane in lanes}
    said = "; ".join(f"{lane} busy {busy[lane] / 1e3:,.3f} ms of {end / 1e3:,.3f} ms ({100 * busy[lane] / end:.0f}%)"
                     for lane in lanes)
    more = f"; {cut:,} spans past the first {len(spans):,} not drawn" if cut else ""
    return "".join(out) + f'<div class="tl-placeholder">one call: {esc(said)}{esc(more)}</div>'


def _range_cell(r) -> str:
    """'33.1-60.8': a line's fastest and slowest time over the profiled calls (empty for a line some call lacked)."""
    return f"<td class='tl-num'>{r[0]:,.1f}&ndash;{r[1]:,.1f}</td>" if r else "<td></td>"


def _longest_first(ln: dict) -> float:
    """Sort key: a line costs the longer of launching it and running its kernels (run/line_profile.line_cost);
    ranked by the device column alone, a host-bound call's lines (equal kernels) came out in no useful order."""
    return -line_cost(ln["host_us"], ln["device_us"])


def _regions_html(lines: list, device: bool, shown: int = 15) -> str:
    """The fused regions' calls, longest first: on a GPU each with whether launching it (host) or its kernels
    (device) took longer, so a user sees which region is host-bound (issue 27 item 1). Empty without regions."""
    regions = sorted((ln for ln in lines if ln.get("region")), key=_longest_first)
    if not regions:
        return ""

    def bound(ln) -> str:
        return bound_of(ln["host_us"], ln["device_us"])

    rows = "".join(f"<tr><td>{esc(ln['kind'])} #{ln['program']}</td><td class='tl-wrap'><code>{esc(ln['label'])}</code>"
                   f"</td><td class='tl-num'>{ln['host_us']:,.1f}</td>"
                   + (f"<td class='tl-num'>{ln['device_us']:,.1f}</td><td>{bound(ln)}</td>" if device else "")
                   + "</tr>" for ln in regions[:shown])
    if device:
        n_host = sum(bound(ln) == "host-bound" for ln in regions)
        lead = (f"<p>{n_host} of {len(regions)} fused region call{'s' if len(regions) != 1 else ''} host-bound: "
                f"launching them (host, with the profiler's ranges) took at least {HOST_BOUND_RATIO:.0%} of their "
                "kernels' time, so the device waited; fewer, larger regions or CUDA graphs help those.</p>")
        head = "<th>host us</th><th>device us</th><th>bound</th>"
    else:
        lead = f"<p>{len(regions)} fused region call{'s' if len(regions) != 1 else ''}, longest first.</p>"
        head = "<th>host us</th>"
    more = f"<p>{len(regions) - shown:,} more not listed.</p>" if len(regions) > shown else ""
    return (f"<h5>fused regions</h5>{lead}<div class='tl-scroll'><table><tr><th>part</th><th>region</th>{head}</tr>"
            f"{rows}</table></div>{more}")


def timeline_html(report) -> str:
    data = getattr(report, "line_times", None)
    if not data or not (data.get("lines") or data.get("spans")):
        return f'<div class="tl-placeholder">{NO_PROFILE}</div>'
    device = data.get("device") == "cuda"
    if not data.get("lines"):  # a replayed CUDA graph: the call and its kernels only
        return (f'<p>{esc(data.get("note") or "no line was timed")}.</p>'
                + _lane_svg(data.get("spans") or [], data.get("spans_cut", 0)))
    lines = sorted(data["lines"], key=_longest_first)
    spread = any(ln.get("host_range") for ln in lines)  # several calls profiled: each line's fastest-slowest

    def times(ln) -> str:
        cells = f"<td class='tl-num'>{ln['host_us']:,.1f}</td>" + (_range_cell(ln.get("host_range")) if spread else "")
        if device:
            cells += f"<td class='tl-num'>{ln['device_us']:,.1f}</td>" + (_range_cell(ln.get("device_range"))
                                                                          if spread else "")
        return cells

    top = "".join(f"<tr><td>{esc(ln['kind'])} #{ln['program']}</td><td class='tl-wrap'><code>{esc(ln['label'])}</code></td>"
                  + times(ln) + f"<td class='tl-wrap'>{esc(ln['source'] or '')}</td></tr>" for ln in lines[:15])
    sums: dict[str, list[float]] = {}
    for ln in data["lines"]:
        acc = sums.setdefault(ln["source"] or "(no source line)", [0.0, 0.0])
        acc[0] += ln["host_us"]
        acc[1] += ln["device_us"]
    by_source = sorted(sums.items(), key=lambda kv: -line_cost(*kv[1]))[:10]
    src = "".join(f"<tr><td class='tl-wrap'><code>{esc(k)}</code></td><td class='tl-num'>{h:,.1f}</td>"
                  + (f"<td class='tl-num'>{d:,.1f}</td>" if device else "") + "</tr>" for k, (h, d) in by_source)
    dev_head = "<th>device us</th>" if device else ""
    lanes = "device: host lane = each line's range, device lane = its kernels" if device else \
        "CPU: the host's time is the program's time (one lane)"
    longer = "<p>each line ranked by the longer of its host and device times</p>" if device else ""
    calls = int(data.get("calls") or 1)
    top_head = "<th>host us</th>" + ("<th>host range</th>" if spread else "") \
        + ((dev_head + ("<th>device range</th>" if spread else "")) if device else "")
    spread_note = (f"<p>us: the median over the {calls} calls; range: the fastest and the slowest of them</p>"
                   if spread else "")
    what = "one more call" if calls == 1 else \
        f"{calls} more calls, each line's times their median over the calls (the lanes draw the median call)"
    return (f"<p>Every line of {what}, timed under torch.profiler ({esc(lanes)}). "
            "<code>trace_lab.profile_lines(jfn, x).export_chrome_trace(path)</code> writes the same call for "
            "Perfetto.</p>" + _lane_svg(data.get("spans") or [], data.get("spans_cut", 0))
            + f"<h5>slowest lines</h5>{longer}{spread_note}<div class='tl-scroll'><table><tr><th>part</th>"
            f"<th>line</th>{top_head}<th>source</th></tr>{top}</table></div>{_regions_html(data['lines'], device)}"
            f"<h5>per source line</h5><div class='tl-scroll'><table>"
            f"<tr><th>source</th><th>host us</th>{dev_head}</tr>{src}</table></div>")
