"""The default loss of a run: what the backward starts from when the user gives no ``loss``.

One definition for inspect, predict, profile_lines and the ``--baseline`` peers, so every run
differentiates the same scalar.
"""
from __future__ import annotations

from .compare import output_tensors

__all__ = ["default_loss"]


def default_loss(out):
    """Sum of every floating output that requires grad (None when there is none)."""
    ts = [t for t in output_tensors(out) if t.requires_grad and t.is_floating_point()]
    if not ts:
        return None
    return sum(t.float().sum() for t in ts)
