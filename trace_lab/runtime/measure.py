"""Measure: real peak memory and time of a program, independent of the model.

* CUDA: ``torch.cuda.max_memory_allocated()`` minus ``memory_allocated()`` before
  the call, after ``reset_peak_memory_stats()``; the caching allocator rounds
  blocks to 512 bytes, which the liveness model mirrors.
* CPU: the PyTorch profiler's allocator events (``profile_memory=True``): every
  allocation and free of the CPU allocator, in time order; their running sum's
  maximum is the peak above entry. This counts every byte the allocator hands
  out, including small scalar temporaries that the model ignores.
* Time: CUDA events or ``perf_counter`` around device-synchronised calls, with Python's
  cyclic garbage collector held off while they run (one collection before them).
  :func:`time_host_device` splits each call into host time (``perf_counter`` until
  the Python call returns: launching) and, on CUDA, device time (CUDA events recorded
  before and after the call, elapsed on the device). On CUDA, a call whose host time is
  close to its device time kept the device waiting for launches: host-bound.
"""
from __future__ import annotations

import contextlib
import statistics
import threading
import time

import torch

__all__ = ["undisturbed", "timing_active", "settle", "settling", "OtherLoad", "profiler_stderr", "NOISY_SPREAD", "NOISY_OTHERS", "measure_peak", "measure_peak_handing_over", "CpuMemoryWindows", "synchronize", "time_calls", "time_host_device", "CallTimes", "HOST_BOUND_RATIO"]


# what the profiler's native side prints on fd 2 around and during a session the lab runs: noise to a student
# (a pink stderr box that looks like an error), never about their program (issue 26 item 3)
PROFILER_NOISE = (
    "USDT",                                # kineto: 'USDT:... SyncActivityProfilerHandler.cpp:59] profiler_start/stop'
    "Memory block of unknown size",        # CPUAllocator: a block allocated before profiling freed during it
    "Profiler record function",            # a record_function range the profiler will ignore
    "profiler results will not include",
    "STAGE:",                              # kineto's 'STAGE:... Collection/Completed Stage' lines
    "Profiler clears events",              # torch 2.10's UserWarning when a session's events are read
)


def _is_profiler_noise(line: str) -> bool:
    return not line.strip() or any(word in line for word in PROFILER_NOISE)


def _flush_c_streams() -> None:
    """fflush(NULL): kineto writes its USDT lines through a buffered C stream, which otherwise empties into
    fd 2 much later (a later cell showed them, five at a time in notebook 06)."""
    import ctypes

    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library to ask (Windows): nothing buffered that we know of
        pass


@contextlib.contextmanager
def profiler_stderr():
    """Around a profiler session the lab runs: what native code writes to fd 2 meanwhile (kineto's USDT
    lines, the CPU allocator's warnings) goes to a temporary file; afterwards the lines that are not
    :data:`PROFILER_NOISE` are written to fd 2 again (a program's own native messages are delayed, not
    lost), and Python warnings the profiler raises inside are dropped when they are noise."""
    import os
    import sys
    import tempfile
    import warnings

    try:
        sys.stderr.flush()
        _flush_c_streams()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no real fd 2 (embedded interpreters)
        yield
        return
    sink = tempfile.TemporaryFile()
    try:
        os.dup2(sink.fileno(), 2)
        with warnings.catch_warnings():
            for word in PROFILER_NOISE:
                warnings.filterwarnings("ignore", message=f".*{word}")
            yield
    finally:
        try:
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass
        _flush_c_streams()  # kineto's lines sit in a C stdio buffer: flushed later they would reach the cell
        os.dup2(saved, 2)
        os.close(saved)
        sink.seek(0)
        text = sink.read().decode("utf-8", "replace")
        sink.close()
        kept = "".join(line for line in text.splitlines(keepends=True) if not _is_profiler_noise(line))
        if kept:
            os.write(2, kept.encode("utf-8", "replace"))


# -- timing that nothing of the lab disturbs (issue 26 item 3) ------------------------------------------------
_timing_lock = threading.Lock()
_timing_depth = 0


def timing_active() -> bool:
    """True while a program is being timed or measured (:func:`undisturbed`): the notebook's progress ticker
    and views draw nothing then (a widget update makes the front end render, on the same CPUs)."""
    return _timing_depth > 0


@contextlib.contextmanager
def undisturbed():
    """Mark a timed or measured section: :func:`timing_active` is True inside (any thread)."""
    global _timing_depth
    with _timing_lock:
        _timing_depth += 1
    try:
        yield
    finally:
        with _timing_lock:
            _timing_depth -= 1


def _cpu_sample():
    """(seconds since an arbitrary start, busy CPU seconds of the whole machine, CPU seconds of this process)
    or None where /proc/stat is not there."""
    import os

    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")
    own = os.times()
    return time.perf_counter(), busy, own.user + own.system


