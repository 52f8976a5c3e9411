"""Test support for the nvFuser executor: fake-CUDA graphs, a whole-program region, the definitions a run builds.

``whole_program_region(trace)`` wraps a Trace's entire program into one fused
region (``fusion0``), in the representation every fusion pass produces. It lets
the executor's splitter and translator be exercised on real captured programs
independently of the fusion strategies (which get their own runs where present).
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx


def fake_cuda_graph(fn, *shapes, dtype=torch.float32):
    """fx graph of ``fn`` traced on fake CUDA tensors (works without a GPU)."""
    mode = FakeTensorMode()
    with mode:
        args = [torch.empty(s, device="cuda", dtype=dtype) if isinstance(s, tuple) else s for s in shapes]
    return make_fx(fn, tracing_mode="fake", pre_dispatch=False)(*args)


def whole_program_region(trace, ctx=None):
    from trace_lab.ir.trace import Trace

    gm = trace.gm
    sub = fx.GraphModule(gm, gm.graph.__deepcopy__())
    out_node = next(n for n in reversed(sub.graph.nodes) if n.op == "output")
    flat = out_node.args[0] if isinstance(out_node.args[0], (list, tuple)) else [out_node.args[0]]
    orig = next(n for n in reversed(gm.graph.nodes) if n.op == "output").args[0]
    orig_flat = orig if isinstance(orig, (list, tuple)) else [orig]
    pairs = [(o, x) for o, x in zip(orig_flat, flat) if isinstance(x, fx.Node)]
    unique = list(dict.fromkeys(x for _, x in pairs))
    node_outs = unique
    out_node.args = (tuple(unique),)
    sub.recompile()

    g = fx.Graph()
    root = torch.nn.Module()
    root.add_module("fusion0", sub)
    env = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            p = g.placeholder(n.name)
            p.meta = dict(n.meta)
            env[n] = p
    phs = [env[n] for n in gm.graph.nodes if n.op == "placeholder"]
    region = g.call_module("fusion0", tuple(phs))
    region.meta["val"] = tuple(x.meta["val"] for x in node_outs)
    region.meta["region"] = {"name": "fusion0", "ops": [str(n.target) for n in sub.graph.nodes
                                                        if n.op == "call_function"], "signature": None}
    items = []
    for i, x in enumerate(node_outs):
        gi = g.call_function(operator.getitem, (region, i))
        gi.meta["val"] = x.meta["val"]
        items.append(gi)
    by_sub = dict(zip(unique, items))
    mapping = {o: by_sub[x] for o, x in pairs}
    new_out = fx.node.map_arg(orig, lambda x: mapping[x])
    g.output(new_out)
    new = fx.GraphModule(root, g)
    return trace.derive(new, "whole-program region")


def record_definitions(monkeypatch) -> list:
    """(definition, cache hit) of every ``NvFuserExecutor._definition`` call from now on, in order."""
    import trace_lab.executors.nvfuser as nv

    calls = []
    real_definition = nv.NvFuserExecutor._definition

    def recording(self, seg, strides=None, in_place=True):
        d, hit = real_definition(self, seg, strides, in_place)
        calls.append((d, hit))
        return d, hit

    monkeypatch.setattr(nv.NvFuserExecutor, "_definition", recording)
    return calls
