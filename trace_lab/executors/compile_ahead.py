"""Regions compiled ahead of their program part, beside an earlier part's (issue 27 item 3: the first call).

AOTAutograd partitions the joint graph into forward and backward before it calls the forward's compiler, but
calls the backward's compiler only inside the first ``backward()``. Compiled then, the backward's regions are a
second compile pool (:mod:`.compile_pool`) after the forward's, whose Python runs alone at the first backward.
An executor that compiles on a pool takes the backward's final stage before it compiles the forward
(:meth:`~.interface.Executor.expect`) and puts the backward's regions into the forward's pool, where their Python
interleaves with the forward's kernel waits. What they compiled waits here, by cache key, until the backward's
own compile claims it. Its region records keep their compile seconds and say beside which part they compiled
(``compiled_ahead_with``): a region compiled ahead is not a cache hit.

Nothing is promised: a key the backward does not use (its graph, donations or covers came out otherwise) stays
unclaimed and the backward compiles that region itself, as without this module; a region that failed to compile
ahead is not kept, so the backward's own compile raises its error in its own words.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AheadRegion", "AheadRegions"]


@dataclass
class AheadRegion:
    fn: object
    seconds: float  # its own compile thread's seconds (0 for a covered region)
    covered: bool  # runs a covering region's code (.region_cover): compiled nothing itself
    refused: tuple | None  # a cover found but refused for it (.region_cover.plan_covers' second list, less the key)
    label: str  # the part whose pool compiled it, e.g. "forward #0"


class AheadRegions:
    """Traces expected to compile after the next compile, and what their regions compiled ahead."""

    def __init__(self):
        self._expected: list = []
        self._by_key: dict[str, AheadRegion] = {}

    def expect(self, trace, label: str) -> None:
        self._expected.append((trace, label))

    def take_expected(self) -> list:
        """The (trace, label) pairs expected since the last call: the next compile's to plan."""
        expected, self._expected = self._expected, []
        return expected

    def __contains__(self, key) -> bool:
        return key in self._by_key

    def keep(self, label: str, compiled: dict, covered: dict, refused: dict) -> None:
        """``compiled``: key -> (compiled code or the exception compiling raised, seconds); ``covered``: key -> the
        call of a region another compiled region covers; ``refused``: key -> why a cover was refused."""
        for key, (fn, seconds) in compiled.items():
            if not isinstance(fn, Exception):
                self._by_key[key] = AheadRegion(fn, seconds, False, refused.get(key), label)
        for key, fn in covered.items():
            self._by_key[key] = AheadRegion(fn, 0.0, True, None, label)

    def claim(self, keys) -> dict[str, AheadRegion]:
        """Key -> AheadRegion for each of ``keys`` compiled ahead; each is handed out once."""
        return {key: self._by_key.pop(key) for key in dict.fromkeys(keys) if key in self._by_key}
