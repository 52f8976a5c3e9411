"""Report: everything one inspected run produced, as plain data plus views.

A Report is built once from a :class:`~trace_lab.jit.JitFunction` after a run
and never changes. Its fields are plain data, and ``view`` is the run's view
model (:mod:`.view_model`: per part and stage the printed lines with their
memory, the graphs, the timeline), built while the Traces are live; every view
reads only these. ``to_dict()`` is all of it as JSON-ready data and
:meth:`Report.from_dict` (or :func:`trace_lab.load_report` for a saved file) rebuilds a
Report that renders the same text and HTML. ``__str__`` is the text summary;
``_repr_html_`` is a self-contained HTML view (works in static exports) in which
every name that comes from user code is escaped. The run's compilation records
(``compilations``: :class:`trace_lab.run.compilation.CompilationRecord`, one per program part, with its
live Traces and compiled program) stay on the Report, not in its JSON: :meth:`Report.traces` and the
notebook's tools read them; a Report never holds the JitFunction.
"""
from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field, fields

import torch

from ..ir.printer import format_bytes, plural
from .parts import materializes_regions, record_parts, summary_parts
from .view_model import ViewModel, build_view
from ..run.compilation import program_records

__all__ = ["Report", "part_summary"]


def part_summary(part, materialized: bool) -> dict:
    """One program part's plain summary from its compilation record."""
    stages = []
    for t in part.traces:
        live = t.liveness(materialized)
        stages.append({
            "stage": t.stage, "pass_seconds": t.pass_seconds, "ops": len(t.ops),
            "regions": sum(1 for n in t.ops if n.op == "call_module"),
            "folded_constants": sum(1 for n in t.graph.nodes if n.op == "get_attr" and n.meta.get("folded")),
            "layers": t.info.get("layers"),  # fusion="layers": {"found": [module paths], "regions": n}
            "predicted_peak_bytes": live.peak_bytes,
            "predicted_peak_above_inputs_bytes": live.peak_above_inputs_bytes,
        })
    compiled = part.compiled
    return {
        "kind": part.kind,
        "stages": stages,
        "executor": getattr(compiled, "executor", None),
        "executor_seconds": getattr(compiled, "compile_seconds", 0.0),
        "regions": compiled.region_table() if compiled is not None else [],
        "notes": part.all_notes(),
        "capture_seconds": part.capture_seconds,
        # where the part's compile time went, by stage and by region (CompilationRecord.timings)
        "timings": part.timings() if hasattr(part, "timings") else None,
        # per-line memory of the final stage: name, allocated, freed, live_after, high_water
        "liveness": part.traces[-1].liveness(materialized).to_dict() if part.traces else None,
    }


def _again(regs: list[dict]) -> str:
    """Why there are more misses than signatures, when there are: a signature compiled again. Inductor compiles a
    region that writes over its dying inputs (``donated``) apart from one of the same signature that does not."""
    groups: dict[str, list[dict]] = {}
    for r in regs:
        if not r.get("cache_hit"):
            groups.setdefault(r.get("signature"), []).append(r)
    again = sum(len(g) - 1 for g in groups.values())
    if not again:
        return ""
    by_donation = all(len({tuple(r.get("donated") or ()) for r in g}) == len(g) for g in groups.values())
    return f" ({again} of them a signature compiled again{' for other donated inputs' if by_donation else ''})"


def _region_compile(r: dict) -> str:
    """'hit', '0.76 s', or "runs fusion2's code" (a region run by the code of one it is part of: region_cover), with
    why not where such a region compiled on its own."""
    by = r.get("runs_code_of")
    if by:
        return f"runs {by}'s code"
    if r.get("cache_hit"):
        return "hit"
    refused = r.get("cover_refused")  # "fusion1, whose code would add 16.00 KiB on its line, which is at the ..."
    return format(r.get("compile_seconds", 0.0), ".2f") + " s" + (f" (part of {refused})" if refused else "")


def _region_rows(programs: list[dict], listed: int = 12) -> list[tuple[str, str]]:
    """One row per program part whose executor compiled fused regions: the fusion cache's work."""
    rows = []
    for p, kind, part in summary_parts(programs):
        regs = part.get("regions") or []
        if regs:
            hits = sum(1 for r in regs if r.get("cache_hit"))
            seconds = sum(r.get("compile_seconds", 0.0) for r in regs)
            per = ", ".join(f"{r['name']} {_region_compile(r)}" for r in regs[:listed])
            more = f", ... {len(regs) - listed} more" if len(regs) > listed else ""
            rows.append((f"regions {kind} #{p['index']}",
                         f"{plural(len(regs), 'region')}, {plural(len({r.get('signature') for r in regs}), 'unique signature')}, "
                         f"{plural(hits, 'cache hit')}, {plural(len(regs) - hits, 'miss', 'misses')}{_again(regs)}, "
                         f"{seconds:.2f} s compiling ({per}{more})"))
    return rows


