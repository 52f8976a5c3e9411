"""Analyses of a Trace: liveness (per-line memory)."""
from .liveness import Liveness, LineMemory, compute_liveness

__all__ = ["Liveness", "LineMemory", "compute_liveness"]
