"""The default loss of a run: what the backward starts from when the user gives no ``loss``.

One definition for inspect, predict, profile_lines and the ``--baseline`` peers, so every run
differentiates the same scalar.
"""
from __future__ import annotations

from .compare import output_tensors

__all__ = ["default_loss", "default_loss_copies_gradient"]


def default_loss(out):
    """Sum of every floating output that requires grad (None when there is none)."""
    ts = [t for t in output_tensors(out) if t.requires_grad and t.is_floating_point()]
    if not ts:
        return None
    return sum(t.float().sum() for t in ts)


def default_loss_copies_gradient(val) -> bool:
    """Whether AOTAutograd copies the gradient :func:`default_loss` sends an output of fake value ``val``:
    ``t.float().sum()`` of a float32 ``t`` of one or more dimensions sends an expanded scalar, which does not
    have the compiled layout and is copied (the copy dies in the backward); the cast of another dtype sends a
    fresh contiguous gradient, and a 0-d output a 0-d one, neither of them copied (analysis/handover.py)."""
    import torch

    return isinstance(val, torch.Tensor) and val.dtype == torch.float32 and val.dim() > 0
