#!/usr/bin/env python3
"""Benchmark of issues 4 and 14: eager, torch.compile (+ reduce-overhead), trace_lab, Thunder; medians of
repeated runs, each configuration run in its own process.

    python benchmarks/bench.py llama  [--layers 8] [--repeat 3] [--jobs 2]   # first iteration, steady, peak
    python benchmarks/bench.py memory                                     # memory_peak_efficient_func: peak
    python benchmarks/bench.py adam                                       # Adam.step: step and compile time
    python benchmarks/bench.py run --benches llama memory adam            # several in one result file
    python benchmarks/bench.py list                                       # configuration names, defaults
    python benchmarks/bench.py report [FILE...] [--print]                 # BENCHMARKS.md's generated section

Configurations (``--configs``): ``eager``, ``torch.compile``, ``reduce-overhead``
(``torch.compile(mode="reduce-overhead")``, CUDA only), ``thunder``, ``default`` (``trace_lab.jit(fn)``
with no options) and ``STRATEGY-EXECUTOR[-SUFFIX...]`` for trace_lab, e.g. ``dataflow-nvfuser``,
``memory-inductor``, ``dataflow-inductor-graphs`` (``cuda_graphs=True``); suffixes ``graphs``, ``nocache``
(``fusion_cache=False``), ``inplace`` / ``noinplace`` (``donate_inplace``), ``nodonate`` (``donate_inputs=False``),
``noalign`` (``align_layer_saves=False``), ``nocover`` (``cover_regions=False``), ``nobatch`` (``batch_updates=False``), ``capN`` (``max_region_ops=N``, e.g. ``horizontal-nvfuser-cap70``).
Configurations that need CUDA
are skipped with the reason on a machine without it.

Every configuration runs ``--repeat`` times (default 3), each run a fresh process (cold caches: Inductor's
and Triton's caches point to an empty directory per run, nvFuser starts empty) under ``--timeout``; runs
go round by round (every configuration once, then again), so drift spreads evenly. ``--jobs N`` runs N
processes at a time: with several GPUs each process gets its own; on one GPU the timed phase (steady state
and peak) holds a lock and stops the other runs' process groups until it ends (a host-bound step timed
while other runs compile on the same CPUs measured up to 2.2x slower), so only compilation overlaps. Steady state: median of timed iterations (CUDA
events; host time until the step returns beside it); peak: ``max_memory_allocated`` above the allocation
before the iteration (+ the CUDA graphs' pools for trace_lab ``-graphs`` rows). Tables show the median and
the range over runs; ratios are of medians within one result file. ``--budget S`` starts no run that would
end after S seconds (its wall in this call's previous round, else in the newest earlier result file of this device
kind), so a command under a time limit keeps its file; at its start the run prints a forecast (those earlier walls
replayed in round order on ``--jobs`` slots) beside the budget, so a plan that cannot fit says so first.
``--resume FILE`` continues such a file in a later command on the same machine (its GPUs' UUIDs, recorded in the
file) at the same commit: its runs stay, the runs it lacks toward ``--repeat`` run, and the file (same name, under
``--out``) stays one run's side-by-side ratios. Any other machine or commit is refused.

Results: ``benchmarks/results/<date>-<device>-<commit>-<benches>.json`` (rewritten after every run) and
``...-log.txt`` (this output). Every row records the commit (+ dirty flag), GPU, host CPU, torch / nvFuser
/ Thunder versions and the time it ran.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
BENCHMARKS_MD = ROOT / "BENCHMARKS.md"
sys.path.insert(0, str(ROOT / "benchmarks"))
SCHEMA = 2
BEGIN, END = "<!-- bench.py report: begin -->", "<!-- bench.py report: end -->"

PEERS = ("eager", "torch.compile", "reduce-overhead", "thunder")
EXECUTORS = ("nvfuser", "inductor", "eager", "auto")
STRATEGY_NAMES = ("none", "dataflow", "horizontal", "memory", "layers", "whole")
DEFAULT_CONFIGS = {
    # layers-inductor: the best Inductor strategy in its last run (0.98x torch.compile, H200, b7657cd); the
    # "best strategy" targets read every strategy a run has
    "llama": ["eager", "torch.compile", "reduce-overhead", "thunder", "default", "dataflow-nvfuser",
              "dataflow-inductor", "layers-inductor", "memory-nvfuser", "dataflow-nvfuser-graphs",
              "dataflow-inductor-graphs"],
    "memory": ["eager", "torch.compile", "thunder", "default", "memory-nvfuser", "memory-inductor"],
    "adam": ["eager", "torch.compile", "thunder", "dataflow-nvfuser", "dataflow-inductor"],
}
# Adam's horizontal region is capped where its updates are not batched (``nobatch``): uncapped, the 200
# parameters' 7,000 ops form one region whose nvFuser compile ran past 70 s (one kernel per update); 350 ops =
# 10 parameters per region, one signature. Batched (batch_updates, the default), the one region is one stacked
# definition; capped, each of its 20 regions paid the stacking and copying back on its own.
ADAM_HORIZONTAL = {"max_region_ops": 350}
# configuration-name suffixes -> (option, value)
SUFFIXES = {"graphs": ("cuda_graphs", True), "nocache": ("cache", False),
            "inplace": ("donate_inplace", True), "noinplace": ("donate_inplace", False),
            "nodonate": ("donate_inputs", False), "noalign": ("align_layer_saves", False),
            "nocover": ("cover_regions", False), "nobatch": ("batch_updates", False)}


# ------------------------------------------------------------------------------------------
# configurations
# ------------------------------------------------------------------------------------------
def parse_config(name: str) -> dict:
    """A configuration name -> {'name', 'system', 'strategy', 'executor', 'cuda_graphs', 'cache'}."""
    if name in PEERS:
        return {"name": name, "system": name}
    if name == "default":
        return {"name": name, "system": "trace_lab", "strategy": None, "executor": None}
    parts = name.split("-")
    caps = [p for p in parts[2:] if p.startswith("cap") and p[3:].isdigit() and int(p[3:]) > 0]
    if len(parts) < 2 or parts[0] not in STRATEGY_NAMES or parts[1] not in EXECUTORS \
            or not set(parts[2:]) - set(caps) <= set(SUFFIXES) or len(caps) > 1:
        raise ValueError(f"unknown configuration {name!r}: use one of {', '.join(PEERS)}, default, or "
                         f"STRATEGY-EXECUTOR[-SUFFIX...] (strategies {', '.join(STRATEGY_NAMES)}; "
                         f"executors {', '.join(EXECUTORS)}; suffixes {', '.join(SUFFIXES)}, capN)")
    extra = {SUFFIXES[p][0]: SUFFIXES[p][1] for p in parts[2:]
             if p in SUFFIXES and SUFFIXES[p][0] not in ("cuda_graphs", "cache")}
    if caps:  # capN: max_region_ops=N (a horizontal region of at most N ops)
        extra["max_region_ops"] = int(caps[0][3:])
    return {"name": name, "system": "trace_lab", "strategy": parts[0], "executor": parts[1],
            "cuda_graphs": "graphs" in parts[2:], "cache": "nocache" not in parts[2:], **({"extra": extra} if extra else {})}


def needs_cuda(cfg: dict) -> str | None:
    """Why this configuration cannot run without CUDA (None: it can)."""
    if cfg["system"] == "reduce-overhead":
        return "torch.compile(mode='reduce-overhead') records CUDA graphs"
    if cfg.get("cuda_graphs"):
        return "cuda_graphs=True needs a CUDA device"
    if cfg.get("executor") == "nvfuser":
        return "the nvFuser executor needs a CUDA device"
    if cfg["system"] == "thunder":
        return "Thunder's row is measured on the GPU machine"
    return None


def config_of_row(r: dict) -> str:
    """The configuration name of a result row, also for rows written before names existed (schema 1:
    system / strategy / extra / cache, executor nvFuser)."""
    if r.get("config") or r.get("name"):
        return r.get("config") or r["name"]
    if r["system"] != "trace_lab":
        return r["system"]
    extra = r.get("extra") or {}
    name = f"{r['strategy']}-{r.get('executor', 'nvfuser')}" + ("-graphs" if extra.get("cuda_graphs") else "")
    return name + ("" if r.get("cache", True) else "-nocache")


def label(name: str) -> str:
    cfg = parse_config(name)
    if cfg["system"] == "reduce-overhead":
        return 'torch.compile(mode="reduce-overhead")'
    if cfg["system"] != "trace_lab":
        return name
    if cfg["strategy"] is None:
        return "trace_lab default options"
    extra = cfg.get("extra") or {}
    return (f"trace_lab {cfg['strategy']} + {cfg['executor']}" + (" cuda_graphs" if cfg["cuda_graphs"] else "")
            + ("" if cfg["cache"] else " cache off") + (" in-place donation" if extra.get("donate_inplace") else "")
            + (" in-place donation off" if extra.get("donate_inplace") is False else "")
            + (f" max_region_ops={extra['max_region_ops']}" if "max_region_ops" in extra else "")
            + (" donation off" if extra.get("donate_inputs") is False else "")
            + (" saves unaligned" if extra.get("align_layer_saves") is False else "")
            + (" covers off" if extra.get("cover_regions") is False else ""))


# ------------------------------------------------------------------------------------------
# one configuration run (child process)
# ------------------------------------------------------------------------------------------
class _Device:
    def __init__(self, kind: str):
        import torch

        self.torch, self.kind = torch, kind

    def sync(self):
        if self.kind == "cuda":
            self.torch.cuda.synchronize()

    def time(self, fn, iters: int) -> tuple[list[float], list[float] | None]:
        """(host ms, device ms or None) of each call: host until ``fn`` returns, device from CUDA events."""
        torch = self.torch
        host, dev = [], ([] if self.kind == "cuda" else None)
        for _ in range(iters):
            self.sync()
            if self.kind == "cuda":
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
            t0 = time.perf_counter()
            fn()
            host.append((time.perf_counter() - t0) * 1e3)
            if self.kind == "cuda":
                e.record()
                e.synchronize()
                dev.append(s.elapsed_time(e))
        return host, dev

    def peak_mib(self, fn) -> float | None:
        """Peak allocation above the allocation before one call of ``fn`` (CUDA); None on CPU."""
        if self.kind != "cuda":
            fn()
            return None
        torch = self.torch
        self.sync()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn()
        self.sync()
        return (torch.cuda.max_memory_allocated() - before) / 2 ** 20


class _gpu_lock:
    """Held around the timed phase when several runs share one machine (``--jobs``): BENCH_LOCK names the
    lock file. The holder also stops the other runs (``SIGSTOP`` to each process group listed in
    BENCH_PIDS, their compile workers included) until its timed phase ends, so a host-bound step is not
    timed while other processes compile on the same CPUs; the parent resumes them if a holder dies."""

    @staticmethod
    @contextlib.contextmanager
    def waiting():
        import fcntl

        with open(os.environ["BENCH_LOCK"], "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            fcntl.flock(f, fcntl.LOCK_UN)
        yield

    def __enter__(self):
        self.f, self.stopped = None, []
        path = os.environ.get("BENCH_LOCK")
        if path:
            import fcntl

            self.f = open(path, "a+")
            fcntl.flock(self.f, fcntl.LOCK_EX)
            self.stopped = _signal_others(signal.SIGSTOP)
            self.stopped_at = time.monotonic()
        return self

    def __exit__(self, *exc):
        if self.f is not None:
            import fcntl

            _signal_groups(self.stopped, signal.SIGCONT)
            _log_pause(self.stopped_at, time.monotonic(), self.stopped)
            fcntl.flock(self.f, fcntl.LOCK_UN)
            self.f.close()


_PAUSES = ".pauses"  # in the BENCH_PIDS folder: one line per timed phase, "start end pgid pgid ..."


def _log_pause(start: float, end: float, pgids) -> None:
    folder = os.environ.get("BENCH_PIDS")
    if folder and pgids:
        with open(os.path.join(folder, _PAUSES), "a") as f:
            f.write(f"{start} {end} {' '.join(map(str, pgids))}\n")


def paused_seconds(start: float, end: float, pgid: int | None = None, folder: str | None = None) -> float:
    """How long this run (process group ``pgid``: default, the caller's) was stopped by other runs' timed phases
    between two ``time.monotonic()`` readings (CLOCK_MONOTONIC is one clock for every process of the machine):
    first-iteration times exclude it, and so does a run's ``--timeout``."""
    folder = folder or os.environ.get("BENCH_PIDS")
    path = os.path.join(folder, _PAUSES) if folder else None
    if not path or not os.path.exists(path):
        return 0.0
    own, total = (os.getpgid(0) if pgid is None else pgid), 0.0
    with open(path) as f:
        for line in f:
            a, b, *groups = line.split()
            if str(own) in groups:
                total += max(0.0, min(end, float(b)) - max(start, float(a)))
    return total


def _signal_groups(pgids, sig) -> list:
    done = []
    for pgid in pgids:
        try:
            os.killpg(pgid, sig)
            done.append(pgid)
        except (ProcessLookupError, PermissionError):
            pass
    return done


def _resume_if_unlocked(lock_path: str) -> None:
    """A run ended: if no run is in its timed phase (the lock is free; a dead holder's lock is released by
    the kernel), resume every listed run, in case the one that ended stopped them and died timing."""
    import fcntl

    with open(lock_path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a live holder resumes them when its timed phase ends
        try:
            _signal_others(signal.SIGCONT)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _signal_others(sig) -> list:
    """Send ``sig`` to the process group of every other run listed in the BENCH_PIDS folder."""
    folder = os.environ.get("BENCH_PIDS")
    if not folder or not os.path.isdir(folder):
        return []
    own = os.getpgid(0)
    return _signal_groups([int(n) for n in os.listdir(folder) if n.isdigit() and int(n) != own], sig)


_THUNDER_PEERS: list = []


class _ThunderPeer:
    """``thunder.jit(fn)``; where that cannot trace the function (lightning-thunder 0.2.6 fails
    on ``Adam.step``), Thunder through Dynamo (``torch.compile(backend=ThunderCompiler())``),
    the other front end it ships. ``frontend`` says which ran; the failed attempt's seconds
    are kept apart so the first-iteration time is the front end's that ran."""

    def __init__(self, fn):
        import thunder

        self.fn, self.impl, self.frontend, self.failed_seconds = fn, thunder.jit(fn), "thunder.jit", 0.0
        _THUNDER_PEERS.append(self)

    def __call__(self, *args):
        if self.frontend != "thunder.jit" or self.failed_seconds:
            return self.impl(*args)
        t0 = time.perf_counter()
        try:
            return self.impl(*args)
        except Exception as e:  # noqa: BLE001 - any tracing failure: try Thunder's other front end
            import torch
            from thunder.dynamo import ThunderCompiler

            self.failed_seconds = time.perf_counter() - t0
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            self.frontend = f"ThunderCompiler (thunder.jit failed: {type(e).__name__}: {first})"
            self.impl = torch.compile(self.fn, backend=ThunderCompiler())
            return self.impl(*args)


def _made(res: dict, cfg: dict, fn, bench: str):
    """:func:`_compile`, its seconds kept as ``construct_s``: what making the compiled callable took before the
    first iteration's clock starts (torch.compile(fn) imports Inductor's compile path there; a trace_lab jit whose
    regions Inductor compiles does the same since 2026-11-29). The first iteration's figure leaves it out for every
    configuration alike; the JSON keeps it so that a reader can add it."""
    started = time.perf_counter()
    made = _compile(cfg, fn, bench)
    res["construct_s"] = round(time.perf_counter() - started, 3)
    return made


def _compile(cfg: dict, fn, bench: str):
    """(compiled callable, stats callable) for one configuration."""
    import torch

    system = cfg["system"]
    if system == "eager":
        return fn, lambda: {}
    if system == "torch.compile":
        return torch.compile(fn), lambda: {}
    if system == "reduce-overhead":
        c = torch.compile(fn, mode="reduce-overhead")

        def step(*args):  # each call is a new step: the graphs may reuse the previous step's outputs
            torch.compiler.cudagraph_mark_step_begin()
            return c(*args)

        return step, lambda: {}
    if system == "thunder":
        return _ThunderPeer(fn), lambda: {}
    import trace_lab

    if cfg["strategy"] is None:
        jfn = trace_lab.jit(fn)  # the default options, whatever they are at this commit
    else:
        strategy, extra = cfg["strategy"], {}
        if strategy == "whole":
            from tests.nvfuser_support import whole_program_region
            from trace_lab.passes import PASSES

            PASSES["fusion"], strategy = whole_program_region, "dataflow"
        if bench == "adam" and strategy == "horizontal" and (cfg.get("extra") or {}).get("batch_updates") is False:
            extra.update(ADAM_HORIZONTAL)
        if cfg.get("cuda_graphs"):
            extra["cuda_graphs"] = True
        extra.update(cfg.get("extra") or {})  # configurations written by other scripts (nvfuser_probe.py)
        jfn = trace_lab.jit(fn, fusion=strategy, executor=cfg.get("executor", "nvfuser"),
                            fusion_cache=cfg.get("cache", True), **extra)

    def stats():
        try:
            return _trace_lab_stats(jfn)
        except Exception as e:  # noqa: BLE001 - a runtime refactor must not cost the row its times
            return {"stats_error": f"{type(e).__name__}: {e}"[:300]}

    return jfn, stats


def _trace_lab_stats(jfn) -> dict:
    if True:
        regions = [r for p in jfn.programs for part in p.parts if part.compiled
                   for r in part.compiled.region_table()]
        segs = [s for r in regions for s in (r.get("segments") or [])]
        executors = {getattr(part.compiled, "executor", None) for p in jfn.programs for part in p.parts if part.compiled}
        ex = next((jfn._executors[e] for e in executors if e in getattr(jfn, "_executors", {})), None)
        return {"options": jfn.options.to_dict(), "executors": sorted(e for e in executors if e),
                "regions": len(regions), "segments": len(segs),
                "definitions_built": getattr(ex, "misses", None), "definitions_reused": getattr(ex, "hits", None),
                "fallbacks": sum(1 for s in segs if "fallback" in s),
                **_graph_stats(jfn),
                "nvfuser_compile_s": round(sum(s.get("compile_seconds", 0.0) for s in segs), 3),
                "region_compile_s": round(sum(r.get("compile_seconds", 0.0) for r in regions), 3),
                "executor_reasons": getattr(jfn, "executor_reasons", None)}


def _graph_stats(jfn) -> dict:
    """cuda_graphs rows: recordings, replays, un-graphed calls and the graphs' memory pools."""
    graphs = jfn.graphed_runs() if hasattr(jfn, "graphed_runs") else []
    if not graphs:
        return {}
    return {"graph_recordings": sum(g.recordings for g in graphs), "graph_replays": sum(g.replays for g in graphs),
            "graph_ungraphed_calls": sum(g.ungraphed for g in graphs),
            "graph_pool_mib": round(sum(g.pool_bytes for g in graphs) / 2 ** 20, 2),
            "graph_notes": [n for g in graphs for n in g.notes][:3]}


def _check(res: dict, got, eager, which: str = "first") -> None:
    """Record whether a step matched eager PyTorch (outputs, gradients, updated values): the first step
    (compilation's), then the last timed one (a replay, with graphs); ``matches_eager`` needs both."""
    from trace_lab.run import compare

    cmp = compare.compare_runs(got, eager)
    res["matches_eager"] = cmp.ok and res.get("matches_eager", True)
    res[f"matches_eager_{which}_step"] = cmp.ok
    if not cmp.ok:
        res[f"mismatch_{which}_step"] = cmp.problems[:3]


def run_one(cfg: dict) -> dict:
    """One configuration run: first iteration (compile), check vs eager, steady state, peak."""
    import torch

    from _placement import current_cpu, placement
    from _results import environment
    from trace_lab.run import compare

    sys.path.insert(0, str(ROOT))
    from examples import workloads

    dev = _Device(cfg.get("device", "cuda"))
    res = dict(cfg)
    res["env"] = environment(with_gpu=dev.kind == "cuda")
    size, bench, iters = cfg.get("size", "full"), cfg["bench"], cfg["iters"]
    first_step = None
    if bench == "llama":
        make = workloads.make_llama(cfg["layers"])
        model, (x,) = make(dev.kind, size)
        compiled, stats = _made(res, cfg, model, bench)

        def step(keep=False):
            out = compiled(x)
            out.float().sum().backward()
            snap = compare.snapshot(out, model, (x,)) if keep else None
            model.zero_grad(set_to_none=True)
            return snap

        def eager_snapshot():
            ref, (xr,) = make(dev.kind, size)  # same seed: eager's step
            out = ref(xr)
            out.float().sum().backward()
            return compare.snapshot(out, ref, (xr,))

        first_step, timed_step, last_step = (lambda: step(keep=True)), step, (lambda: step(keep=True))
        eager_first = eager_last = eager_snapshot  # no optimizer: every step computes the same
        warmup = 2
    elif bench == "adam":
        fn, args = workloads.make_adam_step(dev.kind, size)
        compiled, stats = _made(res, cfg, fn, bench)
        ref_fn, ref_args = workloads.make_adam_step(dev.kind, size)

        def first_step():
            compiled(*args)
            return compare.snapshot(None, fn, args)

        def eager_first():
            ref_fn(*ref_args)
            return compare.snapshot(None, ref_fn, ref_args)

        timed_step = (lambda: compiled(*args))

        def last_step():
            return compare.snapshot(None, fn, args)

        def eager_last():  # eager takes as many steps as the compiled step did
            for _ in range(res["_steps"] - 1):
                ref_fn(*ref_args)
            return compare.snapshot(None, ref_fn, ref_args)

        warmup = 1
    elif bench == "memory":
        fn, (t0s, a) = workloads.make_memory_peak(dev.kind, size)
        compiled, stats = _made(res, cfg, fn, bench)

        def first_step():
            return compare.snapshot(compiled(t0s, a), fn, (t0s, a))

        def eager_first():
            return compare.snapshot(fn(t0s, a), fn, (t0s, a))

        timed_step = (lambda: compiled(t0s, a))
        last_step, eager_last = first_step, eager_first
        warmup = 1
    else:
        raise ValueError(bench)

    dev.sync()
    t0, m0 = time.perf_counter(), time.monotonic()
    got = first_step()
    dev.sync()
    paused = paused_seconds(m0, time.monotonic())  # stopped while another run timed its steps (--jobs)
    res["first_iter_s"] = time.perf_counter() - t0 - paused
    res["paused_s"] = round(paused, 3)
    _check(res, got, eager_first())
    del got
    reserved0 = torch.cuda.memory_reserved() if dev.kind == "cuda" else None
    with _gpu_lock():  # several runs on one GPU (--jobs): only one is in its timed phase
        for _ in range(warmup):
            timed_step()
        res["placement"] = placement(dev.kind == "cuda")  # where this process times its steps (_placement.py)
        host, device = dev.time(timed_step, iters)
        res["placement"]["cpu_after"] = current_cpu()
        if bench == "memory":  # the peak of a call whose result is dropped: what eager's reference keeps counts
            res["peak_mib"] = dev.peak_mib(timed_step)
        elif bench in ("llama", "adam"):  # adam: what a step allocates on top of its state (batched stacks)
            res["peak_mib"] = dev.peak_mib(timed_step)
        else:
            res["peak_mib"] = None
        res["_steps"] = 1 + warmup + iters + (1 if bench in ("llama", "adam") else 0)
        _check(res, last_step(), eager_last(), "last")
    res.pop("_steps")
    times = device if device is not None else host
    res["steady_ms"] = statistics.median(times)
    res["host_ms"] = statistics.median(host)
    res["device_ms"] = statistics.median(device) if device is not None else None
    res["iter_ms"] = [round(t, 4) for t in times]
    res["compile_s"] = max(0.0, res["first_iter_s"] - res["steady_ms"] / 1e3)
    res["stats"] = stats()
    if res["stats"].get("graph_pool_mib") is not None and res.get("peak_mib") is not None:
        # a replay allocates nothing: the graphs' pools, reserved when they were recorded, are the memory
        res["peak_mib"] += res["stats"]["graph_pool_mib"]
    if cfg["system"] == "reduce-overhead" and reserved0 is not None:
        # its graphs' pools are not visible to max_memory_allocated either: what the allocator reserved
        # while recording (an upper bound: it includes cached blocks)
        res["stats"]["reserved_growth_mib"] = round((torch.cuda.memory_reserved() - reserved0) / 2 ** 20, 2)
    if cfg["system"] == "thunder":
        peer = _THUNDER_PEERS[-1]
        res["frontend"] = peer.frontend
        if peer.failed_seconds:
            res["first_iter_s"] -= peer.failed_seconds
            res["compile_s"] = max(0.0, res["first_iter_s"] - res["steady_ms"] / 1e3)
    res["ok"] = True
    return res


# ------------------------------------------------------------------------------------------
# the driver (parent process)
# ------------------------------------------------------------------------------------------
def _gpus() -> list[str]:
    """Names of the visible GPUs, from nvidia-smi (no CUDA context in the parent), else torch."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
        names = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
        vis = os.environ.get("CUDA_VISIBLE_DEVICES")
        if names and vis not in (None, ""):
            names = [names[int(i)] for i in vis.split(",") if i.strip().isdigit() and int(i) < len(names)]
        if names:
            return names
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    import torch

    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def _slug(device: str) -> str:
    """The device part of this bench's result names (``_results.device_slug``)."""
    from _results import device_slug

    return device_slug(device)


def machine_id() -> str:
    """What tells one machine from another of its kind: its GPUs' UUIDs (nvidia-smi), else the host's name. A
    result file continued by ``--resume`` must come from the same machine, so its ratios stay side by side."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
        uuids = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
        if uuids:
            return ",".join(uuids)
    except (OSError, subprocess.SubprocessError):
        pass
    import socket

    return "host:" + socket.gethostname()


def _budget_skip(row: dict) -> bool:
    return str(row.get("skipped") or "").startswith("time budget")


def resumable(result: dict, benches: list[str], git: dict, device: str, machine: str) -> str | None:
    """Why an earlier result file cannot be continued here (None: it can). Its runs must be of the same benches,
    commit, device and machine (:func:`machine_id`): then the runs added now are as side by side with its runs as
    its own rounds were (a warm machine between two calls of one session), and ratios stay within one file."""
    meta = result.get("meta") or {}
    if result.get("kind") != "bench" or result.get("schema") != SCHEMA:
        return f"not a bench result file of schema {SCHEMA}"
    checks = (("benches", result.get("benches"), benches), ("commit", meta.get("commit"), git.get("commit")),
              ("dirty flag", meta.get("dirty"), git.get("dirty")), ("device", result.get("device"), device),
              ("machine", meta.get("machine"), machine))
    for what, then, now in checks:
        if then != now:
            return f"its {what} was {then!r}, here it is {now!r}"
    return None


def remaining_tasks(todo: list[dict], rows: list[dict], repeat: int) -> list[tuple[int, dict]]:
    """(repeat index, configuration) of the runs still to do, round by round: each configuration's runs in
    ``rows`` (ran, failed or timed out; not the skipped ones) count toward ``repeat``."""
    have: dict[tuple, int] = {}
    for r in rows:
        if not r.get("skipped"):
            have[run_key(r)] = have.get(run_key(r), 0) + 1
    return [(rep, cfg) for rep in range(repeat) for cfg in todo if rep >= have.get(run_key(cfg), 0)]


def plan(benches: list[str], configs: list[str] | None, layers: list[int], skip: list[str], device: str,
         iters: int, size: str) -> tuple[list[dict], list[dict]]:
    """(configuration runs to do, rows for configurations skipped with a reason)."""
    todo, skipped = [], []
    for bench in benches:
        names = [n for n in (configs or DEFAULT_CONFIGS[bench]) if n not in skip]
        for n in (layers if bench == "llama" else [None]):
            for name in names:
                cfg = {**parse_config(name), "bench": bench, "device": device, "size": size,
                       "iters": iters * 2 if bench == "adam" else iters}
                if n is not None:
                    cfg["layers"] = n
                why = needs_cuda(cfg) if device != "cuda" else None
                (skipped.append({**cfg, "ok": False, "skipped": why}) if why else todo.append(cfg))
    return todo, skipped


class _Tee:
    def __init__(self, path: Path):
        self.f = open(path, "a", buffering=1)

    def __call__(self, msg: str):
        print(msg, flush=True)
        self.f.write(msg + "\n")


def run(args) -> Path:
    from _results import git_commit

    gpus = _gpus() if args.device in ("auto", "cuda") else []
    device = "cuda" if gpus else "cpu"
    if args.device == "cuda" and not gpus:
        raise SystemExit("--device cuda: no GPU visible")
    size = args.size or ("full" if device == "cuda" else "small")
    iters = args.iters or (10 if args.quick else 30)
    git = git_commit(str(ROOT))
    todo, skipped = plan(args.benches, args.configs, args.layers, args.skip, device, iters, size)
    devname = gpus[0] if gpus else "cpu"
    machine = machine_id()
    now = datetime.datetime.now()
    tag = args.tag or "-".join(b + ("".join(map(str, args.layers)) if b == "llama" else "") for b in args.benches)
    stem = f"{now.date().isoformat()}-{_slug(devname)}-{git['commit'] or 'nogit'}{'-dirty' if git['dirty'] else ''}-{tag}"
    args.out.mkdir(parents=True, exist_ok=True)
    resumed = None
    if args.resume:  # continue an earlier file of this machine: its runs stay, the missing ones run now
        try:
            resumed = json.loads(args.resume.read_text())
        except (OSError, ValueError) as e:
            raise SystemExit(f"--resume {args.resume}: cannot read it ({e})")
        why = resumable(resumed, args.benches, git, devname, machine) if isinstance(resumed, dict) else "not a dict"
        if why:
            raise SystemExit(f"--resume {args.resume}: cannot continue it here: {why}. Its ratios would mix "
                             "machines or code; start a new file (leave out --resume)")
        stem = args.resume.stem
        old_log = args.resume.with_name(f"{stem}-log.txt")
        if old_log.is_file() and old_log.resolve() != (args.out / old_log.name).resolve():
            shutil.copyfile(old_log, args.out / old_log.name)
    path, log = args.out / f"{stem}.json", _Tee(args.out / f"{stem}-log.txt")
    if resumed is not None:
        result = resumed
        result["rows"] = [r for r in resumed["rows"] if not _budget_skip(r)]
        known = {run_key(r) for r in result["rows"]}
        result["rows"] += [r for r in skipped if run_key(r) not in known]
        result["meta"].setdefault("resumed", []).append({"at": now.isoformat(timespec="seconds"),
                                                         "command": " ".join(sys.argv)})
        result["meta"]["repeat"] = max(args.repeat, result["meta"].get("repeat") or 0)
        result["complete"] = False
        tasks = remaining_tasks(todo, result["rows"], args.repeat)
        log(f"bench.py: resuming {args.resume.name} ({sum(1 for r in result['rows'] if not r.get('skipped'))} runs "
            f"kept, measured from {resumed.get('measured_at')}, same machine and commit)")
    else:
        result = {"schema": SCHEMA, "kind": "bench", "benches": args.benches, "date": now.date().isoformat(),
                  "measured_at": now.isoformat(timespec="seconds"), "device": devname,
                  "meta": {**git, "gpus": gpus, "machine": machine, "repeat": args.repeat, "jobs": args.jobs,
                           "size": size, "iters": iters, "layers": args.layers, "quick": args.quick,
                           "timeout_s": args.timeout, "budget_s": args.budget, "command": " ".join(sys.argv)},
                  "complete": False, "rows": list(skipped)}
        tasks = [(rep, cfg) for rep in range(args.repeat) for cfg in todo]  # round by round
    for r in skipped:
        r.update(git)
    log(f"bench.py: {len(todo)} configurations x {args.repeat} runs = {len(tasks)} processes on {devname} "
        f"({size} size, {iters} timed iterations, {args.jobs} at a time), commit {git['commit']}"
        f"{' (dirty)' if git['dirty'] else ''}; skipped: {len(skipped)}")
    for r in skipped:
        log(f"  skip {r['bench']} {r['name']}: {r['skipped']}")
    walls = earlier_walls([RESULTS, args.out], _slug(devname))
    log(forecast([cfg for _, cfg in tasks], walls, args.jobs, args.budget, where=_slug(devname)))
    limits = run_timeouts(todo, walls, args.timeout)
    for (bench_name, layers, name), limit in sorted(limits.items(), key=str):
        if limit > args.timeout:
            log(f"  timeout {bench_name} {name}: {limit:.0f} s (twice its earlier run's {limit / 2:.0f} s on this "
                f"device kind; --timeout {args.timeout:.0f} s)")
    lock = threading.Lock()
    slots: queue.Queue = queue.Queue()
    for k in range(max(1, args.jobs)):
        slots.put(k)
    started_at = time.monotonic()
    last_wall: dict[tuple, float] = {}
    done = [0]

    def save():
        result["targets"] = targets(aggregate(result["rows"]))
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(path)

    def one(i_task):
        i, (rep, cfg) = i_task
        key = run_key(cfg)
        elapsed = time.monotonic() - started_at
        expected = run_estimate(key, last_wall, walls)
        if args.budget and elapsed + expected > args.budget:
            r = {**cfg, **git, "repeat": rep, "ok": False,
                 "skipped": f"time budget ({args.budget:.0f} s; a run takes about {expected:.0f} s, {elapsed:.0f} s "
                            "gone)"}
        else:
            slot = slots.get()  # a free slot: with several GPUs, the GPU no other running process uses
            try:
                r = _spawn({**cfg, **git, "repeat": rep}, limits[key], slot, len(gpus), args.jobs)
            finally:
                slots.put(slot)
            last_wall[key] = r["wall_s"]
        with lock:
            result["rows"].append(r)
            done[0] += 1
            save()
            log(_progress(done[0], len(tasks), r, time.monotonic() - started_at))

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, enumerate(tasks)))
    result["complete"] = True
    save()
    log("")
    log(format_tables([(path.name, result)]))
    log(f"saved {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} (+ {path.stem}-log.txt); "
        f"BENCHMARKS.md: python benchmarks/bench.py report")
    return path


_PIDS_DIR = tempfile.mkdtemp(prefix="trace_lab-bench-pids-")


def _spawn(cfg: dict, timeout: float, slot: int, n_gpus: int, jobs: int) -> dict:
    started = time.perf_counter()
    cache = tempfile.mkdtemp(prefix="bench-cache-")
    env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1", PYTHONUNBUFFERED="1",
               TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=os.path.join(cache, "triton"))
    if n_gpus > 1:  # one GPU per slot
        vis = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = vis.split(",") if vis else [str(i) for i in range(n_gpus)]
        env["CUDA_VISIBLE_DEVICES"] = ids[slot % n_gpus]
    if jobs > 1:
        gpu = env.get("CUDA_VISIBLE_DEVICES", "0") if n_gpus > 1 else "0"
        env["BENCH_LOCK"] = os.path.join(tempfile.gettempdir(), f"trace_lab-bench-{os.getuid()}-gpu{gpu}.lock")
        if n_gpus <= 1:  # one GPU: the runs share the host too; the timed phase stops the others
            env["BENCH_PIDS"] = _PIDS_DIR
    pids = env.get("BENCH_PIDS")
    proc = subprocess.Popen([sys.executable, __file__, "_one", json.dumps(cfg)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, start_new_session=True)
    marker = os.path.join(pids, str(proc.pid)) if pids else None
    if marker:
        open(marker, "w").close()
    begun = time.monotonic()
    try:
        while True:  # the limit counts the run's own time: not while other runs' timed phases stopped it
            try:
                out, err = proc.communicate(timeout=5.0)
                break
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if now - begun - paused_seconds(begun, now, proc.pid, pids) > timeout:
                    raise
        line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        r = json.loads(line[-1][7:]) if line else dict(cfg, ok=False, error=_error_summary(err or out))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        paused = paused_seconds(begun, time.monotonic(), proc.pid, pids)
        r = dict(cfg, ok=False, error=f"timed out after {timeout:.0f} s" + (f" (+ {paused:.0f} s stopped by other "
                                                                             "runs' timed phases)" if paused else ""))
    finally:
        if marker:
            os.remove(marker)
            _resume_if_unlocked(env["BENCH_LOCK"])
        shutil.rmtree(cache, ignore_errors=True)
    r["wall_s"] = round(time.perf_counter() - started, 1)
    return r


def _progress(done: int, total: int, r: dict, elapsed: float) -> str:
    what = f"[{done:3d}/{total}] {elapsed:6.0f} s  run {r.get('repeat', 0) + 1} {r['bench']}" \
           + (f"{r['layers']}L" if r.get("layers") else "") + f" {r['name']:26s}"
    if r.get("ok"):
        peak = f"  peak {r['peak_mib']:.1f} MiB" if r.get("peak_mib") is not None else ""
        host = f" (host {r['host_ms']:.2f})" if r.get("device_ms") is not None else ""
        match = "" if r.get("matches_eager") else "  DIFFERS FROM EAGER"
        p = r.get("placement") or {}
        where = f"  cpu {p['cpu']}->{p.get('cpu_after')}" if p.get("cpu") is not None else ""
        if where and p.get("gpu_numa_node") is not None:
            where += f" (node {p.get('cpu_numa_node')}, GPU's {p['gpu_numa_node']})"
        return f"{what} first {r['first_iter_s']:.2f} s  steady {r['steady_ms']:.3f} ms{host}{peak}" \
               f"  [{r['wall_s']:.0f} s]{where}{match}"
    return f"{what} {'skipped: ' + r['skipped'] if r.get('skipped') else 'FAILED: ' + str(r.get('error'))}"


def _error_summary(text: str) -> str:
    """The exception line of a child's traceback (the last ``SomethingError: ...`` line), else its last lines."""
    lines = text.strip().splitlines()
    exc = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b", ln)]
    return (exc[-1] if exc else " | ".join(lines[-3:]))[-400:]


# ------------------------------------------------------------------------------------------
# aggregation, targets, tables
# ------------------------------------------------------------------------------------------
def _stat(xs: list) -> dict | None:
    xs = [x for x in xs if x is not None]
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)} if xs else None