def _compile_rows(programs: list[dict]) -> list[tuple[str, str]]:
    """Per program part, where its compile time went (issue 27 item 3): AOTAutograd (its tracing and partition, on
    the forward's row: the backward's graph comes out of the same capture), the passes that took time,
    measuring op scratch, the executor (regions compiled and cache hits, the slowest region), graph recording."""
    rows = []
    for p, kind, part in summary_parts(programs):
        t = part.get("timings")
        if not t:
            continue  # a report saved before the records said where compile time went
        passes = [(stage, s) for stage, s in t["passes"] if s >= 0.0005]
        regions = t.get("regions") or []
        compiled = [r for r in regions if not r[2]]
        slowest = max(compiled, key=lambda r: r[1], default=None)
        # "AOTAutograd", not "capture": the Summary's compile row calls the first call's remainder (Dynamo,
        # AOTAutograd and the rest) capture; this figure is AOTAutograd's part of it alone
        pieces = [f"AOTAutograd {t['capture']:.3f} s{_aligned_text(t.get('aligned_saves'))}" if kind != "backward"
                  else "AOTAutograd in the forward's",
                  f"passes {sum(s for _, s in t['passes']):.3f} s"
                  + (f" ({', '.join(f'{stage} {s:.3f}' for stage, s in passes)})" if passes else ""),
                  f"op scratch {t['op_scratch']:.3f} s",
                  f"executor {t['executor']:.3f} s"
                  + (f" ({plural(len(compiled), 'region')} compiled, {plural(len(regions) - len(compiled), 'cache hit')}"
                     + (f"; slowest {slowest[0]} {slowest[1]:.3f} s" if slowest else "") + ")" if regions else "")]
        if t.get("graph_recording"):
            pieces.append(f"CUDA graph recording {t['graph_recording']:.3f} s")
        rows.append((f"compile {kind} #{p['index']}", ", ".join(pieces) + f"; wall {t['wall']:.3f} s"
                     " (passes, op scratch and executor)"))
    return rows


def _aligned_text(aligned: dict | None) -> str:
    """" (0.912 s of it partitioning again so that L['self'].layers.0 saves what its repeats save, 1 value marked:
    align_layer_saves)", or the same with 'not kept' where the second partition saved more or did not align; ''
    where none ran."""
    if not aligned:
        return ""
    layers = ", ".join(aligned["layers"])
    marked = plural(aligned["values"], "value")
    again = f" ({aligned['seconds']:.3f} s of it partitioning again"
    if aligned["kept"]:
        verb, whose = ("saves", "its") if len(aligned["layers"]) == 1 else ("save", "their")
        return f"{again} so that {layers} {verb} what {whose} repeats save, {marked} marked: align_layer_saves)"
    return (f"{again} to align the saves of {layers} with the repeats', {marked} marked; not kept: that partition "
            "did not align them without saving more)")


def _timing_text(t: dict) -> str:
    """'host 4.1 ms (launching), device 4.3 ms (CUDA events): host-bound' on CUDA; the host time on CPU."""
    host, dev = t.get("host_seconds"), t.get("device_seconds")
    if host is None:
        return "not timed"
    if dev is None:
        return f"host {host * 1e3:.3f} ms (median; CPU: the host's time is the program's time)"
    bound = t.get("bound")
    why = {"host-bound": "the device waits for launches: fewer, larger kernels or CUDA graphs help",
           "device-bound": "launching returns before the device finishes: the kernels are the time"}.get(bound, "")
    return (f"host {host * 1e3:.3f} ms (until the call returns: launching), device {dev * 1e3:.3f} ms (CUDA events)"
            + (f": {bound} ({why})" if bound else ""))


