"""trace_lab: see what a PyTorch compiler did to your program, and why it is slow or big.

Public API::

    jfn = trace_lab.jit(fn_or_module, fusion=..., executor=...)
    out = jfn(*args)
    trace_lab.last_traces(jfn)[-1]          # final forward Trace, printable
    trace_lab.last_backward_traces(jfn)     # backward stages ([] if none ran)
    report = trace_lab.inspect(fn, *args)   # compile + run + measure -> Report
    report = trace_lab.from_compile(fn, *args)  # torch.compile's own program (Inductor's kernels) -> Report

In IPython/Jupyter: ``%load_ext trace_lab`` registers ``%%thunder_trace``.
"""
import torch as _torch

from .torch_support import check_torch as _check_torch

_check_torch(_torch.__version__)

from .errors import TraceLabError  # noqa: E402 - after the torch check
from .run.jit import FUSION_STRATEGIES, JitFunction, Options, jit, last_backward_traces, last_traces  # noqa: E402
from .options import with_signature  # noqa: E402
from .ir.trace import Trace  # noqa: E402

__version__ = "0.1.0"


@with_signature
def inspect(fn, *args, loss=None, progress=None, kwargs=None, **options):
    """Compile, run and measure ``fn(*args)``; returns a :class:`~trace_lab.report.Report`
    (:func:`trace_lab.lab.inspection.inspect`; the signature lists the options)."""
    from .lab.inspection import inspect as _inspect

    return _inspect(fn, *args, loss=loss, progress=progress, kwargs=kwargs, **options)


def predict(fn, *args, **kwargs):
    """Predicted peak memory per fusion strategy, computed on the meta device without allocating
    (:func:`trace_lab.run.predict.predict`)."""
    from .run.predict import predict as _predict

    return _predict(fn, *args, **kwargs)


def explain_peak(fn, *args, **options):
    """Run ``fn(*args)`` as :func:`inspect` does, break one part's peak down (the buffers alive on its peak line, by
    kind and source line) and price the remedies on the meta device; ``.try_remedy(name)`` reruns with one and
    measures its saving beside the prediction (:mod:`trace_lab.lab.peak`). ``Report.explain_peak()`` gives the
    breakdown of a run already inspected."""
    from .lab.peak import explain_peak as _explain_peak

    try:  # a displayed explanation is the notebook's Peak panel (Try buttons) where ipywidgets is installed
        from .notebook import lab_panels  # noqa: F401 - registers lab.peak.PANEL
    except ImportError:
        pass
    return _explain_peak(fn, *args, **options)


def sweep(fn, *args, **options):
    """Step time against peak memory over a set of configurations (default: every fusion strategy and the
    partitioner's memory budget at 0.5 and 0): one row per configuration, predicted and measured peak, whether it
    matched eager, the configurations no other beats on both marked (:mod:`trace_lab.lab.sweep`)."""
    from .lab.sweep import sweep as _sweep

    return _sweep(fn, *args, **options)


def sweep_view(fn, *args, **options):
    """:func:`sweep` as a notebook widget: run in the background, a progress bar per configuration, the rows and
    the plot (measured and predicted peak) drawn as each configuration ends; ``.result`` is the Sweep
    (:mod:`trace_lab.notebook.lab_panels`)."""
    from .notebook.lab_panels import sweep_view as _sweep_view

    return _sweep_view(fn, *args, **options)


def saved_for_backward(jfn):
    """The tensors each forward keeps for its own backward: name, shape, dtype, bytes, op, source line, who
    holds it, whether it is cheap to recompute (:mod:`trace_lab.analysis.saved`); ``str()`` is a table. Call
    it after a forward and backward of ``jfn``. After a graph break every program whose backward ran is
    listed, each row with its ``program`` index."""
    from .analysis.saved import saved_for_programs
    from .capture.session import program_parts

    last_traces(jfn)  # checks jfn, says why when nothing ran
    pairs = [(p.index, p.forward.traces[-1], part.traces[-1]) for _, p, part in program_parts(jfn)
             if part.kind == "backward" and p.forward is not None and p.forward.traces]
    if not pairs:
        raise TraceLabError("saved_for_backward: run a forward and its backward through the jitted function first "
                            "(nothing is saved for a backward that has not been compiled)")
    return saved_for_programs(pairs)


def diff(a, b, kind: str = "forward", program: int | None = None):
    """What changed between two stages of one program (two Traces, e.g. ``last_traces(jfn)[0]`` and
    ``[-1]``), or between the ``kind`` program of two jitted functions (the same program compiled with
    other options; ``program=i``: the i-th of ``jfn.programs``, one per graph of a graph break; default: the
    one that ran last): ops fused, unfused, moved, added, removed, the live-memory change per op and why
    the peak moved (:mod:`trace_lab.analysis.diff`); ``str()`` reads as a summary."""
    from .analysis.diff import diff_traces
    from .run.jit import final_stage

    def stage(x):
        return x if isinstance(x, Trace) else final_stage(x, kind, program, "diff")

    return diff_traces(stage(a), stage(b))