def aggregate(rows: list[dict]) -> list[dict]:
    """One group per (bench, layers, configuration): medians and ranges over its runs, ratios of medians."""
    groups: dict[tuple, dict] = {}
    for r in rows:
        name = config_of_row(r)
        g = groups.setdefault((r["bench"], r.get("layers"), name),
                              {"bench": r["bench"], "layers": r.get("layers"), "config": name, "runs": []})
        g["runs"].append(r)
    out = []
    for g in groups.values():
        ok = [r for r in g["runs"] if r.get("ok")]
        g["n"], g["n_ok"] = len(g["runs"]), len(ok)
        g["skipped"] = next((r["skipped"] for r in g["runs"] if r.get("skipped")), None)
        g["errors"] = [r["error"] for r in g["runs"] if r.get("error")]
        for k in ("steady_ms", "host_ms", "device_ms", "first_iter_s", "compile_s", "peak_mib", "construct_s"):
            g[k] = _stat([r.get(k) for r in ok])
        g["nvfuser_compile_s"] = _stat([(r.get("stats") or {}).get("nvfuser_compile_s") for r in ok])
        g["matches_eager"] = all(r.get("matches_eager") for r in ok) if ok else None
        g["stats"] = (ok[0].get("stats") or {}) if ok else {}
        g["frontend"] = ok[0].get("frontend") if ok else None
        del g["runs"]
        out.append(g)
    order = {n: i for i, n in enumerate((*PEERS, "default"))}
    out.sort(key=lambda g: (g["bench"], g["layers"] or 0, order.get(g["config"], len(order))))  # stable otherwise
    for g in out:
        for peer in ("eager", "torch.compile", "reduce-overhead"):
            ref = _group(out, g["bench"], g["layers"], peer)
            g[f"vs_{peer}"] = (g["steady_ms"]["median"] / ref["steady_ms"]["median"]
                               if g["steady_ms"] and ref and ref["steady_ms"] else None)
    return out