class OtherLoad:
    """The share of the machine's CPUs that other processes (a browser rendering the notebook, a test run,
    a compile) used between :meth:`start` and :meth:`share`: 0.0 alone, 1.0 every CPU busy with others.
    On a 2-core machine, torch's OpenMP threads spin at every parallel region's barrier, and another busy
    process makes each such barrier wait for a time slice: a 4 ms program measured 0.5-1 s."""

    def __init__(self):
        self.first = _cpu_sample()

    def share(self) -> float | None:
        import os

        last = _cpu_sample()
        if self.first is None or last is None:
            return None
        wall = last[0] - self.first[0]
        if wall <= 0:
            return None
        others = max(0.0, (last[1] - self.first[1]) - (last[2] - self.first[2]))
        return min(1.0, others / (wall * (os.cpu_count() or 1)))


QUIET_SHARE = 0.15  # other processes below this share of the CPUs: quiet enough to time
# how long timing waits for the machine to be quiet (then it times, and says so): 0 in scripts and tests (no front
# end renders beside them; a busy CI machine would add the whole wait to every run), NOTEBOOK_SETTLE_SECONDS in a
# notebook cell (:func:`settling`, set by trace_lab.notebook.runner.inspect_cell)
SETTLE_MAX_SECONDS = 0.0
NOTEBOOK_SETTLE_SECONDS = 3.0


@contextlib.contextmanager
def settling(seconds: float = NOTEBOOK_SETTLE_SECONDS):
    """Within the block, timing waits up to ``seconds`` for other processes to go quiet (:func:`settle`)."""
    global SETTLE_MAX_SECONDS
    before, SETTLE_MAX_SECONDS = SETTLE_MAX_SECONDS, seconds
    try:
        yield
    finally:
        SETTLE_MAX_SECONDS = before


def settle(max_seconds: float | None = None, window: float = 0.1) -> float | None:
    """Wait (at most ``max_seconds``) until other processes use less than :data:`QUIET_SHARE` of the CPUs over
    ``window`` seconds: under Run All the front end is still rendering the last outputs when the next cell's
    timing starts. Returns the last share seen (None where it cannot be read)."""
    max_seconds = SETTLE_MAX_SECONDS if max_seconds is None else max_seconds
    if max_seconds <= 0:
        return None
    deadline = time.perf_counter() + max_seconds
    share = None
    while True:
        probe = OtherLoad()
        if probe.first is None:
            return None
        time.sleep(window)
        share = probe.share()
        if share is None or share < QUIET_SHARE or time.perf_counter() >= deadline:
            return share


SETTLE_SECONDS = 0.05


def _settle_collective_threads() -> None:
    """Before a memory-profiling session stops in a process with a process group: give the backend's
    worker threads (gloo's) time to finish releasing the buffers of collectives that were just waited for.
    Those threads carry the caller's profiler state and report their frees to it; a session stopped while
    they still do is torn down under them (the race of pytorch/pytorch#136304; a --nproc rank died with
    "malloc(): unaligned tcache chunk detected" under a loaded CI machine)."""
    import time

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        time.sleep(SETTLE_SECONDS)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_peak(run, args, device: torch.device, collect: bool = True):
    """(outputs, peak bytes above entry or None, method) for one boxed call.

    Python's cyclic garbage collector is held off during the call: garbage of earlier calls freed
    inside the window would lower the figure at random. ``collect`` also runs a full collection first,
    so that the process's memory at entry holds no garbage (a program's measured run); a region's
    workspace is a difference inside the window and skips it (a full collection in a process that has
    compiled a model costs ~0.3 s: 18 regions' measurements were 5.6 s of a first call on the GPU)."""
    import gc

    if collect:
        gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _measure_peak(run, args, device)
    finally:
        if enabled:
            gc.enable()


