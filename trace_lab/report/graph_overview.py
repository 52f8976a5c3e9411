"""The overview of a large program's graph: contiguous blocks of lines, one node each.

Why: a dataflow picture of more than a few dozen nodes fitted into a notebook pane is drawn at a
scale where no label can be read (a 37-op fused forward opened at 0.07 in notebook 02). So when the
detailed picture (:mod:`.graph_model`, fused regions collapsed if that is enough) would have more
than :data:`OVERVIEW_NODES` nodes, :func:`trace_lab.report.graph.graph_data` draws this overview
instead: the program's lines (``trace.ops``, a fused region is one line) cut into at most
:data:`MAX_BLOCKS` contiguous blocks, each a node that says its lines, how many ops and fused
regions it holds, its commonest ops, the inputs it reads and, where it holds the peak line, the peak.
Edges carry the bytes one block hands to a later one; one node collects the program's outputs.

Blocks follow repeated layers where the program has them: the lines are read as tokens (a fused
region by its structural signature, :mod:`trace_lab.passes.signature`, the key the fusion cache
shares kernels by; another op by its target), the period with the most repeated tokens is taken
as a layer, and each repetition is one block (several per block when there are more layers than
blocks); the lines before and after are blocks of their own. Without a repetition the lines are cut
evenly. Each block's node id is ``blk_<start>_<stop>`` (a slice of ``trace.ops``): the live graph
widget expands a clicked block into its own picture (``graph_data(trace, line_range=(start, stop))``,
an overview again if that is still too large), and ``blocks`` in the data lists them.
"""
from __future__ import annotations

from collections import Counter

import torch.fx as fx

from ..analysis.region_record import region_record
from ..ir.printer import format_bytes
from ..ir.trace import Trace, is_getitem
from .graph_model import PEAK_COLOR, PEAK_FILL, _html_label, _nbytes, _op_name, dot_escape, input_kind

__all__ = ["OVERVIEW_NODES", "MAX_BLOCKS", "block_ranges", "overview_data"]

OVERVIEW_NODES = 60  # a detailed picture above this many nodes is drawn as the overview
MAX_BLOCKS = 12  # a chain of this many blocks fits a 900 x 600 pane at a readable scale
BLOCK_FILL = "#eef2ff"
REPEAT_FILL = "#e0f2fe"


def _token(trace: Trace, node: fx.Node) -> str:
    if node.op == "call_module":
        info = node.meta.get("region") or {}
        sig = info.get("signature") if isinstance(info, dict) else None
        return f"region:{sig}" if sig else f"region:{len((info or {}).get('ops') or [])}"
    return str(node.target)


