"""Trace: an ordered, named, printable view of one fx program.

Design: a Trace wraps a ``torch.fx.GraphModule`` produced by capture or by a
pass, and adds what the lab shows on top of it: Thunder-style short names
(``t0, t1, ...`` for computed values, readable names for inputs), the kind of
program (forward / backward / inference), the pass stage that produced it and
how long that pass took. Traces are immutable by convention: passes build a new
GraphModule and call :meth:`Trace.derive`. Nothing writes a Trace after the passes:
what an executor finds when it compiles the last stage comes back on its
``CompiledProgram`` and the jit joins it to that stage by op id
(:meth:`Trace.with_regions`, read through ``analysis.region_record.region_record``), and what the
run stage measures right after capture (each op's scratch) is a table of records every stage
shares (``op_scratch``). The IR is the ground floor: it imports nothing above it. Its
``liveness()`` asks the memory model that :mod:`trace_lab.analysis.liveness` registers
(:func:`use_memory_model`), and pricing a line only reads records: printing never measures.

Multi-output ops (``native_layer_norm``, ``_foreach_*``) are shown unpacked,
Thunder style: ``(t5, t6, _) = aten.native_layer_norm.default(...)``. Their
``getitem`` nodes carry the element names and print nothing themselves; the
eager executor and the liveness model treat them the same way.
"""
from __future__ import annotations

import copy
from functools import cached_property
from types import MappingProxyType

import torch
import torch.fx as fx

from .fx_util import is_getitem, node_device, tensor_values

__all__ = ["Trace", "use_memory_model", "is_getitem", "tensor_values", "node_device", "input_kind"]  # the helpers live in fx_util

_NO_REGIONS = MappingProxyType({})
_MEMORY_MODEL: dict = {}  # "price": Trace -> Liveness, "key": Trace -> cache key (analysis.liveness registers)


def use_memory_model(price, key) -> None:
    """Register the memory model ``Trace.liveness`` asks: ``price(trace, materialized_regions=...)`` and
    ``key(trace)``, what its cached result depends on besides the graph. trace_lab.analysis.liveness calls
    this when imported (the package imports it), so the IR needs no import of the layer above it."""
    _MEMORY_MODEL.update(price=price, key=key)


