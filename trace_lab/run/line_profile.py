"""Measured time per trace line and region (issue 17 item 1, data and export).

``trace_lab.profile_lines(jfn, *args)`` runs one more call of a jitted function (and
its backward when an output requires grad; ``repeat=N``: N calls, each line's median) under
``torch.profiler``, started up first by an untimed call of the same function in the same session
(:data:`WARMUP_LABEL`), with every
compiled program swapped for its instrumented twin (:meth:`GeneratedProgram.instrumented`:
the same generated code with each line inside a ``record_function`` range named
``'<kind> #<program> L<index> <value> = <op>'``: the program index keeps the identical lines of two
programs of a graph break apart, which the profiler, summing ranges by name, added together). Per line it reads the host time of the range (the
Python and dispatch time of launching the line's op or region) and, on CUDA, the device
time of the kernels launched inside it; per source line of the user's code it sums them.
The programs' fast ``run`` is put back afterwards. A function compiled with
``cuda_graphs=True`` replays graphs, which have no lines: its profile has no per-line times, only
the call on the host lane and its kernels on the device lane (the gaps CUDA graphs remove).

``LineProfile.export_chrome_trace(path)`` writes the profiler's Chrome/Perfetto trace,
whose host lane carries the line ranges and whose device lane the kernels; ``spans`` keeps the
same two lanes as plain data (the Timeline view draws them: a host-bound call shows gaps on the
device lane).

The lines do not cover the whole call: Dynamo's guards, AOTAutograd's wrappers, the autograd engine and
the profiler's own ranges run between them. ``coverage`` is the lines' host time over the profiled call's
(``call_us``); below :data:`LOW_COVERAGE` the profile says so in ``note`` (on a program of 1-2 ms the
lines were about half of the call).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import torch

from ..capture.session import program_parts
from ..errors import TraceLabError
from ..runtime.codegen import line_label
from ..runtime.measure import profiler_stderr

__all__ = ["profile_lines", "LineProfile", "LineTime", "line_cost"]


@dataclass(frozen=True)
class LineTime:
    program: int
    kind: str
    index: int
    label: str
    source: str | None
    host_us: float
    device_us: float
    region: bool = False  # a fused region's call (one line of the final trace), not a single op
    # with more than one profiled call: (fastest, slowest) of the line's host / device times over the calls
    host_range: tuple | None = None
    device_range: tuple | None = None


CALL_LABEL = "trace_lab call"  # the profiled call's own range (the host lane of a replayed CUDA graph)
# What runs under the profiler before the timed call, in this range: the call itself once, untimed, with the
# programs' plain runs, then one op and, on CUDA, one kernel per device, waited for. The profiler's start-up (its
# first range, CUPTI's first kernel record) otherwise lands on the call's first line, every call: on the H100 that
# line read ~2,440 us host beside a 112 us kernel (2026-11-28). And each op's first run after the profiler starts
# is slow (its code and data are cold; running the same op warms it, another op or a meta tensor does not): with
# only the op and kernel above, the first sin, mul and add of notebook 06's tiny_chain read 3-5x the median line
# on this CPU and on the H200, in every call (2026-11-28, session 28).
WARMUP_LABEL = "trace_lab profiler warm-up"
# The profiler keeps its records in blocks, and starting a block costs a line ~5x the median line: the same line
# of every call, since every call records the same events (tiny_chain's L11 on this CPU; it moved with the number
# of ranges recorded before the call, 2026-11-28). With ``repeat=N`` call i records i x PAD_RANGES empty ranges
# in its warm-up first, so that cost lands on other lines in other calls and the median leaves it out.
PAD_RANGES = 37
MAX_SPANS = 4000  # per lane kept for the Timeline view (a long program's call is cut, and says so)
LOW_COVERAGE = 0.8  # lines' host time / the call's below this: the note says how much of the call they are


@dataclass
class LineProfile:
    lines: list[LineTime] = field(default_factory=list)
    device: str = "cpu"
    _profiler: object = None
    # one call on two lanes: ("host", line label, start us, duration us) for every line's range and
    # ("device", kernel name, start us, duration us) for every kernel; times from the call's first event
    spans: list = field(default_factory=list)
    spans_cut: int = 0  # spans left out past MAX_SPANS per lane
    note: str = ""  # why the lines are not timed (a replayed CUDA graph), or that they are a small part of the call
    call_us: float = 0.0  # the profiled call's host time (forward and backward, everything around the lines)
    coverage: float | None = None  # the lines' host time / call_us
    calls: int = 1  # profiled calls: with more than one, each line's times are their medians over the calls

    def by_source(self) -> list[tuple[str, float, float]]:
        """(source line, host us, device us) summed over the trace lines it produced, longest first: by the longer
        of the two times (:func:`line_cost`)."""
        sums: dict[str, list[float]] = {}
        for ln in self.lines:
            s = sums.setdefault(ln.source or "(no source line)", [0.0, 0.0])
            s[0] += ln.host_us
            s[1] += ln.device_us
        return sorted(((k, h, d) for k, (h, d) in sums.items()), key=lambda r: -line_cost(r[1], r[2]))

    def export_chrome_trace(self, path) -> str:
        self._profiler.export_chrome_trace(str(path))
        return str(path)

    def to_dict(self) -> dict:
        return {"device": self.device, "lines": [asdict(ln) for ln in self.lines],
                "spans": [list(sp) for sp in self.spans], "spans_cut": self.spans_cut, "note": self.note,
                "call_us": self.call_us, "coverage": self.coverage, "calls": self.calls}

    def __str__(self) -> str:
        rows = sorted(self.lines, key=lambda ln: -line_cost(ln.host_us, ln.device_us))[:20]
        of = f"median of {self.calls} calls; " if self.calls > 1 else ""
        out = [f"time per trace line ({of}{self.device}; host = launching it, device = its kernels), "
               "longest first (the longer of the two):"]
        if self.note:
            out.insert(0, f"note: {self.note}")
        elif self.coverage is not None:
            out.append(f"  (the lines are {100 * self.coverage:.0f}% of the call's {self.call_us:,.1f} us on the host)")
        out += [f"  {ln.host_us:9.1f} us host  {ln.device_us:9.1f} us device  {ln.label}" for ln in rows]
        out.append("per source line:")
        out += [f"  {h:9.1f} us host  {d:9.1f} us device  {src}" for src, h, d in self.by_source()[:10]]
        return "\n".join(out)


def line_cost(host_us: float, device_us: float) -> float:
    """What a line costs the call: launching it or running its kernels, whichever is longer (a host-bound line's
    kernels all take about the same, so ranking by device time alone would order such lines at random)."""
    return max(host_us, device_us)


def _warm_up(cuda_devices, call, pad: int = 0) -> None:
    """Pay the profiler's start-up before the timed call (see :data:`WARMUP_LABEL`): ``call()`` once (the same
    ops on the same devices), then one op, and on each CUDA device one kernel, waited for; then ``pad`` empty
    ranges (:data:`PAD_RANGES`)."""
    with torch.profiler.record_function(WARMUP_LABEL):
        call()
        for _ in range(pad):
            with torch.profiler.record_function(WARMUP_LABEL):
                pass
        torch.zeros(1).add_(1)
        for device in cuda_devices:
            torch.zeros(1, device=device).add_(1)
            torch.cuda.synchronize(device)


def _spans(prof, labels: set[str]) -> tuple[list, int]:
    """The host lane (the line ranges) and the device lane (the kernels) of the profiled call, in us from
    its first event; at most :data:`MAX_SPANS` per lane (and how many were left out). The warm-up's kernels ran
    before the call started and are left out."""
    events = list(prof.profiler.kineto_results.events())
    call_start = min((ev.start_ns() for ev in events if ev.name() == CALL_LABEL
                      and ev.device_type() != torch.autograd.DeviceType.CUDA), default=None)
    host, device = [], []
    for ev in events:
        name = ev.name()
        on_device = ev.device_type() == torch.autograd.DeviceType.CUDA
        if name in labels and on_device:
            continue  # the GPU's copy of a line's annotation (same name): not a kernel, and not the host range
        if name in labels:
            host.append(("host", name, ev.start_ns() / 1e3, ev.duration_ns() / 1e3))
        elif on_device and ev.duration_ns() > 0 and (call_start is None or ev.start_ns() >= call_start):
            device.append(("device", name, ev.start_ns() / 1e3, ev.duration_ns() / 1e3))
    spans = sorted(host, key=lambda s: s[2])
    spans += sorted(device, key=lambda s: s[2])
    if not spans:
        return [], 0
    t0 = min(s[2] for s in spans)
    cut = max(0, len(host) - MAX_SPANS) + max(0, len(device) - MAX_SPANS)
    kept = [s for lane in ("host", "device") for s in [x for x in spans if x[0] == lane][:MAX_SPANS]]
    return [(lane, name, round(start - t0, 3), round(dur, 3)) for lane, name, start, dur in kept], cut


def _source(trace, node) -> str | None:
    from ..ir.printer import source_line

    if node.op == "call_module":
        inner = [n for n in trace.gm.get_submodule(node.target).graph.nodes if n.op == "call_function"]
        return next((s for s in map(source_line, inner) if s), None)
    return source_line(node)


def _call(jfn, args, kwargs, loss):
    from .loss import default_loss

    out = jfn(*args, **kwargs)
    scalar = (loss or default_loss)(out)
    if scalar is not None and scalar.requires_grad:
        scalar.backward()
    return out


def profile_lines(jfn, *args, loss=None, kwargs: dict | None = None, repeat: int = 1) -> LineProfile:
    """Host (and device) time of every line of the programs one call of ``jfn(*args)`` runs; a first call
    compiles them when none has yet (that call is not profiled). Each profiled call follows an untimed call in
    the same profiler session (:data:`WARMUP_LABEL`), so ``jfn`` runs twice per profiled call: its side effects
    (an optimizer's step, accumulated gradients) happen twice. ``repeat=N`` profiles N calls, each under
    its own profiler, and gives every line the median of its N host and N device times, so one call that
    another process or a stray allocation slowed does not decide a line's figure; the spans (Timeline) and
    ``export_chrome_trace`` are those of the call whose lines' total is the median."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise TraceLabError(f"profile_lines: repeat must be a whole number of calls, 1 or more (got {repeat!r})")
    kwargs = dict(kwargs or {})
    if not jfn.programs:
        _call(jfn, args, kwargs, loss)
    if repeat == 1:
        return _profile_one_call(jfn, args, kwargs, loss)
    return _median_of([_profile_one_call(jfn, args, kwargs, loss, pad=i * PAD_RANGES) for i in range(repeat)])


def _median_of(calls: list[LineProfile]) -> LineProfile:
    """One profile of ``len(calls)`` calls: each line's median host and device time over the calls (a line
    some call lacks keeps the calls that have it) and their range, the call time's median; the spans and the
    profiler of the call whose lines' total is the median."""
    from statistics import median

    totals = sorted(range(len(calls)),
                    key=lambda i: sum(line_cost(ln.host_us, ln.device_us) for ln in calls[i].lines))
    result = calls[totals[len(totals) // 2]]
    times: dict[str, list[LineTime]] = {}  # by label: it names the program, the kind and the line
    for call in calls:
        for ln in call.lines:
            times.setdefault(ln.label, []).append(ln)

    def spread(values) -> tuple:
        values = [float(v) for v in values]
        return (min(values), max(values))

    result.lines = [replace(ln, host_us=float(median(t.host_us for t in times[ln.label])),
                            device_us=float(median(t.device_us for t in times[ln.label])),
                            host_range=spread(t.host_us for t in times[ln.label]),
                            device_range=spread(t.device_us for t in times[ln.label])) for ln in result.lines]
    result.call_us = float(median(c.call_us for c in calls))
    result.calls = len(calls)
    if result.lines:  # (a replayed CUDA graph has no lines: its note stays)
        _set_coverage(result)
    return result


def _profile_one_call(jfn, args, kwargs, loss, pad: int = 0) -> LineProfile:
    """One call under ``torch.profiler`` with the instrumented programs swapped in (see the module doc)."""
    parts = [part for _, _, part in program_parts(jfn)]
    if not parts:
        raise TraceLabError("profile_lines: the function ran no tensor program to profile")
    twins = []  # (compiled program, its fast run, its instrumented twin)
    graphs = any(getattr(getattr(part, "compiled", None), "graphs", None) is not None for part in parts)
    for _, program, part in program_parts(jfn):
        compiled = getattr(part, "compiled", None)
        generated = getattr(compiled, "generated", None)
        if generated is not None and not graphs:
            twins.append((compiled, compiled.run, generated.instrumented(program.index)))
    cuda_devices = {part.traces[-1].device for part in parts if part.traces[-1].device.type == "cuda"}
    cuda = bool(cuda_devices)
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    try:
        # kineto's USDT lines on fd 2 (torch 2.13: one per profiler start and stop) are not the cell's output
        with profiler_stderr(), torch.profiler.profile(activities=activities) as prof:
            _warm_up(cuda_devices, lambda: _call(jfn, args, kwargs, loss), pad)  # the fast runs: no line ranges
            for compiled, _, twin in twins:
                compiled.run = twin
            with torch.profiler.record_function(CALL_LABEL):
                _call(jfn, args, kwargs, loss)
                if cuda:
                    torch.cuda.synchronize()
    finally:
        for compiled, run, _ in twins:
            compiled.run = run
    events = {}
    for e in prof.key_averages():
        # On CUDA a range appears twice under its name: the host range (its CPU time, and the device time of the
        # kernels launched inside it) and the GPU's copy of the annotation (device_type CUDA, no CPU time). Read
        # the host range; the GPU copy only where no host range was kept (it overwrote the host time with 0).
        on_host = getattr(e, "device_type", torch.autograd.DeviceType.CPU) == torch.autograd.DeviceType.CPU
        if not on_host and e.key in events:
            continue
        events[e.key] = (e.cpu_time_total if on_host else 0.0,
                         getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0.0)))
    result = LineProfile(device="cuda" if cuda else "cpu", _profiler=prof)
    labels = {line_label(part.traces[-1], i, n, program.index) for _, program, part in program_parts(jfn)
              for i, n in enumerate(part.traces[-1].ops)}
    result.spans, result.spans_cut = _spans(prof, labels if not graphs else {CALL_LABEL})
    if graphs:  # a replayed graph has no lines: the call on the host lane, its kernels on the device lane
        result.note = ("CUDA graphs replayed (cuda_graphs=True): the lines have no ranges of their own; the host "
                       "lane is the whole call, the device lane its kernels")
        return result
    for _, program, part in program_parts(jfn):
        trace = part.traces[-1]
        for index, node in enumerate(trace.ops):
            label = line_label(trace, index, node, program.index)
            if label in events:
                host, device = events[label]
                result.lines.append(LineTime(program.index, trace.kind, index, label, _source(trace, node),
                                             float(host), float(device), region=node.op == "call_module"))
    result.call_us = float(events.get(CALL_LABEL, (0.0, 0.0))[0])
    _set_coverage(result)
    return result


def _set_coverage(result: LineProfile) -> None:
    """The lines' share of the call's host time, and the note that says so when it is low."""
    result.coverage, result.note = None, ""
    if result.call_us > 0 and result.lines:
        result.coverage = sum(ln.host_us for ln in result.lines) / result.call_us
        if result.coverage < LOW_COVERAGE:
            result.note = (f"the lines' host time is {100 * result.coverage:.0f}% of the profiled call "
                           f"({result.call_us / 1e3:,.3f} ms): the rest runs between them (Dynamo's guards, "
                           "AOTAutograd's wrappers, the autograd engine, the profiler's own ranges); a short "
                           "program's lines are a small part of its call")