class CpuMemoryWindows:
    """CPU peaks of several program runs measured in one profiler session (``jfn.measuring()``).

    The CPU allocator reports the size of a free only for blocks allocated while memory
    profiling was on. A backward frees the saved activations its forward allocated (and the
    gradient copy AOTAutograd makes just before calling it), so a profiler started per call
    would miss those frees and overstate the peak. Here the session starts before the first
    program run of the block and stops when the block ends; each run is a
    ``record_function`` window, and its peak is the running sum of the allocator events inside
    that window. Figures are handed to each run's ``on_result(peak, method)`` at :meth:`close`.
    """

    def __init__(self):
        self._prof = None
        self._failed: str | None = None
        self._pending: list = []
        self._stderr = None  # profiler_stderr() held from start to close

    def interrupt(self, why: str) -> None:
        """End the session now (figures so far are final); runs until the block ends are not measured."""
        self.close()
        self._failed = f"not measured: {why}"

    def start(self) -> None:
        """Start the session now (before making inputs that the measured program will free)."""
        if self._prof is None and self._failed is None:
            from torch.profiler import ProfilerActivity, profile

            prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self._stderr = profiler_stderr()
            self._stderr.__enter__()
            try:
                prof.start()
                self._prof = prof
            except RuntimeError as e:  # another profiler is already active
                self._release_stderr()
                if "profiler" not in str(e).lower():
                    raise
                self._failed = f"not measured: {e}"

    def _release_stderr(self) -> None:
        held, self._stderr = self._stderr, None
        if held is not None:
            held.__exit__(None, None, None)

    def run(self, run, args, on_result, collect: bool = True):
        """Run ``run(args)`` in its own window; ``collect`` as :func:`measure_peak`'s (a window's peak is a running
        sum inside it, so garbage left from before changes nothing: a full collection first only tidies the
        process for a program's measured run)."""
        self.start()
        if self._prof is None:
            on_result(None, self._failed)
            return run(args)
        import gc

        label = f"trace_lab::measure#{len(self._pending)}"
        if collect:
            gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        try:
            with torch.profiler.record_function(label):
                outs = run(args)
        finally:
            if enabled:
                gc.enable()
        self._pending.append((label, on_result))
        return outs

    def close(self) -> None:
        if self._prof is None:
            return
        _settle_collective_threads()
        try:
            self._prof.stop()
        finally:
            self._release_stderr()
        events = list(self._prof.profiler.kineto_results.events())
        self._prof = None
        memory = sorted(((ev.start_ns(), ev.nbytes()) for ev in events if ev.name() == "[memory]"),
                        key=lambda e: e[0])
        windows = {ev.name(): (ev.start_ns(), ev.start_ns() + ev.duration_ns()) for ev in events
                   if ev.name().startswith("trace_lab::measure#")}
        for label, on_result in self._pending:
            if label not in windows:
                on_result(None, "not measured: the profiler recorded no window for this run")
                continue
            start, end = windows[label]
            current = peak = 0
            for t, nbytes in memory:
                if start <= t <= end:
                    current += nbytes
                    peak = max(peak, current)
            on_result(peak, "torch.profiler allocator events")
        self._pending = []


def measure_peak_handing_over(run, make_args, device: torch.device, collect: bool = True):
    """:func:`measure_peak` for a program that frees inputs it is handed (a backward): ``make_args()``
    builds them inside the measurement, so that on CPU their frees are seen (see CpuMemoryWindows).
    ``collect``: as :func:`measure_peak`'s (False for a region's workspace, a difference inside the window)."""
    if device.type != "cpu":
        return measure_peak(run, make_args(), device, collect=collect)
    windows, result = CpuMemoryWindows(), {}
    windows.start()
    try:
        outs = windows.run(run, make_args(), lambda peak, method: result.update(peak=peak, method=method),
                           collect=collect)
    finally:
        windows.close()
    return outs, result.get("peak"), result.get("method", "not measured")


def _measure_peak(run, args, device: torch.device):
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.empty_cache()  # fresh segments: cached oversize blocks would inflate the count
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        outs = run(args)
        synchronize(device)
        return outs, torch.cuda.max_memory_allocated(device) - before, "torch.cuda.max_memory_allocated"
    if device.type == "cpu":
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        with profiler_stderr():  # kineto's USDT lines, the allocator's 'unknown size' warnings: not the cell's
            try:
                prof.start()
            except RuntimeError as e:  # another profiler is already active
                if "profiler" not in str(e).lower():
                    raise
                return run(args), None, f"not measured: {e}"
            try:
                outs = run(args)
            finally:
                _settle_collective_threads()
                prof.stop()
        # by time only, ties in the order recorded: sorting ties by size would put a free before an
        # allocation made in the same nanosecond and hide part of the peak
        events = sorted(((ev.start_ns(), ev.nbytes()) for ev in prof.profiler.kineto_results.events()
                         if ev.name() == "[memory]"), key=lambda e: e[0])
        current = peak = 0
        for _, nbytes in events:
            current += nbytes
            peak = max(peak, current)
        return outs, peak, "torch.profiler allocator events"
    return run(args), None, f"not measured on {device.type}"


# host >= this fraction of device time: the device waited for launches, the program is host-bound
HOST_BOUND_RATIO = 0.8


def bound_of(host: float, device: float) -> str:
    """'host-bound' when ``host`` is at least HOST_BOUND_RATIO of ``device`` (or there is no device time),
    'device-bound' otherwise: a call's medians, or one profiled line's times."""
    return "host-bound" if device <= 0 or host >= HOST_BOUND_RATIO * device else "device-bound"


