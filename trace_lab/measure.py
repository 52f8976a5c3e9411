"""Measure: real peak memory and time of a program, independent of the model.

* CUDA: ``torch.cuda.max_memory_allocated()`` minus ``memory_allocated()`` before
  the call, after ``reset_peak_memory_stats()``; the caching allocator rounds
  blocks to 512 bytes, which the liveness model mirrors.
* CPU: the PyTorch profiler's allocator events (``profile_memory=True``): every
  allocation and free of the CPU allocator, in time order; their running sum's
  maximum is the peak above entry. This counts every byte the allocator hands
  out, including small scalar temporaries that the model ignores.
* Time: CUDA events or ``perf_counter`` around device-synchronised calls.
"""
from __future__ import annotations

import contextlib
import statistics
import time

import torch

__all__ = ["measure_peak", "synchronize", "time_calls"]


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


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_peak(run, args, device: torch.device):
    """(outputs, peak bytes above entry or None, method) for one boxed call."""
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
            with _quiet_stderr():
                prof.stop()
        events = sorted((ev.start_ns(), ev.nbytes()) for ev in prof.profiler.kineto_results.events()
                        if ev.name() == "[memory]")
        current = peak = 0
        for _, nbytes in events:
            current += nbytes
            peak = max(peak, current)
        return outs, peak, "torch.profiler allocator events"
    return run(args), None, f"not measured on {device.type}"


def time_calls(call, device: torch.device, runs: int) -> list[float]:
    """Seconds for each of ``runs`` device-synchronised calls of ``call()``."""
    times = []
    for _ in range(runs):
        synchronize(device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
    return times


def median(xs):
    return statistics.median(xs) if xs else None

