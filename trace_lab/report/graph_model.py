"""The content of a trace's dataflow picture, before it becomes DOT.

Design: :class:`_Flat` lists the program's drawable lines (outer ops, with an
open fused region's inner ops inline); :class:`_Builder` turns a window of
those lines into a :class:`_Model` (nodes with escaped HTML-like labels, edges
with the values they carry, clusters for regions, what is live at the peak);
:func:`_plan` picks collapse / window so that the picture stays under a node
cap and writes the notes that say what was left out. Everything here is linear
in the size of the trace; :mod:`.graph` emits the DOT.

Parts: this module is the planning (:func:`_plan`); the model and its builder are
:mod:`.graph_builder`, the facts shared with other views (escaping, input kinds,
recomputation, values live at the peak) :mod:`.graph_facts`. Those facts are
public here and re-exported by :mod:`.graph`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.trace import Trace
from .graph_builder import _Builder, _Flat, _Model
# re-exported: the facts other views import from here (and from .graph)
from .graph_facts import (DEFAULT_MAX_NODES, INPUT_STYLE, PEAK_COLOR, PEAK_FILL, REGION_COLORS,  # noqa: F401
                          _cluster_id, _html_label, _nbytes, _op_name, _safe_id, _short_type, dot_escape,
                          input_kind, is_recomputed, live_at_peak)

__all__ = ["dot_escape", "input_kind", "is_recomputed", "live_at_peak", "DEFAULT_MAX_NODES"]


# -- planning: what to draw so that the picture stays under max_nodes ---------------------------
def _flat_window(flat: _Flat, center: int, size: int) -> tuple[int, int]:
    n = len(flat.entries)
    size = max(1, min(size, n))
    lo = max(0, min(center - size // 2, n - size))
    return lo, lo + size


def _ops_range(trace: Trace, flat: _Flat, window: tuple[int, int]) -> tuple[int, int]:
    """The slice of trace.ops that a window of drawable lines touches."""
    pos = {n: i for i, n in enumerate(trace.ops)}
    lo, hi = window
    return pos[flat.entries[lo][0]], pos[flat.entries[hi - 1][0]] + 1


@dataclass
class _Plan:
    model: _Model
    collapsed: bool
    shown_range: tuple[int, int] | None
    notes: list[str]


def _plan(trace: Trace, materialized_regions, collapse_regions, line_range, max_nodes, highlight,
          focus: set[str] | None = None) -> _Plan:
    ops = trace.ops
    n_regions = sum(1 for n in ops if n.op == "call_module")
    notes: list[str] = []
    if line_range is not None:
        lo, hi = max(0, int(line_range[0])), min(len(ops), int(line_range[1]))
        if lo >= hi:
            raise ValueError(f"line_range={tuple(line_range)!r} selects no op; the trace has {len(ops)} ops "
                             "(line_range is a slice (start, stop) of trace.ops)")
        line_range = (lo, hi)

    def build(collapse: bool, window):
        flat = _Flat(trace, collapse)
        return flat, _Builder(trace, flat, collapse, window, materialized_regions, highlight).build()

    def user_window(flat: _Flat):
        if line_range is None:
            return None
        lo, hi = line_range
        return flat.first[ops[lo]], flat.span(ops[hi - 1])[1]

    collapse = bool(collapse_regions)
    flat = _Flat(trace, collapse)
    flat, model = build(collapse, user_window(flat))
    if len(model.nodes) > max_nodes and collapse_regions is None and n_regions:
        largest = flat.largest_region()
        cflat = _Flat(trace, True)
        cflat, cmodel = build(True, user_window(cflat))
        if largest <= max_nodes // 2:
            collapse, flat, model = True, cflat, cmodel
            notes.append(f"{n_regions} fused regions collapsed to one node each (the open graph has more than "
                         f"max_nodes={max_nodes} nodes; pass collapse_regions=False to open them)")
        else:
            notes.append(f"fused regions drawn open: the largest holds {largest} ops, too many to hide "
                         "in one node (pass collapse_regions=True to collapse them)")
    window = user_window(flat)
    if len(model.nodes) > max_nodes and line_range is None:
        n = len(flat.entries)
        if focus:
            hits = [k for k, (o, i) in enumerate(flat.entries) if (i if i is not None else o).name in focus]
            center = (hits[0] + hits[-1]) // 2 if hits else 0
            size = hits[-1] - hits[0] + 1 if hits else n
        else:
            peak = trace.liveness(materialized_regions).peak_line
            plo, phi = flat.span(peak.node) if peak is not None and peak.node in flat.first else (0, 1)
            center, size = (plo + phi) // 2, n
        size = min(size, max(1, int(n * max_nodes / len(model.nodes))))
        while True:
            window = _flat_window(flat, center, size)
            model = _Builder(trace, flat, collapse, window, materialized_regions, highlight).build()
            if len(model.nodes) <= max_nodes or size == 1:
                break
            size = max(1, int(size * 0.8))
    shown_range = _ops_range(trace, flat, window) if window else None
    if window and window != (0, len(flat.entries)):
        lo, hi = window
        n = len(flat.entries)
        inside = "" if collapse or not n_regions else " (counting the ops inside fused regions)"
        why = "a window around the peak line" if (line_range is None and not focus) else (
            "the lines holding the values of the other picture" if line_range is None else "line_range")
        notes.append(f"showing lines {lo}-{hi - 1} of {n}{inside}, {why}; {lo} lines before and {n - hi} after "
                     "left out, with the inputs and outputs only they use"
                     + ("; pass line_range=(start, stop) or a larger max_nodes to choose" if line_range is None
                        else ""))
    stubs = sum(1 for nid in model.nodes if nid.startswith("ext_"))
    if stubs:
        notes.append(f"{stubs} values made by lines not shown appear as dashed stubs")
    return _Plan(model, collapse, shown_range, notes)
