"""The depth views as HTML: Peak (what makes it), Saved (for backward), Diff (first -> last stage), Regions (why each ends).

Each reads one part's depth data (:mod:`.depth`, in the view model) and nothing live, so the
static report, the notebook widget and a report reloaded from JSON show the same; every name
from user code is escaped. :func:`depth_panels` gives the three panels of a whole report (one
section per part), :func:`part_depth_html` one part's view for the widget's tabs.
"""
from __future__ import annotations

from ..ir.printer import format_bytes
from .packing import esc

__all__ = ["DEPTH_VIEWS", "part_depth_html", "depth_panels", "remedies_html", "remedy_cells", "REMEDY_HEAD"]

DEPTH_VIEWS = ("Peak", "Saved", "Diff", "Regions")


def _why_none(data: dict | None) -> str:
    why = (data or {}).get("error", "not recorded for this run")
    return f'<div class="tl-placeholder">{esc(why)}</div>'


def saved_html(depth: dict) -> str:
    data = depth.get("saved") or {}
    if "rows" not in data:
        return _why_none(data)
    head = ("name", "shape", "dtype", "bytes", "held by", "recomputable", "op", "source")
    body = []
    for r in data["rows"]:
        cells = (r["name"], str(list(r["shape"])), r["dtype"],
                 format_bytes(r["bytes"]) if r["held_by"] == "activation" else "-", r["held_by"],
                 "yes" if r["recomputable"] else "no", r["op"], r["source"] or "")
        body.append("<tr>" + "".join(f"<td class='tl-wrap'>{esc(c)}</td>" if k == len(cells) - 1 else f"<td>{esc(c)}</td>"
                                     for k, c in enumerate(cells)) + "</tr>")
    n_act = sum(r["held_by"] == "activation" for r in data["rows"])
    total = (f"<p><b>saved activations: {esc(format_bytes(data['activation_bytes']))}</b> in {n_act} tensors, kept "
             "from the forward into the backward (the saved part of the step's peak); inputs the caller holds anyway "
             "add nothing. <i>recomputable</i>: cheap for a partitioner to recompute instead of saving.</p>")
    return (total + '<div class="tl-scroll"><table class="tl-compare"><tr>'
            + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>" + "".join(body) + "</table></div>")


def peak_html(depth: dict) -> str:
    data = depth.get("peak") or {}
    if "data" not in data:
        return _why_none(data)
    d = data["data"]
    held = sum(r["bytes"] for r in d["held"])
    out = [f"<p><b>peak {esc(format_bytes(d['peak_above_inputs']))} above inputs</b> on line {d['line']} "
           f"(<code>{esc(d['op'])}</code>): the buffers alive while it runs, by kind and by the source line that made "
           "them. The rows add up to the peak (with the line's own workspace, less inputs freed before it); the "
           f"caller's inputs ({esc(format_bytes(held))}) are not part of it. <code>trace_lab.explain_peak(fn, *args)</code> "
           "prices remedies (other strategies, checkpointing repeated blocks, recomputing a saved activation) and reruns "
           "one to measure its saving (in the notebook: <b>price remedies</b> above, then <b>Try</b>).</p>"]
    head = ("kind", "bytes", "source", "made by", "tensors")
    body = []
    for r in d["rows"]:
        names = ", ".join(r["tensors"][:8]) + (f" (+{len(r['tensors']) - 8})" if len(r["tensors"]) > 8 else "")
        cells = (r["kind"], format_bytes(r["bytes"]), r["source"] or "", r["op"], names)
        body.append("<tr>" + "".join(f"<td class='tl-wrap'>{esc(c)}</td>" if k >= 2 else f"<td>{esc(c)}</td>"
                                     for k, c in enumerate(cells)) + "</tr>")
    if d["transient"] > 0:
        body.append(f"<tr><td>workspace</td><td>{esc(format_bytes(d['transient']))}</td>"
                    "<td class='tl-wrap' colspan='3'>inside the peak line's own call (a region's workspace, an op's scratch)</td></tr>")
    elif d["transient"] < 0:
        body.append(f"<tr><td>freed inside</td><td>-{esc(format_bytes(-d['transient']))}</td>"
                    "<td class='tl-wrap' colspan='3'>inputs the peak line's region frees inside its call (donated) "
                    "before its high-water mark</td></tr>")
    if d["inputs_freed"]:
        body.append(f"<tr><td>inputs freed</td><td>-{esc(format_bytes(d['inputs_freed']))}</td>"
                    "<td class='tl-wrap' colspan='3'>inputs handed over to the program and freed before the peak line</td></tr>")
    out.append('<div class="tl-scroll"><table class="tl-compare"><tr>' + "".join(f"<th>{esc(h)}</th>" for h in head)
               + "</tr>" + "".join(body) + "</table></div>")
    return "".join(out)


REMEDY_HEAD = ("remedy", "predicted saving", "measured saving", "matches eager", "why")


def remedy_cells(r) -> tuple:
    """One remedy's cells (a trace_lab.lab.peak.Remedy): name, savings (negative: it costs memory), eager check."""
    return (r.name, format_bytes(r.predicted_saving), "-" if r.measured_saving is None else format_bytes(r.measured_saving),
            "-" if r.ok is None else ("yes" if r.ok else "NO"), r.why)


def remedies_html(explanation) -> str:
    """The remedies a PeakExplanation priced, largest predicted saving first (as the notebook's panel ranks them),
    each with its predicted saving and, once tried, the measured one."""
    rows = sorted(explanation.considered, key=lambda r: -r.predicted_saving)
    if not rows:
        body = '<div class="tl-placeholder">no remedy was priced for this part</div>'
    else:
        body = ('<div class="tl-scroll"><table class="tl-compare"><tr>' + "".join(f"<th>{esc(h)}</th>" for h in REMEDY_HEAD)
                + "</tr>" + "".join("<tr>" + "".join(f"<td class='tl-wrap'>{esc(c)}</td>" for c in remedy_cells(r))
                                    + "</tr>" for r in rows) + "</table></div>")
    notes = "".join(f"<li>{esc(n)}</li>" for n in explanation.notes)
    return (f"<p><b>remedies</b>, predicted on the meta device for this part; <code>try_remedy(name)</code> (or "
            f"<b>Try</b> in the notebook) reruns with one and measures its saving:</p>{body}<ul>{notes}</ul>")


def diff_html(depth: dict) -> str:
    data = depth.get("diff") or {}
    if "data" not in data:
        return _why_none(data)
    d = data["data"]
    pa, pb = d["peak_a"], d["peak_b"]
    change = pb["bytes"] - pa["bytes"]
    rows = [("from", d["a"]), ("to", d["b"]),
            ("peak", f"{format_bytes(pa['bytes'])} at {pa['line']} -> {format_bytes(pb['bytes'])} at {pb['line']} "
                     f"({'+' if change >= 0 else '-'}{format_bytes(abs(change))})")]
    for region, ops in d["fused"].items():
        rows.append((f"fused into {region}", ", ".join(ops)))
    for label in ("unfused", "removed", "added", "moved"):
        if d[label]:
            rows.append((f"{label} ({len(d[label])})", ", ".join(d[label][:40]) + (" ..." if len(d[label]) > 40 else "")))
    for label, key in (("alive at the new peak, not the old", "alive_only_at_b_peak"),
                       ("alive at the old peak, not the new", "alive_only_at_a_peak")):
        if d[key]:
            rows.append((label, ", ".join(f"{n} {format_bytes(b)}" for n, b in d[key][:12])))
    changed = sorted((m for m in d["memory"] if m["delta"]), key=lambda m: -abs(m["delta"]))[:12]
    if changed:
        rows.append(("live bytes after the line, largest changes", ", ".join(
            f"{m['name']} {'+' if m['delta'] > 0 else '-'}{format_bytes(abs(m['delta']))}" for m in changed)))
    return ("<div class='tl-scroll'><table>" + "".join(f"<tr><th>{esc(k)}</th><td class='tl-wrap'>{esc(v)}</td></tr>"
                                                       for k, v in rows) + "</table></div>")


def regions_html(depth: dict) -> str:
    data = depth.get("region_ends") or {}
    if "ends" not in data:
        return _why_none(data)
    where = {"input": "feeding it", "output": "reading it", "next": "next region"}
    out = [f"<p>Why each fused region of stage {esc(data['stage'])} ({esc(data['stage_name'])}) ends, at each "
           "boundary: the executor cannot fuse the neighbour, a cycle would form, the horizontal cap, the memory "
           "strategy's predicted rise, a collective, or the strategy does not merge that neighbour.</p>"]
    for region, rows in data["ends"].items():
        items = "".join(f"<li><code>{esc(r.get('name', r['node']))}</code> ({esc(r['op'])}, {esc(where.get(r['side'], r['side']))}): "
                        f"<b>{esc(r['kind'])}</b> {esc(r['reason'])}</li>" for r in rows)
        out.append(f"<details><summary><b>{esc(region)}</b>: {len(rows)} boundar{'y' if len(rows) == 1 else 'ies'}"
                   f"</summary><ul>{items or '<li>none: nothing outside it to fuse with</li>'}</ul></details>")
    return "".join(out)


_RENDER = {"Peak": peak_html, "Saved": saved_html, "Diff": diff_html, "Regions": regions_html}


def part_depth_html(view: str, part) -> str:
    """One depth view (``"Peak"``, ``"Saved"``, ``"Diff"``, ``"Regions"``) of one PartView."""
    if part is None:
        return '<div class="tl-placeholder">no program part selected</div>'
    return _RENDER[view](part.depth or {})


def depth_panels(parts) -> list[tuple[str, str]]:
    """(title, HTML) of the three depth views for a whole report, one section per part (a forward's saved
    table only: a backward saves nothing)."""
    panels = []
    for view in DEPTH_VIEWS:
        shown = [p for p in parts if view != "Saved" or p.kind == "forward"]
        body = "".join(f"<details open><summary><b>{esc(p.label)}</b></summary>{part_depth_html(view, p)}</details>"
                       for p in shown) or '<div class="tl-placeholder">no program was compiled</div>'
        panels.append((view, body))
    return panels
