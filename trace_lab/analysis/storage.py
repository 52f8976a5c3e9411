"""Allocator arithmetic shared by the memory model and the measurements: the CUDA
caching allocator's block size and the bytes a tensor's storage takes.

Kept below :mod:`.liveness`, :mod:`.op_scratch` and :mod:`trace_lab.runtime.call_memory` so that each can
price bytes the same way without importing the others; :mod:`.liveness` re-exports
``CUDA_ROUNDING`` and ``tensor_bytes``.
"""
from __future__ import annotations

import torch

__all__ = ["CUDA_ROUNDING", "tensor_bytes", "round_up", "span_elements"]

CUDA_ROUNDING = 512


def round_up(n: int, rounding: int) -> int:
    return (n + rounding - 1) // rounding * rounding if rounding > 1 and n > 0 else n


def span_elements(t: torch.Tensor) -> int:
    """Elements of its storage a strided tensor reaches from its offset on: 1 + the sum of (size - 1) * stride
    (0 for an empty tensor)."""
    if any(int(s) == 0 for s in t.shape):
        return 0
    return 1 + sum((int(s) - 1) * int(st) for s, st in zip(t.shape, t.stride()))


def tensor_bytes(t: torch.Tensor, rounding: int = 1) -> int:
    if t._is_zerotensor():  # aten._efficientzerotensor (a backward's known-zero gradient): no allocation,
        return 0            # though its storage reports the full size
    try:
        n = t.untyped_storage().nbytes()
    except Exception:  # noqa: BLE001 - some fake/sparse tensors have no storage
        n = t.numel() * t.element_size()
    if rounding > 1 and n > 0:
        n = (n + rounding - 1) // rounding * rounding
    return n
