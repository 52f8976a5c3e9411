"""Measured communication: how long compute really stalls at each wait, against calibrated transfers.

Why not the profiler's kernel lanes: an NCCL kernel launched before its peer's
spins until the peer launches the matching kernel, so its duration counts
waiting, not transfer, and the "communication" lane can exceed the step. The
figures here do not count spinning:

* **stall per wait** (exposed communication): while a :class:`WaitStallRecorder`
  is active, the runtime's wait hook
  (:func:`trace_lab.runtime.wait_hook.set_wait_hook`) brackets every
  ``wait_tensor`` it runs. CUDA: an event on the current stream right before
  and right after the wait; the stream reaches the first when its earlier
  compute is done and the second when the collective is done as well, so the
  elapsed time is the time the compute stream stood still. CPU (gloo, a
  blocking wait): wall time around the wait. Each stall is attributed to the
  kind of the collective it waits for (all_gather / reduce_scatter / all_reduce).
* **intrinsic time per collective** (:func:`calibrate`): after the measured
  steps, each distinct collective that was waited for (kind, input shape,
  dtype, group) is replayed alone: barrier, device synchronize, then issue +
  wait timed the same way; median of ``reps`` per rank, then the minimum over
  ranks (the last rank to arrive does not wait for a peer). On CUDA the replay
  is queued behind a short sleep kernel (``torch.cuda._sleep``), so the stream
  reaches the first event only after the host has issued the collective: the
  bracket holds the collective's device time, not the host's launch latency
  (which a wait inside a step never sees, because there the host runs ahead).
* **hidden fraction** = ``1 - sum(stalls) / sum(intrinsic)`` over the executed
  waits of a kind (all-gathers) or of all collectives, clamped to [0, 1].
* **without waiting for a peer** (``total_min_over_ranks``): a rank's stall at a wait
  also counts the time its peers took to reach the collective (it completes only when
  the last rank has issued it). Per executed wait, the smallest stall over the ranks
  is the one of the rank that arrived last, which waited for the transfer alone: the
  communication not hidden even behind the slowest rank's compute (the step's critical
  path). Measured on 2 x H100 (668a15d, 2026-11-27): rank 0 read 20.7% all-gather hidden where
  rank 1 read 85.8% in the same launch. Every rank computes it (one ``all_gather_object``).

* **where it stays exposed** (``most_exposed``): the waits with the largest stall (each
  wait's least over the ranks where there are several, else this rank's), averaged over
  the measured steps, each with what its collective reads (a parameter shard's name) and
  its intrinsic time: whether the program's first gathers, or one large weight, are what
  is left.

Nothing here is active unless a recorder is entered; programs run unchanged
(and uninstrumented) otherwise.
"""
from __future__ import annotations

import statistics
import time

import torch

from ..capture.session import program_parts

__all__ = ["WaitStallRecorder", "measure_comm", "calibrate", "summarize_stalls", "format_comm", "KINDS",
           "min_over_ranks", "most_exposed"]

KINDS = ("all_gather", "reduce_scatter", "all_reduce")


def _ops():
    c = torch.ops._c10d_functional
    return {"all_gather": c.all_gather_into_tensor.default, "reduce_scatter": c.reduce_scatter_tensor.default,
            "all_reduce": c.all_reduce.default}


def _signature(wait_node):
    """(kind, signature) of the collective a wait node waits for; signature is plain data
    ``(kind, shape, dtype name, trailing args)`` from which the collective can be replayed."""
    c = wait_node.args[0] if wait_node.args else None
    kinds = {v: k for k, v in _ops().items()}
    if getattr(c, "op", None) != "call_function" or c.target not in kinds:
        return "other", None
    val = c.args[0].meta.get("val")
    if not isinstance(val, torch.Tensor):
        return kinds[c.target], None
    tail = tuple(c.args[1:])
    return kinds[c.target], (kinds[c.target], tuple(val.shape), str(val.dtype).replace("torch.", ""), tail)


