"""Depth data of one program part, built with the view model: what changed, why regions end, what is saved.

Three answers per part, each plain data (JSON through the view model) or ``{"error": why}``:

* ``diff``: :func:`trace_lab.analysis.diff.diff_traces` of the part's first and last stage
  (ops fused, unfused, moved, added, removed; the live-bytes change per op; each side's peak
  and the values alive only at one of them), with its text;
* ``region_ends``: the fusion pass's reasons (``trace.info["region_ends"]``, issue 17 item 3)
  of the last stage that has them, with the stage's name (the printer writes their kinds on each
  region's line, ``# ends: executor x2, cycle``; the full reasons are in the Regions view);
* ``saved``: for a forward whose backward ran, :func:`trace_lab.analysis.saved.saved_for_backward`
  of the two final stages (rows, largest activations first, and their total);
* ``peak``: :func:`trace_lab.analysis.peak.peak_breakdown` of the final stage: the buffers alive on the peak line by
  kind and source line, adding up to the part's predicted peak (issue 28 item 2; the remedies need reruns:
  ``trace_lab.explain_peak``).
"""
from __future__ import annotations

__all__ = ["depth_of"]


def _guard(make) -> dict:
    try:
        return make()
    except Exception as e:  # noqa: BLE001 - a depth view that cannot be built must not lose the report
        return {"error": f"{type(e).__name__}: {e}"}


def _diff(part) -> dict:
    from ..analysis.diff import diff_traces

    first, last = part.traces[0], part.traces[-1]
    if first is last:
        return {"error": "one stage only: no pass changed this program"}
    d = diff_traces(first, last)
    return {"text": str(d), "data": d.to_dict()}


def _region_ends(part) -> dict:
    for k in range(len(part.traces) - 1, -1, -1):
        ends = part.traces[k].info.get("region_ends")
        if ends:
            return {"stage": k, "stage_name": part.traces[k].stage, "ends": ends}
    return {"error": "no fused regions (or a strategy that records no reasons)"}


def _saved(program, part) -> dict:
    from ..analysis.saved import saved_for_backward

    backward = getattr(program, "backward", None)
    if part.kind != "forward" or backward is None or not getattr(backward, "traces", None):
        return {"error": "only a forward whose backward ran saves tensors for it"}
    rows = saved_for_backward(part.traces[-1], backward.traces[-1])
    return {"rows": [r.to_dict() for r in rows], "activation_bytes": rows.activation_bytes, "text": str(rows)}


def _peak(program, part) -> dict:
    from ..analysis.peak import peak_breakdown

    trace = part.traces[-1]
    backward = getattr(program, "backward", None)
    saved = None
    if part.kind == "forward" and backward is not None and getattr(backward, "traces", None):
        saved = sum(1 for n in backward.traces[-1].inputs if not n.name.startswith("tangent"))
    b = peak_breakdown(trace, bool(trace.materialized_regions), saved=saved, program=getattr(program, "index", 0))
    if b.line < 0:
        return {"error": "the program allocates nothing above its inputs: its peak is at entry"}
    return {"data": b.to_dict(), "text": str(b)}


def depth_of(program, part) -> dict:
    """The depth data of one program part (module docstring)."""
    return {"diff": _guard(lambda: _diff(part)), "region_ends": _guard(lambda: _region_ends(part)),
            "saved": _guard(lambda: _saved(program, part)), "peak": _guard(lambda: _peak(program, part))}
