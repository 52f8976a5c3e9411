"""Launcher: run one function (or one cell's source) on N processes, bring results back.

Design: :func:`run_distributed` starts ``nproc`` workers with
``torch.multiprocessing``: on CPU ``forkserver`` when the target and its
arguments pickle (fresh workers forked from a clean server that has imported
torch once: forking this process itself is unsafe once it has run threads -
compiles, widgets, OpenMP - and a forked rank was seen to crash with SIGSEGV
that way), ``fork`` for objects that only live here (a notebook's functions);
``spawn`` for CUDA, which cannot be forked. It gives each a process group (gloo on CPU, NCCL on GPUs, one
GPU per rank, rendezvous over TCP on a free port of 127.0.0.1 only), runs the
target and sends back, per rank, a :class:`RankResult`: the target's return
value, its Report as plain data (``Report.to_dict()``: its view model holds the timeline),
its timings and any error with its traceback. A failing rank fails the whole
run with that traceback (:class:`~trace_lab.errors.TraceLabError`). A rank that dies from a
signal before reporting (a gloo rank of notebook 05 aborted with "malloc(): unaligned tcache
chunk detected", twice on 2026-11-27 among some twenty runs, inside torch, not in the cell's code)
is not the target's error, nor are ranks that lose each other in the rendezvous before any target ran
(gloo's "Connection closed by peer", seen in CI on a loaded 2-core machine): the launch runs again once
(``retry_crashed``, on a fresh port) and
``DistributedRun.notes`` says so (the ``--nproc`` cell's summary row "processes" too).
Each rank's stderr (native and Python) goes to a file that the launcher relays to its own stderr once the launch
ends; a crashed attempt's is not relayed: the note quotes the dead rank's last line instead (the same abort came
back on an H100 GPU check of 2026-12-07 and its glibc message, written straight to the cell's stderr, failed
notebook 05's clean-output check although the rerun succeeded).
A launch that runs past ``timeout_s`` fails with where each rank still running was: before the ranks are
killed each dumps its threads' Python stacks (``faulthandler`` on SIGUSR1) and the error quotes the last
frames of each, so a hang in a collective or a rendezvous says so.

The target is either a callable ``target(*args, **kwargs)`` or Python source
that is ``exec``-ed in a copy of ``namespace``; inside a worker,
:func:`current` (and, for source, the names ``rank``, ``world_size``,
``device``, ``group_name``) say where it runs. A source sets ``report`` (a
Report) and/or ``result`` (any picklable value) to send them back.
"""
from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import socket
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

import torch

from ..errors import TraceLabError

__all__ = ["WorkerContext", "RankResult", "DistributedRun", "run_distributed", "current", "free_port",
           "report_timings"]


@dataclass(frozen=True)
class WorkerContext:
    rank: int
    world_size: int
    backend: str
    device: str
    group_name: str


@dataclass
class RankResult:
    rank: int
    value: object = None
    report: dict | None = None
    timings: dict = field(default_factory=dict)
    error: str | None = None
    joined: bool = False  # through the rendezvous (init_process_group, then a barrier): its target may have run


@dataclass
class DistributedRun:
    nproc: int
    backend: str
    device: str
    results: list[RankResult]
    notes: list = field(default_factory=list)  # e.g. a launch run again after a rank died from a signal

    @property
    def report(self) -> dict | None:
        """Rank 0's Report as plain data (None when the target made no Report)."""
        return self.results[0].report if self.results else None

    @property
    def timings(self) -> dict[int, dict]:
        return {r.rank: r.timings for r in self.results}

    @property
    def values(self) -> list:
        return [r.value for r in self.results]

    def to_dict(self) -> dict:
        return {"nproc": self.nproc, "backend": self.backend, "device": self.device, "report": self.report,
                "timings": self.timings}


_CURRENT: WorkerContext | None = None


