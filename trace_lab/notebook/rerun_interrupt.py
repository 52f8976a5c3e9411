"""Stopping a LabView's background rerun: the worker interrupt and the kernel's idle SIGINT hook.

Design. A rerun runs in a worker thread (see :mod:`.widgets`); :func:`_async_raise` raises
KeyboardInterrupt in it (``PyThreadState_SetAsyncExc``, landing at the next bytecode), and
:func:`_install_interrupt_hook` puts a handler into ipykernel's idle SIGINT slot that stops
every running view in :data:`_ACTIVE` (a weak set the views add themselves to), else defers
to the previous handler; installed once per process. :func:`_wait_for_timing` lets a
finished rerun draw only after another cell's timing in this process is over.
"""
from __future__ import annotations

import ctypes
import threading
import time
import weakref

_ACTIVE: "weakref.WeakSet[LabView]" = weakref.WeakSet()
_HOOK_INSTALLED = False


def _wait_for_timing(limit: float = 60.0) -> None:
    """Wait (at most ``limit`` s) while a program is timed or measured in this process: a rerun that ends then
    draws its views (and the front end renders them) only after it."""
    from ..runtime.measure import timing_active

    deadline = time.monotonic() + limit
    while timing_active() and time.monotonic() < deadline:
        time.sleep(0.05)


def _async_raise(thread: threading.Thread, exc_type=KeyboardInterrupt) -> bool:
    if thread.ident is None or not thread.is_alive():
        return False
    n = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))
    return n == 1


def _install_interrupt_hook(shell) -> None:
    """Make the kernel's Interrupt stop background reruns while no cell is running.

    ipykernel ignores SIGINT while idle and restores ``kernel.saved_sigint_handler``
    after each message; putting our handler there (from a click handler, i.e.
    inside a message) makes it the idle handler. It stops running reruns and
    otherwise defers to the previous idle handler.
    """
    global _HOOK_INSTALLED
    kernel = getattr(shell, "kernel", None)
    if _HOOK_INSTALLED or kernel is None or not hasattr(kernel, "saved_sigint_handler"):
        return
    previous = kernel.saved_sigint_handler

    def on_sigint(signum, frame):
        views = [v for v in list(_ACTIVE) if v.running]
        for v in views:
            v.stop()
        if not views and callable(previous):
            previous(signum, frame)

    kernel.saved_sigint_handler = on_sigint
    _HOOK_INSTALLED = True
