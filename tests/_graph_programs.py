"""Hand-made programs and a DOT reader for the graph tests.

The small program (sizes chosen so that every edge's byte label tells which
value it carries)::

    x: f32[4, 8]  (128 B)     w: f32[8, 16]  (512 B)
    a = relu(x)       f32[4, 8]   128 B   -> read by mm
    b = mm(a, w)      f32[4, 16]  256 B   -> read by mul and add
    c = mul(b, 2.0)   f32[4, 16]  256 B
    d = add(c, b)     f32[4, 16]  256 B   -> the output

and its fused version, where ``mul`` and ``add`` form region ``fusion0`` (input
b, output d), built exactly as HELPERS.md describes the representation.
"""
from __future__ import annotations

import operator
import re

import torch
import torch.fx as fx

from trace_lab.ir.trace import Trace

aten = torch.ops.aten
X_SHAPE, W_SHAPE = (4, 8), (8, 16)


def fill_vals(gm: fx.GraphModule, args) -> None:
    """meta['val'] of every node (regions too, recursively) from a real run."""

    class Record(fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            if n.op == "call_module":
                fill_vals(self.module.get_submodule(n.target), [self.env[a] for a in n.args])
            n.meta["val"] = result
            return result

    Record(gm).run(*args)


def _args():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*X_SHAPE, generator=g), torch.randn(*W_SHAPE, generator=g)]


def small_program(kind="forward", input_names=("x", "w"), recompute=()) -> Trace:
    g = fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    a = g.create_node("call_function", aten.relu.default, (x,), name="relu")
    b = g.create_node("call_function", aten.mm.default, (a, w), name="mm")
    c = g.create_node("call_function", aten.mul.Tensor, (b, 2.0), name="mul")
    d = g.create_node("call_function", aten.add.Tensor, (c, b), name="add")
    g.output((d,))
    gm = fx.GraphModule(torch.nn.Module(), g)
    fill_vals(gm, _args())
    for n in gm.graph.nodes:
        if n.name in recompute:
            n.meta["recompute"] = "PREFER_RECOMPUTE"
    return Trace(gm, kind, "as captured", list(input_names))


def split_program() -> Trace:
    """x: f32[4, 8]; (s0 f32[4, 3], s1 f32[4, 5]) = split_with_sizes(x, [3, 5], 1); y = cat([s1, s0], 1)."""
    g = fx.Graph()
    x = g.placeholder("x")
    s = g.create_node("call_function", aten.split_with_sizes.default, (x, [3, 5], 1), name="split")
    s0 = g.call_function(operator.getitem, (s, 0))
    s1 = g.call_function(operator.getitem, (s, 1))
    y = g.create_node("call_function", aten.cat.default, ([s1, s0], 1), name="cat")
    g.output((y,))
    gm = fx.GraphModule(torch.nn.Module(), g)
    fill_vals(gm, _args()[:1])
    return Trace(gm, "forward", "as captured", ["x"])


def small_fused_program(kind="forward", recompute=()) -> Trace:
    sub = fx.Graph()
    b_in = sub.placeholder("mm")
    c = sub.create_node("call_function", aten.mul.Tensor, (b_in, 2.0), name="mul")
    d = sub.create_node("call_function", aten.add.Tensor, (c, b_in), name="add")
    sub.output((d,))
    sub_gm = fx.GraphModule(torch.nn.Module(), sub)
    g = fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    a = g.create_node("call_function", aten.relu.default, (x,), name="relu")
    b = g.create_node("call_function", aten.mm.default, (a, w), name="mm")
    r = g.call_module("fusion0", (b,))
    r.meta["region"] = {"name": "fusion0", "ops": ["mul", "add"], "signature": None}
    out = g.call_function(operator.getitem, (r, 0))
    g.output((out,))
    root = torch.nn.Module()
    root.fusion0 = sub_gm
    gm = fx.GraphModule(root, g)
    fill_vals(gm, _args())
    for n in list(gm.graph.nodes) + list(sub_gm.graph.nodes):
        if n.name in recompute:
            n.meta["recompute"] = "PREFER_RECOMPUTE"
    return Trace(gm, kind, "fusion", ["x", "w"])


