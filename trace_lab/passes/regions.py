"""Regions: turn an ordered list of units into a new Trace with fused regions.

The representation every part of trace_lab agrees on (see docs): a fused region
is a ``call_module`` node whose target ``fusionK`` is an ``fx.GraphModule``
submodule holding the region's ops (placeholders = region inputs, output = a
tuple of region outputs). The region node's ``meta['val']`` is always a tuple of
the output FakeTensors, read through ``operator.getitem`` users, and
``meta['region']`` says ``name``, ``ops``, ``signature`` and ``aliases`` (for
each output: None for a new buffer, ``("input", j)`` when it is a view of input
``j``, ``("output", k)`` when it shares the buffer of output ``k``).

Region inputs are the values read from outside, in order of first use; outputs
are the values read after the region or returned, in order of production.
Inner nodes keep their meta (val, stack_trace, recompute). A unit that is not
fused, or that only makes views (no kernel to run), stays as plain ops.

The new program and its regions are ``torch.fx``'s lazy GraphModules: their Python
``forward`` is generated the first time it is read or called, not when they are
built. The executors generate their own code from the graphs, so on a first call
most are never generated (building Adam.step's 200 regions cost 0.7 s on a 2-core CPU
before, 2026-11-28).
"""
from __future__ import annotations

import copy
import operator

import torch
import torch.fx as fx
from torch.fx._lazy_graph_module import _LazyGraphModule

from ..analysis.buffers import alias_sources
from ..ir.printer import target_name
from ..ir.trace import Trace, is_getitem
from .signature import region_signature

__all__ = ["build_trace", "computes_something", "region_nodes"]


def region_nodes(trace: Trace) -> list[fx.Node]:
    return [n for n in trace.ops if n.op == "call_module"]


def _values(node: fx.Node) -> list[fx.Node]:
    """The value nodes an op produces: its getitem users for a tuple, else itself."""
    if isinstance(node.meta.get("val"), (list, tuple)) and node.op != "placeholder":
        return sorted((u for u in node.users if is_getitem(u)), key=lambda g: g.args[1])
    return [node]


def computes_something(nodes) -> bool:
    """False when every output of every op is a view of an argument (nothing to compile)."""
    for n in nodes:
        srcs = alias_sources(n)
        if not srcs or any(s is None for s in srcs):
            return True
    return False


def _inner_aliases(sub: fx.GraphModule, n_outputs: int) -> list:
    """Per region output: None, ("input", j) or ("output", k), following the inner views."""
    root: dict[fx.Node, object] = {}  # value node -> ("input", j) or ("buffer", node, slot)
    slots_of: dict[fx.Node, list] = {}
    j = 0
    for n in sub.graph.nodes:
        if n.op == "placeholder":
            root[n] = ("input", j)
            j += 1
        elif is_getitem(n):
            slots = slots_of.get(n.args[0], [])
            root[n] = slots[n.args[1]] if n.args[1] < len(slots) else ("buffer", n, 0)
        elif n.op != "output":
            slots = []
            for i, s in enumerate(alias_sources(n)):
                if isinstance(s, fx.Node):
                    slots.append(root.get(s, ("buffer", s, 0)))
                elif isinstance(s, int):
                    slots.append(slots[s])
                else:
                    slots.append(("buffer", n, i))
            slots_of[n] = slots
            root[n] = slots[0] if slots else ("buffer", n, 0)
    outs = next(n for n in sub.graph.nodes if n.op == "output").args[0]
    aliases, first_with_root = [], {}
    for k, v in enumerate(outs[:n_outputs]):
        r = root.get(v, ("buffer", v, 0))
        if r[0] == "input":
            aliases.append(("input", r[1]))
        elif r in first_with_root:
            aliases.append(("output", first_with_root[r]))
        else:
            first_with_root[r] = k
            aliases.append(None)
    return aliases


def _copy_meta(node: fx.Node) -> dict:
    return copy.copy(node.meta)