def _printed_name(trace, node) -> str:
    """``node``'s name as ``trace`` prints it (``t12``, ``layers_0_attn_wqkv_weight_shard``)."""
    return trace.name(node) if hasattr(trace, "name") else node.name


def _collective_reads(trace, wait_node) -> str | None:
    """What the collective a wait node waits for reads, as ``trace`` prints it (a parameter shard's input), or
    None."""
    c = wait_node.args[0] if wait_node.args else None
    source = c.args[0] if getattr(c, "op", None) == "call_function" and c.args else None
    return _printed_name(trace, source) if isinstance(source, torch.fx.Node) else None


class _Timer:
    """Start/stop marks on the device's timeline: CUDA events on the current stream, or wall time."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a


class WaitStallRecorder:
    """Context manager: record every wait a program runs (see the module docstring)."""

    def __init__(self, device, label=None):
        self.device = torch.device(device)
        self.timer = _Timer(self.device)
        self.label = label or (lambda trace: (None, trace.kind))
        self.step = 0
        self._raw: list[tuple] = []
        self._spans: list[tuple] = []
        self._open: dict[int, object] = {}
        self._old = None

    # -- the hook the runtime calls --------------------------------------------------------
    def enter(self, trace):
        self._open[id(trace)] = self.timer.mark()

    def exit(self, trace):
        start = self._open.pop(id(trace), None)
        if start is not None:
            self._spans.append((trace, self.step, start, self.timer.mark()))

    def wait(self, trace, node, fn, args, kwargs):
        a = self.timer.mark()
        out = fn(*args, **kwargs)
        self._raw.append((trace, node, self.step, a, self.timer.mark()))
        return out

    # -- use ------------------------------------------------------------------------------
    def __enter__(self):
        from ..runtime.wait_hook import set_wait_hook

        self._old = set_wait_hook(self)
        return self

    def __exit__(self, *exc):
        from ..runtime.wait_hook import set_wait_hook

        set_wait_hook(self._old)
        return False

    def resolve(self) -> tuple[list[dict], list[dict]]:
        """(one dict per executed wait, one per program run) in seconds; synchronizes the device."""
        if self.timer.cuda:
            torch.cuda.synchronize(self.device)
        waits = []
        for trace, node, step, a, b in self._raw:
            kind, sig = _signature(node)
            program, part = self.label(trace)
            waits.append({"program": program, "part": part, "step": step, "wait": node.name, "collective": kind,
                          "line": _printed_name(trace, node),
                          "reads": _collective_reads(trace, node), "signature": sig,
                          "stall_seconds": max(0.0, self.timer.seconds(a, b))})
        spans = []
        for trace, step, a, b in self._spans:
            program, part = self.label(trace)
            spans.append({"program": program, "part": part, "step": step, "seconds": self.timer.seconds(a, b)})
        return waits, spans


# ~0.5 ms at 2 GHz: longer than issuing one collective from Python, short against a step
_LAUNCH_COVER_CYCLES = 1_000_000


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def calibrate(signatures, device, reps: int = 5, warmup: int = 1) -> dict:
    """Intrinsic seconds of each collective signature, replayed alone (see the module docstring).

    Every rank of the process group must call it; the signature sets are merged across
    ranks so that every rank replays the same collectives in the same order.
    """
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    from ..runtime.measure import synchronize

    device = torch.device(device)
    sigs = set(signatures)
    if dist.is_initialized() and dist.get_world_size() > 1:
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, sorted(sigs, key=repr))
        sigs = {s for lst in gathered for s in lst}
    order = sorted(sigs, key=repr)
    ops, wait = _ops(), torch.ops._c10d_functional.wait_tensor.default
    timer = _Timer(device)
    medians = []
    for kind, shape, dtype, tail in order:
        group = _resolve_process_group(tail[-1])
        barrier = {"device_ids": [torch.cuda.current_device()]} if device.type == "cuda" else {}
        inp = torch.zeros(shape, dtype=_dtype(dtype), device=device)
        samples = []
        for r in range(warmup + reps):
            dist.barrier(group=group, **barrier)
            synchronize(device)
            if device.type == "cuda":
                torch.cuda._sleep(_LAUNCH_COVER_CYCLES)  # the host issues the collective while this runs
            a = timer.mark()
            out = wait(ops[kind](inp, *tail))
            b = timer.mark()
            synchronize(device)
            if r >= warmup:
                samples.append(timer.seconds(a, b))
            del out
        medians.append(statistics.median(samples))
    if not order:
        return {}
    t = torch.tensor(medians, dtype=torch.float64, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return dict(zip(order, t.tolist()))


def _fraction(stall: float, intrinsic: float):
    if intrinsic <= 0:
        return None
    return min(1.0, max(0.0, 1.0 - stall / intrinsic))


def _totals(waits: list[dict], intrinsic: dict, steps: int) -> dict:
    stall = {k: 0.0 for k in KINDS}
    intr = {k: 0.0 for k in KINDS}
    count = {k: 0 for k in KINDS}
    for w in waits:
        k = w["collective"]
        if k not in stall:
            continue
        count[k] += 1
        stall[k] += w["stall_seconds"]
        intr[k] += intrinsic.get(w["signature"], 0.0)
    per = max(steps, 1)
    all_stall, all_intr = sum(stall.values()), sum(intr.values())
    return {
        "waits": len(waits), "waits_by_kind": count,
        "stall_seconds": {k: v / per for k, v in stall.items()},
        "intrinsic_seconds": {k: v / per for k, v in intr.items()},
        "exposed_comm_seconds": all_stall / per,
        "intrinsic_comm_seconds": all_intr / per,
        "all_gather_hidden_fraction": _fraction(stall["all_gather"], intr["all_gather"]),
        "hidden_fraction": _fraction(all_stall, all_intr),
    }


MOST_EXPOSED = 5  # waits summarize_stalls lists by stall


def most_exposed(waits: list[dict], intrinsic: dict, steps: int, n: int = MOST_EXPOSED) -> list[dict]:
    """The ``n`` waits (program, part, wait) with the largest stall per step (mean over ``steps``), largest first:
    each with its line's name in the printed trace, its collective, what that reads, and its intrinsic seconds;
    waits that never stalled are left out."""
    per: dict[tuple, dict] = {}
    for w in waits:
        key = (w["program"], w["part"], w["wait"])
        entry = per.setdefault(key, {"program": w["program"], "part": w["part"], "wait": w["wait"],
                                     "line": w.get("line", w["wait"]), "collective": w["collective"],
                                     "reads": w.get("reads"), "stall_seconds": 0.0,
                                     "intrinsic_seconds": intrinsic.get(w.get("signature"), None)})
        entry["stall_seconds"] += w["stall_seconds"] / max(steps, 1)
    ranked = sorted((e for e in per.values() if e["stall_seconds"] > 0), key=lambda e: -e["stall_seconds"])
    return ranked[:n]


def min_over_ranks(rank_waits: list[list[dict]]) -> list[dict] | None:
    """Each rank's executed waits (in order) -> the first rank's waits with, per wait, the smallest stall over the
    ranks (module docstring); None when the ranks did not execute the same waits."""
    keys = [[(w["step"], w["part"], w["wait"]) for w in ws] for ws in rank_waits]
    if not keys or any(k != keys[0] for k in keys[1:]):
        return None
    return [dict(w, stall_seconds=min(ws[i]["stall_seconds"] for ws in rank_waits))
            for i, w in enumerate(rank_waits[0])]


def _peer_free_waits(waits: list[dict]) -> list[dict] | None:
    """:func:`min_over_ranks` over this process group's ranks (every rank must call it); None with one rank."""
    import torch.distributed as dist

    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return None
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, [{k: w[k] for k in ("step", "part", "wait", "stall_seconds")} for w in waits])
    return min_over_ranks([waits, *gathered])  # this rank's own waits first: they keep their signatures