def _period(tokens: list[int]) -> tuple[int, int, int] | None:
    """(period, first line, repeats) of the longest run of repeated layers, or None.

    The period p maximises the lines whose token equals the token p lines later (its smallest
    near-best multiple-free value is taken); the repeated span is the longest run of such lines.
    """
    n = len(tokens)
    if n < 8:
        return None
    import numpy as np

    t = np.asarray(tokens)
    best, scores = 0, {}
    for p in range(2, n // 2 + 1):
        s = int((t[p:] == t[:-p]).sum())
        scores[p] = s
        best = max(best, s)
    if best < max(4, n // 4):
        return None
    p = min(q for q, s in scores.items() if s >= 0.85 * best)
    eq = t[p:] == t[:-p]
    run, start, best_run, best_start = 0, 0, 0, 0
    for i, e in enumerate(eq):
        if e:
            if run == 0:
                start = i
            run += 1
            if run > best_run:
                best_run, best_start = run, start
        else:
            run = 0
    repeats = (best_run + p) // p
    if repeats < 2:
        return None
    return p, best_start, repeats


def block_ranges(trace: Trace, lo: int, hi: int, max_blocks: int = MAX_BLOCKS) -> list[tuple[int, int, str]]:
    """Contiguous blocks ``(start, stop, kind)`` covering ``trace.ops[lo:hi]``; kind is "repeat k/K"
    for a repeated layer (or group of layers), "" otherwise."""
    ops = trace.ops[lo:hi]
    n = len(ops)
    if n <= 1:
        return [(lo, hi, "")]
    ids: dict[str, int] = {}
    tokens = [ids.setdefault(_token(trace, op), len(ids)) for op in ops]
    found = _period(tokens)
    blocks: list[tuple[int, int, str]] = []
    if found is not None:
        p, s, repeats = found
        head, tail = s, n - (s + repeats * p)
        room = max_blocks - (head > 0) - (tail > 0)
        if room >= 2:
            per = -(-repeats // room)  # layers per block
            groups = -(-repeats // per)
            if head:
                blocks.extend(_even(lo, lo + head, 1))
            for g in range(groups):
                a, b = s + g * per * p, s + min(repeats, (g + 1) * per) * p
                blocks.append((lo + a, lo + b, f"repeat {g + 1}/{groups}"))
            if tail:
                blocks.extend(_even(lo + s + repeats * p, hi, 1))
            return blocks
    return _even(lo, hi, min(max_blocks, max(2, -(-n // 8))))


def _even(lo: int, hi: int, k: int) -> list[tuple[int, int, str]]:
    n = hi - lo
    k = max(1, min(k, n))
    cuts = [lo + round(i * n / k) for i in range(k + 1)]
    return [(a, b, "") for a, b in zip(cuts, cuts[1:]) if b > a]


def overview_data(trace: Trace, line_range: tuple[int, int] | None, materialized_regions, highlight: bool,
                  max_blocks: int = MAX_BLOCKS) -> tuple[list, list, list[str], dict]:
    """(nodes, edges, notes, extra) of the overview of ``trace.ops[line_range]`` in :func:`.graph.graph_data`'s
    form; ``extra`` holds ``blocks`` (``[{id, range, label}]``) and ``peak_node_id``."""
    ops = trace.ops
    lo, hi = line_range if line_range is not None else (0, len(ops))
    blocks = block_ranges(trace, lo, hi, max_blocks)
    where: dict[fx.Node, int] = {}
    for k, (a, b, _) in enumerate(blocks):
        for op in ops[a:b]:
            where[op] = k
            for u in op.users:
                if is_getitem(u):
                    where[u] = k
    pos = {op: i for i, op in enumerate(ops)}
    live = trace.liveness(materialized_regions)
    peak_node = live.peak_line.node if (highlight and live.peak_line is not None) else None
    bid = [f"blk_{a}_{b}" for a, b, _ in blocks]
    edges: dict[tuple[str, str], dict] = {}
    nodes, info = [], []
    outputs = trace.output_node.args[0]
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    out_set = {v for v in outputs if isinstance(v, fx.Node)}
    peak_id = None
    for k, (a, b, kind) in enumerate(blocks):
        names: Counter = Counter()
        n_regions = inner = 0
        reads: dict[fx.Node, str] = {}
        for op in ops[a:b]:
            if op.op == "call_module":
                n_regions += 1
                rec = region_record(trace, op)
                rops = [str(o) for o in (rec.ops if rec is not None and rec.ops else [])]
                inner += len(rops)
                names.update([r.split(".")[1] if r.count(".") >= 2 else r for r in rops] or [_op_name(op)])
            else:
                names.update([_op_name(op)])
            for v in op.all_input_nodes:
                p = v.args[0] if is_getitem(v) else v
                if p.op in ("placeholder", "get_attr"):
                    reads[p] = input_kind(trace, p)
                    continue
                src = where.get(v, where.get(p))
                if src is None:  # a line outside the range
                    src_id = "ext_before" if pos.get(p, lo) < lo else "ext_after"
                elif src == k:
                    continue
                else:
                    src_id = bid[src]
                edges.setdefault((src_id, bid[k]), {})[v] = _nbytes(v.meta.get("val"))
            for v in ([u for u in op.users if is_getitem(u)] or [op]):
                if v in out_set:
                    edges.setdefault((bid[k], "outputs"), {})[v] = _nbytes(v.meta.get("val"))
                if any(pos.get(u, -1) >= hi for u in v.users):
                    edges.setdefault((bid[k], "ext_after"), {})[v] = _nbytes(v.meta.get("val"))
        head = f"lines {a}-{b - 1}" + (f" · {kind}" if kind else "")
        count = f"{b - a} lines" + (f" · {n_regions} fused regions ({inner} ops inside)" if n_regions else "")
        common = ", ".join(f"{nm} x{c}" if c > 1 else nm for nm, c in names.most_common(4))
        kinds = Counter(reads.values())
        rows = [(head, "b"), (count, "small"), (common, "small")]
        if reads:
            rows.append(("reads " + ", ".join(f"{c} {kd}{'s' if c > 1 else ''}" for kd, c in sorted(kinds.items())),
                         "small"))
        peak = peak_node is not None and a <= pos.get(peak_node, -1) < b
        if peak:
            peak_id = bid[k]
            rows.append((f"peak: {format_bytes(live.peak_above_inputs_bytes)} above inputs at {live.peak_line.name}",
                         "i"))
        tip = (f"lines {a}-{b - 1} of {trace.kind} '{trace.stage}': {b - a} lines"
               + (f", {n_regions} fused regions" if n_regions else "") + f"; {common}. In the live Graph tab a click "
               f"opens these lines (graph_data(trace, line_range=({a}, {b})) draws them)")
        attrs = {"shape": "box", "style": "rounded,filled", "fillcolor": PEAK_FILL if peak else
                 (REPEAT_FILL if kind else BLOCK_FILL), "tooltip": dot_escape(tip), "margin": "0.12,0.06"}
        if peak:
            attrs.update(color=PEAK_COLOR, penwidth="2.5", peripheries="2")
        nodes.append([bid[k], _html_label(rows), attrs])
        info.append({"id": bid[k], "range": [a, b], "label": head})
    used = {x for e in edges for x in e}
    if "ext_before" in used:
        nodes.insert(0, ["ext_before", _html_label([(f"lines 0-{lo - 1}", "b"), ("not shown", "i")]),
                         {"shape": "box", "style": "dashed", "color": "#9ca3af", "fontcolor": "#6b7280"}])
    if "ext_after" in used:
        nodes.append(["ext_after", _html_label([(f"lines {hi}-{len(ops) - 1}", "b"), ("not shown", "i")]),
                      {"shape": "box", "style": "dashed", "color": "#9ca3af", "fontcolor": "#6b7280"}])
    if "outputs" in used:
        n_out = len({v for (s, d), vals in edges.items() if d == "outputs" for v in vals})
        nodes.append(["outputs", _html_label([(f"outputs ({n_out} of {len(out_set)})" if line_range else
                                               f"outputs ({n_out})", "b")]),
                      {"shape": "invhouse", "style": "filled", "fillcolor": "#dcfce7"}])
    edge_rows = [[s, d, dot_escape(format_bytes(sum(vals.values())))] for (s, d), vals in edges.items()]
    repeats = sum(1 for *_, kd in blocks if kd)
    what = (f" ({repeats} of them repeated layers: the same fused regions and ops in the same order)"
            if repeats else " of consecutive lines")
    notes = [f"overview: {hi - lo} lines drawn as {len(blocks)} blocks{what}, one node each, because the full "
             f"picture has more than {OVERVIEW_NODES} nodes and would be unreadable at fit; in the live Graph tab "
             "click a block to open its lines (graph_data(trace, line_range=(start, stop)), or overview=False "
             "for the detailed picture)"]
    return nodes, edge_rows, notes, {"blocks": info, "peak_node_id": peak_id}