def fuse_consecutive(trace: Trace, fusible, min_ops: int = 2) -> Trace:
    """Test scaffolding (not a fusion pass): wrap maximal runs of consecutive fusible ops.

    A run of consecutive lines is always schedulable as one region; its inputs
    are values produced before it, its outputs values read after it.
    """
    ops = trace.ops
    runs, cur = [], []
    for n in ops:
        if fusible(n) and not isinstance(n.meta.get("val"), (list, tuple)):
            cur.append(n)
        else:
            runs.append(cur)
            cur = []
    runs.append(cur)
    runs = [r for r in runs if len(r) >= min_ops]
    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    root = torch.nn.Module()
    run_of = {n: i for i, r in enumerate(runs) for n in r}
    done = set()
    for n in trace.graph.nodes:
        if n in run_of:
            i = run_of[n]
            if i in done:
                continue
            done.add(i)
            run = runs[i]
            members = set(run)
            ins = [a for m in run for a in m.all_input_nodes if a not in members]
            ins = list(dict.fromkeys(ins))
            outs = [m for m in run if any(u not in members for u in m.users)]
            sub = fx.Graph()
            senv = {a: sub.placeholder(a.name) for a in ins}
            for m in run:
                senv[m] = sub.node_copy(m, lambda v: senv[v])
            sub.output(tuple(senv[m] for m in outs))
            name = f"fusion{i}"
            setattr(root, name, fx.GraphModule(torch.nn.Module(), sub))
            r = new.call_module(name, tuple(env[a] for a in ins))
            r.meta["val"] = tuple(m.meta["val"] for m in outs)
            r.meta["region"] = {"name": name, "ops": [str(m.target) for m in run], "signature": None}
            for k, m in enumerate(outs):
                gi = new.call_function(operator.getitem, (r, k))
                gi.meta["val"] = m.meta["val"]
                env[m] = gi
        else:
            env[n] = new.node_copy(n, lambda v: env[v])
    for name, mod in trace.gm.named_children():
        setattr(root, name, mod)
    return trace.derive(fx.GraphModule(root, new), "fusion (test scaffold)")


def is_pointwise(n: fx.Node) -> bool:
    return n.op == "call_function" and torch.Tag.pointwise in getattr(n.target, "tags", ())


# -- reading DOT -------------------------------------------------------------------------------
_EDGE = re.compile(r'^\s*(\w+) -> (\w+)(?: \[(.*)\])?$')
_NODE = re.compile(r'^\s*(\w+) \[(.*)\]$')
_CLUSTER = re.compile(r'^\s*subgraph (cluster_\w+) \{$')


def read_dot(source: str) -> dict:
    """{'nodes': {id: attr text}, 'edges': {(a, b): label}, 'clusters': {name: {ids}}, 'node_cluster': {id: name}}"""
    nodes, edges, clusters, where = {}, {}, {}, {}
    cluster = None
    for line in source.splitlines():
        if m := _CLUSTER.match(line):
            cluster = m.group(1)
            clusters[cluster] = set()
            continue
        if line.strip() == "}":
            cluster = None
            continue
        if m := _EDGE.match(line):
            lab = re.search(r'label="([^"]*)"', m.group(3) or "") or re.search(r"label=(\S+)", m.group(3) or "")
            edges[(m.group(1), m.group(2))] = lab.group(1) if lab else None
            continue
        if (m := _NODE.match(line)) and m.group(1) not in ("node", "edge", "graph"):
            nodes[m.group(1)] = m.group(2)
            if cluster:
                clusters[cluster].add(m.group(1))
                where[m.group(1)] = cluster
    return {"nodes": nodes, "edges": edges, "clusters": clusters, "node_cluster": where}


def red_outlined(dot: dict) -> set[str]:
    return {nid for nid, attrs in dot["nodes"].items() if 'color="#dc2626"' in attrs}