def _group(groups, bench, layers, config):
    return next((g for g in groups if g["bench"] == bench and g["layers"] == layers and g["config"] == config), None)


def _med(g, key):
    return g[key]["median"] if g and g.get(key) else None


def _target(name: str, value, limit, unit: str, ratio_of: str = "", detail: str = "", among=()) -> dict:
    """met when the median ``value`` <= ``limit``; the detail gives the ratio to the reference. ``among``: the
    groups whose medians the value and limit are. Where one lost runs (failed, not run), a median of fewer runs
    than asked (e.g. one torch.compile run of three) cannot show the target met: it is left unjudged; a miss
    stays a miss, and says how many runs it rests on."""
    if value is None or limit is None:
        return {"target": name, "met": None, "detail": "not measured" + (f" ({detail})" if detail else "")}
    text = f"{_num(value)}{unit} vs limit {_num(limit)}{unit}" + (f" ({ratio_of})" if ratio_of else "")
    met = value <= limit * (1 + 1e-9)
    short = next((g for g in among if g and g["n_ok"] < g["n"]), None)
    runs = f"{_label(short)} has {short['n_ok']} of {short['n']} runs" if short is not None else ""
    if short is not None and met:
        return {"target": name, "met": None, "value": value, "limit": limit,
                "detail": f"not judged ({runs}): {text}"}
    return {"target": name, "met": met, "value": value, "limit": limit,
            "detail": text + (f"; {runs}" if runs else "") + ("" if met or not detail else f"; {detail}")}


