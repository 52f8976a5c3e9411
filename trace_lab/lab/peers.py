"""Peers in Compare: the same call run as the user would otherwise run it, measured the same way.

``--baseline eager,torch.compile`` (issue 17 item 7) adds a Compare row per peer so every
trace_lab figure is read against eager PyTorch, ``torch.compile`` (Inductor, default mode) or
``torch.compile(mode="reduce-overhead")`` (CUDA graphs; GPU only). A peer runs on deep copies of
the function and its inputs (the user's objects are not touched), with the same loss/backward
rule as :func:`trace_lab.inspect`, and is measured by the same code as trace_lab's runs
(:mod:`trace_lab.runtime.measure`): the first call (compile included), the steady state (median of
``runs`` timed calls, host and on CUDA device time) and the peak of the whole call above what was
allocated before it (``step_peak``). ``reduce-overhead`` starts every call as a new CUDA-graph step
with the gradients set to None (a replay overwrites the last one's outputs, so gradients cannot
accumulate across calls; a training loop's ``zero_grad`` does the same). trace_lab's own run measures ``step_peak`` too when asked
(``inspect(..., measure_step=True)``), so that column compares like with like. A peer compiles
nothing trace_lab can show: its row has no traces or predicted peaks.
"""
from __future__ import annotations

import datetime
import time

import torch

from ..errors import TraceLabError
from ..runtime.measure import measure_peak, median, synchronize, time_host_device
from ..run import compare
from ..run.python_warnings import kept_on_report

__all__ = ["PEERS", "parse_peers", "run_peer"]

PEERS = ("eager", "torch.compile", "reduce-overhead")
_DESCRIBE = {"eager": "eager PyTorch (no compiler)", "torch.compile": "torch.compile (Inductor, default mode)",
             "reduce-overhead": "torch.compile(mode='reduce-overhead'): Inductor with CUDA graphs"}


def parse_peers(text: str | None) -> tuple[str, ...]:
    """'eager, torch.compile' -> ('eager', 'torch.compile'); a clear error for anything else."""
    if text is None:
        return ()
    peers = tuple(p.strip() for p in str(text).split(",") if p.strip())
    unknown = [p for p in peers if p not in PEERS]
    if unknown or not peers:
        raise TraceLabError(f"--baseline {text}: {', '.join(map(repr, unknown)) or 'nothing'} is not a peer; give a "
                            f"comma-separated list of {', '.join(PEERS)}")
    return tuple(dict.fromkeys(peers))


def _device(fn, args) -> torch.device:
    from .inspection import _device_of

    return _device_of(fn, args)


@kept_on_report
def run_peer(fn, args, peer: str, *, runs: int, name: str, loss=None, backward=None):
    """A Report of ``fn(*args)`` (and its backward) run as ``peer`` would run it (module docstring)."""
    from ..report.report import Report
    from ..run.loss import default_loss

    device = _device(fn, args)
    if peer == "reduce-overhead" and device.type != "cuda":
        raise TraceLabError("--baseline reduce-overhead: torch.compile's reduce-overhead mode records CUDA graphs, "
                            f"and this cell runs on {device.type}; use it on a GPU, or drop it from --baseline")
    copied = compare.deepcopy_for_reference(fn, args)
    if copied is None:
        raise TraceLabError(f"--baseline {peer}: the cell's inputs cannot be copied for it "
                            f"({compare.why_not_copyable(fn, args)}), and a peer must not change them")
    f, a = copied
    if peer == "torch.compile":
        f = torch.compile(f)
    elif peer == "reduce-overhead":
        f = torch.compile(f, mode="reduce-overhead")
    loss_fn = loss or default_loss

    leaves = [t for t in compare.reachable_tensors(copied[0], a) if t.requires_grad and t.is_leaf]

    def call(boxed):
        if peer == "reduce-overhead":
            # a new step: the last replay's outputs (its gradients too) are overwritten by this one, so the
            # gradients start from None, as a training step's zero_grad(set_to_none=True) makes them
            torch.compiler.cudagraph_mark_step_begin()
            for t in leaves:
                t.grad = None
        out = f(*boxed)
        if backward is not False:
            lv = loss_fn(out)
            if lv is not None:
                lv.backward()
        return out

    synchronize(device)
    started = time.perf_counter()
    call(a)
    synchronize(device)
    first = time.perf_counter() - started
    _, peak, method = measure_peak(call, a, device)
    times, timing = [], None
    if runs > 0:
        timed = time_host_device(lambda: call(a), device, runs)
        times, timing = timed.seconds, timed.to_dict()
    steady = median(times)
    compile_s = max(0.0, first - (steady or 0.0)) if peer != "eager" else 0.0
    return Report(
        name=name, options={"fusion": peer, "executor": peer}, device=str(device),
        executor_reasons=[_DESCRIBE[peer] + " (a --baseline peer: measured the same way, nothing traced)"],
        programs=[], compile_seconds={"capture": 0.0, "passes": 0.0, "executor": compile_s, "total": compile_s},
        first_run_seconds=first, steady_seconds=steady, run_seconds=times, comparison=None, memory=[],
        created=datetime.datetime.now().isoformat(timespec="seconds"), torch_version=torch.__version__,
        timing=timing, step_peak={"measured_bytes": peak, "method": method}, peer=peer)
