"""Liveness: bytes allocated, freed and live after every line of a Trace.

The model mirrors what the allocator sees when the program runs in trace order
and each value is dropped right after its last use (the ``del`` lines):

* every tensor output of an op (or of a fused region) allocates a *buffer* of its
  storage size; on CUDA sizes are rounded up to 512 bytes as the caching
  allocator rounds blocks, so the figure compares with ``max_memory_allocated``;
* views, ``alias``, in-place ops and ``copy_`` (anything whose schema marks its
  return as aliasing an argument) and ``_unsafe_view`` share their argument's
  buffer and allocate nothing;
* a buffer is freed once no live value refers to it; program inputs are held by
  the caller and never freed; program outputs (including values saved for the
  backward) stay live to the end;
* a collective (``_c10d_functional``) reads its inputs until its ``wait_tensor``:
  they stay live to that line, so deferring waits costs memory;
* an op's inputs and outputs coexist while it runs, so a line's high-water mark
  is ``live_before + allocated``; outputs nobody reads are freed right after;
* a fused region allocates only its outputs when its executor keeps inner values
  in registers (nvFuser, Inductor); with ``materialized_regions=True`` (the eager
  executor runs a region op by op) the region's inner peak is added on its line.
  A region output that is a view of a region input, or of the same inner buffer
  as an earlier output, shares that buffer (``meta['region']['aliases']``), as
  the executors return it (Inductor/AOTAutograd regenerate such views). Once an
  executor has compiled the region it records how its code really lays the
  outputs out (views of inputs, shared storages, the bytes of each fresh storage:
  ``meta['region']['output_storage_bytes']``) and the model follows that;
* a compiled region may allocate scratch buffers inside its call (Inductor's
  multi-kernel regions, split reductions). Its executor measures that workspace
  once at compile time and records it as ``meta['region']['workspace_bytes']``;
  a region that is not materialised adds it to its own line's high-water mark
  only (allocated and freed within the line, like an op's unread output).

* a plain op may allocate scratch inside its call too (a CPU convolution's im2col
  buffer, FFT plans, sorts): for the ops of ``op_scratch.SCRATCH_OPS`` it is measured
  once per signature (:mod:`.op_scratch`) and counted on the op's line the same way;
  where it cannot be measured the printed line is marked as a lower bound.

Not modelled: workspace that an op outside that table allocates and frees inside
itself (matmul on some backends). That shows up as measured > predicted.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.fx as fx

from ..fx_util import is_getitem, node_device, tensor_values
from .storage import CUDA_ROUNDING, round_up as _round_up, tensor_bytes

__all__ = ["LineMemory", "Liveness", "compute_liveness", "tensor_bytes", "alias_sources", "CUDA_ROUNDING",
           "region_workspace", "workspace_key", "output_buffer_bytes", "region_output_bytes"]

ALIASING_WITHOUT_SCHEMA = {"_unsafe_view", "wait_tensor"}  # wait_tensor returns its argument


@dataclass
class LineMemory:
    node: fx.Node
    name: str
    allocated: int
    freed: int
    live_after: int
    high_water: int  # live bytes while the op runs (inputs + outputs)
    dead_values: list[str] = field(default_factory=list)  # names to `del` after this line
    dead_nodes: list = field(default_factory=list)  # the same values as fx nodes
    workspace: int = 0  # transient bytes inside a region's call (compiled workspace, or inner peak op by op)


@dataclass
class Liveness:
    lines: list[LineMemory]
    entry_bytes: int
    peak_bytes: int
    peak_index: int  # index into lines, -1 when the peak is at entry
    exit_bytes: int
    rounding: int

    @property
    def peak_above_inputs_bytes(self) -> int:
        return self.peak_bytes - self.entry_bytes

    @property
    def peak_line(self) -> LineMemory | None:
        return self.lines[self.peak_index] if self.peak_index >= 0 else None

    def curve(self) -> list[int]:
        """Live bytes after each line, entry first."""
        return [self.entry_bytes] + [ln.live_after for ln in self.lines]

    def to_dict(self) -> dict:
        return {
            "entry_bytes": self.entry_bytes,
            "peak_bytes": self.peak_bytes,
            "peak_above_inputs_bytes": self.peak_above_inputs_bytes,
            "exit_bytes": self.exit_bytes,
            "peak_line": self.peak_line.name if self.peak_line else None,
            "rounding": self.rounding,
            "lines": [
                {"name": ln.name, "allocated": ln.allocated, "freed": ln.freed,
                 "live_after": ln.live_after, "high_water": ln.high_water, "workspace": ln.workspace}
                for ln in self.lines
            ],
        }


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


def _is_wait_of_collective(node: fx.Node) -> bool:
    c10d = torch.ops._c10d_functional
    if node.op != "call_function" or node.target is not c10d.wait_tensor.default:
        return False
    src = node.args[0] if node.args else None
    return isinstance(src, fx.Node) and src.op == "call_function" and getattr(src.target, "namespace", "") == "_c10d_functional"


def _node_arg(node: fx.Node, index: int):
    schema = node.target._schema
    if index < len(node.args):
        return node.args[index]
    return node.kwargs.get(schema.arguments[index].name)


def alias_sources(node: fx.Node) -> list:
    """For each flat output slot: None (a new buffer), the argument node whose buffer
    it shares, or the int index of an earlier output slot whose buffer it shares."""
    n_out = len(tensor_values(node.meta.get("val")))
    if node.op == "call_function":
        out = []
        for idx in _aliased_arg_index(node):
            src = _node_arg(node, idx) if idx is not None else None
            out.append(src if isinstance(src, fx.Node) else None)
        return out
    if node.op == "call_module":
        aliases = (node.meta.get("region") or {}).get("aliases") or [None] * n_out
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


def output_buffer_bytes(node: fx.Node, index: int, t: torch.Tensor, rounding: int = 1) -> int:
    """Bytes a fresh buffer for flat output ``index`` of ``node`` takes: the storage size a
    compiled region was measured to return where its executor recorded one, else the
    captured value's storage size."""
    recorded = (node.meta.get("region") or {}).get("output_storage_bytes") if node.op == "call_module" else None
    if recorded is not None and index < len(recorded) and recorded[index] is not None:
        return _round_up(int(recorded[index]), rounding)
    return tensor_bytes(t, rounding)