def build_trace(trace: Trace, units, stage: str, info: dict | None = None) -> Trace:
    """A new Trace running ``units`` in order; fused units that compute become regions."""
    old = trace.graph
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    root = torch.nn.Module()
    existing = 0
    for n in old.nodes:
        if n.op == "placeholder":
            env[n] = graph.node_copy(n, env.__getitem__)
        elif n.op == "get_attr":
            env[n] = graph.node_copy(n, env.__getitem__)
            _copy_attr(trace.gm, root, n.target)
        elif n.op == "call_module":
            existing += 1
    output = trace.output_node
    returned = set(output.all_input_nodes)
    in_unit: dict[fx.Node, int] = {}
    for k, u in enumerate(units):
        for n in u.nodes:
            in_unit[n] = k
    counter = _first_free_index(trace.gm)
    regions = []
    for k, unit in enumerate(units):
        if unit.fused and computes_something(unit.nodes):
            name = f"fusion{counter}"
            counter += 1
            regions.append(_emit_region(graph, env, root, unit, k, in_unit, returned, name))
        else:
            for n in unit.nodes:
                env[n] = graph.node_copy(n, env.__getitem__)
                if n.op == "call_module":
                    _copy_attr(trace.gm, root, n.target)
                for g in _values(n):
                    if g is not n:
                        env[g] = graph.node_copy(g, env.__getitem__)
    graph.node_copy(output, env.__getitem__)
    gm = _LazyGraphModule(root, graph)  # its Python code is built when first read or called (module docstring)
    gm.graph.lint()
    meta_info = dict(info or {})
    meta_info["regions"] = regions
    return trace.derive(gm, stage, info=meta_info)


def _first_free_index(gm: fx.GraphModule) -> int:
    k = 0
    while hasattr(gm, f"fusion{k}"):
        k += 1
    return k


def _copy_attr(src: torch.nn.Module, dst: torch.nn.Module, target: str) -> None:
    *path, last = target.split(".")
    s, d = src, dst
    for p in path:
        s = getattr(s, p)
        if not hasattr(d, p):
            d.add_module(p, torch.nn.Module())
        d = getattr(d, p)
    obj = getattr(s, last)
    if isinstance(obj, torch.nn.Module):
        d.add_module(last, obj)
    else:
        setattr(d, last, obj)


def _emit_region(graph, env, root, unit, k, in_unit, returned, name) -> dict:
    inside = set(unit.nodes)
    inputs: list[fx.Node] = []
    outputs: list[fx.Node] = []
    for n in unit.nodes:
        for a in n.all_input_nodes:
            p = a.args[0] if is_getitem(a) else a
            if p not in inside and a not in inputs:
                inputs.append(a)
        for v in _values(n):
            if v in returned or any(in_unit.get(u.args[0] if is_getitem(u) else u) != k for u in v.users):
                outputs.append(v)
    sub_graph = fx.Graph()
    inner: dict[fx.Node, fx.Node] = {}
    for j, a in enumerate(inputs):
        p = sub_graph.placeholder(f"in{j}")
        p.meta = {key: a.meta[key] for key in ("val", "tensor_meta") if key in a.meta}
        inner[a] = p
    for n in unit.nodes:
        inner[n] = sub_graph.node_copy(n, inner.__getitem__)
        for g in _values(n):
            if g is not n:
                inner[g] = sub_graph.node_copy(g, inner.__getitem__)
    sub_graph.output(tuple(inner[v] for v in outputs))
    sub = _LazyGraphModule(torch.nn.Module(), sub_graph)
    sub.graph.lint()
    root.add_module(name, sub)
    node = graph.call_module(name, tuple(env[a] for a in inputs))
    node.meta["val"] = tuple(v.meta.get("val") for v in outputs)
    first = unit.nodes[0]
    for key in ("stack_trace", "recompute"):
        if key in first.meta:
            node.meta[key] = first.meta[key]
    ops = [target_name(n.target) for n in unit.nodes]
    record = {"name": name, "ops": ops, "signature": region_signature(sub, [a.meta.get("val") for a in inputs]),
              "aliases": _inner_aliases(sub, len(outputs)), "nodes": [n.name for n in unit.nodes]}
    node.meta["region"] = record
    for i, v in enumerate(outputs):
        g = graph.call_function(operator.getitem, (node, i))
        g.meta = _copy_meta(v)
        env[v] = g
    return {"name": name, "ops": len(ops), "inputs": len(inputs), "outputs": len(outputs)}