def current() -> WorkerContext:
    """Where this worker runs (only inside :func:`run_distributed`)."""
    if _CURRENT is None:
        raise TraceLabError("trace_lab.distributed.current() is only defined inside run_distributed workers")
    return _CURRENT


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _choose(backend: str, device: str, nproc: int) -> tuple[str, str]:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() and torch.cuda.device_count() >= nproc else "cpu"
    if device not in ("cpu", "cuda"):
        raise TraceLabError(f"run_distributed: device={device!r}; use 'cpu', 'cuda' or 'auto'")
    if device == "cuda" and torch.cuda.device_count() < nproc:
        raise TraceLabError(f"run_distributed: {nproc} processes need {nproc} GPUs, "
                            f"this machine has {torch.cuda.device_count()}")
    if backend == "auto":
        backend = "nccl" if device == "cuda" else "gloo"
    return backend, device


_REPORT_TIMINGS = ("first_run_seconds", "steady_seconds", "run_seconds")


def report_timings(report) -> dict:
    return {"first_run_seconds": report.first_run_seconds, "steady_seconds": report.steady_seconds,
            "run_seconds": list(report.run_seconds)}


def _is_report(value) -> bool:
    """Whether a rank's value is a Report (what ``inspect`` returns), known by what a rank sends of it:
    ``to_dict()`` and the timings :func:`report_timings` reads. ``distributed`` sits below ``report`` in the
    import order (docs/ARCHITECTURE.md, tests/test_import_graph.py), so the class is not imported here."""
    return callable(getattr(value, "to_dict", None)) and all(hasattr(value, a) for a in _REPORT_TIMINGS)


def _worker(rank, nproc, backend, device, port, target, args, kwargs, namespace, queue, threads, stacks=None,
            stderr=None):
    global _CURRENT
    import torch.distributed as dist

    if stderr is not None:  # this rank's native and Python stderr to a file the parent relays (_relay_stderr)
        sys.stderr.flush()
        fd = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
    result = RankResult(rank=rank)
    if stacks is not None:  # where this rank is, on request (a launch that timed out: _rank_stacks)
        try:
            faulthandler.register(signal.SIGUSR1, file=open(stacks, "w"), all_threads=True)  # noqa: SIM115 - lives
        except (OSError, ValueError, AttributeError):  # no file, no SIGUSR1: a timeout then names no stack
            pass
    try:
        if threads:
            torch.set_num_threads(threads)
        dev = f"cuda:{rank}" if device == "cuda" else "cpu"
        if device == "cuda":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nproc)
        # every rank through the rendezvous before any target runs: one whose init returned first could run a short
        # target and close its end of gloo's mesh under a peer still connecting ("Connection closed by peer" in
        # connectFullMesh, a CI run of 2026-11-29, after a retried launch); a failure here is still the rendezvous's
        dist.barrier(**({"device_ids": [rank]} if device == "cuda" else {}))
        result.joined = True
        _CURRENT = WorkerContext(rank, nproc, backend, dev, dist.group.WORLD.group_name)
        started = time.perf_counter()
        if isinstance(target, str):
            ns = dict(namespace or {})
            ns.update(rank=rank, world_size=nproc, device=dev, group_name=_CURRENT.group_name)
            exec(compile(target, f"<trace_lab rank {rank}>", "exec"), ns)
            value, report = ns.get("result"), ns.get("report")
        else:
            value = target(*args, **(kwargs or {}))
            report = None
        if _is_report(value):
            value, report = None, value
        result.timings["wall_seconds"] = time.perf_counter() - started
        if report is not None:
            result.report = report.to_dict()  # with its view model: the parent rebuilds it (Report.from_dict)
            result.timings.update(report_timings(report))
        result.value = value
    except BaseException:  # noqa: BLE001 - shipped to the parent with its traceback
        result.error = traceback.format_exc()
    finally:
        # plain pickle to bytes: tensors travel by value, not as shared-memory handles that die with us
        try:
            payload = pickle.dumps(result)
        except Exception:  # noqa: BLE001 - unpicklable value: send the error instead
            payload = pickle.dumps(RankResult(rank=rank, error="result could not be pickled:\n"
                                              + traceback.format_exc()))
        queue.put(payload)
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
        sys.stderr.flush()