def region_output_bytes(node: fx.Node, rounding: int = 1) -> int:
    """Bytes the model allocates for a region's outputs (outputs that alias allocate nothing)."""
    return sum(output_buffer_bytes(node, i, t, rounding)
               for i, (t, src) in enumerate(zip(tensor_values(node.meta.get("val")), alias_sources(node)))
               if t is not None and src is None)


def region_workspace(node: fx.Node, rounding: int = 1) -> int:
    """Scratch bytes a compiled region allocates and frees inside its call (0 if not measured)."""
    if node.op != "call_module":
        return 0
    return _round_up(max(0, int((node.meta.get("region") or {}).get("workspace_bytes") or 0)), rounding)


def workspace_key(trace) -> tuple:
    """The regions' recorded workspaces and output layouts, and the ops' recorded scratch: changes
    when an executor records them or an op's scratch gets measured (cache key)."""
    key = []
    for n in trace.graph.nodes:
        if n.op == "call_function" and "op_scratch" in n.meta:  # measured, or not measurable yet (op_scratch.py)
            from .op_scratch import scratch_key

            key.append((n.name, scratch_key(n)))
        if n.op != "call_module":
            continue
        region = n.meta.get("region") or {}
        if region_workspace(n) or region.get("output_storage_bytes") is not None:
            key.append((n.target, region_workspace(n), tuple(region.get("output_storage_bytes") or ()),
                        tuple(region.get("aliases") or ())))
    return tuple(key)