def export_repro(trace_or_jfn, path, region=None, executor="inductor", kind="forward", program=None):
    """A standalone Python file that runs one program (or one fused region, ``region="fusion0"``) eagerly
    and through ``executor`` and compares them (:mod:`trace_lab.run.repro`); of a jitted function, its
    ``kind`` part of program ``program`` (one per graph of a graph break; default: the one that ran last)."""
    from .run.repro import export_repro as _export

    return _export(trace_or_jfn, path, region=region, executor=executor, kind=kind, program=program)


def region_ends(trace_or_jfn, kind: str = "forward", program: int | None = None) -> str:
    """Why each fused region of a final stage ends, at each boundary: the executor cannot fuse the
    neighbour, a cycle would form, the horizontal cap, the memory strategy's predicted rise, a collective
    (:mod:`trace_lab.passes.region_ends`). Data: ``trace.info["region_ends"]``. Of a jitted function:
    its ``kind`` part of program ``program`` (one per graph of a graph break; default: the one that ran last)."""
    from .passes.region_ends import format_region_ends
    from .run.jit import final_stage

    trace = trace_or_jfn if isinstance(trace_or_jfn, Trace) else \
        final_stage(trace_or_jfn, kind, program, "region_ends")
    return format_region_ends(trace.info.get("region_ends", {}))


def profile_lines(jfn, *args, loss=None, kwargs=None, repeat=1):
    """Host (and on CUDA device) time of every trace line of one more call of ``jfn(*args)`` (``repeat=N``: of N
    calls, each line's median), summed per source line too; ``.export_chrome_trace(path)`` for Perfetto
    (:mod:`trace_lab.run.line_profile`). Each timed call follows an untimed one in the same profiler session, so
    ``jfn`` runs twice per profiled call (an optimizer steps twice)."""
    from .run.line_profile import profile_lines as _profile

    return _profile(jfn, *args, loss=loss, kwargs=kwargs, repeat=repeat)


def region_code(jfn, region: str, kind: str = "forward") -> str:
    """The code the executor generated for one fused region of the last ``kind`` program (Inductor's output
    code with its kernels; for nvFuser, the region's program, its torch steps and segment calls with what each
    called name is, then its FusionDefinitions)."""
    from .run.jit import compiled_of, final_stage

    compiled = compiled_of(jfn, final_stage(jfn, kind, None, "region_code"))
    if compiled is None:
        raise TraceLabError(f"region_code: no {kind} program has run yet: call the jitted function first")
    try:
        return compiled.code_of(region)
    except KeyError as e:
        raise TraceLabError(f"region_code: {e.args[0]} (executor {compiled.executor})") from None


def load_report(path):
    """A Report saved with ``report.save_json(path)``: renders the same text and HTML as when it was saved."""
    from .report.load import load_report as _load_report

    return _load_report(path)


def from_thunder(jfn_or_trace, *args, name=None, check=True, **kwargs):
    """lightning-thunder's own traces (``thunder.jit`` function after a call, or a ``TraceCtx``) as a trace_lab
    Report: each of Thunder's traces with per-line live memory, its fusions as regions, the graph; given the
    call's arguments, Thunder's forward and backward measured and checked against eager
    (:mod:`trace_lab.lab.thunder_view`)."""
    from .lab.thunder_view import from_thunder as _from_thunder

    return _from_thunder(jfn_or_trace, *args, name=name, check=check, **kwargs)


def from_compile(fn, *args, name=None, check=True, **kwargs):
    """The program torch.compile (Inductor) runs for ``fn(*args, **kwargs)`` as a trace_lab Report: AOTAutograd's
    forward and backward after Inductor's post-grad passes, in the order Inductor's kernels run, each generated
    kernel a region, with per-line live memory and graphs; each compiled program measured (forward, backward)
    and checked against eager (:mod:`trace_lab.lab.compile_view`). ``diff(report.traces()[-1], other)`` compares
    it with any trace_lab trace."""
    from .lab.compile_view import from_compile as _from_compile

    return _from_compile(fn, *args, name=name, check=check, **kwargs)


def load_ipython_extension(ipython):  # pragma: no cover - exercised by the notebook tests
    from .notebook.magics import load_ipython_extension as _load

    _load(ipython)


__all__ = ["jit", "last_traces", "last_backward_traces", "inspect", "predict", "saved_for_backward", "diff", "export_repro", "region_ends", "profile_lines", "region_code", "load_report", "from_thunder", "from_compile", "Trace", "Options", "JitFunction",
           "TraceLabError", "FUSION_STRATEGIES"]
