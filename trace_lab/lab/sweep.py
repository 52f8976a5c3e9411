"""Time against memory over a set of configurations (issue 28 item 3): ``trace_lab.sweep(fn, *args)``.

Each configuration is a dict of trace_lab options (``{"fusion": "memory"}``, ``{"cuda_graphs": True}``,
``{"max_region_ops": 8}``) plus, optionally, ``"memory_budget"``: AOTAutograd's ``activation_memory_budget``
(0 to 1: the share of activation memory the partitioner may save; below 1 it recomputes the rest), set
around that configuration's run where this torch has it. Each runs through ``trace_lab.inspect`` (checked
against eager, memory measured, ``runs`` timed calls): a row holds the steady time of one call (forward and
backward), the peak predicted and measured (of the part, forward or backward, whose measured peak above its
inputs is higher: ``Report.peak_part``, the peak explainer's choice too; the same part's prediction beside it) and
whether it matched eager. A configuration that fails is a row with its error; the sweep goes on.

``front`` marks the rows no other row beats on both time and measured peak (lower or equal on both, lower on
one): the configurations worth choosing between. ``str()`` is a table; the HTML view adds the scatter plot.
Progress: ``progress(done, total, label)`` before each configuration and once at the end; ``on_row(row)`` after
each configuration's row is made (the notebook's view shows rows as they come: ``trace_lab.sweep_view``).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from ..errors import TraceLabError

__all__ = ["SweepRow", "Sweep", "sweep", "checked_configs", "DEFAULT_CONFIGS"]

# every fusion strategy with the default executor, and the partitioner's memory budget at two settings
DEFAULT_CONFIGS = ({"fusion": "none"}, {"fusion": "horizontal"}, {"fusion": "dataflow"}, {"fusion": "memory"},
                   {"fusion": "dataflow", "memory_budget": 0.5}, {"fusion": "dataflow", "memory_budget": 0.0})


@dataclass
class SweepRow:
    label: str
    config: dict
    step_ms: float | None = None  # steady time of one call (median of the timed calls)
    predicted_peak: int | None = None  # bytes above inputs, of the part named in ``part``
    measured_peak: int | None = None
    part: str | None = None  # forward / backward: the part with the higher measured peak
    ok: bool | None = None  # matched eager
    error: str | None = None
    front: bool = False

    def to_dict(self) -> dict:
        return dict(vars(self))


@dataclass
class Sweep:
    rows: list[SweepRow] = field(default_factory=list)
    device: str = ""
    notes: list[str] = field(default_factory=list)

    def front(self) -> list[SweepRow]:
        return [r for r in self.rows if r.front]

    def to_dict(self) -> dict:
        return {"device": self.device, "rows": [r.to_dict() for r in self.rows], "notes": list(self.notes)}

    def _table(self) -> list[tuple]:
        from ..ir.printer import format_bytes

        rows = [("config", "step ms", "peak predicted", "peak measured", "part", "matches eager", "front")]
        for r in self.rows:
            if r.error:
                rows.append((r.label, "-", "-", "-", "-", f"error: {r.error}", ""))
                continue
            rows.append((r.label, "-" if r.step_ms is None else f"{r.step_ms:.3f}",
                         "-" if r.predicted_peak is None else format_bytes(r.predicted_peak),
                         "-" if r.measured_peak is None else format_bytes(r.measured_peak), r.part or "-",
                         "yes" if r.ok else "no", "*" if r.front else ""))
        return rows

    def __str__(self) -> str:
        rows = self._table()
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        lines = [f"sweep on {self.device}: step time against peak above inputs (* = no other row beats it on both)"]
        lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        return "\n".join(lines + [f"note: {n}" for n in self.notes])

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))

    def svg(self) -> str:
        """The scatter plot: step time against peak, measured and predicted, the front joined and marked."""
        from ..report.sweep_plot import sweep_svg

        return sweep_svg(self.rows)

    def _repr_html_(self) -> str:
        """The plot and the table, with the report's CSS (an export where no report was shown before styles it)."""
        from ..report.assets_html import styled
        from ..report.packing import esc

        rows = self._table()
        head = "".join(f"<th>{esc(h)}</th>" for h in rows[0])
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows[1:])
        plot = self.svg() if any(r.step_ms is not None and r.measured_peak is not None for r in self.rows) else ""
        notes = "".join(f"<li>{esc(n)}</li>" for n in self.notes)
        return styled(f"<b>sweep on {esc(self.device)}</b>: step time against peak above inputs (* = no other row "
                      f"beats it on both){plot}<div class='tl-scroll'><table><tr>{head}</tr>{body}</table></div>"
                      f"<ul>{notes}</ul>")


