"""Facts a trace's dataflow picture draws from: its styles, DOT escaping, and what each node is.

Design. Small, linear functions of a Trace and its fx nodes, shared by the detailed
picture (:mod:`.graph_builder`), the overview (:mod:`.graph_overview`) and other views:
escaping text for HTML-like DOT labels (:func:`dot_escape`, :func:`_html_label`) and DOT
ids, a node's short type, op name and size, its input kind, whether a backward op
recomputes a forward value, and which values are live at the peak. Public names are
re-exported by :mod:`.graph_model` and :mod:`.graph`.
"""
from __future__ import annotations

import html
import re

import torch
import torch.fx as fx

from ..ir.printer import target_name, type_comment
from ..ir.trace import Trace, input_kind, is_getitem, tensor_values  # noqa: F401 - input_kind re-exported

DEFAULT_MAX_NODES = 300
REGION_COLORS = ["#fde68a", "#bfdbfe", "#bbf7d0", "#fbcfe8", "#ddd6fe", "#fed7aa", "#a5f3fc", "#d9f99d"]
INPUT_STYLE = {  # kind -> (shape, fill)
    "input": ("ellipse", "#dbeafe"),
    "parameter": ("ellipse", "#fef3c7"),
    "tangent": ("ellipse", "#ede9fe"),
    "saved": ("ellipse", "#e0f2fe"),
    "constant": ("ellipse", "#f3f4f6"),
}
PEAK_COLOR = "#dc2626"
PEAK_FILL = "#fecaca"


# -- escaping ----------------------------------------------------------------------------
def dot_escape(s) -> str:
    """Text safe inside an HTML-like DOT label and inside a quoted DOT string.

    HTML entities for ``& < > " '`` (so no raw markup survives into DOT, SVG or
    HTML), backslashes doubled (no escString expansion), newlines as entities.
    """
    s = html.escape(str(s), quote=True)
    return s.replace("\\", "\\\\").replace("\n", "&#10;").replace("\r", "")


def _html_label(lines: list[tuple[str, str]]) -> str:
    """HTML-like label from (text, style) rows; style in {'', 'b', 'i', 'small'}."""
    rows = []
    for text, style in lines:
        t = dot_escape(text)
        if style == "b":
            t = f"<B>{t}</B>"
        elif style == "i":
            t = f"<I>{t}</I>"
        elif style == "small":
            t = f'<FONT POINT-SIZE="9">{t}</FONT>'
        rows.append(t)
    return "<" + "<BR/>".join(rows) + ">"


def _safe_id(prefix: str, name: str) -> str:
    return prefix + re.sub(r"[^A-Za-z0-9_]", "_", str(name))


def _cluster_id(region_name: str) -> str:
    return _safe_id("cluster_", region_name)


# -- facts about nodes (shared with other views) -------------------------------------------
def _short_type(val) -> str:
    if isinstance(val, torch.Tensor):
        return type_comment(val).split(" ", 1)[1]
    if isinstance(val, (list, tuple)):
        return ", ".join(_short_type(v) for v in val)
    return type_comment(val)


def _op_name(node: fx.Node) -> str:
    if node.op == "call_module":
        return str(node.target)
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return t._opname  # the overload is in the tooltip
    return target_name(t).rsplit(".", 1)[-1] if not isinstance(t, str) else t


def _nbytes(val) -> int:
    """Logical size of a value (numel x itemsize): what an edge carries, views included."""
    return sum(t.numel() * t.element_size() for t in tensor_values(val) if t is not None)


def is_recomputed(trace: Trace, node: fx.Node) -> bool:
    """An op of a backward that recomputes a forward value (checkpointing or the partitioner)."""
    if trace.kind != "backward":
        return False
    return node.meta.get("recompute") is not None or node.meta.get("partitioner_tag") == "is_forward"


def live_at_peak(trace: Trace, materialized_regions: bool | None = None) -> tuple[fx.Node | None, set[fx.Node]]:
    """(peak op, outer values live while it runs), from ``trace.liveness()``.

    Values live during a line are those produced up to and including it that
    were not dropped by an earlier line (inputs are never dropped).
    """
    live = trace.liveness(materialized_regions)
    values = {n for n in trace.inputs if tensor_values(n.meta.get("val"))}
    if live.peak_index < 0:
        return None, values
    for k, ln in enumerate(live.lines[: live.peak_index + 1]):
        n = ln.node
        if isinstance(n.meta.get("val"), (list, tuple)) and not is_getitem(n):
            values.update(u for u in n.users if is_getitem(u))
        else:
            values.add(n)
        if k < live.peak_index:  # the caller holds inputs: they stay live
            values.difference_update(d for d in ln.dead_nodes if d.op != "placeholder")
    return live.peak_line.node, values