def _auto_start_method(device: str, payload, available) -> str:
    """``spawn`` for CUDA; on CPU ``forkserver`` when ``payload`` pickles, else ``fork`` (see the module doc)."""
    if device != "cpu":
        return "spawn"
    if "forkserver" in available:
        try:
            pickle.dumps(payload)
            return "forkserver"
        except Exception:  # noqa: BLE001 - a lambda, a notebook's function: only fork can hand it over
            pass
    return "fork" if "fork" in available else "spawn"


def run_distributed(target, nproc: int = 2, *, args: tuple = (), kwargs: dict | None = None,
                    namespace: dict | None = None, backend: str = "auto", device: str = "auto",
                    timeout_s: float = 600.0, start_method: str = "auto", retry_crashed: int = 1) -> DistributedRun:
    """Run ``target`` (callable or source) on ``nproc`` ranks; see the module docstring."""
    import torch.multiprocessing as mp

    if not isinstance(nproc, int) or nproc < 1:
        raise TraceLabError(f"run_distributed: nproc={nproc!r}; need a positive integer")
    if not (callable(target) or isinstance(target, str)):
        raise TraceLabError(f"run_distributed: target must be a callable or source text, got {type(target).__name__}")
    backend, device = _choose(backend, device, nproc)
    if start_method == "auto":
        start_method = _auto_start_method(device, (target, args, kwargs, namespace), mp.get_all_start_methods())
    if start_method == "forkserver":
        mp.set_forkserver_preload(["torch", "trace_lab.distributed.launcher"])
    ctx = mp.get_context(start_method)
    notes = []
    for attempt in range(1 + max(0, int(retry_crashed))):
        try:
            results = _launch_once(ctx, nproc, backend, device, target, args, kwargs, namespace, timeout_s)
            break
        except _RankCrashed as e:  # a signal or a lost rendezvous, not the target's error: nothing written back
            if attempt >= retry_crashed:
                raise TraceLabError(f"{e}" + (f"; {notes[-1]}" if notes else "")) from None
            notes.append(f"{e} on attempt {attempt + 1}; the launch ran again")
    return DistributedRun(nproc, backend, device, [results[i] for i in range(nproc)], notes)


class _RankCrashed(TraceLabError):
    """A launch that failed for no reason of the target's, so that it may run again: a rank's process ended from a
    signal (SIGABRT, SIGSEGV) before reporting, or the ranks lost each other in the rendezvous before any target
    ran (gloo's "Connection closed by peer" on a loaded machine)."""


