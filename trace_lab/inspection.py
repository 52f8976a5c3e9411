"""inspect: compile, run, check and measure one call, returning a Report.

The sequence, chosen so that each figure is measured undisturbed:

1. eager reference on a deep copy of (fn, args): outputs, grads, values;
2. first call of the jitted function (+ backward when the output needs grad),
   timed: compile happens here; its outputs/grads are compared with (1);
3. one call under memory measurement (per-program measured peak);
4. ``runs`` timed calls -> steady-state median;
5. in a multi-process run whose programs hold collectives (``measure_comm``
   None = auto: only when ``runs > 0``): one call with every wait instrumented,
   then a calibration of the collectives
   (:mod:`trace_lab.distributed.comm_measure`) -> ``Report.comm``.

Side effects (an optimizer step, gradient accumulation) repeat on each call;
``runs=0`` does only steps 1-2 (and 3 if ``measure_memory``).
"""
from __future__ import annotations

import time

import torch

from . import compare
from .jit import JitFunction, jit
from .measure import median, synchronize, time_host_device

__all__ = ["inspect", "default_loss"]


def default_loss(out):
    """Sum of every floating output that requires grad (None when there is none)."""
    ts = [t for t in compare.output_tensors(out) if t.requires_grad and t.is_floating_point()]
    if not ts:
        return None
    return sum(t.float().sum() for t in ts)


def _device_of(fn, args) -> torch.device:
    for t in compare.reachable_tensors(fn, args):
        return t.device
    return torch.device("cpu")


def inspect(fn, *args, fusion: str = "none", executor: str = "auto", fusion_cache: bool = True,
            sort_waits: bool = True, fsdp: str | None = None, runs: int = 5, backward: bool | None = None,
            loss=None, name: str | None = None, check: bool = True, measure_memory: bool = True,
            progress=None, measure_comm: bool | None = None, **extra):
    """Compile ``fn``, run ``fn(*args)`` (and its backward), check it against eager, measure it.

    ``backward``: None runs the backward when an output requires grad; ``loss(out)``
    gives the scalar to differentiate (default: sum of outputs). ``progress(msg)``
    is called at each step (the notebook shows it).
    """
    from .report import Report

    say = progress or (lambda msg: None)
    loss_fn = loss or default_loss
    device = _device_of(fn, args)
    warnings: list[str] = []

    def call(f, a):
        out = f(*a)
        do_bw = backward if backward is not None else True
        if do_bw:
            lv = loss_fn(out)
            if lv is not None:
                lv.backward()
            elif backward:
                warnings.append("backward=True but no output requires grad; no backward ran")
        return out

    eager_snap = None
    if check:
        say("running eager reference")
        ref = compare.deepcopy_for_reference(fn, args)
        if ref is None:
            warnings.append("eager reference skipped: the function or its arguments cannot be deep-copied")
        else:
            ref_fn, ref_args = ref
            random_state = compare.RandomState.capture()  # the compiled run draws what eager drew
            ref_out = call(ref_fn, ref_args)
            eager_snap = compare.snapshot(ref_out, ref_fn, ref_args)
            random_state.restore()
            del ref, ref_fn, ref_args, ref_out

    jfn = fn if isinstance(fn, JitFunction) else jit(fn, fusion=fusion, executor=executor, fusion_cache=fusion_cache,
                                                    sort_waits=sort_waits, fsdp=fsdp, **extra)
    target = jfn.fn
    say("compiling and running the first call")
    synchronize(device)
    started = time.perf_counter()
    out = call(jfn, args)
    synchronize(device)
    first_run = time.perf_counter() - started
    comparison = None
    if eager_snap is not None:
        comparison = compare.compare_runs(compare.snapshot(out, target, args), eager_snap)
        if not comparison.ok:
            warnings.append("differs from eager: " + "; ".join(comparison.problems[:3]))
        if comparison.note:  # not an exact comparison (random ops): say how it compared
            warnings.append(comparison.note)
    del out
    if not jfn.programs:
        warnings.append("no program was compiled: the function ran no tensor operations that torch.compile captured")

    n_measure = len(jfn.measurements)
    if measure_memory:
        say("measuring peak memory")
        with jfn.measuring():
            call(jfn, args)
    measurements = jfn.measurements[n_measure:]

    times: list[float] = []
    timing = None
    if runs > 0:
        say(f"timing {runs} runs")
        timed = time_host_device(lambda: call(jfn, args), device, runs)  # host and (CUDA) device time per call
        times, timing = timed.seconds, timed.to_dict()
    comm = None
    if measure_comm or (measure_comm is None and runs > 0 and _multi_process_collectives(jfn)):
        say("measuring exposed communication (wait stalls, collective calibration)")
        from .distributed.comm_measure import measure_comm as _measure_comm

        comm = _measure_comm(lambda: call(jfn, args), device, jfn=jfn, steps=1, iter_seconds=median(times))
    return Report.from_run(jfn, name=name, device=device, first_run_seconds=first_run,
                           steady_seconds=median(times), run_seconds=times, comparison=comparison,
                           measurements=measurements, warnings=warnings, comm=comm, timing=timing)


def _multi_process_collectives(jfn) -> bool:
    """True in a process group of 2+ ranks when a compiled program waits for a collective."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return False
    wait = torch.ops._c10d_functional.wait_tensor.default
    return any(n.op == "call_function" and n.target is wait
               for p in jfn.programs for part in p.parts if part.traces for n in part.traces[-1].ops)
