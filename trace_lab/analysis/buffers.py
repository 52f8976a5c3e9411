"""Buffers: the memory model's primitives, shared by the liveness model and the scheduler.

Design. Both :func:`trace_lab.analysis.liveness.compute_liveness` (per-line memory of a
Trace) and :class:`trace_lab.passes.schedule.MemoryModel` (the peak of an order of units
before the Trace is built) price the same program the same way, from these parts:

* :func:`alias_sources` - alias resolution: per output slot of a line, the argument whose
  buffer it shares (views, in-place ops, anything whose schema says it aliases), an earlier
  output slot whose buffer it shares (a region's outputs on one storage), or a new buffer;
* :class:`Buffers` - the storage groups of a Trace: every tensor value -> buffer ids, the
  bytes of each buffer (rounded as the allocator rounds, nothing for another device's
  memory), which buffers the caller holds (inputs, constants: never freed), which inputs
  the caller handed over (``Trace.owned_inputs``, :mod:`.handover`: one buffer per storage
  group, of the group's largest storage, freed at its last use), and what each line creates;
* :func:`reads` - what a line reads, so a buffer is freed after the last line that reads a
  value in it (a collective's inputs are read until its ``wait_tensor``);
* :func:`released_at_first_line` - handed-over inputs nothing reads, released with the
  argument list at the first line;
* :func:`output_buffer_bytes` / :func:`region_output_bytes` / :func:`region_workspace` -
  what a compiled region's record (:mod:`.region_record`) says its outputs and workspace take.

A compiled region's layout comes from its :class:`~.region_record.RegionRecord` (joined to
the Trace by op id); a region not compiled yet is priced by its plan.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from ..ir.fx_util import is_getitem, tensor_values
from .region_record import RegionRecord, plan_record, records_of
from .storage import CUDA_ROUNDING, round_up, tensor_bytes

__all__ = ["Buffers", "alias_sources", "reads", "released_at_first_line", "output_buffer_bytes",
           "region_output_bytes", "region_workspace", "default_rounding", "ALIASING_WITHOUT_SCHEMA"]

ALIASING_WITHOUT_SCHEMA = {"_unsafe_view", "wait_tensor"}  # wait_tensor returns its argument


def default_rounding(trace) -> int:
    """The allocator's block size for ``trace``'s device (CUDA's caching allocator; 1 elsewhere)."""
    return CUDA_ROUNDING if trace.device.type == "cuda" else 1


def _aliased_arg_index(node: fx.Node) -> list[int | None]:
    """For each output of an aten op: index of the flat tensor argument it aliases."""
    target = node.target
    schema = getattr(target, "_schema", None)
    outs = tensor_values(node.meta.get("val"))
    if schema is None:
        return [None] * len(outs)
    opname = getattr(target, "__name__", "").split(".")[0]
    tensor_args = [a for a in schema.arguments]
    result: list[int | None] = []
    for i, _ in enumerate(outs):
        ret = schema.returns[i] if i < len(schema.returns) else (schema.returns[-1] if schema.returns else None)
        alias = getattr(ret, "alias_info", None) if ret is not None else None
        if opname in ALIASING_WITHOUT_SCHEMA:
            result.append(0)
        elif alias is not None:
            idx = 0
            for j, a in enumerate(tensor_args):
                if a.alias_info is not None and set(a.alias_info.before_set) & set(alias.before_set):
                    idx = j
                    break
            result.append(idx)
        else:
            result.append(None)
    return result


def _node_arg(node: fx.Node, index: int):
    schema = node.target._schema
    if index < len(node.args):
        return node.args[index]
    return node.kwargs.get(schema.arguments[index].name)


def alias_sources(node: fx.Node, record: RegionRecord | None = None) -> list:
    """For each flat output slot: None (a new buffer), the argument node whose buffer
    it shares, or the int index of an earlier output slot whose buffer it shares.
    A region follows ``record`` (what its compiled code returns) where given, else its plan."""
    n_out = len(tensor_values(node.meta.get("val")))
    if node.op == "call_function":
        out = []
        for idx in _aliased_arg_index(node):
            src = _node_arg(node, idx) if idx is not None else None
            out.append(src if isinstance(src, fx.Node) else None)
        return out
    if node.op == "call_module":
        aliases = (record if record is not None else plan_record(node)).aliases or [None] * n_out
        out = []
        for a in aliases:
            if a is None:
                out.append(None)
            elif a[0] == "input":
                out.append(node.args[a[1]])
            else:  # ("output", k)
                out.append(int(a[1]))
        return out
    return [None] * n_out


def is_wait_of_collective(node: fx.Node) -> bool:
    c10d = torch.ops._c10d_functional
    if node.op != "call_function" or node.target is not c10d.wait_tensor.default:
        return False
    src = node.args[0] if node.args else None
    return isinstance(src, fx.Node) and src.op == "call_function" and getattr(src.target, "namespace", "") == "_c10d_functional"


def reads(node: fx.Node) -> list[fx.Node]:
    """The values line ``node`` reads: its inputs and, for the ``wait_tensor`` of a collective,
    the collective's inputs too (the comm library reads them until the wait)."""
    values = list(node.all_input_nodes)
    if is_wait_of_collective(node):
        values += node.args[0].all_input_nodes
    return values


def output_buffer_bytes(node: fx.Node, index: int, t: torch.Tensor, rounding: int = 1,
                        record: RegionRecord | None = None) -> int:
    """Bytes a fresh buffer for flat output ``index`` of ``node`` takes: the storage size a
    compiled region was measured to return where its record says so, else the captured
    value's storage size."""
    recorded = record.output_storage_bytes if record is not None and node.op == "call_module" else None
    if recorded is not None and index < len(recorded) and recorded[index] is not None:
        return round_up(int(recorded[index]), rounding)
    return tensor_bytes(t, rounding)


def region_output_bytes(node: fx.Node, rounding: int = 1, record: RegionRecord | None = None) -> int:
    """Bytes the model allocates for a region's outputs (outputs that alias allocate nothing)."""
    return sum(output_buffer_bytes(node, i, t, rounding, record)
               for i, (t, src) in enumerate(zip(tensor_values(node.meta.get("val")), alias_sources(node, record)))
               if t is not None and src is None)


def region_workspace(node: fx.Node, rounding: int = 1, record: RegionRecord | None = None) -> int:
    """Scratch bytes a compiled region allocates and frees inside its call (0 if not measured). A region that
    frees donated inputs inside its call (``record.donated``) has a signed figure: its peak above entry less its
    outputs, below zero when the inputs it frees go before its outputs are made."""
    if node.op != "call_module" or record is None:
        return 0
    measured = int(record.workspace_bytes or 0)
    if record.donated and measured < 0:
        return -round_up(-measured, rounding)
    return round_up(max(0, measured), rounding)


def released_at_first_line(trace, nodes=None) -> set:
    """Handed-over inputs (``trace.owned_inputs``) that no line reads and the program does not
    return: the callee drops them with its argument list, at the first line."""
    nodes = list(trace.gm.graph.nodes) if nodes is None else nodes
    owned = getattr(trace, "owned_inputs", None) or {}
    placeholders = [n for n in nodes if n.op == "placeholder"]
    if not owned or not any(n.op not in ("placeholder", "output", "get_attr") and not is_getitem(n) for n in nodes):
        return set()
    read = set()
    for n in nodes:
        if n.op == "output":
            read |= set(n.all_input_nodes)
        elif not is_getitem(n):
            read |= set(reads(n))
    return {placeholders[i] for i in owned if i < len(placeholders) and placeholders[i] not in read
            and any(t is not None for t in tensor_values(placeholders[i].meta.get("val")))}


class Buffers:
    """The buffers of a Trace: which buffer every tensor value lives in, and its bytes.

    ``values[v]`` - buffer id per flat tensor of value ``v`` (None: not a tensor) for
    inputs, constants, single-output lines and the getitems of multi-output ones;
    ``slots[line]`` - buffer id per flat output slot of a line; ``created[line]`` - the
    buffers the line allocates; ``nbytes[b]`` - bytes of buffer ``b``; ``held`` - buffers the
    caller holds (inputs not handed over, constants), never freed; ``owned`` - buffers of
    handed-over inputs (one per storage group); ``entry_bytes`` - inputs and constants.
    """

    def __init__(self, trace, rounding: int | None = None, nodes=None):
        self.rounding = rounding = default_rounding(trace) if rounding is None else rounding
        self.records = records = records_of(trace)
        nodes = list(trace.gm.graph.nodes) if nodes is None else nodes
        device_type = trace.device.type
        self.nbytes: list[int] = []
        self.held: set[int] = set()
        self.owned: set[int] = set()
        self.values: dict[fx.Node, list] = {}
        self.slots: dict[fx.Node, list] = {}
        self.created: dict[fx.Node, list[int]] = {}

        def nbytes(t) -> int:  # memory on another device (a CPU scalar in a CUDA program) is not this program's
            return tensor_bytes(t, rounding) if t.device.type == device_type else 0

        # inputs the caller handed over share one buffer per storage group, of the group's largest storage
        owned = getattr(trace, "owned_inputs", None) or {}
        placeholders = [n for n in nodes if n.op == "placeholder"]
        group_bytes: dict[str, int] = {}
        for i, ph in enumerate(placeholders):
            if i in owned:
                vals = [t for t in tensor_values(ph.meta.get("val")) if t is not None]
                group_bytes[owned[i]] = max([group_bytes.get(owned[i], 0)] + [nbytes(t) for t in vals])
        group_buffer: dict[str, int] = {}
        for i, n in enumerate(placeholders):
            bids = []
            for t in tensor_values(n.meta.get("val")):
                if t is None:
                    bids.append(None)
                elif i in owned:
                    if owned[i] not in group_buffer:
                        group_buffer[owned[i]] = self._new(group_bytes[owned[i]])
                        self.owned.add(group_buffer[owned[i]])
                    bids.append(group_buffer[owned[i]])
                else:
                    bids.append(self._new(nbytes(t), held=True))
            self.values[n] = bids
        for n in nodes:  # tensor literals (get_attr): held by the program's module, like caller-held inputs
            if n.op == "get_attr":
                self.values[n] = [None if t is None else self._new(nbytes(t), held=True)
                                  for t in tensor_values(n.meta.get("val"))]
        self.entry_bytes = sum(self.nbytes)
        for n in nodes:
            if n.op in ("placeholder", "output", "get_attr") or is_getitem(n):
                continue
            record = records.get(n.name) if n.op == "call_module" else None
            slots: list = []
            created: list[int] = []
            for slot, (t, src) in enumerate(zip(tensor_values(n.meta.get("val")), alias_sources(n, record))):
                if t is None:
                    slots.append(None)
                elif isinstance(src, int) and src < len(slots) and slots[src] is not None:
                    slots.append(slots[src])
                elif isinstance(src, fx.Node) and (self.values.get(src) or [None])[0] is not None:
                    slots.append(self.values[src][0])
                else:
                    bid = self._new(output_buffer_bytes(n, slot, t, rounding, record)
                                    if t.device.type == device_type else 0)
                    created.append(bid)
                    slots.append(bid)
            self.slots[n], self.created[n] = slots, created
            val = n.meta.get("val")
            if isinstance(val, (list, tuple)):  # element k goes to its getitem (one per element)
                getitems = {g.args[1]: g for g in n.users if is_getitem(g)}
                for k in range(len(val)):
                    if k in getitems:
                        self.values[getitems[k]] = [slots[k] if k < len(slots) else None]
            else:
                self.values[n] = slots

    def _new(self, nbytes: int, held: bool = False) -> int:
        self.nbytes.append(nbytes)
        if held:
            self.held.add(len(self.nbytes) - 1)
        return len(self.nbytes) - 1

    def record(self, node: fx.Node) -> RegionRecord | None:
        """The compiled record of region ``node`` the Trace is joined to (None: priced by its plan)."""
        return self.records.get(node.name) if node.op == "call_module" else None
