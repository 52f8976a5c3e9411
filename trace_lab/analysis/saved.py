"""Saved for backward: the tensors a forward keeps alive for its backward (issue 17 item 4).

Where "why is my training step out of memory" is answered. AOTAutograd's forward returns
the user's outputs followed by what the backward reads; the backward's non-tangent inputs
name them (the count tells where the user's outputs end). For each saved value of the
forward's final stage this module lists: its name in the trace, shape, dtype, bytes (its
storage, rounded as the allocator model rounds), the op and the user's source line that
produced it, and who holds it:

* ``activation`` - a value the forward made; it stays alive from the forward into the
  backward, so it is the saved part of the step's peak (storages shared by several saved
  views count once, under the first);
* ``input`` - a forward input (a parameter, the batch) or a view of one: the caller holds it
  anyway, so it adds nothing.

``recomputable`` says whether the producing op is cheap for a partitioner to recompute in
the backward (tagged pointwise, or a view / layout op, and not random); matmuls,
convolutions, attention and reductions are not. AOTAutograd's min-cut partitioner weighs
exactly this when it chooses what to save; ``activation_checkpointing`` moves values from
this table into recomputation.

A graph break makes one program per segment, each forward saving for its own backward (which runs in
reverse order): :func:`saved_for_programs` pairs each forward with its own backward and tags each row
with its ``program`` index (the table gets a ``program`` column when there are several).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.fx as fx

from ..ir.fx_util import tensor_values
from .handover import storage_root
from .storage import CUDA_ROUNDING, round_up

__all__ = ["SavedTensor", "SavedForBackward", "saved_for_backward", "saved_for_programs", "format_saved"]

_LAYOUT = {"view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "squeeze", "unsqueeze",
           "slice", "select", "alias", "clone", "_to_copy", "split", "split_with_sizes", "cat", "unbind"}


@dataclass(frozen=True)
class SavedTensor:
    name: str
    shape: tuple
    dtype: str
    bytes: int
    held_by: str  # "activation" or "input"
    op: str
    source: str | None
    recomputable: bool
    program: int = 0  # the program (graph-break segment) whose forward keeps it

    def to_dict(self) -> dict:
        return asdict(self)


def _recomputable(n: fx.Node) -> bool:
    target = n.target
    if n.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return torch.Tag.pointwise in target.tags or target.overloadpacket.__name__ in _LAYOUT


class SavedForBackward(list):
    """The rows (SavedTensor), largest activations first; ``str()`` is the table."""

    @property
    def activation_bytes(self) -> int:
        """The saved part of the peak: bytes of the saved activations (shared storages once)."""
        return sum(r.bytes for r in self if r.held_by == "activation")

    def __str__(self) -> str:
        return format_saved(self)


def saved_for_backward(forward_trace, backward_trace, rounding: int | None = None,
                       program: int = 0) -> SavedForBackward:
    """The values ``forward_trace`` returns for ``backward_trace`` (the backward of the same program),
    largest activations first; ``program`` is the index the rows carry."""
    from ..ir.printer import source_line, target_name

    bw_inputs = backward_trace.inputs
    n_saved = sum(1 for n in bw_inputs if not n.name.startswith("tangent"))
    out_spec = forward_trace.output_node.args[0]
    outs = list(out_spec) if isinstance(out_spec, (list, tuple)) else [out_spec]
    saved = [o for o in outs[len(outs) - n_saved:] if isinstance(o, fx.Node)] if n_saved else []
    if rounding is None:
        on_cuda = any(v.device.type == "cuda" for o in saved for v in tensor_values(o.meta.get("val")) if v is not None)
        rounding = CUDA_ROUNDING if on_cuda else 1
    inputs = {n for n in forward_trace.gm.graph.nodes if n.op in ("placeholder", "get_attr")}
    counted: set[fx.Node] = set()
    rows = []
    for o in saved:
        val = o.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        root = storage_root(o)
        held = "input" if root in inputs else "activation"
        size = round_up(val.untyped_storage().nbytes(), rounding) if held == "activation" and root not in counted else 0
        counted.add(root)
        producer = root if held == "activation" else o
        rows.append(SavedTensor(forward_trace.name(o), tuple(val.shape), str(val.dtype).replace("torch.", ""), size,
                                held, target_name(producer.target) if producer.op == "call_function" else producer.op,
                                source_line(producer), _recomputable(producer), program))
    rows.sort(key=lambda r: (r.held_by != "activation", -r.bytes))
    return SavedForBackward(rows)


def saved_for_programs(pairs, rounding: int | None = None) -> SavedForBackward:
    """The rows of several programs, ``pairs`` = [(program index, forward trace, that program's backward
    trace)]: by program, then largest activations first. Pairing the last forward to run with the last
    backward to run is wrong after a graph break (the backwards run in reverse order)."""
    rows: list[SavedTensor] = []
    for index, forward_trace, backward_trace in pairs:
        rows += saved_for_backward(forward_trace, backward_trace, rounding, program=index)
    return SavedForBackward(rows)


def format_saved(rows: list[SavedTensor]) -> str:
    """A text table, with the activations' total (the saved part of the peak)."""
    from ..ir.printer import format_bytes

    head = ("name", "shape", "dtype", "bytes", "held by", "recomputable", "op", "source")
    body = [(r.name, str(list(r.shape)), r.dtype, format_bytes(r.bytes) if r.held_by == "activation" else "-",
             r.held_by, "yes" if r.recomputable else "no", r.op, r.source or "") for r in rows]
    programs = sorted({r.program for r in rows})
    if len(programs) > 1:  # a graph break: say whose each row is (names repeat across programs)
        head = ("program",) + head
        body = [(str(r.program),) + b for r, b in zip(rows, body)]
    widths = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip() for x in [head] + body]
    total = sum(r.bytes for r in rows if r.held_by == "activation")
    lines.append(f"saved activations: {format_bytes(total)} in {sum(r.held_by == 'activation' for r in rows)} "
                 f"tensors (inputs the caller holds anyway: {sum(r.held_by == 'input' for r in rows)})")
    if len(programs) > 1:
        lines.append(f"{len(programs)} programs (a graph break): " + "; ".join(
            f"program {p}: {format_bytes(sum(r.bytes for r in rows if r.program == p and r.held_by == 'activation'))}"
            for p in programs) + " of activations, all alive together once every forward has run")
    return "\n".join(lines)
