"""Fusion cache: compiled regions keyed by the region's structural signature.

The signature (:func:`region_signature`, what makes two regions "the same kernel":
ops, wiring, constants, outputs and input layouts, no names) is computed where the
regions are built, :mod:`trace_lab.passes.signature`, and re-exported here.

:class:`FusionCache` maps signature -> compiled callable (LRU, bounded) and
counts hits and misses; ``enabled=False`` makes every lookup a miss and stores
nothing, so each region compiles on its own.
"""
from __future__ import annotations

import time
from collections import OrderedDict

from ..passes.signature import describe_input, region_signature, signature_hash

__all__ = ["describe_input", "region_signature", "signature_hash", "FusionCache"]


class FusionCache:
    """Compiled regions by signature (least recently used evicted beyond ``max_entries``)."""

    def __init__(self, enabled: bool = True, max_entries: int = 4096):
        self.enabled = enabled
        self.max_entries = max_entries
        self._entries: OrderedDict[str, object] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, signature: str) -> bool:
        """Would a lookup of ``signature`` hit? (counts nothing)"""
        return self.enabled and signature in self._entries

    def peek(self, signature: str):
        """The compiled entry for ``signature`` or None (counts nothing, changes no order)."""
        return self._entries.get(signature) if self.enabled else None

    def get_or_compile(self, signature: str, compile_fn):
        """(compiled, hit, seconds spent compiling) for a region with this signature."""
        if signature in self:
            self._entries.move_to_end(signature)
            self.hits += 1
            return self._entries[signature], True, 0.0
        started = time.perf_counter()
        compiled = compile_fn()
        seconds = time.perf_counter() - started
        self.put(signature, compiled)
        return compiled, False, seconds

    def put(self, signature: str, compiled, hit: bool = False) -> None:
        """Count a miss (a hit with ``hit``: code compiled for another signature) and keep ``compiled`` (compiled
        elsewhere, e.g. on a compile pool's thread)."""
        if hit:
            self.hits += 1
        else:
            self.misses += 1
        if self.enabled:
            self._entries[signature] = compiled
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