class Trace:
    """A named, printable, analysable program (one stage of one program)."""

    def __init__(self, gm: fx.GraphModule, kind: str, stage: str = "as captured",
                 input_names: list[str] | None = None, pass_seconds: float = 0.0, info: dict | None = None,
                 owned_inputs: dict[int, str] | None = None, materialized_regions: bool = False,
                 op_scratch=None):
        self.gm = gm
        self.kind = kind
        self.stage = stage
        self.pass_seconds = pass_seconds
        self.info = dict(info or {})  # free-form facts passes want to show (e.g. regions)
        self._input_names = list(input_names or [])
        # inputs the caller hands over (a backward's saved activations): position -> storage group.
        # Inputs of one group share a storage (views of one forward value). The runtime releases
        # them at their last use and the liveness model frees them there; the rest the caller holds.
        self.owned_inputs: dict[int, str] = dict(owned_inputs or {})
        # whether the executor that will run this program runs fused regions op by op (the jit says,
        # when it builds the first stage; every derived stage keeps it): the liveness it prints
        self.materialized_regions = bool(materialized_regions)
        # what compiling this stage found, per region (op id -> analysis.region_record.RegionRecord):
        # empty until the stage is joined to its compiled program (with_regions)
        self.compiled_regions = _NO_REGIONS
        # what the run stage measured of this program's ops (analysis.op_scratch.OpScratch: signature ->
        # record), shared by every stage derived from this one; None until measured (lines are lower bounds)
        self.op_scratch = op_scratch
        self.names: dict[fx.Node, str] = self._assign_names()

    # -- structure --------------------------------------------------------------------
    @property
    def graph(self) -> fx.Graph:
        return self.gm.graph

    @property
    def inputs(self) -> list[fx.Node]:
        return [n for n in self.graph.nodes if n.op == "placeholder"]

    @property
    def output_node(self) -> fx.Node:
        return next(n for n in reversed(self.graph.nodes) if n.op == "output")

    @property
    def ops(self) -> list[fx.Node]:
        """Nodes that print as a line (compute nodes, fused regions); getitems excluded."""
        return [n for n in self.graph.nodes
                if n.op in ("call_function", "call_module", "call_method") and not is_getitem(n)]

    @cached_property
    def device(self) -> torch.device:
        return node_device(self.gm)

    def name(self, node: fx.Node) -> str:
        return self.names.get(node, node.name)

    def names_by_fx_name(self) -> dict[str, str]:
        return {n.name: self.names[n] for n in self.names}

    def derive(self, gm: fx.GraphModule, stage: str, pass_seconds: float = 0.0,
               info: dict | None = None) -> "Trace":
        """A new stage of the same program (names of inputs carried over, and why its regions end: a pass
        after fusion keeps the regions and their reasons unless it says otherwise)."""
        carried = {"region_ends": self.info["region_ends"]} if self.info.get("region_ends") else {}
        return Trace(gm, self.kind, stage, self._input_names, pass_seconds, {**carried, **(info or {})},
                     self.owned_inputs, self.materialized_regions, self.op_scratch)

    def with_regions(self, regions) -> "Trace":
        """This stage joined to what compiling it found: ``regions`` (``CompiledProgram.regions``,
        op id -> RegionRecord) keyed by the fx names of this stage's region nodes. A new Trace on the
        same graph (same names, stage and info); this one is left as it was (and returned itself when
        there is nothing to join)."""
        if not regions and not self.compiled_regions:
            return self  # nothing compiled to join (no fused regions): the same stage, its cache kept
        joined = copy.copy(self)
        joined.__dict__.pop("_liveness_cache", None)
        joined.compiled_regions = MappingProxyType(dict(regions or {}))
        return joined

    def _assign_names(self) -> dict[fx.Node, str]:
        names: dict[fx.Node, str] = {}
        used: set[str] = set()
        phs = self.inputs
        for i, n in enumerate(phs):
            base = self._input_names[i] if i < len(self._input_names) else n.name
            name = base
            k = 1
            while name in used:
                name = f"{base}_{k}"
                k += 1
            names[n] = name
            used.add(name)
        counter = 0

        def fresh() -> str:
            nonlocal counter
            while f"t{counter}" in used:
                counter += 1
            used.add(f"t{counter}")
            counter += 1
            return f"t{counter - 1}"

        regions = []
        for n in self.graph.nodes:
            if n.op in ("placeholder", "output"):
                continue
            if n.op == "get_attr":  # a tensor literal of the user's code: named as the program holds it
                base = "_".join(p for p in str(n.target).split(".") if p) or "const"
                name, k = base, 1
                while name in used:
                    name, k = f"{base}_{k}", k + 1
                names[n] = name
                used.add(name)
                continue
            if n.op == "call_module" and isinstance(n.meta.get("region"), dict):
                regions.append(n)
                self._name_region_inner(n, names, fresh, outer_names=False)
            vals = n.meta.get("val")
            multi = isinstance(vals, (list, tuple))
            if multi and not is_getitem(n):
                continue  # elements are named through their getitem users
            names[n] = fresh()
        for n in regions:
            self._name_region_inner(n, names, fresh, outer_names=True)
        return names

    def _name_region_inner(self, node: fx.Node, names: dict, fresh, outer_names: bool) -> None:
        """Fused region internals share the program's namespace: inputs and outputs
        take the names of the values outside; inner temporaries get fresh names."""
        try:
            sub = self.gm.get_submodule(node.target)
        except AttributeError:
            return
        out = next((m for m in reversed(sub.graph.nodes) if m.op == "output"), None)
        results = list(out.args[0]) if out is not None and isinstance(out.args[0], (list, tuple)) else []
        getitems = {u.args[1]: u for u in node.users if is_getitem(u)}
        if outer_names:
            phs = [m for m in sub.graph.nodes if m.op == "placeholder"]
            for m, a in zip(phs, node.args):
                if isinstance(a, fx.Node) and a in names:
                    names[m] = names[a]
            for k, m in enumerate(results):
                if isinstance(m, fx.Node) and k in getitems and getitems[k] in names:
                    names[m] = names[getitems[k]]
            return
        escaping = {m for m in results if isinstance(m, fx.Node)}
        for m in sub.graph.nodes:
            if m.op in ("placeholder", "output") or m in escaping:
                continue
            if isinstance(m.meta.get("val"), (list, tuple)) and not is_getitem(m):
                continue
            names[m] = fresh()

    # -- analyses -----------------------------------------------------------------------
    def liveness(self, materialized_regions: bool | None = None):
        """Per-line memory (see :mod:`trace_lab.analysis.liveness`), cached per mode."""
        if not _MEMORY_MODEL:
            raise RuntimeError("no memory model registered: import trace_lab (trace_lab.analysis.liveness registers it)")
        if materialized_regions is None:  # the executor that runs this trace (the jit said so)
            materialized_regions = self.materialized_regions
        key = (bool(materialized_regions), _MEMORY_MODEL["key"](self))
        cache = self.__dict__.setdefault("_liveness_cache", {})
        if key not in cache:
            cache[key] = _MEMORY_MODEL["price"](self, materialized_regions=bool(materialized_regions))
        return cache[key]

    # -- text ----------------------------------------------------------------------------
    def python_source(self, annotate: bool = True) -> str:
        from .printer import format_trace

        return format_trace(self, annotate=annotate)

    def python_callable(self):
        """Execute the printed program text and return its function (round-trip check)."""
        from .printer import exec_namespace

        src = self.python_source(annotate=False)
        ns = exec_namespace(self)
        exec(compile(src, f"<trace_lab {self.kind} {self.stage}>", "exec"), ns)
        return ns[self.kind_function_name]

    @property
    def kind_function_name(self) -> str:
        return {"backward": "backward", "inference": "inference"}.get(self.kind, "forward")

    def __str__(self) -> str:
        return self.python_source(annotate=True)

    def __repr__(self) -> str:
        return f"<Trace {self.kind} '{self.stage}': {len(self.ops)} ops>"


def input_kind(trace: "Trace", node: fx.Node) -> str:
    """'input', 'parameter', 'tangent', 'saved' (backward input from the forward) or 'constant'."""
    if node.op == "get_attr":
        return "constant"
    desc = str(node.meta.get("desc", ""))
    name = trace.name(node)
    if "Tangent" in desc or name.startswith("tangent"):
        return "tangent"
    if "Param" in desc or "Buffer" in desc:
        return "parameter"
    if trace.kind == "backward" and "desc" not in node.meta and node.meta.get("partitioner_tag") == "is_forward":
        return "saved"
    tm = node.meta.get("tensor_meta")
    val = node.meta.get("val")
    if getattr(tm, "requires_grad", False) or getattr(val, "requires_grad", False):
        return "parameter"
    return "input"
