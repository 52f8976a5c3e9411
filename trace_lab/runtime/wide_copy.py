"""A layout copy whose innermost dim stays contiguous, done in 16- or 8-byte words instead of element by element.

Design. Under nvFuser, an attention layer's head transposes ((B, T, H, D) <-> (B, H, T, D)) run as torch clones
(segments that only lay values out are torch's: ``executors/nvfuser_region._layout_only``). torch's copy kernel
moves a permuted bfloat16 tensor one element at a time (offset arithmetic per element, no vector loads), where
Inductor's clone kernels move wide words: on the H200, 6.8 us of device time for a 4 MiB head transpose against
Inductor's 2.4-2.9 us (``benchmarks/widened_copy_probe.py``). When the innermost dim is contiguous, its bytes can
be reinterpreted as ``complex128`` (16 bytes) or ``int64`` (8 bytes) words (``Tensor.view(dtype)``: same storage,
fewer and wider elements) and copied so: 2.5-3.0 us, Inductor's time. The result is bit for bit the clone's, in
the same contiguous layout and allocation, so no trace, liveness figure or predicted peak changes.

:func:`word_for` decides from a value's recorded layout (the capture's fake tensor) at generation time, so a
program pays no test for copies that cannot widen (a real transpose such as ``k^T`` keeps torch's clone);
:func:`wide_clone` checks again at run time, since a value may reach the region in another layout than its
capture recorded, and falls back to the plain clone where the words do not fit (a misaligned start included).
"""
from __future__ import annotations

import functools

import torch

__all__ = ["WORDS", "word_for", "wide_clone"]

# the words tried, widest first: (dtype, bytes)
WORDS = ((torch.complex128, 16), (torch.int64, 8))

_clone = torch.ops.aten.clone.default


def word_for(value) -> torch.dtype | None:
    """The widest word (:data:`WORDS`) a contiguous clone of ``value`` (a tensor or fake tensor with the recorded
    layout) can copy in, or None: its innermost dim contiguous and a whole number of words, every other stride and
    its storage offset whole words too, and each word wider than an element."""
    if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.numel() == 0 or value.is_complex() \
            or value.stride(-1) != 1 or value.dtype == torch.bool:
        return None
    item = value.element_size()
    for dtype, size in WORDS:
        if size > item and (value.shape[-1] * item) % size == 0 and (value.storage_offset() * item) % size == 0 \
                and all((s * item) % size == 0 for s in value.stride()[:-1]):
            return dtype
    return None


@functools.lru_cache(maxsize=None)
def wide_clone(word: torch.dtype):
    """``aten.clone(x, memory_format=torch.contiguous_format)`` done in ``word``\\ s (one function per word, made
    once): bit for bit the clone's result. Where ``x`` does not reinterpret as whole aligned words after all
    (its run-time layout differs from the recorded one), the plain clone runs."""
    size = torch.empty((), dtype=word).element_size()

    def clone_in_words(x, memory_format=torch.contiguous_format):
        if memory_format is torch.contiguous_format and x.data_ptr() % size == 0:
            try:
                return x.view(word).clone(memory_format=torch.contiguous_format).view(x.dtype)
            except RuntimeError:  # the innermost dim is not contiguous or not whole words at run time
                pass
        return _clone(x, memory_format=memory_format)

    clone_in_words.__name__ = clone_in_words.__qualname__ = f"clone_in_{size}_byte_words"
    return clone_in_words
