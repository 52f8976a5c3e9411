"""A program's distinct regions compiled at once, on a few threads (issue 27 item 3: the first call).

An Inductor compile is Python (lowering, scheduling, code generation: it holds the GIL) and then a wait
for its kernels, which Inductor compiles in its own worker processes (Triton on CUDA, C++ on CPU).
Compiled one after another, every one of those waits is the first call's; on a few threads one region's
wait overlaps the next one's Python (18 distinct regions of a Llama stack waited 10 s of a 44 s first call
on an H100). Torch keeps compile state per thread (tracing and compile contexts, metrics, Inductor's
virtualized graph handlers, and in newer releases configuration patches); each thread makes the program's
CUDA device its current one.

Python that is not thread-safe stays one at a time: a job holds the pool's lock while it compiles and
lets go only where the caller's ``releasing(lock)`` says (for Inductor, inside its blocking wait for
kernels: :func:`trace_lab.executors.inductor.kernel_waits_release`), so jobs interleave at those points only.

Results come back in the caller's thread (progress callbacks are context variables: they stay there);
measuring the compiled regions (their workspace) happens after the pool, one at a time, where no other
compile allocates. A job's seconds are its own thread's: jobs overlap, so their sum exceeds the pool's
wall time (the record says so, ``compile_overlapped``).
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

import torch

__all__ = ["THREADS", "PoolLock", "compile_all"]

# threads compiling one program's regions (TRACE_LAB_COMPILE_THREADS=1: one after another, in the caller's thread)
THREADS = max(1, int(os.environ.get("TRACE_LAB_COMPILE_THREADS", "4")))


class PoolLock:
    """The pool's lock, which knows whether the calling thread holds it (:meth:`held_here`)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._holder = None

    def __enter__(self):
        self._lock.acquire()
        self._holder = threading.get_ident()
        return self

    def __exit__(self, *exc):
        self._holder = None
        self._lock.release()

    def held_here(self) -> bool:
        return self._holder == threading.get_ident()

    @contextlib.contextmanager
    def released(self):
        """Let other jobs run while this one blocks (only where this thread holds the lock)."""
        if not self.held_here():
            yield
            return
        self.__exit__()
        try:
            yield
        finally:
            self.__enter__()


def compile_all(jobs: dict, compile_one, device: torch.device | None = None, threads: int | None = None,
                on_done=None, releasing=None) -> dict:
    """{key: (compiled or the exception compiling raised, seconds)} for ``compile_one(job)`` of every
    ``jobs[key]``; ``on_done(done, total, key)`` after each, in the caller's thread. ``releasing(lock)``:
    a context manager, entered around the pool, that makes the compiler's blocking waits call
    ``lock.released()`` (without it jobs run one after another, each in its own thread)."""
    threads = THREADS if threads is None else max(1, threads)
    total, results = len(jobs), {}
    cuda_index = None
    if device is not None and device.type == "cuda":
        cuda_index = device.index if device.index is not None else torch.cuda.current_device()

    lock = PoolLock()

    def one(key, job):
        if cuda_index is not None:
            torch.cuda.set_device(cuda_index)
        started = time.perf_counter()
        try:
            with lock:
                out = compile_one(job)
        except Exception as e:  # noqa: BLE001 - handed back: the caller says which region failed
            out = e
        return key, out, time.perf_counter() - started

    def finished(key, out, seconds):
        results[key] = (out, seconds)
        if on_done is not None:
            on_done(len(results), total, key)

    if threads == 1 or total <= 1:
        for key, job in jobs.items():
            finished(*one(key, job))
        return results
    with (releasing(lock) if releasing is not None else contextlib.nullcontext()), \
            ThreadPoolExecutor(max_workers=min(threads, total), thread_name_prefix="trace_lab-compile") as pool:
        for future in as_completed([pool.submit(one, key, job) for key, job in jobs.items()]):
            finished(*future.result())
    return results