def label_of(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "defaults"


@contextlib.contextmanager
def _memory_budget(value):
    if value is None:
        yield
        return
    import torch._functorch.config as functorch_config

    if not hasattr(functorch_config, "activation_memory_budget"):
        raise TraceLabError("memory_budget: this torch's AOTAutograd has no activation_memory_budget")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
        raise TraceLabError(f"memory_budget={value!r}: give a number from 0 to 1 (the share of activation memory "
                            "the partitioner may save)")
    with functorch_config.patch(activation_memory_budget=float(value)):
        yield


def _add(result: Sweep, row: SweepRow, on_row) -> None:
    result.rows.append(row)
    if on_row is not None:
        on_row(row)


def _pareto(rows: list[SweepRow]) -> None:
    scored = [r for r in rows if r.ok and r.step_ms is not None and r.measured_peak is not None]
    for r in scored:
        r.front = not any(o is not r and o.step_ms <= r.step_ms and o.measured_peak <= r.measured_peak
                          and (o.step_ms < r.step_ms or o.measured_peak < r.measured_peak) for o in scored)


def checked_configs(configs) -> list[dict]:
    """The configurations to run (None: :data:`DEFAULT_CONFIGS`), copied; a TraceLabError for a bad list."""
    configs = list(DEFAULT_CONFIGS if configs is None else configs)
    if not configs:
        raise TraceLabError("sweep: give at least one configuration (a dict of options), or none for the defaults")
    for c in configs:
        if not isinstance(c, dict):
            raise TraceLabError(f"sweep: each configuration is a dict of options, got {type(c).__name__}: {c!r}")
    return [dict(c) for c in configs]


def sweep(fn, *args, configs=None, runs: int = 3, progress=None, on_row=None, loss=None, kwargs=None,
          **common) -> Sweep:
    """Run ``fn(*args)`` under each configuration (module docstring); ``common`` options apply to all."""
    from .inspection import inspect

    configs = checked_configs(configs)
    result = Sweep(notes=[
        "peak: the part (forward or backward) with the higher measured peak above its inputs; its prediction beside it",
        f"step: median of {runs} timed calls after the first (forward and backward)"])
    for done, config in enumerate(configs):
        label = label_of(config)
        if progress is not None:
            progress(done, len(configs), label)
        row = SweepRow(label, config)
        options = {**common, **{k: v for k, v in config.items() if k != "memory_budget"}}
        try:
            with _memory_budget(config.get("memory_budget")):
                report = inspect(fn, *args, loss=loss, kwargs=kwargs, runs=runs, **options)
        except Exception as e:  # noqa: BLE001 - a failing configuration is a row, the sweep goes on
            text = str(e).strip().splitlines()
            row.error = f"{type(e).__name__}: {text[0] if text else ''}"
            _add(result, row, on_row)
            continue
        result.device = result.device or report.device
        row.ok = report.ok
        row.step_ms = None if report.steady_seconds is None else report.steady_seconds * 1e3
        part = report.peak_part()
        if part is not None:
            row.part, row.measured_peak, row.predicted_peak = part, report.measured_peak(part), report.predicted_peak(part)
        _add(result, row, on_row)
    if progress is not None:
        progress(len(configs), len(configs), "")
    _pareto(result.rows)
    return result
