"""What makes a program's peak: the buffers alive on its peak line, by kind and by the source line that made them
(issue 28 item 2, the explainer's first half; the remedies and their measured proof are :mod:`trace_lab.lab.peak`).

The figures are the liveness model's own (:func:`.liveness.line_state`: the same walk that prices every line), so
they add up: the peak above the program's inputs is the bytes of the buffers the program made that are alive on the
peak line, plus that line's transient bytes (a region's workspace, an op's scratch), less the bytes of inputs handed
over to the program and freed before it (a backward frees saved activations as it goes). Inputs held by the caller
are listed apart: they are not part of the figure.

Each buffer gets one kind, from what holds it on the peak line:

* ``saved for backward`` - a forward output the backward reads (``saved`` = how many of the forward's outputs are
  saved: the backward's non-tangent inputs count them);
* ``output`` - a forward output the caller gets; ``gradient`` - a backward output;
* ``temporary`` - anything else the program made and still holds (an intermediate waiting for its last reader,
  the peak line's own results);
* on the caller's side (not counted): ``parameter``, ``input``, ``saved`` (a backward's saved activations),
  ``tangent``, ``constant``.

Rows are grouped by (kind, source line); each keeps its tensors' names and bytes, largest first.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch.fx as fx

from ..ir.trace import input_kind
from .liveness import line_state

__all__ = ["PeakRow", "PeakBreakdown", "peak_breakdown", "CALLER_KINDS"]

CALLER_KINDS = ("parameter", "input", "saved", "tangent", "constant")


@dataclass(frozen=True)
class PeakRow:
    kind: str
    source: str  # the user's source line that made the buffers ('' when unknown)
    op: str  # the op (or region) that made the largest of them
    bytes: int
    tensors: tuple  # names in the trace, largest first

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PeakBreakdown:
    """The peak line of one program part and what is in memory while it runs."""

    kind: str  # forward / backward
    program: int
    line: int  # index of the peak line among the trace's lines
    op: str  # the peak line's name in the trace
    peak_above_inputs: int
    rows: list[PeakRow] = field(default_factory=list)  # what the program made, alive on the peak line
    transient: int = 0  # the peak line's own workspace / scratch (below zero: donated inputs freed inside)
    inputs_freed: int = 0  # handed-over inputs already freed before the peak line (subtracted)
    held: list[PeakRow] = field(default_factory=list)  # the caller's inputs (not in the figure)

    def counted(self) -> int:
        """The rows' bytes + transient - inputs freed: equals ``peak_above_inputs`` (the model's figure)."""
        return sum(r.bytes for r in self.rows) + self.transient - self.inputs_freed

    def by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.kind] = out.get(r.kind, 0) + r.bytes
        return out

    def to_dict(self) -> dict:
        return {"kind": self.kind, "program": self.program, "line": self.line, "op": self.op,
                "peak_above_inputs": self.peak_above_inputs, "transient": self.transient,
                "inputs_freed": self.inputs_freed, "rows": [r.to_dict() for r in self.rows],
                "held": [r.to_dict() for r in self.held]}

    def __str__(self) -> str:
        from ..ir.printer import format_bytes

        lines = [f"{self.kind} #{self.program}: peak {format_bytes(self.peak_above_inputs)} above inputs on line "
                 f"{self.line} ({self.op})"]
        for kind, n in sorted(self.by_kind().items(), key=lambda kv: -kv[1]):
            lines.append(f"  {kind}: {format_bytes(n)}")
            for r in [r for r in self.rows if r.kind == kind][:5]:
                names = ", ".join(r.tensors[:4]) + (", ..." if len(r.tensors) > 4 else "")
                lines.append(f"    {format_bytes(r.bytes):>10}  {r.source or r.op}  [{names}]")
        if self.transient > 0:
            lines.append(f"  the line's own workspace/scratch: {format_bytes(self.transient)}")
        elif self.transient < 0:
            lines.append(f"  inputs the line's region frees inside its call (donated): -{format_bytes(-self.transient)}")
        if self.inputs_freed:
            lines.append(f"  inputs handed over and freed before it: -{format_bytes(self.inputs_freed)}")
        if self.held:
            lines.append(f"  held by the caller, not counted: {format_bytes(sum(r.bytes for r in self.held))}")
        return "\n".join(lines)


def _source(trace, node: fx.Node | None) -> str:
    from ..ir.printer import source_line

    if node is None:
        return ""
    found = source_line(node)
    if found is None and node.op == "call_module":  # a region: its last inner op with a source line
        sub = trace.gm.get_submodule(node.target)
        for inner in reversed(list(sub.graph.nodes)):
            found = source_line(inner) if inner.op == "call_function" else None
            if found:
                break
    return found or ""


def peak_breakdown(trace, materialized_regions: bool = False, saved: int | None = None,
                   program: int = 0) -> PeakBreakdown:
    """The peak line of ``trace`` and its buffers, grouped (see the module's docstring). ``saved``: how many of a
    forward's outputs its backward reads (None: none are told apart from outputs)."""
    live = trace.liveness(materialized_regions)
    result = PeakBreakdown(trace.kind, program, live.peak_index, live.peak_line.name if live.peak_line else "",
                           live.peak_above_inputs_bytes)
    if live.peak_index < 0:
        return result
    state = line_state(trace, live.peak_index, materialized_regions, live.rounding)
    out_spec = trace.output_node.args[0]
    outs = list(out_spec) if isinstance(out_spec, (list, tuple)) else [out_spec]
    first_saved = len(outs) - saved if saved else len(outs)
    out_kind = {}
    for i, o in enumerate(outs):
        if isinstance(o, fx.Node):
            out_kind.setdefault(o, "gradient" if trace.kind == "backward" else
                                ("saved for backward" if i >= first_saved else "output"))
    groups: dict[tuple, list] = {}
    held: dict[tuple, list] = {}
    for bid, nbytes in state.buffers.items():
        holders = state.holders[bid]
        if bid in state.entry:
            root = holders[0] if holders else None
            kind = input_kind(trace, root) if root is not None else "input"
            held.setdefault((kind, ""), []).append((nbytes, [trace.name(h) for h in holders], "input"))
            continue
        kinds = [out_kind[h] for h in holders if h in out_kind]
        kind = kinds[0] if kinds else "temporary"
        maker = state.made_by[bid]
        names = list(dict.fromkeys(trace.name(h) for h in holders)) or [trace.name(maker)]
        op = trace.name(maker) if maker is not None else ""
        groups.setdefault((kind, _source(trace, maker)), []).append((nbytes, names, op))
    entry_alive = sum(state.buffers[b] for b in state.buffers if b in state.entry)
    result.transient = state.transient
    result.inputs_freed = live.entry_bytes - entry_alive
    result.rows = _rows(groups)
    result.held = _rows(held)
    return result


def _rows(groups: dict) -> list[PeakRow]:
    rows = []
    for (kind, source), items in groups.items():
        items.sort(key=lambda it: -it[0])
        names = tuple(dict.fromkeys(n for _, ns, _ in items for n in ns))
        rows.append(PeakRow(kind, source, items[0][2], sum(b for b, _, _ in items), names))
    rows.sort(key=lambda r: -r.bytes)
    return rows