def _launch_once(ctx, nproc, backend, device, target, args, kwargs, namespace, timeout_s) -> dict:
    """Start ``nproc`` ranks, wait for each one's result -> {rank: RankResult}; raises on a rank's error."""
    queue = ctx.SimpleQueue()
    port = free_port()
    # CPU ranks split the cores, and none takes more threads than this process uses (a test session's 2): a rank
    # of a loaded machine that spins more OpenMP threads than it gets cores can slow down a hundredfold
    threads = max(1, min((os.cpu_count() or 1) // nproc, torch.get_num_threads())) if device == "cpu" else 0
    stacks_dir = tempfile.TemporaryDirectory(prefix="trace_lab_ranks_")
    stacks = [os.path.join(stacks_dir.name, f"rank{rank}.txt") for rank in range(nproc)]
    stderrs = [os.path.join(stacks_dir.name, f"rank{rank}.stderr") for rank in range(nproc)]
    procs = []
    for rank in range(nproc):
        p = ctx.Process(target=_worker, args=(rank, nproc, backend, device, port, target, args, kwargs, namespace,
                                              queue, threads, stacks[rank], stderrs[rank]), daemon=False)
        p.start()
        procs.append(p)
    results: dict[int, RankResult] = {}
    deadline = time.monotonic() + timeout_s
    crashed, failed = None, False  # (rank, exit code) of a rank that died without reporting; raised here
    try:
        while len(results) < nproc:
            if time.monotonic() > deadline:
                if any(r.error for r in results.values()):
                    break
                raise TraceLabError(f"run_distributed: timed out after {timeout_s:.0f} s with "
                                    f"{nproc - len(results)} rank(s) still running (port {port})"
                                    + _rank_stacks(procs, stacks, results))
            if not queue.empty():
                r = pickle.loads(queue.get())
                results[r.rank] = r
                if r.error:  # the other ranks may be stuck in a collective: stop waiting for them
                    deadline = min(deadline, time.monotonic() + 3.0)
                continue
            dead = [i for i, p in enumerate(procs) if p.exitcode not in (None, 0) and i not in results]
            if dead:
                crashed = (dead[0], procs[dead[0]].exitcode)
                break
            time.sleep(0.02)
    except BaseException:  # a timeout: what the ranks wrote still reaches the caller
        failed = True
        raise
    finally:
        for p in procs:
            p.join(timeout=10 if len(results) == nproc else 0.1)
            if p.is_alive():
                p.kill()
                p.join()
        written = [_read(path) for path in stderrs]
        stacks_dir.cleanup()
        if failed:
            _relay_stderr(written)
    if crashed is not None:
        rank, code = crashed
        last = written[rank].strip().splitlines()[-1:] if written[rank].strip() else []
        why = (f"run_distributed: rank {rank} died (exit code {code}{_signal_name(code)}) without reporting"
               + (f" (its last words on stderr: {last[0]!r})" if last else ""))
        if code < 0:  # run again: what the dead attempt wrote is in the note, not on the caller's stderr
            raise _RankCrashed(why)
        _relay_stderr(written)
        raise TraceLabError(why)
    _relay_stderr(written)
    errors = [r for r in results.values() if r.error]
    if errors:
        if not any(r.joined for r in results.values()) and all(_peer_lost(r.error) for r in errors):
            # the ranks lost each other while connecting, before any target ran: not the target's failure
            raise _RankCrashed(f"run_distributed: the ranks' rendezvous failed before the target ran (rank "
                               f"{errors[0].rank}: {errors[0].error.strip().splitlines()[-1]})")
        root = _first_failure(errors)
        raise TraceLabError(f"run_distributed: rank {root.rank} failed:\n{root.error}")
    return results


def _read(path: str) -> str:
    """A rank's file (its stderr, its dumped stacks) as text; '' where the rank never wrote it."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _relay_stderr(written: list[str]) -> None:
    """What the ranks wrote to stderr (warnings, native messages), on this process's stderr, rank by rank, once
    the launch ended: a launch that is run again (a crashed rank) relays nothing of its own, its note says why."""
    for text in written:
        if text:
            sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


# what a rank says when another rank went away under it (gloo's rendezvous or a collective): a consequence
_PEER_LOST = ("closed by peer", "reset by peer", "remote worker crashing")


def _first_failure(errors: list):
    """The failing rank to quote: the lowest rank whose failure is its own, not one that only says a peer went away
    (``_PEER_LOST``: a rank whose target raised exited while another still connected to it); that one only where
    every failure is of that kind."""
    ranked = sorted(errors, key=lambda r: r.rank)
    return next((r for r in ranked if not _peer_lost(r.error)), ranked[0])


def _peer_lost(error: str) -> bool:
    return any(p in error for p in _PEER_LOST)


def _rank_stacks(procs, stacks: list, results: dict, frames: int = 8) -> str:
    """Where each rank still running is: its threads' stacks, dumped on SIGUSR1 (``_worker``), the last
    ``frames`` lines of each thread (innermost first, as ``faulthandler`` writes them)."""
    alive = [i for i, p in enumerate(procs) if i not in results and p.is_alive()]
    for i in alive:
        try:
            os.kill(procs[i].pid, signal.SIGUSR1)
        except OSError:
            pass
    time.sleep(1.0)
    parts = []
    for i in alive:
        threads = [t.strip().splitlines() for t in _read(stacks[i]).split("\n\n") if t.strip()]
        shown = "\n".join("    " + "\n    ".join(t[:frames + 1]) for t in threads) or "    (no stack was written)"
        parts.append(f"\nrank {i} was at:\n{shown}")
    return "".join(parts)


def _signal_name(code: int) -> str:
    try:
        return f": {signal.Signals(-code).name}" if code < 0 else ""
    except ValueError:
        return ""
