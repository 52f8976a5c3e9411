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
  as an earlier output, shares that buffer (the plan's ``aliases``), as the
  executors return it (Inductor/AOTAutograd regenerate such views). Once an
  executor has compiled the region, its record (``CompiledProgram.regions``, joined
  to the Trace by op id: :mod:`.region_record`) says how the code really lays the
  outputs out (views of inputs, shared storages, the bytes of each fresh storage:
  ``output_storage_bytes``) and the model follows that;
* a compiled region may allocate scratch buffers inside its call (Inductor's
  multi-kernel regions, split reductions). Its executor measures that workspace
  once at compile time and returns it as the record's ``workspace_bytes``;
  a region that is not materialised adds it to its own line's high-water mark
  only (allocated and freed within the line, like an op's unread output).
* a region may free its dying inputs inside its call (*donation*): an argument whose storage
  dies on the region's line (no other value holds it, the caller does not hold it) can be
  handed to the compiled code in a list it clears, so the storage goes at the argument's
  last use inside the call, not after the call returns (:func:`_donatable` says which;
  the executor decides). A donating region's record holds the signed workspace measured
  that way (peak above entry - outputs, below zero when inputs go before outputs are
  made), and the line's high-water mark follows it;
* a plain op may allocate scratch inside its call too (a CPU convolution's im2col
  buffer, FFT plans, sorts): for the ops of ``op_scratch.SCRATCH_OPS`` the run stage measures
  it once per signature (:mod:`trace_lab.runtime.op_scratch`) into the Trace's records
  (``Trace.op_scratch``), which this model reads and counts on the op's line the same way;
  where it cannot be measured the printed line is marked as a lower bound, and where it
  depends on the input's values (matrix_exp) it is measured at large values and marked as an
  upper bound.

The buffers, aliasing, held and handed-over inputs and reads come from
:mod:`.buffers`, which the scheduler (:class:`trace_lab.passes.schedule.MemoryModel`)
prices orders with too; :func:`line_transient` is the one rule for a line's
transient bytes, used by both.

Not modelled: workspace that an op outside that table allocates and frees inside
itself (matmul on some backends). That shows up as measured > predicted.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch.fx as fx

from ..ir.fx_util import is_getitem, node_device
from .buffers import (Buffers, alias_sources, default_rounding, output_buffer_bytes, reads, region_output_bytes,
                      region_workspace, released_at_first_line)
from ..ir.trace import use_memory_model
from .op_scratch import bound_note, op_scratch_bytes
from .storage import CUDA_ROUNDING, span_elements, tensor_bytes

# alias_sources, region_output_bytes, region_workspace, output_buffer_bytes: re-exported from .buffers
__all__ = ["LineMemory", "Liveness", "compute_liveness", "tensor_bytes", "alias_sources", "CUDA_ROUNDING",
           "region_workspace", "output_buffer_bytes", "region_output_bytes", "region_inner_peak",
           "line_transient", "cache_key", "LineState", "line_state"]


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
    bound: str = ""  # the line's figure is a bound, and why (op scratch not measured, or value-dependent)
    donatable: tuple = ()  # a region's argument positions whose storage dies on this line (see _donatable)
    written_over: tuple = ()  # "out over arg" per output a compiled region wrote over a dying argument (in place)


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


class _RegionView:
    """What :func:`compute_liveness` reads of a Trace, for a region's own GraphModule (only its
    peak is used, so values keep their fx names; no import of :mod:`trace_lab.ir.trace` here)."""

    owned_inputs: dict = {}

    def __init__(self, gm: fx.GraphModule, op_scratch=None):
        self.gm = gm
        self.device = node_device(gm)
        self.op_scratch = op_scratch

    @staticmethod
    def name(node: fx.Node) -> str:
        return node.name


def region_inner_peak(node: fx.Node, rounding: int, allocated: int, op_scratch=None) -> int:
    """Extra bytes a fused region holds while it runs op by op (eager executor)."""
    sub = node.graph.owning_module.get_submodule(node.target)
    inner = compute_liveness(_RegionView(sub, op_scratch), materialized_regions=True, rounding=rounding)
    return max(0, inner.peak_above_inputs_bytes - allocated)


def line_transient(node: fx.Node, rounding: int, materialized_regions: bool, allocated: int, record=None,
                   op_scratch=None) -> int:
    """Bytes a line holds only while it runs, on top of its outputs: a region's inner peak when it
    runs op by op, else its compiled workspace (``record``); the scratch a plain op takes inside
    its call (convolutions, FFTs, sorts), as the program's records say (``op_scratch``:
    :class:`.op_scratch.OpScratch`)."""
    if node.op == "call_module":
        if materialized_regions:  # run op by op: its inner values are the transient bytes
            return region_inner_peak(node, rounding, allocated, op_scratch)
        return region_workspace(node, rounding, record)
    if node.op == "call_function":
        return op_scratch_bytes(node, op_scratch)
    return 0


def cache_key(trace) -> int:
    """What a Trace's cached liveness depends on beyond its graph and its compiled records (both fixed
    once the Trace exists): its op-scratch records, which grow when a measurement a profiler kept from
    running is made later (the table's version)."""
    table = getattr(trace, "op_scratch", None)
    return -1 if table is None else table.version


@dataclass
class LineState:
    """What is in memory while one line runs (:func:`line_state`): every buffer alive then (inputs' and constants'
    buffers first, ``entry`` of them), its bytes, the values that refer to it and the line that made it (None for
    an input's), and the line's own transient bytes (workspace, scratch)."""

    index: int
    node: fx.Node
    buffers: dict[int, int]  # buffer id -> bytes, alive during the line
    holders: dict[int, list]  # buffer id -> values (fx nodes) referring to it then
    made_by: dict[int, fx.Node | None]  # buffer id -> the line that allocated it (None: an input's or constant's)
    entry: frozenset  # the buffer ids of the program's inputs and constants
    transient: int
    high_water: int


def compute_liveness(trace, materialized_regions: bool = False, rounding: int | None = None) -> Liveness:
    return _walk(trace, materialized_regions, rounding)


def line_state(trace, index: int, materialized_regions: bool = False, rounding: int | None = None) -> LineState:
    """The buffers alive while line ``index`` of ``trace`` runs (the same walk as :func:`compute_liveness`)."""
    return _walk(trace, materialized_regions, rounding, at_line=index)


def _walk(trace, materialized_regions: bool, rounding: int | None, at_line: int | None = None):
    gm = trace.gm
    if rounding is None:
        rounding = default_rounding(trace)
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    output = nodes[-1]
    outputs_used = set(output.all_input_nodes)
    buf = Buffers(trace, rounding, nodes)
    buffers = buf.nbytes

    # last line that reads each value (getitems count as reads by their users; a collective's
    # inputs are read until its wait)
    last_use: dict[fx.Node, int] = {}
    for n in nodes:
        if n.op == "output" or is_getitem(n):
            continue
        for a in reads(n):
            last_use[a] = max(last_use.get(a, -1), order[n])
    first_op = next((order[n] for n in nodes if n.op not in ("placeholder", "output", "get_attr")
                     and not is_getitem(n)), None)
    for n in released_at_first_line(trace, nodes):  # never read: released with the argument list
        last_use[n] = first_op
    dies_at: dict[int, list[fx.Node]] = {}  # line index -> values last read there (so no line scans all values)
    for v, lu in last_use.items():
        if v not in outputs_used:
            dies_at.setdefault(lu, []).append(v)

    refs = [0] * len(buffers)  # buffer id -> live values referring to it
    pinned = buf.held
    value_buffers: dict[fx.Node, list[int | None]] = {}
    born: dict[fx.Node, int] = {}  # the order values entered value_buffers: the order a line releases them
    for n in nodes:
        if n.op in ("placeholder", "get_attr"):
            value_buffers[n] = buf.values[n]
            born[n] = len(born)
            for bid in buf.values[n]:
                if bid is not None:
                    refs[bid] += 1
    owned = getattr(trace, "owned_inputs", None) or {}
    placeholders = [n for n in nodes if n.op == "placeholder"]
    owned_nodes = {placeholders[i] for i in owned if i < len(placeholders)}
    live = entry = buf.entry_bytes
    peak, peak_index = entry, -1
    lines: list[LineMemory] = []
    name_of = trace.name
    scratch = getattr(trace, "op_scratch", None)  # the run stage's measured op scratch (records)

    # line_state only: the buffers alive (the inputs' and constants' first) and the line that made each
    made_by: dict[int, fx.Node] = {bid: n for n, bids in buf.created.items() for bid in bids} if at_line is not None else {}
    alive = {bid for bid in range(len(buffers)) if bid not in made_by} if at_line is not None else None
    entry_ids = frozenset(alive or ())

    def release(value: fx.Node) -> int:
        freed = 0
        for bid in value_buffers.pop(value, []):
            if bid is None:
                continue
            refs[bid] -= 1
            if refs[bid] == 0 and bid not in pinned:
                freed += buffers[bid]
                if alive is not None:
                    alive.discard(bid)
        return freed

    for n in nodes:
        if n.op in ("placeholder", "output", "get_attr") or is_getitem(n):
            continue
        bids = buf.slots[n]
        for bid in bids:
            if bid is not None:
                refs[bid] += 1
        allocated = sum(buffers[bid] for bid in buf.created[n])
        workspace = line_transient(n, rounding, materialized_regions, allocated, buf.record(n), scratch)
        high_water = live + allocated + workspace
        live += allocated
        if alive is not None:
            alive.update(buf.created[n])
            if len(lines) == at_line:
                return _state(at_line, n, buffers, alive, value_buffers, bids, made_by, entry_ids, workspace,
                              high_water)

        # hand each element to its getitem user; a multi-output node itself holds nothing
        dead_names: list[str] = []
        dead_nodes: list[fx.Node] = []
        freed = 0
        multi = isinstance(n.meta.get("val"), (list, tuple))
        if multi:
            getitems = {u.args[1]: u for u in n.users if is_getitem(u)}
            for i in range(len(n.meta["val"])):
                g = getitems.get(i)
                slot = bids[i] if i < len(bids) else None
                if g is not None:
                    value_buffers[g] = [slot]
                    born[g] = len(born)
                elif slot is not None:
                    refs[slot] -= 1
                    if refs[slot] == 0 and slot not in pinned:
                        freed += buffers[slot]
                        if alive is not None:
                            alive.discard(slot)
            produced = [g for g in getitems.values()]
        else:
            value_buffers[n] = bids
            born[n] = len(born)
            produced = [n]
        donatable = _donatable(n, bids, value_buffers, refs, pinned, last_use, order, outputs_used,
                               owned_nodes) if n.op == "call_module" else ()
        # values whose last read is this line, and produced values nobody reads
        dying = [v for v in dies_at.get(order[n], ()) if v in value_buffers]
        dying += [v for v in produced if v not in last_use and v not in outputs_used]
        for v in sorted(dying, key=born.__getitem__):
            if v.op == "get_attr":
                continue  # the module keeps its constants
            dead_nodes.append(v)
            if v.op != "placeholder" or v in owned_nodes:
                dead_names.append(name_of(v))
            freed += release(v)
        live -= freed
        lines.append(LineMemory(n, name_of(n) if not multi else ", ".join(name_of(p) for p in produced),
                                allocated, freed, live, high_water, dead_names, dead_nodes, workspace,
                                bound_note(n, scratch) if n.op == "call_function" else "", donatable,
                                _written_over(n, buf.record(n), name_of) if n.op == "call_module" else ()))
        if high_water > peak:
            peak, peak_index = high_water, len(lines) - 1
    if at_line is not None:
        raise IndexError(f"line {at_line} is past the program's {len(lines)} lines")
    return Liveness(lines, entry, peak, peak_index, live, rounding)


def _written_over(n, record, name_of) -> tuple:
    """``"t6 over t3"`` for each output of region ``n`` that its compiled code writes over a donated argument
    (``donate_inplace``: the record's ``in_place_over`` positions, and an output laid out in that argument's
    storage); a view of an argument is not one."""
    over = set((record.details or {}).get("in_place_over", ())) if record is not None else set()
    if not over or not record.aliases:
        return ()
    if isinstance(n.meta.get("val"), (list, tuple)):
        by_index = {u.args[1]: u for u in n.users if is_getitem(u)}
    else:
        by_index = {0: n}
    found = []
    for k, alias in enumerate(record.aliases):
        if alias and alias[0] == "input" and alias[1] in over and k in by_index \
                and isinstance(n.args[alias[1]], fx.Node):
            found.append(f"{name_of(by_index[k])} over {name_of(n.args[alias[1]])}")
    return tuple(found)


def _donatable(n, line_slots, value_buffers, refs, pinned, last_use, order, outputs_used, owned_nodes):
    """Argument positions of region ``n`` whose storage dies on its line and can go inside its call: the
    argument's last read is this line, it is the one value holding its buffer (no other live value, none
    of the region's outputs), the caller does not hold it (a program input only when handed over), it is
    passed once, and it spans its whole storage from offset 0 (so the bytes freed inside the call are the
    buffer's, as a placeholder input of the recorded layout measures them)."""
    found = []
    args = list(n.args)
    for i, a in enumerate(args):
        if not isinstance(a, fx.Node) or a.op == "get_attr" or a in outputs_used or args.count(a) != 1:
            continue
        if last_use.get(a) != order[n] or (a.op == "placeholder" and a not in owned_nodes):
            continue
        bids = value_buffers.get(a) or []
        if len(bids) != 1 or bids[0] is None or bids[0] in pinned or bids[0] in line_slots or refs[bids[0]] != 1:
            continue
        val = a.meta.get("val")
        if not hasattr(val, "storage_offset") or int(val.storage_offset()) != 0:
            continue
        span = span_elements(val)
        try:
            whole = int(val.untyped_storage().nbytes())
        except Exception:  # noqa: BLE001 - a storage the meta value cannot show: not donated
            continue
        if span * val.element_size() != whole or whole == 0:
            continue
        found.append(i)
    return tuple(found)


def _state(index, node, buffers, alive, value_buffers, line_slots, made_by, entry_ids, transient, high_water):
    holders: dict[int, list] = {bid: [] for bid in alive}
    for value, bids in value_buffers.items():
        for bid in bids:
            if bid in holders:
                holders[bid].append(value)
    for bid in line_slots:  # the line's own outputs (a multi-output op's are held by its getitems, or no one)
        if bid in holders and not holders[bid]:
            holders[bid].append(node)
    ordered = sorted(alive)
    return LineState(index, node, {b: buffers[b] for b in ordered}, {b: holders[b] for b in ordered},
                     {b: made_by.get(b) for b in ordered}, entry_ids, transient, high_water)


use_memory_model(compute_liveness, cache_key)  # Trace.liveness asks this model (the IR imports nothing above it)
