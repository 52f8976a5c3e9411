"""The ``fsdp`` pass: sharded parameters become explicit collectives in the trace.

A module sharded by :func:`trace_lab.distributed.shard_module` reaches the
captured programs as flat shards, each read through one
``trace_lab.fsdp_unshard`` op (and its gradient leaves through
``trace_lab.fsdp_reduce_grad``). This pass lowers them into torch's functional
collectives, as Thunder's FSDP transform does with its ``synchronize`` prims:

    unshard(p)        ->  g = all_gather_into_tensor(p, W, group)   # right before
                          w = wait_tensor(g)                        # the first use
                          full = view(slice(w, 0, 0, numel), shape)
    reduce_grad(dp)   ->  s = mul(dp, 1/W)  (+ contiguous copy, pad to W*S)
                          r = reduce_scatter_tensor(s, "sum", W, group); wait_tensor(r)

Waits follow their collectives immediately: no overlap, and the fewest bytes
live; :mod:`~trace_lab.passes.sort_waits` moves them. The gradient is divided
before the reduce-scatter so that nothing consumes the reduced shard but the
program output, letting ``sort_waits`` defer its wait to the end.

ZeRO-2 vs ZeRO-3 is decided where AOTAutograd splits forward from backward:
with ``fsdp="zero3"`` :func:`tag_gathers_for_recompute` marks every
``fsdp_unshard`` of the joint graph ``MUST_RECOMPUTE``, so the partitioner saves
the shard (a program input, free) instead of the gathered parameter and the
backward gathers it again; this pass then lowers those re-gathers too. With
``zero2`` the gathered parameters are saved for the backward.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from .registry import register_pass
from .collectives import ALL_GATHER, REDUCE_SCATTER, WAIT, fake_mode_of, new_node, rebuild

__all__ = ["fsdp_pass", "lower_fsdp", "tag_gathers_for_recompute"]

aten = torch.ops.aten


def _targets():
    """(unshard, reduce_grad) op overloads, looked up by name: :mod:`trace_lab.distributed.sharding`
    defines them, and a pass does not import the distributed layer. Before it is imported no
    program can hold them (None, None)."""
    ops = torch.ops.trace_lab
    if not (hasattr(ops, "fsdp_unshard") and hasattr(ops, "fsdp_reduce_grad")):
        return None, None
    return ops.fsdp_unshard.default, ops.fsdp_reduce_grad.default


def tag_gathers_for_recompute(joint_gm: fx.GraphModule) -> None:
    """Joint-graph hook for ZeRO-3: never save a gathered parameter, gather it again."""
    from torch.utils.checkpoint import CheckpointPolicy

    unshard, _ = _targets()
    for n in joint_gm.graph.nodes:
        if n.op == "call_function" and n.target is unshard:
            n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
            n.meta.setdefault("ac_graph_id", 0)


def _first_user(n: fx.Node, order: dict) -> fx.Node:
    return min(n.users, key=order.__getitem__)


def lower_fsdp(gm: fx.GraphModule) -> tuple[fx.GraphModule, dict]:
    """Lower unshard / reduce_grad ops of ``gm`` into functional collectives (a new module)."""
    unshard, reduce_grad = _targets()
    body = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    new = rebuild(gm, body)
    graph = new.graph
    fake_mode = fake_mode_of(new)
    order = {n: i for i, n in enumerate(graph.nodes)}
    gathers = reduces = 0
    gathered_bytes = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in (unshard, reduce_grad):
            continue
        if n.target is unshard:
            shard, shape, numel, size, group = n.args
            if not n.users:
                graph.erase_node(n)
                continue
            with graph.inserting_before(_first_user(n, order)):
                g = new_node(graph, fake_mode, ALL_GATHER, (shard, size, group), like=n)
                w = new_node(graph, fake_mode, WAIT, (g,), like=n)
                full = w
                if numel != w.meta["val"].numel():
                    full = new_node(graph, fake_mode, aten.slice.Tensor, (full, 0, 0, numel), like=n)
                full = new_node(graph, fake_mode, aten.view.default, (full, list(shape)), like=n)
            gathers += 1
            gathered_bytes += g.meta["val"].numel() * g.meta["val"].element_size()
        else:
            grad, shard_numel, size, group = n.args
            with graph.inserting_before(n):
                s = new_node(graph, fake_mode, aten.mul.Tensor, (grad, 1.0 / size), like=n)
                if not s.meta["val"].is_contiguous():
                    s = new_node(graph, fake_mode, aten.clone.default, (s,),
                                 {"memory_format": torch.contiguous_format}, like=n)
                s = new_node(graph, fake_mode, aten.view.default, (s, [-1]), like=n)
                pad = shard_numel * size - s.meta["val"].numel()
                if pad:
                    s = new_node(graph, fake_mode, aten.constant_pad_nd.default, (s, [0, pad], 0.0), like=n)
                r = new_node(graph, fake_mode, REDUCE_SCATTER, (s, "sum", size, group), like=n)
                full = new_node(graph, fake_mode, WAIT, (r,), like=n)
            reduces += 1
        n.replace_all_uses_with(full)
        graph.erase_node(n)
        order = {m: i for i, m in enumerate(graph.nodes)}
    graph.lint()
    new.recompile()
    return new, {"all_gathers": gathers, "reduce_scatters": reduces, "gathered_bytes": gathered_bytes}


@register_pass("fsdp")
def fsdp_pass(trace, ctx):
    mode = ctx.options.fsdp  # zero2 or zero3: run_pipeline runs this pass only when it is set
    gm, info = lower_fsdp(trace.gm)
    info["mode"] = mode
    if trace.kind != "backward" and info["all_gathers"] == 0:
        info["note"] = ("no sharded parameter reached this program: shard the module with "
                        "trace_lab.distributed.shard_module(model) before jitting it with fsdp=" + repr(mode))
    return trace.derive(gm, "fsdp", info={**trace.info, "fsdp": info})
