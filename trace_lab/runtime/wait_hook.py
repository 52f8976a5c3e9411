"""The wait hook: how a measuring tool sees every ``wait_tensor`` a program runs.

:func:`set_wait_hook` installs a hook (only while measuring;
:mod:`trace_lab.distributed.comm_measure`) that a program holding
``wait_tensor`` ops calls around each wait and at its start and end. With no
hook installed a run pays one global read per wait; programs without waits pay
nothing. Both the generated runtime and the per-line interpreter use it.
"""
from __future__ import annotations

import torch

__all__ = ["set_wait_hook", "current_hook", "hooked_wait", "WAIT"]

WAIT = torch.ops._c10d_functional.wait_tensor.default
_WAIT_HOOK = None


def set_wait_hook(hook):
    """Install ``hook`` (or None) for every program that waits; return the previous one.

    ``hook.enter(trace)`` / ``hook.exit(trace)`` bracket each run of such a program;
    ``hook.wait(trace, node, fn, args, kwargs)`` runs the wait ``fn(*args, **kwargs)``
    and returns its result.
    """
    global _WAIT_HOOK
    old, _WAIT_HOOK = _WAIT_HOOK, hook
    return old


def current_hook():
    return _WAIT_HOOK


def hooked_wait(trace, node, fn):
    """``fn`` (a wait) wrapped so that the hook installed at call time, if any, runs it."""
    def call(*args, **kwargs):
        hook = _WAIT_HOOK  # None if the hook was removed while this program ran
        return fn(*args, **kwargs) if hook is None else hook.wait(trace, node, fn, args, kwargs)

    return call
