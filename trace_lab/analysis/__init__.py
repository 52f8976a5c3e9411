"""Analyses of a Trace: liveness (per-line memory) and the primitives it shares with the scheduler
(:mod:`.buffers`), and the records of compiled regions joined to a Trace (:mod:`.region_record`)."""
from .buffers import Buffers
from .liveness import Liveness, LineMemory, compute_liveness
from .region_record import RegionRecord, region_record

__all__ = ["Liveness", "LineMemory", "compute_liveness", "Buffers", "RegionRecord", "region_record"]
