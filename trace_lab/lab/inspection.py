"""inspect: compile, run, check and measure one call, returning a Report.

The sequence, chosen so that each figure is measured undisturbed:

1. eager reference on a deep copy of (fn, args): outputs, grads, values;
2. first call of the jitted function (+ backward when the output needs grad),
   timed: compile happens here; its outputs/grads are compared with (1);
3. one call under memory measurement (per-program measured peak);
4. ``runs`` timed calls -> steady-state median, their spread, and whether other processes competed for
   the CPUs meanwhile (:func:`trace_lab.runtime.measure.time_host_device`; nothing of the lab draws while
   a program is timed or measured: :func:`~trace_lab.runtime.measure.undisturbed`);
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

from ..run import compare
from ..run.loss import default_loss, default_loss_copies_gradient
from ..errors import nothing_captured
from ..run.jit import JitFunction
from ..run.python_warnings import kept_on_report
from ..options import OPTIONS, Options, check_option, names, with_signature
from ..runtime.measure import (OtherLoad, measure_peak, median, synchronize, time_host_device,
                               undisturbed)
from ..capture.session import program_parts

__all__ = ["inspect", "default_loss"]



def _device_of(fn, args) -> torch.device:
    for t in compare.reachable_tensors(fn, args):
        return t.device
    return torch.device("cpu")


@with_signature
@kept_on_report
def inspect(fn, *args, loss=None, progress=None, kwargs: dict | None = None, **options):
    """Compile ``fn``, run ``fn(*args, **kwargs)`` (and its backward), check it against eager, measure it.

    The options are those of :data:`trace_lab.options.SCHEMA` offered to ``inspect`` (the signature
    lists them): every :func:`trace_lab.run.jit` option, and ``runs``, ``check``, ``backward``, ``name``,
    ``measure_memory``, ``measure_comm``. ``backward``: None runs the backward when an output requires
    grad; ``loss(out)`` gives the scalar to differentiate (default: sum of outputs). ``progress(msg)``
    is called at each step (the notebook shows it).

    Keyword arguments of ``fn``: ``kwargs={...}`` always goes to ``fn``. A keyword that is
    not a trace_lab option goes to ``fn`` too when ``fn``'s signature names it
    (``inspect(F.softmax, x, dim=-1)``); a trace_lab option of the same name wins, so pass such a
    keyword through ``kwargs=``. Any other keyword is a TypeError that names the options and
    ``fn``'s parameters.
    """
    from ..report import Report

    given, fn_kwargs = _split_keywords(fn, options, kwargs)
    opts = {n: check_option(n, given.get(n, OPTIONS[n].default)) for n in names("inspect")}
    runs, backward, fsdp = opts["runs"], opts["backward"], opts["fsdp"]
    if fsdp and not isinstance(fn, JitFunction):
        # shard a plain module now, as jit would: the eager reference below is then the sharded module's run
        from ..distributed.sharding import shard_for_jit

        fn = shard_for_jit(fn, fsdp)
    say = progress or (lambda msg: None)
    loss_fn = loss or default_loss
    all_args = args + tuple(fn_kwargs.values())  # what the reference copies and the comparison walks
    device = _device_of(fn, all_args)
    warnings: list[str] = []

    def call(f, a, kw=fn_kwargs):
        out = f(*a, **kw)
        do_bw = backward if backward is not None else True
        if do_bw:
            lv = loss_fn(out)
            if lv is not None:
                lv.backward()
            elif backward:
                warnings.append("backward=True but no output requires grad; no backward ran")
        return out

    eager_snap = None
    if opts["check"]:
        say("running eager reference")
        ref = compare.deepcopy_for_reference(fn, all_args)
        if ref is None:
            warnings.append(f"eager reference skipped: {compare.why_not_copyable(fn, args, fn_kwargs)}; this run "
                            "is not checked against eager")
        else:
            ref_fn, ref_args = ref
            ref_kwargs = dict(zip(fn_kwargs, ref_args[len(args):]))
            _seed(opts["seed"])
            random_state = compare.RandomState.capture()  # the compiled run draws what eager drew
            ref_out = call(ref_fn, ref_args[:len(args)], ref_kwargs)
            eager_snap = compare.snapshot(ref_out, ref_fn, ref_args)
            random_state.restore()
            del ref, ref_fn, ref_args, ref_kwargs, ref_out

    # said before the jit is made: making one whose regions Inductor compiles imports Inductor (~2 s, once per
    # process, as making torch.compile(fn) does), which is the compiler's time, not the eager reference's
    say("compiling and running the first call")
    jfn = fn if isinstance(fn, JitFunction) else JitFunction(fn, Options(**{n: opts[n] for n in names("jit")}))
    # which of the backward's gradients AOTAutograd copies (torch before 2.13: analysis/handover.py): the default
    # loss's rule, or none of them for a custom loss (its gradients are fresh tensors autograd makes)
    jfn.gradients_copied = default_loss_copies_gradient if loss is None else None
    target = jfn.fn
    _seed(opts["seed"])
    synchronize(device)
    load = OtherLoad()  # what other processes used meanwhile: a busy machine inflates the first call too
    started = time.perf_counter()
    out = call(jfn, args)
    synchronize(device)
    first_run = time.perf_counter() - started
    first_run_others = load.share()
    comparison = None
    if eager_snap is not None:
        comparison = compare.compare_runs(compare.snapshot(out, target, all_args), eager_snap)
        if not comparison.ok:
            warnings.append("differs from eager: " + "; ".join(comparison.problems[:3]))
        if comparison.note:  # not an exact comparison (random ops): say how it compared
            warnings.append(comparison.note)
    del out
    if not jfn.programs:
        warnings.append(f"no program was compiled: {nothing_captured(jfn, all_args)}")

    n_measure = len(jfn.measurements)
    if opts["measure_memory"]:
        say("measuring peak memory")
        with undisturbed(), jfn.measuring():  # nothing of the lab draws meanwhile (issue 26 item 3)
            call(jfn, args)
    measurements = jfn.measurements[n_measure:]
    step_peak = None
    if opts["measure_step"]:  # the whole call, as a --baseline peer is measured (run/peers.py)
        say("measuring the peak of the whole call")
        with undisturbed():
            _, peak, method = measure_peak(lambda boxed: call(jfn, boxed), args, device)
        step_peak = {"measured_bytes": peak, "method": method}
    gap = _collective_scratch_note(jfn, measurements, device)
    if gap:
        warnings.append(gap)

    times: list[float] = []
    timing = None
    if runs > 0:
        say(f"timing {runs} runs")
        timed = time_host_device(lambda: call(jfn, args), device, runs)  # host and (CUDA) device time per call
        times, timing = timed.seconds, timed.to_dict()
    line_times = None
    calls = opts["profile_calls"]
    if calls > 1 and not opts["profile"]:
        warnings.append(f"profile_calls={calls} without profile: no line was timed (add profile=True, or --profile "
                        "in the magic)")
    if opts["profile"]:  # time every line of more calls (the Trace tab's time column, the Timeline tab)
        say(f"timing every trace line (torch.profiler{f', median of {calls} calls' if calls > 1 else ''})")
        from ..errors import TraceLabError
        from ..run.line_profile import profile_lines

        try:
            with undisturbed():  # (profile_lines keeps kineto's USDT lines off the cell's stderr itself)
                line_times = profile_lines(jfn, *args, loss=loss_fn, kwargs=fn_kwargs, repeat=calls).to_dict()
        except TraceLabError as e:
            warnings.append(f"profile: {e}")
    comm = None
    measure_comm = opts["measure_comm"]
    if measure_comm or (measure_comm is None and runs > 0 and _multi_process_collectives(jfn)):
        say("measuring exposed communication (wait stalls, collective calibration)")
        from ..distributed.comm_measure import measure_comm as _measure_comm

        comm = _measure_comm(lambda: call(jfn, args), device, jfn=jfn, steps=1, iter_seconds=median(times))
    return Report.from_run(jfn, name=opts["name"], device=device, first_run_seconds=first_run,
                           first_run_others_share=first_run_others, steady_seconds=median(times), run_seconds=times, comparison=comparison,
                           measurements=measurements, warnings=warnings, comm=comm, timing=timing,
                           step_peak=step_peak, line_times=line_times)


def _seed(seed: int | None) -> None:
    """``seed=``: the eager reference and the compiled run each start from ``torch.manual_seed(seed)``."""
    if seed is not None:
        torch.manual_seed(seed)


def _split_keywords(fn, extra: dict, kwargs: dict | None) -> tuple[dict, dict]:
    """(inspect's options, fn's keyword arguments) from inspect's ``**options`` and ``kwargs=``."""
    import difflib
    import inspect as pyinspect

    option_names = set(names("inspect"))
    fn_kwargs = dict(kwargs or {})
    try:
        params = pyinspect.signature(fn.fn if isinstance(fn, JitFunction) else fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        params = None
    named = {n for n, p in (params or {}).items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    options, unknown = {}, []
    for key, value in extra.items():
        if key in option_names:
            options[key] = value
        elif key in named:
            if key in fn_kwargs:
                raise TypeError(f"trace_lab.inspect got {key!r} both as a keyword and in kwargs=; give it once")
            fn_kwargs[key] = value
        else:
            unknown.append(key)
    if unknown:
        known = [n for n in pyinspect.signature(inspect).parameters if n not in ("fn", "args")]
        fn_name = getattr(fn, "__name__", type(fn).__name__)
        if params is None:
            theirs = f"nor a keyword of {fn_name} (its signature cannot be read: it takes keywords through kwargs= only)"
        else:
            theirs = f"nor a parameter of {fn_name}({', '.join(map(str, params.values()))})"
            if any(p.kind == p.VAR_KEYWORD for p in params.values()):
                theirs += " (its **kwargs are not guessed: a misspelt option would land there)"
        hints = [f"{u!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(u, known + sorted(named), 1))
                 else repr(u) for u in unknown]
        raise TypeError(f"trace_lab.inspect got unexpected keyword{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(hints)}: neither a trace_lab option ({', '.join(known)}) {theirs}. Pass "
                        f"{fn_name}'s own keyword arguments as kwargs={{{unknown[0]!r}: ...}}.")
    return options, fn_kwargs


def _collective_scratch_note(jfn, measurements, device) -> str | None:
    """Why a CPU run with collectives measures more than it predicts, when it does (issue 18, notebook 05).

    gloo's collectives allocate buffers for themselves that are no value of the program. Seen with the
    profiler on a ZeRO-3 chain of Linear layers (2 ranks): each all-gather stages the full tensor in one of
    gloo's worker threads (and the calling thread holds a shard-sized copy), and the backward, whose
    reduce-scatters and all-gathers are its only ops without a single-process twin, allocates 0.9 MB more
    than its values in the calling thread (not attributed op by op). A single-process run measures what
    it predicts. The liveness model counts the program's values only, so the measured peak lies above
    the predicted one, by an amount that varies between ranks and runs (the worker threads' timing)."""
    if device.type != "cpu" or not _multi_process_collectives(jfn):
        return None
    from ..ir.printer import format_bytes

    over = [(m, m.measured_peak_above_inputs - m.predicted_peak_above_inputs) for m in measurements
            if m.measured_peak_above_inputs is not None]
    over = [(m, d) for m, d in over if d > 0.01 * m.predicted_peak_above_inputs + 1024]  # the CPU tolerance
    if not over:
        return None
    gaps = ", ".join(f"{m.kind} #{m.program} +{format_bytes(d)}" for m, d in over)
    return (f"measured peaks above predicted ({gaps}): the measurement counts the buffers gloo's collectives "
            "allocate for themselves (an all-gather stages the full tensor in gloo's worker threads), which are no "
            "value of the program, so the liveness model does not count them; the measured figure varies between "
            "ranks and runs, the predicted one is the program's own")


def _multi_process_collectives(jfn) -> bool:
    """True in a process group of 2+ ranks when a compiled program waits for a collective."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return False
    wait = torch.ops._c10d_functional.wait_tensor.default
    return any(n.op == "call_function" and n.target is wait
               for _, _, part in program_parts(jfn) for n in part.traces[-1].ops)