def summarize_stalls(waits: list[dict], spans: list[dict], intrinsic: dict, steps: int,
                     iter_seconds: float | None = None, peer_free: list[dict] | None = None) -> dict:
    """Per program part and per step: stalls, intrinsic times, exposed comm and hidden fractions; with
    ``peer_free`` (:func:`min_over_ranks`'s waits) also ``total_min_over_ranks``."""
    parts = []
    keys = list(dict.fromkeys((w["program"], w["part"]) for w in waits + spans))
    for program, part in keys:
        mine = [w for w in waits if (w["program"], w["part"]) == (program, part)]
        span = [s["seconds"] for s in spans if (s["program"], s["part"]) == (program, part)]
        parts.append({"program": program, "kind": part, **_totals(mine, intrinsic, steps),
                      "span_seconds": sum(span) / max(steps, 1) if span else None})
    calibration = []
    for sig, seconds in sorted(intrinsic.items(), key=lambda kv: repr(kv[0])):
        kind, shape, dtype, tail = sig
        calibration.append({"collective": kind, "shape": list(shape), "dtype": dtype, "args": list(map(str, tail)),
                            "seconds": seconds, "executed": sum(1 for w in waits if w["signature"] == sig)})
    return {"method": "measured: stall at each wait vs calibrated collectives",
            "steps": steps, "iter_seconds": iter_seconds, "parts": parts,
            "total": _totals(waits, intrinsic, steps),
            "total_min_over_ranks": _totals(peer_free, intrinsic, steps) if peer_free is not None else None,
            "most_exposed": most_exposed(peer_free if peer_free is not None else waits, intrinsic, steps),
            "calibration": calibration,
            "waits": [{k: v for k, v in w.items() if k != "signature"} for w in waits]}


