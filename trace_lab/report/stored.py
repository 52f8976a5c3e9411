"""Stored traces: what the views need from a Trace, as plain data that can cross processes.

A :class:`~trace_lab.trace.Trace` holds an fx program and cannot leave the
process that compiled it (a ``--nproc`` worker). :func:`parts_data` turns every
program part of a Report into plain data, per stage: the printed text
(``str(trace)``), the stage name, the number of op lines and the liveness the
Trace tab draws (``trace.liveness()``: entry, peak, and per op line
``[live_after, high_water, allocated, freed, is_region]``), plus, per part, the
DOT source of the before/after graphs (no layout: that happens where it is
shown). :class:`StoredTrace` reads that data back with the few attributes the
views use (``kind``, ``stage``, ``ops``, ``str()``, ``liveness()``), so the
Trace, Memory and Graph tabs render a remote run exactly as a local one.
"""
from __future__ import annotations

from types import SimpleNamespace

__all__ = ["trace_data", "parts_data", "StoredTrace", "StoredLiveness", "stored_part_traces"]


def trace_data(trace) -> dict:
    """One stage of one program part as plain data (see the module docstring)."""
    live = trace.liveness()
    return {
        "kind": trace.kind, "stage": trace.stage, "text": str(trace), "n_ops": len(trace.ops),
        "entry_bytes": live.entry_bytes, "peak_bytes": live.peak_bytes, "peak_index": live.peak_index,
        "lines": [[ln.live_after, ln.high_water, ln.allocated, ln.freed, ln.node.op == "call_module"]
                  for ln in live.lines],
    }


def _graph_data(before, after) -> dict:
    """DOT source and notes of the before/after graphs (``trace_lab.report.graph``), or why there are none."""
    try:
        from .graph import before_after

        g_before, g_after = before_after(before, after)
    except Exception as e:  # noqa: BLE001 - no graphs must not lose the report
        return {"error": f"{type(e).__name__}: {e}"}
    return {side: {"source": g.source, "notes": list(g.notes)} for side, g in (("before", g_before),
                                                                               ("after", g_after))}


def parts_data(report, graphs: bool = True) -> list[dict]:
    """``[{"label": "forward #0", "stages": [trace_data...], "graph": {...}}]`` for every program part."""
    out = []
    for p in (report.jfn.programs if report.jfn is not None else []):
        for part in p.parts:
            if part.traces:
                entry = {"label": f"{part.kind} #{p.index}", "stages": [trace_data(t) for t in part.traces]}
                if graphs:
                    entry["graph"] = _graph_data(part.traces[0], part.traces[-1])
                out.append(entry)
    return out


class StoredLiveness:
    """The parts of :class:`~trace_lab.analysis.liveness.Liveness` the views read."""

    def __init__(self, data: dict):
        self.entry_bytes = data["entry_bytes"]
        self.peak_bytes = data["peak_bytes"]
        self.peak_index = data["peak_index"]
        self.peak_above_inputs_bytes = self.peak_bytes - self.entry_bytes
        self.lines = [SimpleNamespace(live_after=a, high_water=h, allocated=al, freed=f,
                                      node=SimpleNamespace(op="call_module" if region else "call_function"))
                      for a, h, al, f, region in data["lines"]]

    @property
    def peak_line(self):
        return self.lines[self.peak_index] if self.peak_index >= 0 else None

    def curve(self) -> list[int]:
        return [self.entry_bytes] + [ln.live_after for ln in self.lines]


class StoredTrace:
    """A Trace read back from :func:`trace_data`: text and memory only (no fx graph)."""

    def __init__(self, data: dict, part_graph: dict | None = None):
        self.data = data
        self.kind, self.stage = data["kind"], data["stage"]
        self.ops = [None] * data["n_ops"]  # only counted by the views
        self.part_graph = part_graph  # the part's first-vs-final-stage graphs (see _graph_data)
        self._liveness = None

    def stored_graphs(self) -> tuple:
        """(before, after) graphs of this trace's program part: objects with ``.source`` (DOT) and ``.notes``."""
        from ..errors import TraceLabError

        g = self.part_graph or {"error": "the worker sent no graphs for this program"}
        if "error" in g:
            raise TraceLabError(g["error"])
        return tuple(SimpleNamespace(source=g[side]["source"], notes=g[side]["notes"]) for side in ("before", "after"))

    def liveness(self, materialized_regions=None) -> StoredLiveness:
        if self._liveness is None:
            self._liveness = StoredLiveness(self.data)
        return self._liveness

    def __str__(self) -> str:
        return self.data["text"]

    def __repr__(self) -> str:
        return f"<StoredTrace {self.kind} '{self.stage}': {len(self.ops)} ops>"


def stored_part_traces(parts: list[dict]) -> list[tuple[str, list[StoredTrace]]]:
    """[(label, stages)] as :func:`trace_lab.report.html.part_traces` gives them for a local Report."""
    out = []
    for part in parts:
        out.append((part["label"], [StoredTrace(s, part.get("graph")) for s in part["stages"]]))
    return out