@dataclass
class Report:
    name: str
    options: dict
    device: str
    executor_reasons: list[str]
    programs: list[dict]
    compile_seconds: dict
    first_run_seconds: float
    steady_seconds: float | None
    run_seconds: list[float]
    comparison: dict | None
    memory: list[dict]
    warnings: list[str] = field(default_factory=list)
    created: str = ""
    torch_version: str = ""
    comm: dict | None = None  # multi-process runs: measured wait stalls (trace_lab.distributed.comm_measure)
    # per timed call: host time (until the call returns) and, on CUDA, device time (CUDA events) and
    # whether the program is host-bound (trace_lab.measure.CallTimes.to_dict); None when not timed
    timing: dict | None = None
    # the peak of the whole call (forward and backward together), {"measured_bytes", "method"}: measured for a
    # --baseline peer (run/peers.py) and for a trace_lab run beside one (inspect(..., measure_step=True))
    step_peak: dict | None = None
    peer: str | None = None  # a --baseline peer's name ('eager', 'torch.compile', ...): nothing traced
    # every line of one more call timed (inspect(profile=True): run/line_profile.LineProfile.to_dict())
    line_times: dict | None = None
    # other processes' share of the CPUs during the first call (compile included): above NOISY_OTHERS the
    # compile and first-call times are not to be trusted (:meth:`first_run_noise`); None where not measured
    first_run_others_share: float | None = None
    view: ViewModel = field(default_factory=ViewModel, repr=False)  # what the views show (.view_model)
    # the run's CompilationRecords (run/compilation.py): live Traces and compiled programs, never saved
    compilations: list | None = field(default=None, repr=False, compare=False)

    # -- construction -----------------------------------------------------------------
    @classmethod
    def from_run(cls, jfn, *, name, device, first_run_seconds, steady_seconds, run_seconds, comparison,
                 measurements, warnings, comm=None, timing=None, step_peak=None, line_times=None,
                 first_run_others_share=None) -> "Report":
        programs = [{"index": p.index, "reason": p.reason, "inputs": p.input_descriptors} for p in jfn.programs]
        records = jfn.compilations()
        passes = executor_s = 0.0
        for pos, _, part in record_parts(records):
            summary = part_summary(part, materializes_regions(part))
            programs[pos][part.kind] = summary
            passes += sum(s["pass_seconds"] for s in summary["stages"])
            executor_s += summary["executor_seconds"]
        capture = max(0.0, first_run_seconds - passes - executor_s - (steady_seconds or 0.0))
        memory = []
        for m in measurements:
            memory.append({
                "program": m.program, "kind": m.kind, "predicted_peak_above_inputs_bytes": m.predicted_peak_above_inputs,
                "measured_peak_above_inputs_bytes": m.measured_peak_above_inputs, "method": m.method,
            })
        for pos, _, part in record_parts(records):  # what a pass found worth a warning (fusion=layers without layers)
            warnings += [f"{part.kind} #{pos}: {w}" for t in part.traces
                         for w in (t.info.get("warnings") or [])]
        for p in jfn.programs:
            if len(jfn.programs) > 1 and p.reason.startswith("graph break"):
                warnings.append(f"program {p.index}: {p.reason}")
        return cls(
            name=name or getattr(jfn.fn, "__name__", type(jfn.fn).__name__),
            options=jfn.options.to_dict(), device=str(device), executor_reasons=list(jfn.executor_reasons),
            programs=programs,
            compile_seconds={"capture": capture, "passes": passes, "executor": executor_s,
                             "total": capture + passes + executor_s},
            first_run_seconds=first_run_seconds, steady_seconds=steady_seconds, run_seconds=list(run_seconds),
            comparison=comparison.to_dict() if comparison is not None else None, memory=memory,
            warnings=list(dict.fromkeys(warnings)), created=datetime.datetime.now().isoformat(timespec="seconds"),
            torch_version=torch.__version__, comm=comm, timing=timing, step_peak=step_peak, line_times=line_times,
            first_run_others_share=first_run_others_share, view=build_view(records, comm),
            compilations=records,
        )

    @classmethod
    def from_dict(cls, data: dict, **extra) -> "Report":
        """A Report from :meth:`to_dict` data (a saved report, or one sent back by another process). It
        holds plain data only: no compilation records, so :meth:`traces` gives the view model's stages
        (``str()`` is a stage's text); subclasses pass their fields in ``extra``."""
        names = {f.name for f in fields(cls)} - {"compilations", "view"} - set(extra)
        return cls(**{k: v for k, v in data.items() if k in names}, view=ViewModel.from_dict(data.get("view")),
                   **extra)

    # -- access -------------------------------------------------------------------------
    def traces(self, kind: str = "forward", program: int = -1) -> list:
        """Stages of one program part ('forward' also finds an inference program): the Traces of its
        compilation record, else (a report loaded from JSON) the view model's stages
        (:class:`~.view_model.StageView`)."""
        if self.compilations is None:
            return self.view.stages(kind, program)
        progs = sorted(program_records(self.compilations), key=lambda p: p.index)
        if not progs:
            return []
        p = progs[program]
        if kind in ("forward", "inference"):
            return list(p.forward.traces) if p.forward else []
        return list(p.backward.traces) if p.backward else []

    def compilation(self, kind: str, program: int) -> "object | None":
        """The compilation record of part ``kind`` of program ``program`` (its index), or None (a report
        loaded from JSON, or sent back by a --nproc worker, has none)."""
        kinds = ("forward", "inference") if kind in ("forward", "inference") else (kind,)
        return next((r for r in self.compilations or [] if r.program == program and r.kind in kinds), None)

    def predicted_peak(self, kind: str = "forward", program: int = -1) -> int | None:
        ts = self.traces(kind, program)
        if not ts:
            return None
        entry = self.programs[program].get(ts[-1].kind, {})
        return entry.get("stages", [{}])[-1].get("predicted_peak_above_inputs_bytes")

    def measured_peak(self, kind: str = "forward", program: int = -1) -> int | None:
        idx = self.programs[program]["index"] if self.programs else None
        kinds = ("forward", "inference") if kind in ("forward", "inference") else ("backward",)
        for m in self.memory:
            if m["program"] == idx and m["kind"] in kinds:
                return m["measured_peak_above_inputs_bytes"]
        return None

    def peak_part(self, program: int = -1) -> str | None:
        """The part of program ``program``, ``"forward"`` or ``"backward"``, whose measured peak above its inputs is
        higher (the predicted peak breaks a tie and stands in where nothing was measured); None: it has no part.
        The one choice of "the part with the higher peak" that :meth:`explain_peak`, ``trace_lab.explain_peak``
        and ``trace_lab.sweep`` make."""
        kinds = [k for k in ("forward", "backward") if self.traces(k, program)]
        if not kinds:
            return None
        return max(kinds, key=lambda k: (self.measured_peak(k, program) or 0, self.predicted_peak(k, program) or 0))

    def explain_peak(self, kind: str | None = None, program: int = -1):
        """What makes the peak of one part (``kind`` None: :meth:`peak_part`): the buffers alive on its peak line by
        kind and source line, adding up to the predicted peak (:class:`trace_lab.analysis.peak.PeakBreakdown`).
        ``trace_lab.explain_peak(fn, *args)`` adds the remedies, priced and tried."""
        from ..analysis.peak import peak_breakdown
        from ..errors import TraceLabError

        if self.compilations is None:
            raise TraceLabError("explain_peak needs the run's live programs: a report loaded from JSON (or sent back "
                                "by a --nproc worker) has only their printed lines")
        kind = kind or self.peak_part(program) or "forward"
        traces = self.traces(kind, program)
        if not traces:
            raise TraceLabError(f"explain_peak: program {program} has no {kind} part (a backward needs an output "
                                "that requires grad)")
        backward = self.traces("backward", program) if kind != "backward" else []
        saved = sum(1 for n in backward[-1].inputs if not n.name.startswith("tangent")) if backward else None
        index = sorted(p.index for p in program_records(self.compilations))[program]
        return peak_breakdown(traces[-1], materializes_regions(self.compilation(kind, index)), saved=saved,
                              program=index)

    @property
    def ok(self) -> bool:
        return self.comparison is None or self.comparison["ok"]

    # -- views ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Every field as JSON-ready data, the view model included (:meth:`from_dict` reads it back)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("compilations", "view")}
        d["view"] = self.view.to_dict()
        return json.loads(json.dumps(d, default=str))

    def summary_rows(self) -> list[tuple[str, str]]:
        rows = [("device", self.device), ("executor", "; ".join(self.executor_reasons) or "-"),
                ("fusion", str(self.options.get("fusion"))),
                ("compile", "{total:.3f} s (capture {capture:.3f}, passes {passes:.3f}, executor {executor:.3f})".format(
                    **self.compile_seconds)),
                ("first run", f"{self.first_run_seconds:.3f} s" + (
                    f"; NOISY: {self.first_run_noise()}, so this time and the compile time are not compared"
                    if self.first_run_noise() else "")),
                ("steady state", self.steady_text())]
        if self.timing:
            rows.append(("time per call", _timing_text(self.timing)))
        for m in self.memory:
            measured = m["measured_peak_above_inputs_bytes"]
            # trace_lab's one meaning of peak: above the program's inputs (report/table.py says why)
            rows.append((f"peak {m['kind']} #{m['program']}",
                         f"predicted {format_bytes(m['predicted_peak_above_inputs_bytes'])}, measured "
                         + (format_bytes(measured) if measured is not None else "n/a") + " above inputs"))
        if self.step_peak is not None:
            measured = self.step_peak.get("measured_bytes")
            rows.append(("peak of the whole call", (format_bytes(measured) if measured is not None else "n/a")
                         + " above inputs, forward and backward together (measured)"))
        for p, kind, part in summary_parts(self.programs):
            s = part["stages"][-1]
            folded = s.get("folded_constants", 0)  # absent from reports saved before constant folding
            layers = s.get("layers")
            rows.append((f"{kind} #{p['index']}", f"{plural(s['ops'], 'op')}, {plural(s['regions'], 'fused region')}"
                         + (f", {plural(folded, 'scalar constant')} folded" if folded else "")
                         + (f", {plural(len(layers['found']), 'layer')} in {plural(layers['regions'], 'region')}"
                            if layers else "")
                         + (f", {p['reason']}" if p["reason"] != "first compile" else "")))
        rows += _region_rows(self.programs)
        rows += _compile_rows(self.programs)
        if self.comparison is not None:
            c = self.comparison
            rows.append(("vs eager", ("matches" if c["ok"] else "DIFFERS") + f", max |diff| {c['max_abs_diff']:.3g} "
                         f"({c['checked']['outputs']} outputs, {c['checked']['grads']} grads, "
                         f"{c['checked']['values']} values)"))
        return rows

    def timing_noise(self) -> str | None:
        """Why this run's steady time is not to be trusted (its timed runs spread wide, or other processes
        competed for the CPUs while it was timed: ``trace_lab.runtime.measure.timing_noise``), or None."""
        from ..runtime.measure import timing_noise

        return timing_noise(list(self.run_seconds or []), (self.timing or {}).get("others_cpu_share"))

    def first_run_noise(self) -> str | None:
        """Why the first call's (and so the compile's) time is not to be trusted: other processes used more than
        ``NOISY_OTHERS`` of the CPUs while it ran (a front end rendering under Run All); or None."""
        from ..runtime.measure import NOISY_OTHERS

        share = self.first_run_others_share
        if share is None or share <= NOISY_OTHERS:
            return None
        return f"other processes used {share:.0%} of the CPUs during the first call"

    def steady_text(self) -> str:
        """'16.110 ms (median of 3, 15.204-18.003 ms)', and 'NOISY: why' when :meth:`timing_noise` says so."""
        if self.steady_seconds is None:
            return "not timed"
        runs = [s for s in self.run_seconds or [] if s is not None]
        text = f"{self.steady_seconds * 1e3:.3f} ms (median of {len(runs)}"
        text += f", {min(runs) * 1e3:.3f}-{max(runs) * 1e3:.3f} ms)" if len(runs) > 1 else ")"
        noise = self.timing_noise()
        return text + (f"; NOISY: {noise}, so this time is not compared (rerun it on a quiet machine)" if noise
                       else "")

    def __str__(self) -> str:
        width = max(len(k) for k, _ in self.summary_rows())
        lines = [f"trace_lab report: {self.name}"]
        lines += [f"  {k.ljust(width)}  {v}" for k, v in self.summary_rows()]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Report {self.name!r}: {len(self.programs)} programs, ok={self.ok}>"

    def stage_access(self, label: str, kind: str, position: int, k: int) -> str:
        """The Python expression that gives stage ``k`` of part ``label`` of this report (shown in views)."""
        return f"report.traces({kind!r}, {position})[{k}]"

    def summary_extra_html(self) -> str:
        """More HTML under the summary table (a multi-process report adds its timeline)."""
        return ""

    def _repr_html_(self) -> str:
        from .html import report_html

        return report_html(self)

    def save_html(self, path) -> str:
        """Write a standalone HTML report (opens offline) and return its path."""
        from .html import standalone_page

        with open(path, "w", encoding="utf-8") as f:
            f.write(standalone_page(self))
        return str(path)

    def save_json(self, path) -> str:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2)
        return str(path)