class CallTimes:
    """Per-call seconds of timed calls: ``host`` (the Python call until it returns, launching included)
    and ``device`` (CUDA events around the call, elapsed on the device; None on CPU). ``seconds`` is the
    steady-state time: device time on CUDA, host time elsewhere."""

    def __init__(self, device: torch.device, host: list[float], device_times: list[float] | None,
                 others_share: float | None = None):
        self.device_type = device.type
        self.host = host
        self.device = device_times
        self.others_share = others_share  # other processes' share of the CPUs while timed (OtherLoad)

    @property
    def seconds(self) -> list[float]:
        return list(self.device if self.device is not None else self.host)

    def bound(self) -> str | None:
        """'host-bound' when the median host time is within HOST_BOUND_RATIO of the median device time,
        'device-bound' otherwise; None without device times (CPU: the host's time is the time)."""
        if not self.device or not self.host:
            return None
        return bound_of(statistics.median(self.host), statistics.median(self.device))

    def to_dict(self) -> dict:
        """Plain data for the Report (``Report.timing``)."""
        return {
            "host_seconds": median(self.host), "device_seconds": median(self.device) if self.device else None,
            "host_run_seconds": list(self.host), "device_run_seconds": list(self.device) if self.device else None,
            "bound": self.bound(), "host_bound_ratio": HOST_BOUND_RATIO,
            "others_cpu_share": self.others_share,
            "noisy": timing_noise(self.seconds, self.others_share),
            "method": ("host: perf_counter until the call returns; device: CUDA events around the call"
                       if self.device is not None else "host: perf_counter around the call (no device timing on "
                       f"{self.device_type})"),
        }


def time_host_device(call, device: torch.device, runs: int) -> CallTimes:
    """Time ``runs`` calls of ``call()``, each after a device synchronisation. Host time: until the call
    returns (on CUDA, kernels may still run after it); device time (CUDA only): events recorded just before
    and just after the call, read after synchronising.

    Python's cyclic garbage collector runs once before the calls and is held off during them: in a
    notebook kernel that has compiled a few programs, a collection landing inside one call made it several
    times slower than the others (notebook 02's steady state: 13 vs 37 ms for the same kernels).

    Nothing of the lab runs meanwhile (:func:`undisturbed`: the notebook's progress ticker and views hold
    their updates), the calls wait (at most :data:`SETTLE_MAX_SECONDS`) for other processes to go quiet
    (:func:`settle`: under Run All the front end still renders the last outputs), and the share of the CPUs
    other processes used while they ran is kept (``others_share``): :func:`timing_noise` reads it."""
    import gc

    with undisturbed():
        if device.type == "cpu" and runs > 0:
            settle()
        gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        load = OtherLoad()
        try:
            timed = _time_host_device(call, device, runs)
        finally:
            if enabled:
                gc.enable()
        timed.others_share = load.share()
        return timed


def _time_host_device(call, device: torch.device, runs: int) -> CallTimes:
    host, dev = [], ([] if device.type == "cuda" else None)
    for _ in range(runs):
        synchronize(device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            call()
            host.append(time.perf_counter() - t0)
            end.record()
            end.synchronize()
            dev.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            call()
            host.append(time.perf_counter() - t0)
    return CallTimes(device, host, dev)


NOISY_SPREAD = 1.5  # the slowest timed run over the fastest: above this the median is not one program's time
NOISY_OTHERS = 0.2  # other processes' share of the CPUs while timed: above this they competed for them


def timing_noise(seconds: list[float], others_share: float | None = None) -> str | None:
    """Why a run's timing is not to be trusted, or None: its timed runs spread more than
    :data:`NOISY_SPREAD` (slowest over fastest), or other processes used more than :data:`NOISY_OTHERS`
    of the CPUs while it was timed (a steady but inflated time: the Compare table gives it no star)."""
    why = []
    seconds = [s for s in seconds if s is not None]
    if len(seconds) >= 2 and min(seconds) > 0 and max(seconds) > NOISY_SPREAD * min(seconds):
        why.append(f"the timed runs spread {min(seconds) * 1e3:.3f}-{max(seconds) * 1e3:.3f} ms "
                   f"(slowest {max(seconds) / min(seconds):.1f}x the fastest)")
    if others_share is not None and others_share > NOISY_OTHERS:
        why.append(f"other processes used {others_share:.0%} of the CPUs while it was timed")
    return "; ".join(why) or None


def time_calls(call, device: torch.device, runs: int) -> list[float]:
    """Seconds for each of ``runs`` device-synchronised calls of ``call()`` (CUDA events on CUDA)."""
    return time_host_device(call, device, runs).seconds


def median(xs):
    return statistics.median(xs) if xs else None

