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
import time

import torch

__all__ = ["measure_peak", "measure_peak_handing_over", "CpuMemoryWindows", "synchronize", "time_calls", "time_host_device", "CallTimes", "HOST_BOUND_RATIO"]


@contextlib.contextmanager
def _quiet_stderr():
    """Silence the C-level stderr (fd 2) for the duration: only around profiler start/stop."""
    import os
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no real fd 2 (embedded interpreters)
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


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


def measure_peak(run, args, device: torch.device):
    """(outputs, peak bytes above entry or None, method) for one boxed call.

    Python's cyclic garbage collector is run before and held off during the call: garbage of
    earlier calls freed inside the window would lower the figure at random."""
    import gc

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

    def interrupt(self, why: str) -> None:
        """End the session now (figures so far are final); runs until the block ends are not measured."""
        self.close()
        self._failed = f"not measured: {why}"

    def start(self) -> None:
        """Start the session now (before making inputs that the measured program will free)."""
        if self._prof is None and self._failed is None:
            from torch.profiler import ProfilerActivity, profile

            prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            try:
                with _quiet_stderr():
                    prof.start()
                self._prof = prof
            except RuntimeError as e:  # another profiler is already active
                if "profiler" not in str(e).lower():
                    raise
                self._failed = f"not measured: {e}"

    def run(self, run, args, on_result):
        self.start()
        if self._prof is None:
            on_result(None, self._failed)
            return run(args)
        import gc

        label = f"trace_lab::measure#{len(self._pending)}"
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
        with _quiet_stderr():
            self._prof.stop()
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


def measure_peak_handing_over(run, make_args, device: torch.device):
    """:func:`measure_peak` for a program that frees inputs it is handed (a backward): ``make_args()``
    builds them inside the measurement, so that on CPU their frees are seen (see CpuMemoryWindows)."""
    if device.type != "cpu":
        return measure_peak(run, make_args(), device)
    windows, result = CpuMemoryWindows(), {}
    windows.start()
    try:
        outs = windows.run(run, make_args(), lambda peak, method: result.update(peak=peak, method=method))
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
        try:
            with _quiet_stderr():  # kineto prints 'USDT ... profiler_start/stop' on fd 2
                prof.start()
        except RuntimeError as e:  # another profiler is already active
            if "profiler" not in str(e).lower():
                raise
            return run(args), None, f"not measured: {e}"
        try:
            outs = run(args)
        finally:
            _settle_collective_threads()
            with _quiet_stderr():
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


class CallTimes:
    """Per-call seconds of timed calls: ``host`` (the Python call until it returns, launching included)
    and ``device`` (CUDA events around the call, elapsed on the device; None on CPU). ``seconds`` is the
    steady-state time: device time on CUDA, host time elsewhere."""

    def __init__(self, device: torch.device, host: list[float], device_times: list[float] | None):
        self.device_type = device.type
        self.host = host
        self.device = device_times

    @property
    def seconds(self) -> list[float]:
        return list(self.device if self.device is not None else self.host)

    def bound(self) -> str | None:
        """'host-bound' when the median host time is within HOST_BOUND_RATIO of the median device time,
        'device-bound' otherwise; None without device times (CPU: the host's time is the time)."""
        if not self.device or not self.host:
            return None
        h, d = statistics.median(self.host), statistics.median(self.device)
        return "host-bound" if d <= 0 or h >= HOST_BOUND_RATIO * d else "device-bound"

    def to_dict(self) -> dict:
        """Plain data for the Report (``Report.timing``)."""
        return {
            "host_seconds": median(self.host), "device_seconds": median(self.device) if self.device else None,
            "host_run_seconds": list(self.host), "device_run_seconds": list(self.device) if self.device else None,
            "bound": self.bound(), "host_bound_ratio": HOST_BOUND_RATIO,
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
    times slower than the others (notebook 02's steady state: 13 vs 37 ms for the same kernels)."""
    import gc

    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _time_host_device(call, device, runs)
    finally:
        if enabled:
            gc.enable()


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


def time_calls(call, device: torch.device, runs: int) -> list[float]:
    """Seconds for each of ``runs`` device-synchronised calls of ``call()`` (CUDA events on CUDA)."""
    return time_host_device(call, device, runs).seconds


def median(xs):
    return statistics.median(xs) if xs else None