class _RegionView:
    """What :func:`compute_liveness` reads of a Trace, for a region's own GraphModule (only its
    peak is used, so values keep their fx names; no import of :mod:`trace_lab.trace` here)."""

    owned_inputs: dict = {}

    def __init__(self, gm: fx.GraphModule):
        self.gm = gm
        self.device = node_device(gm)

    @staticmethod
    def name(node: fx.Node) -> str:
        return node.name


def _region_inner_peak(node: fx.Node, rounding: int, allocated: int) -> int:
    """Extra bytes a fused region holds while it runs op by op (eager executor)."""
    sub = node.graph.owning_module.get_submodule(node.target)
    inner = compute_liveness(_RegionView(sub), materialized_regions=True, rounding=rounding)
    return max(0, inner.peak_above_inputs_bytes - allocated)


def compute_liveness(trace, materialized_regions: bool = False, rounding: int | None = None) -> Liveness:
    gm = trace.gm
    if rounding is None:
        rounding = CUDA_ROUNDING if trace.device.type == "cuda" else 1
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    output = nodes[-1]
    outputs_used = set(output.all_input_nodes)

    # A multi-output op is "used" through its getitems; resolve values to producers.
    def producer(n: fx.Node) -> fx.Node:
        return n.args[0] if is_getitem(n) else n

    # last line that reads each value (getitems count as reads by their users)
    last_use: dict[fx.Node, int] = {}
    for n in nodes:
        if n.op == "output":
            continue
        if is_getitem(n):
            continue
        for a in n.all_input_nodes:
            last_use[a] = max(last_use.get(a, -1), order[n])
        if _is_wait_of_collective(n):  # the comm library reads a collective's inputs until its wait
            for a in n.args[0].all_input_nodes:
                last_use[a] = max(last_use.get(a, -1), order[n])

    buffers: dict[int, int] = {}  # buffer id -> bytes
    refs: dict[int, int] = {}  # buffer id -> live values referring to it
    pinned: set[int] = set()
    value_buffers: dict[fx.Node, list[int | None]] = {}
    next_id = [0]

    def new_buffer(nbytes: int) -> int:
        bid = next_id[0]
        next_id[0] += 1
        buffers[bid] = nbytes
        refs[bid] = 0
        return bid

    device_type = trace.device.type

    def nbytes(t) -> int:
        # memory on another device (a CPU scalar in a CUDA program) is not this program's
        return tensor_bytes(t, rounding) if t.device.type == device_type else 0

    # inputs the caller handed over (a backward's saved activations) die at their last use; inputs
    # of one storage group (views of one forward value) share one buffer of the group's largest storage
    owned = getattr(trace, "owned_inputs", None) or {}
    placeholders = [n for n in nodes if n.op == "placeholder"]
    group_bytes: dict[str, int] = {}
    for i, ph in enumerate(placeholders):
        if i in owned:
            vals = [t for t in tensor_values(ph.meta.get("val")) if t is not None]
            group_bytes[owned[i]] = max([group_bytes.get(owned[i], 0)] + [nbytes(t) for t in vals])
    group_buffer: dict[str, int] = {}
    first_op = next((order[n] for n in nodes if n.op not in ("placeholder", "output", "get_attr")
                     and not is_getitem(n)), None)
    live = 0
    for i, n in enumerate(placeholders):
        bids = []
        for t in tensor_values(n.meta.get("val")):
            if t is None:
                bids.append(None)
                continue
            if i in owned:
                if owned[i] in group_buffer:
                    bid = group_buffer[owned[i]]
                else:
                    bid = group_buffer[owned[i]] = new_buffer(group_bytes[owned[i]])
                    live += buffers[bid]
                refs[bid] += 1
                if n not in last_use and n not in outputs_used and first_op is not None:
                    last_use[n] = first_op  # never read: released with the argument list
            else:
                bid = new_buffer(nbytes(t))
                pinned.add(bid)
                refs[bid] += 1
                live += buffers[bid]
            bids.append(bid)
        value_buffers[n] = bids
    for n in nodes:  # tensor literals (get_attr): held by the program's module, like caller-held inputs
        if n.op == "get_attr":
            bids = []
            for t in tensor_values(n.meta.get("val")):
                bid = None
                if t is not None:
                    bid = new_buffer(nbytes(t))
                    pinned.add(bid)
                    refs[bid] += 1
                    live += buffers[bid]
                bids.append(bid)
            value_buffers[n] = bids
    owned_nodes = {placeholders[i] for i in owned if i < len(placeholders)}
    entry = live
    peak, peak_index = entry, -1
    lines: list[LineMemory] = []
    name_of = trace.name

    def release(value: fx.Node) -> int:
        freed = 0
        for bid in value_buffers.pop(value, []):
            if bid is None:
                continue
            refs[bid] -= 1
            if refs[bid] == 0 and bid not in pinned:
                freed += buffers[bid]
        return freed

    for n in nodes:
        if n.op in ("placeholder", "output", "get_attr") or is_getitem(n):
            continue
        outs = tensor_values(n.meta.get("val"))
        allocated = 0
        bids: list[int | None] = []
        for slot, (t, src) in enumerate(zip(outs, alias_sources(n))):
            if t is None:
                bids.append(None)
                continue
            if isinstance(src, int) and src < len(bids) and bids[src] is not None:
                bids.append(bids[src])
                refs[bids[src]] += 1
                continue
            if isinstance(src, fx.Node):
                src_bids = value_buffers.get(src, [])
                if src_bids and src_bids[0] is not None:
                    bids.append(src_bids[0])
                    refs[src_bids[0]] += 1
                    continue
            bid = new_buffer(output_buffer_bytes(n, slot, t, rounding) if t.device.type == device_type else 0)
            refs[bid] += 1
            allocated += buffers[bid]
            bids.append(bid)
        workspace = 0
        if n.op == "call_module":
            if materialized_regions:  # run op by op: its inner values are the transient bytes
                workspace = _region_inner_peak(n, rounding, allocated)
            else:
                workspace = region_workspace(n, rounding)
        elif n.op == "call_function":  # scratch a plain op allocates inside its call (convolutions, FFTs, sorts)
            from .op_scratch import op_scratch_bytes

            workspace = op_scratch_bytes(n, rounding)
        high_water = live + allocated + workspace
        live += allocated

        # hand each element to its getitem user; a multi-output node itself holds nothing
        dead_names: list[str] = []
        dead_nodes: list[fx.Node] = []
        freed = 0
        multi = isinstance(n.meta.get("val"), (list, tuple))
        if multi:
            getitems = {u.args[1]: u for u in n.users if is_getitem(u)}
            flat_index = 0
            for i, v in enumerate(n.meta["val"]):
                g = getitems.get(i)
                slot = bids[flat_index] if flat_index < len(bids) else None
                flat_index += 1
                if g is not None:
                    value_buffers[g] = [slot]
                elif slot is not None:
                    refs[slot] -= 1
                    if refs[slot] == 0 and slot not in pinned:
                        freed += buffers[slot]
            produced = [g for g in getitems.values()]
        else:
            value_buffers[n] = bids
            produced = [n]
        # values whose last read is this line, and produced values nobody reads
        for v in list(value_buffers):
            if v in outputs_used:
                continue
            lu = last_use.get(v)
            if (lu is not None and lu == order[n]) or (v in produced and lu is None):
                if v.op == "get_attr":
                    continue  # the module keeps its constants
                dead_nodes.append(v)
                if v.op != "placeholder" or v in owned_nodes:
                    dead_names.append(name_of(v))
                freed += release(v)
        live -= freed
        lines.append(LineMemory(n, name_of(n) if not multi else ", ".join(name_of(p) for p in produced),
                                allocated, freed, live, high_water, dead_names, dead_nodes, workspace))
        if high_water > peak:
            peak, peak_index = high_water, len(lines) - 1
    return Liveness(lines, entry, peak, peak_index, live, rounding)
