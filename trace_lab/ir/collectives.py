"""Collective ops in the IR: torch's functional collectives and the view ops that move with a wait.

A *collective* is a ``torch.ops._c10d_functional`` op that returns a tensor still being
written by the communication library; the value may be read only after the
``wait_tensor`` applied to it. View-like ops on a waited value (``slice``, ``view``,
``permute``, ...) cost nothing and are not consumers in the scheduling sense. These names
are the IR's vocabulary: the passes that insert and reorder collectives
(:mod:`trace_lab.passes.collectives`) and the analyses that price them
(:mod:`trace_lab.analysis.timeline`) both read them from here.
"""
from __future__ import annotations

import torch
import torch.fx as fx

__all__ = ["C10D", "WAIT", "ALL_GATHER", "REDUCE_SCATTER", "COLLECTIVES", "VIEW_OPS", "is_wait", "is_collective",
           "is_all_gather", "is_view_op"]

C10D = torch.ops._c10d_functional
WAIT = C10D.wait_tensor.default
ALL_GATHER = C10D.all_gather_into_tensor.default
REDUCE_SCATTER = C10D.reduce_scatter_tensor.default
COLLECTIVES = {ALL_GATHER, REDUCE_SCATTER, C10D.all_reduce.default, C10D.all_to_all_single.default,
               C10D.broadcast.default}

aten = torch.ops.aten
VIEW_OPS = {aten.view.default, aten.slice.Tensor, aten.permute.default, aten.t.default, aten.expand.default,
            aten.alias.default, aten._unsafe_view.default, aten.unsqueeze.default, aten.squeeze.dim,
            aten.transpose.int, aten.select.int, aten.as_strided.default, aten.reshape.default}


def is_wait(n: fx.Node) -> bool:
    return n.op == "call_function" and n.target is WAIT


def is_collective(n: fx.Node) -> bool:
    return n.op == "call_function" and n.target in COLLECTIVES


def is_all_gather(n: fx.Node) -> bool:
    return n.op == "call_function" and n.target is ALL_GATHER


def is_view_op(n: fx.Node) -> bool:
    return n.op == "call_function" and n.target in VIEW_OPS and len(n.all_input_nodes) == 1