def _ratio(a, b) -> float | None:
    return a / b if a is not None and b else None


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"


def _host_note(g) -> str:
    """Where the steady time goes. A step is timed from a synchronised device to the end of its kernels (CUDA
    events), so host time spent before a kernel can start is part of it (a graphed step's input checks come
    before its replay): host-bound where the host's time is at least 80% of the step, device-bound at most 30%,
    otherwise both count."""
    h, d = _med(g, "host_ms"), _med(g, "device_ms")
    if h is None or d is None or d <= 0:
        return ""
    share = h / d
    bound = "host-bound" if share >= 0.8 else "device-bound" if share <= 0.3 else "host and device both count"
    return f"host {_num(h)} ms of the step's {_num(d)} ms ({share:.0%}): {bound}"


def _first_note(g) -> str:
    nv = _med(g, "nvfuser_compile_s")
    return f"nvFuser compiling {_num(nv)} s of it" if nv else ""


def as_run(g) -> dict:
    """The configuration a group ran: its name's, except ``default``, which is named by what its run resolved to
    (``stats``: the one executor its programs used, and the strategy ``fusion="auto"`` chose), so that the default
    options compete for "best <executor> strategy" with the configurations named after the same choice."""
    cfg = dict(parse_config(g["config"]))
    stats = g.get("stats") or {}
    if g["config"] == "default":
        executors = stats.get("executors") or []
        if len(executors) == 1:
            cfg["executor"] = executors[0]
        for why in stats.get("executor_reasons") or []:
            m = re.match(r"fusion auto: (\w+) on", why)
            if m:
                cfg["strategy"] = m.group(1)
    return cfg


