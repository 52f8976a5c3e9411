"""Small helpers over fx nodes that every layer uses (the lowest module of trace_lab).

:mod:`trace_lab.ir.trace`, the printer, the liveness model, the passes and the executors
all read nodes the same way: ``getitem`` nodes unpack multi-output ops, a node's
``meta['val']`` flattens to its tensors, and a program's device is that of its first
tensor. They live here, below :class:`trace_lab.ir.trace.Trace`, so the modules that
analyse or print a Trace do not import the module that defines it (and ``Trace``
can call them without an import cycle). ``trace_lab.ir.trace`` re-exports them.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

__all__ = ["is_getitem", "tensor_values", "node_device"]


def is_getitem(node: fx.Node) -> bool:
    return node.op == "call_function" and node.target is operator.getitem


def tensor_values(val) -> list:
    """Flatten a node's meta value into its tensors (None for non-tensor slots)."""
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (list, tuple)):
        out = []
        for v in val:
            out.extend(tensor_values(v) if isinstance(v, (list, tuple)) else [v if isinstance(v, torch.Tensor) else None])
        return out
    return []


def node_device(gm: fx.GraphModule) -> torch.device:
    for n in gm.graph.nodes:
        for v in tensor_values(n.meta.get("val")):
            if v is not None:
                return v.device
    return torch.device("cpu")