def measure_comm(step, device, *, jfn=None, steps: int = 2, reps: int = 5, iter_seconds: float | None = None) -> dict:
    """Run ``step()`` ``steps`` times with every wait instrumented, then calibrate the collectives.

    Every rank must call it (the calibration is collective). ``jfn`` (a JitFunction)
    names the program parts; ``iter_seconds`` (uninstrumented, measured by the caller)
    is carried into the result. Returns :func:`summarize_stalls`'s plain data, plus the
    instrumented steps' own times (``instrumented_step_seconds``).
    """
    from ..runtime.measure import synchronize

    device = torch.device(device)
    rec = WaitStallRecorder(device, label=_part_labels(jfn))
    times = []
    synchronize(device)
    with rec:
        for i in range(steps):
            rec.step = i
            a = rec.timer.mark()
            step()
            b = rec.timer.mark()
            synchronize(device)
            times.append(rec.timer.seconds(a, b))
    waits, spans = rec.resolve()
    intrinsic = calibrate({w["signature"] for w in waits if w["signature"] is not None}, device, reps)
    out = summarize_stalls(waits, spans, intrinsic, steps, iter_seconds, peer_free=_peer_free_waits(waits))
    out["instrumented_step_seconds"] = times
    return out


def _part_labels(jfn):
    """trace -> (program index, part kind), from the final stage of each compiled part."""
    def label(trace):
        for _, p, part in program_parts(jfn):
            if part.traces[-1] is trace:
                return p.index, part.kind
        return None, trace.kind

    return label


def _ms(x) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def format_comm(comm: dict) -> str:
    """Text table of a :func:`measure_comm` result: one row per program part and the step total."""
    head = ("program", "waits", "span ms", "exposed ms", "AG stall ms", "AG intrinsic ms", "comm intrinsic ms",
            "hidden", "AG hidden")
    rows = [head]
    for p in comm["parts"] + [dict(comm["total"], program=None, kind="step total", span_seconds=comm.get(
            "iter_seconds"))]:
        name = f"#{p['program']} {p['kind']}" if p.get("program") is not None else str(p["kind"])
        rows.append((name + (" (measured)" if p["kind"] != "step total" else ""), str(p["waits"]),
                     _ms(p.get("span_seconds")), _ms(p["exposed_comm_seconds"]),
                     _ms(p["stall_seconds"]["all_gather"]), _ms(p["intrinsic_seconds"]["all_gather"]),
                     _ms(p["intrinsic_comm_seconds"]), _pct(p["hidden_fraction"]),
                     _pct(p["all_gather_hidden_fraction"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