def _label(g) -> str:
    cfg = as_run(g)
    if g["config"] == "default" and cfg.get("strategy") and cfg.get("executor"):
        return f"default ({cfg['strategy']}-{cfg['executor']})"
    return g["config"]


def targets(groups: list[dict]) -> list[dict]:
    """Issue 27's targets (issue 14's where 27 names none), each met or missed by its median; ratios of medians
    within one file."""
    out = []
    tl = [g for g in groups if g["n_ok"] and parse_config(g["config"])["system"] == "trace_lab"]
    llama_layers = sorted({g["layers"] for g in groups if g["bench"] == "llama" and g["layers"]})
    if llama_layers:
        L = llama_layers[-1]
        # ablation rows (an option set off or on by a suffix: inplace, nodonate, ...) are shown, not targets
        rows = [g for g in tl if g["bench"] == "llama" and g["layers"] == L and not parse_config(g["config"]).get("extra")]
        tc, ro, eager = (_group(groups, "llama", L, c) for c in ("torch.compile", "reduce-overhead", "eager"))
        plain = [g for g in rows if not parse_config(g["config"]).get("cuda_graphs")]
        for ex, lim in (("inductor", 1.1), ("nvfuser", 1.2)):
            cands = [g for g in plain if as_run(g).get("executor") == ex]
            best = min(cands, key=lambda g: _med(g, "steady_ms"), default=None)
            out.append(_target(f"llama {L}L steady, no graphs: best {ex} strategy <= {lim}x torch.compile",
                               _med(best, "steady_ms"), _med(tc, "steady_ms") and lim * _med(tc, "steady_ms"), " ms",
                               f"{_label(best)}: {_ratio(_med(best, 'steady_ms'), _med(tc, 'steady_ms')):.2f}x"
                               if best and _med(tc, "steady_ms") else "", _host_note(best), among=(best, tc)))
        worst = max(plain, key=lambda g: _med(g, "steady_ms"), default=None)
        out.append(_target(f"llama {L}L steady: no strategy slower than eager", _med(worst, "steady_ms"),
                           _med(eager, "steady_ms"), " ms",
                           f"slowest {worst['config']}: {worst['vs_eager']:.2f}x eager" if worst and worst["vs_eager"]
                           else "", _host_note(worst), among=(worst, eager)))
        for g in [g for g in rows if parse_config(g["config"]).get("cuda_graphs")]:
            out.append(_target(f"llama {L}L steady, {g['config']}: <= 1.0x reduce-overhead", _med(g, "steady_ms"),
                               _med(ro, "steady_ms"), " ms",
                               f"{g['vs_reduce-overhead']:.2f}x" if g.get("vs_reduce-overhead") else "",
                               _host_note(g), among=(g, ro)))
        d = _group(groups, "llama", L, "default")
        out.append(_target(f"llama {L}L steady, default options: <= 1.05x eager", _med(d, "steady_ms"),
                           _med(eager, "steady_ms") and 1.05 * _med(eager, "steady_ms"), " ms",
                           f"{d['vs_eager']:.2f}x" if d and d.get("vs_eager") else "", _host_note(d), among=(d, eager)))
        for g in [g for g in plain if parse_config(g["config"]).get("strategy") in ("memory", "dataflow")]:
            p, tp = _med(g, "peak_mib"), _med(tc, "peak_mib")
            lim = 1.0 if parse_config(g["config"]).get("strategy") == "memory" else 1.05
            out.append(_target(f"llama {L}L peak above start, {g['config']}: <= {lim}x torch.compile's", p,
                               tp and lim * tp, " MiB", f"{_ratio(p, tp):.2f}x" if p and tp else "", among=(g, tc)))
        for g in plain:
            ex = parse_config(g["config"]).get("executor")
            lim = {"inductor": 0.6, "nvfuser": 0.8}.get(ex)
            if lim is None:
                continue
            f, tf = _med(g, "first_iter_s"), _med(tc, "first_iter_s")
            out.append(_target(f"llama {L}L first iteration, {g['config']}: <= {lim}x torch.compile's", f,
                               tf and lim * tf, " s", f"{f / tf:.2f}x" if f and tf else "", _first_note(g),
                               among=(g, tc)))
    for g in [g for g in tl if g["bench"] == "memory" and parse_config(g["config"]).get("strategy") == "memory"
              and not parse_config(g["config"]).get("cuda_graphs")]:
        out.append(_target(f"memory_peak_efficient_func, {g['config']}: peak stays at eager's 0.75 MiB",
                           _med(g, "peak_mib"), 0.75, " MiB"))
    tc, ro, eager = (_group(groups, "adam", None, c) for c in ("torch.compile", "reduce-overhead", "eager"))
    d = _group(groups, "adam", None, "default")
    if d:
        out.append(_target("Adam.step, default options: <= 1.05x eager", _med(d, "steady_ms"),
                           _med(eager, "steady_ms") and 1.05 * _med(eager, "steady_ms"), " ms",
                           f"{d['vs_eager']:.2f}x" if d.get("vs_eager") else "", _host_note(d), among=(d, eager)))
    for graphs, ref, ref_name in ((False, tc, "torch.compile"), (True, ro, "reduce-overhead")):
        cands = [g for g in tl if g["bench"] == "adam" and as_run(g).get("executor") == "nvfuser"
                 and bool(as_run(g).get("cuda_graphs")) == graphs]
        best = min(cands, key=lambda g: _med(g, "steady_ms"), default=None)
        if best:
            out.append(_target(f"Adam.step, best nvfuser strategy{' with graphs' if graphs else ''}: <= 1.0x "
                               f"{ref_name}", _med(best, "steady_ms"), _med(ref, "steady_ms"), " ms",
                               f"{_label(best)}: {_ratio(_med(best, 'steady_ms'), _med(ref, 'steady_ms')):.2f}x"
                               if _med(ref, "steady_ms") else "", _host_note(best), among=(best, ref)))
    for g in [g for g in tl if g["bench"] == "adam"]:
        c, tcc = _med(g, "compile_s"), _med(tc, "compile_s")
        out.append(_target(f"Adam.step compile, {g['config']}: <= 1/5 of torch.compile's", c, tcc and tcc / 5, " s",
                           f"{c / tcc:.2f}x" if c and tcc else "", _first_note(g), among=(g, tc)))
    return out


def _rng(s, fmt: str) -> str:
    if not s:
        return ""
    if s["n"] == 1 or s["min"] == s["max"]:
        return format(s["median"], fmt)
    return f"{format(s['median'], fmt)} ({format(s['min'], fmt)}–{format(s['max'], fmt)})"


def _x(v) -> str:
    return f"{v:.2f}x" if v is not None else ""


def format_group_table(groups: list[dict], bench: str, layers) -> str:
    lines = ["| config | runs | steady ms | host ms | vs eager | vs torch.compile | vs reduce-overhead "
             "| first iteration s (made before it) | peak above start MiB | definitions built/reused | matches eager |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in [g for g in groups if g["bench"] == bench and g["layers"] == layers]:
        name = label(g["config"]) + (" (ThunderCompiler)" if str(g.get("frontend") or "").startswith("ThunderCompiler")
                                     else "")
        if not g["n_ok"]:
            if g["skipped"] and not g["errors"]:
                lines.append(f"| {name} | - | skipped: {g['skipped']} | | | | | | | | |")
                continue
            why = "failed: " + " ".join((g["errors"] or ["?"])[0].replace("|", "/").split())[:100]
            lines.append(f"| {name} | 0/{g['n']} | {why} | | | | | | | | |")
            continue
        st = g["stats"]
        defs = f"{st.get('definitions_built')}/{st.get('definitions_reused')}" \
            if st.get("definitions_built") is not None else ""
        peak = _rng(g["peak_mib"], ".1f" if (_med(g, "peak_mib") or 0) >= 10 else ".2f")
        if g["config"] == "reduce-overhead" and st.get("reserved_growth_mib") is not None:
            peak = f"{peak} + pools (reserved +{st['reserved_growth_mib']:.0f})"
        if peak and g["stats"].get("graph_pool_mib") is not None:
            peak += " (incl. pools)"
        first = _rng(g["first_iter_s"], ".2f")
        if first and g.get("construct_s"):  # making it (torch.compile(fn), trace_lab.jit(fn)): outside the clock
            first += f"; made in {_med(g, 'construct_s'):.2f}"
        match = {True: "yes", False: "**NO**", None: "not checked"}[g["matches_eager"]]
        n_failed = len(g["errors"] or [])
        failed = (f" ({n_failed} failed)" if n_failed else f" ({g['n'] - g['n_ok']} not run: {g['skipped']})") \
            if g["n_ok"] < g["n"] else ""
        lines.append(f"| {name} | {g['n_ok']}/{g['n']}{failed} | {_rng(g['steady_ms'], '.3f')} "
                     f"| {_rng(g['host_ms'], '.3f') if g['device_ms'] else ''} | {_x(g['vs_eager'])} "
                     f"| {_x(g['vs_torch.compile'])} | {_x(g['vs_reduce-overhead'])} | {first} "
                     f"| {peak} | {defs} | {match} |")
    return "\n".join(lines)


def _load_rows(result: dict) -> list[dict]:
    """Rows of a result file; schema 1 files (before names and repeats) carry one run per configuration."""
    rows = []
    for r in result.get("rows", []):
        r = dict(r)
        r.setdefault("bench", result.get("bench"))
        r["config"] = config_of_row(r)
        r.setdefault("name", r["config"])
        rows.append(r)
    return rows


def format_tables(files: list[tuple[str, dict]]) -> str:
    """Headline tables of result files: per bench (and llama layer count) medians and ranges, then the targets.
    The files are taken in the order they were measured (``measured_at``), whatever order they were given in: a
    target is quoted from the latest file that measured it."""
    out, all_targets = [], []
    files = sorted(files, key=lambda f: str(f[1].get("measured_at") or ""))
    for fname, result in files:
        rows = _load_rows(result)
        groups = aggregate(rows)
        meta = result.get("meta", {})
        env = next((r.get("env") for r in rows if r.get("env")), {}) or {}
        benches = list(dict.fromkeys(r["bench"] for r in rows))
        commit = meta.get("commit") or next((r.get("commit") for r in rows if r.get("commit")), None)
        head = (f"### `{fname}`: {result.get('device')}, measured {result.get('measured_at')}, "
                f"commit {commit or 'not recorded'}{' (dirty)' if meta.get('dirty') else ''}")
        out += [head, ""]
        if result.get("schema", 1) < SCHEMA:
            out += ["One run per configuration (written before `--repeat`): no range, no host time.", ""]
        else:
            out += [f"{meta.get('repeat')} runs per configuration ({meta.get('jobs')} at a time), "
                    f"{meta.get('size')} size, {meta.get('iters')} timed iterations per run; "
                    f"host {env.get('cpu', '?')}; torch {env.get('torch', '?')}, "
                    f"{env.get('nvfuser') or 'no nvFuser'}, {env.get('thunder') or 'no Thunder'}"
                    + ("" if result.get("complete") else "; **incomplete** (stopped before the last run)"), ""]
        for b in benches:
            for n in sorted({g["layers"] for g in groups if g["bench"] == b}, key=lambda v: v or 0):
                out += [f"**{b}**" + (f" ({n} layer{'s' if n > 1 else ''})" if n else "") + (" - " + {
                    "llama": "forward + backward, steady = one step",
                    "memory": "memory_peak_efficient_func",
                    "adam": "Adam.step; first iteration = compile"}[b]), "",
                    format_group_table(groups, b, n), ""]
        all_targets += [dict(t, file=fname) for t in targets(groups)]
    # a target measured in a later file (sorted above by measured_at) is quoted from that file only: the latest run
    # ("measured": a value against a limit, judged or not: a later run that met a target on too few runs is quoted
    # as not judged, not replaced by an older verdict)
    newest = {t["target"]: t["file"] for t in all_targets if t.get("value") is not None}
    all_targets = [t for t in all_targets if newest.get(t["target"], t["file"]) == t["file"]
                   and (t.get("value") is not None or t["target"] not in newest)]
    all_targets = list({t["target"]: t for t in all_targets}.values())
    out += ["### Targets (issue 27): met when the median meets them, in the latest run that measured them; ratios of "
            "medians within one file", "",
            "| target | met | median vs limit (ratio); where the time goes | file |", "|---|---|---|---|"]
    for t in all_targets:
        met = {True: "met", False: "**missed**", None: "n/a"}[t["met"]]
        out.append(f"| {t['target']} | {met} | {t['detail']} | `{t['file']}` |")
    return "\n".join(out)


def earlier_walls(directories: list[Path], device_slug: str) -> dict[tuple, float]:
    """Each configuration's wall seconds per run in the newest earlier result file of this device kind that ran
    it (median over its runs; a run stopped by its limit counts the time it took), keyed like the planned runs:
    (bench, layers, name)."""
    walls: dict[tuple, float] = {}
    files = [(p, d) for directory in directories if directory.is_dir() for p, d in _result_files(directory)
             if p.name[11:].startswith(device_slug + "-")]  # <date>-<device>-...
    for _, d in sorted(files, key=lambda pd: str(pd[1].get("measured_at") or "")):
        runs: dict[tuple, list[float]] = {}
        for r in _load_rows(d):
            if r.get("wall_s") and not r.get("skipped"):
                runs.setdefault(run_key(r), []).append(float(r["wall_s"]))
        walls.update({k: statistics.median(v) for k, v in runs.items()})
    return walls


def run_key(run: dict) -> tuple:
    """(bench, layers, configuration name): what a planned run and a result row have in common."""
    return run.get("bench"), run.get("layers"), run.get("name")


def run_estimate(key: tuple, this_call: dict[tuple, float], earlier: dict[tuple, float]) -> float:
    """Seconds a run of ``key`` is expected to take, for ``--budget``: its last wall in this call, else its wall in
    the newest earlier file of this device kind (:func:`earlier_walls`), else 0 (unknown: it starts). Without the
    earlier wall a first round started every run: on 2026-12-07 (H100) Adam's torch.compile run began 168 s into a
    420 s budget, needed about 300 s, and the call's own limit killed it."""
    return this_call.get(key, earlier.get(key, 0.0))


def run_timeouts(configs: list[dict], walls: dict[tuple, float], timeout: float) -> dict[tuple, float]:
    """Seconds each configuration's run may take: ``--timeout``, or twice the configuration's earlier wall on this
    device kind where that is longer (2026-11-28: two of three torch.compile runs of Adam.step, 162-253 s alone
    before, hit a 300 s limit beside three other runs, and the target had no median of three)."""
    return {run_key(cfg): max(timeout, 2.0 * walls.get(run_key(cfg), 0.0)) for cfg in configs}


def forecast(tasks: list[dict], walls: dict[tuple, float], jobs: int, budget: float | None,
             where: str = "this device") -> str:
    """One line: about how long the planned runs take (``_forecast.makespan`` of the earlier walls in round order
    on ``jobs`` slots), how many runs no earlier file timed, and whether that fits ``--budget``."""
    from _forecast import makespan

    keys = [run_key(t) for t in tasks]
    known = [walls[k] for k in keys if k in walls]
    if not known:
        return f"forecast: no earlier run of these configurations on {where}"
    total = makespan(known, jobs)
    line = (f"forecast: about {total:.0f} s for the {len(known)} runs timed before on {where}"
            + (f" ({len(keys) - len(known)} runs with no earlier time not counted)" if len(known) < len(keys) else ""))
    if budget and total > budget:
        line += (f"; MORE than the budget ({budget:.0f} s): later rounds will be skipped, so fewer configurations "
                 "or --repeat would keep every configuration's repeats")
    elif budget:
        line += f" (budget {budget:.0f} s)"
    return line


def _result_files(directory: Path) -> list[tuple[Path, dict]]:
    found = []
    for p in sorted(directory.glob("*.json")):
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(d, dict) and (d.get("kind") == "bench" or d.get("bench") in DEFAULT_CONFIGS) and d.get("rows"):
            found.append((p, d))
    return found


def latest(directory: Path) -> list[tuple[Path, dict]]:
    """The newest GPU result file for each bench. Once a file of repeated runs (schema 2) exists, only those
    count: single-run files written before ``--repeat`` leave the headline. CPU runs only when named."""
    files = [(p, d) for p, d in _result_files(directory) if d.get("device") not in ("cpu", "no-gpu")]
    if any(d.get("schema", 1) >= SCHEMA for _, d in files):
        files = [(p, d) for p, d in files if d.get("schema", 1) >= SCHEMA]
    chosen: dict[str, tuple[Path, dict]] = {}
    for p, d in sorted(files, key=lambda pd: pd[1].get("measured_at", "")):
        for b in d.get("benches") or [d.get("bench")]:
            chosen[b] = (p, d)
    return list({p: (p, d) for p, d in chosen.values()}.values())


def report(files: list[Path], directory: Path) -> str:
    chosen = [(p, json.loads(p.read_text())) for p in files] if files else latest(directory)
    if not chosen:
        return "No bench result files found in " + str(directory)
    names = {p.name for p, _ in chosen}
    older = sorted(p.name for p in directory.glob("*") if p.is_file() and p.name not in names
                   and not p.name.endswith(".tmp"))
    text = [BEGIN, "<!-- generated by `python benchmarks/bench.py report`; edit outside these markers -->", "",
            "## Latest results", "",
            "Generated from the newest result file of each bench only: " + ", ".join(f"`{n}`" for n in sorted(names))
            + ". Ranges are min–max over the runs; a target is met only when its median meets it.", "",
            format_tables([(p.name, d) for p, d in chosen]), "",
            "## Older result files", "",
            "Kept in `benchmarks/results/`, not in the tables above (`python benchmarks/bench.py report FILE --print` "
            "prints the tables of any bench file):", ""]
    by_day: dict[str, list[str]] = {}
    for n in older:
        by_day.setdefault(n[:10] if re.match(r"\d{4}-\d\d-\d\d", n) else "other", []).append(n)
    text += [f"- {day}: " + ", ".join(f"`{n}`" for n in names) for day, names in by_day.items()]
    text += ["", END]
    return "\n".join(text)


def write_report(section: str, md: Path) -> None:
    old = md.read_text() if md.exists() else ""
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + section + old[old.index(END) + len(END):]
    else:
        new = old.rstrip() + "\n\n" + section + "\n"
    md.write_text(new)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench", choices=["llama", "adam", "memory", "all", "run", "report", "list", "_one"])
    ap.add_argument("rest", nargs="*", help="report: result files (default: the newest per bench); _one: config")
    ap.add_argument("--benches", nargs="+", choices=list(DEFAULT_CONFIGS), default=None, help="with 'run'")
    ap.add_argument("--configs", nargs="+", default=None, help="configuration names (see 'list'; default: each bench's)")
    ap.add_argument("--skip", nargs="*", default=["thunder"], help="configurations to leave out (default: thunder)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per configuration, each a fresh process (default 3)")
    ap.add_argument("--jobs", type=int, default=1, help="processes at a time (one GPU: the timed phase is locked)")
    ap.add_argument("--quick", action="store_true", help="10 timed iterations per run instead of 30")
    ap.add_argument("--iters", type=int, default=None, help="timed iterations per run (overrides --quick)")
    ap.add_argument("--layers", type=int, nargs="+", default=[8])
    ap.add_argument("--size", choices=["full", "small"], default=None, help="workload size (default: full on GPU)")
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds per configuration run (not counting time stopped by other runs' timed phases); "
                         "a configuration whose earlier run on this device kind took longer than half of it gets "
                         "twice that run's wall")
    ap.add_argument("--budget", type=float, default=None, help="start no run that would end after this many seconds")
    ap.add_argument("--tag", default=None, help="name part of the result file (default: the benches)")
    ap.add_argument("--resume", type=Path, default=None,
                    help="continue this earlier result file (same benches, commit, device and machine): its runs "
                         "stay, the runs it lacks toward --repeat run now; written under --out with its name")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--print", action="store_true", help="report: print instead of rewriting BENCHMARKS.md")
    ap.add_argument("--md", type=Path, default=BENCHMARKS_MD, help="report: the file whose generated section is rewritten")
    args = ap.parse_intermixed_args(argv)  # report --print FILE...
    if args.bench == "_one":
        if os.environ.get("BENCH_PIDS"):  # started while another run is timing: wait until it ends
            with _gpu_lock.waiting():
                pass
        r = run_one(json.loads(args.rest[0]))
        print("RESULT " + json.dumps(r), flush=True)
        sys.stdout.flush()
        os._exit(0)  # skip interpreter teardown (compile worker pools): seconds per run
    if args.bench == "list":
        for b, names in DEFAULT_CONFIGS.items():
            print(f"{b}: " + " ".join(names))
        print("any STRATEGY-EXECUTOR[-graphs][-nocache]: strategies " + ", ".join(STRATEGY_NAMES)
              + "; executors " + ", ".join(EXECUTORS))
        return 0
    if args.bench == "report":
        section = report([Path(p) for p in args.rest], args.out)
        if args.print:
            print(section)
        else:
            write_report(section, args.md)
            print(f"rewrote the generated section of {args.md}")
        return 0
    if args.bench != "run":
        args.benches = ["memory", "adam", "llama"] if args.bench == "all" else [args.bench]
    elif not args.benches:
        ap.error("run needs --benches")
    for n in args.configs or []:
        parse_config(n)  # unknown names fail here, not in a child
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
