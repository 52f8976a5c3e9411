"""``trace_lab.from_thunder``: lightning-thunder's own traces in the lab's views.

Users of Thunder already have traces (``thunder.last_traces(jfn)``). This turns them into a
:class:`~trace_lab.report.report.Report` with the lab's views: every trace Thunder's passes made
(one stage each) as Thunder printed it with per-line live memory, the fused regions as Thunder
formed them (``nvFusion0``, ``TorchCompile0``), the before/after graph and the memory curve.
The conversion is :mod:`trace_lab.capture.thunder`; the memory figures are the lab's liveness
model on Thunder's programs.

Given the arguments the function was called with, it also measures: it runs Thunder's compiled
forward (``computation_fn``) and backward (``backward_fn``) once more, exactly the programs of the
last traces, as Thunder's autograd runs them (the backward handed the saved tensors in a list it
clears), under the same measurement as every trace_lab run (:mod:`trace_lab.runtime.measure`:
``max_memory_allocated`` on CUDA, the profiler's allocator events on CPU); and it checks those
outputs and gradients against eager PyTorch (the function Thunder jitted, run plainly).
"""
from __future__ import annotations

import datetime

import torch

from ..analysis.op_scratch import OpScratch
from ..capture.thunder import ThunderTrace, del_agreement, from_thunder_trace, thunder_stage_name
from ..runtime.op_scratch import measure_op_scratch
from ..run.python_warnings import kept_on_report
from ..ir.printer import format_bytes
from ..report.report import Report, part_summary
from ..run.compilation import CompilationRecord
from ..report.view_model import PartView, ViewModel, graphs_of, stage_view
from ..runtime.measure import CpuMemoryWindows, measure_peak
from ..run.compare import Snapshot, compare_runs

__all__ = ["from_thunder"]


def _thunder():
    try:
        import thunder
    except Exception as e:  # noqa: BLE001 - ImportError, or a thunder built for another torch
        raise ImportError(f"trace_lab.from_thunder needs lightning-thunder importable here ({type(e).__name__}: {e})") from e
    return thunder



def _stages(traces, kind: str, caller_held: set[str], notes: list[str], groups=None) -> list[ThunderTrace]:
    out = []
    for i, t in enumerate(traces):
        stage = thunder_stage_name(t, i)
        try:
            out.append(from_thunder_trace(t, kind, stage, caller_held, groups))
        except Exception as e:  # noqa: BLE001 - one trace that does not convert must not lose the others
            notes.append(f"{kind} trace {i} ('{stage}') not shown: {type(e).__name__}: {e}")
    table = OpScratch()  # the run stage measures the ops' scratch once; every stage reads the same records
    for t in out:
        t.op_scratch = table
        measure_op_scratch(t)
    return out


def _is_trace(obj) -> bool:
    return hasattr(obj, "bound_symbols")


@kept_on_report
def from_thunder(jfn_or_trace, *args, name: str | None = None, check: bool = True, **kwargs) -> Report:
    """The lab's Report of a Thunder-jitted function's last traces (module docstring).

    ``jfn_or_trace``: a function or module returned by ``thunder.jit`` that has run, or one Thunder
    ``TraceCtx`` (or a list of them, shown as the stages of one forward program). ``*args, **kwargs``:
    what it was called with; given, the forward and backward are measured and checked against eager
    (``check=False`` skips the eager check); without them the figures are predictions only."""
    thunder = _thunder()
    notes: list[str] = []
    if _is_trace(jfn_or_trace) or (isinstance(jfn_or_trace, (list, tuple)) and jfn_or_trace
                                   and all(_is_trace(t) for t in jfn_or_trace)):
        traces = list(jfn_or_trace) if isinstance(jfn_or_trace, (list, tuple)) else [jfn_or_trace]
        if args or kwargs:
            raise TypeError("from_thunder(trace) shows a trace; to measure, pass the thunder.jit function and its arguments")
        return _report(name or "thunder trace", _stages(traces, "forward", set(), notes), [], notes, None, None, thunder)
    try:
        fw = list(thunder.last_traces(jfn_or_trace) or [])
    except Exception as e:  # noqa: BLE001 - thunder raises when the function never ran
        raise ValueError(f"from_thunder: {jfn_or_trace!r} has no Thunder traces ({type(e).__name__}: {e}); "
                         "pass a function returned by thunder.jit, after calling it once") from e
    if not fw:
        raise ValueError("from_thunder: the Thunder-jitted function has not run yet: call it once first")
    bw = list(thunder.last_backward_traces(jfn_or_trace) or [])
    fw_stages = _stages(fw, "forward", set(), notes)
    if not fw_stages:
        raise ValueError("from_thunder: none of the forward traces could be read: " + "; ".join(notes))
    groups, held = _saved_storage(fw_stages[-1], _flat_output_names(fw[-1]))
    bw_stages = _stages(bw, "backward", held, notes, groups)
    for st in (fw_stages[-1:] + bw_stages[-1:]):
        notes += [f"{st.kind}: {p}" for p in del_agreement(st)]
    measured = checked = None
    if args or kwargs:
        fw_stages[-1] = _with_measured_regions(fw[-1], fw_stages[-1], notes)
        if bw_stages:
            bw_stages[-1] = _with_measured_regions(bw[-1], bw_stages[-1], notes)
        measured, checked = _measure(thunder, jfn_or_trace, args, kwargs, check, notes)
    fn = getattr(thunder.compile_data(jfn_or_trace), "fn", jfn_or_trace)
    label = name or getattr(fn, "__name__", None) or type(fn).__name__
    return _report(label, fw_stages, bw_stages, notes, measured, checked, thunder, jfn_or_trace)


def _with_measured_regions(ctx, trace: ThunderTrace, notes: list[str]) -> ThunderTrace:
    """The last stage joined to what each of Thunder's fusions does when called alone on inputs of the
    recorded shapes (its output layout and the workspace inside the call), as trace_lab's executors
    record their own regions; the liveness model then counts that workspace on the fusion's line."""
    from ..runtime.call_memory import measure_workspace
    from ..analysis.buffers import default_rounding
    from ..analysis.region_record import RegionRecord

    fusions = {str(b.sym.name): b for b in ctx.bound_symbols if getattr(b.sym, "is_fusion", False)}
    rounding = default_rounding(trace)
    records = {}
    for node in trace.ops:
        bsym = fusions.get(str(node.target)) if node.op == "call_module" else None
        fn = (getattr(bsym, "_call_ctx", None) or {}).get(str(node.target)) if bsym is not None else None
        if fn is None:
            continue
        vals = {trace.name(a): a.meta.get("val") for a in node.args}
        call_args = [vals.get(getattr(a, "name", None), getattr(a, "value", a)) for a in bsym.args]
        try:
            ws, out_bytes, (aliases, storage) = measure_workspace(fn, call_args, rounding)
        except Exception as e:  # noqa: BLE001 - an unmeasured fusion is said, not fatal
            notes.append(f"{trace.kind}: {node.target} not measured alone ({type(e).__name__}: {e})")
            continue
        records[node.name] = RegionRecord(op=node.name, name=str(node.target), compiled=True, executor="thunder",
                                          aliases=tuple(aliases), output_storage_bytes=tuple(storage),
                                          workspace_bytes=ws, output_bytes=out_bytes)
    return trace.with_regions(records) if records else trace


def _saved_storage(forward: ThunderTrace, outputs: set[str]) -> tuple[dict[str, str], set[str]]:
    """Per value of the forward, the buffer it lives in (the liveness model's, so a saved view and its base
    share one), and the values whose buffer the caller still holds when the backward runs: the forward's
    inputs, its outputs, and views of either."""
    from ..analysis.buffers import Buffers

    buf = Buffers(forward)
    groups = {forward.name(n): f"buffer{bids[0]}" for n, bids in buf.values.items() if bids and bids[0] is not None}
    held_groups = {groups[forward.name(n)] for n in forward.inputs if forward.name(n) in groups}
    held_groups |= {groups[v] for v in outputs if v in groups}
    return groups, {v for v, g in groups.items() if g in held_groups}


def _flat_output_names(trace) -> set[str]:
    """Names of the forward's outputs that it also saves for the backward: the caller holds the outputs."""
    ret = next((b for b in reversed(trace.bound_symbols) if str(b.sym.name) in ("python_return", "return")), None)
    if ret is None or not ret.args or not isinstance(ret.args[0], dict):
        return set()
    flat = ret.args[0].get("flat_output") or ()
    return {p.name for p in flat if hasattr(p, "name")}


def _device(tensors) -> torch.device:
    return next((t.device for t in tensors if isinstance(t, torch.Tensor)), torch.device("cpu"))


def _measure(thunder, jfn, args, kwargs, check: bool, notes: list[str]):
    """Run Thunder's compiled forward and backward once more, measured; compare with eager."""
    cd = thunder.compile_data(jfn)
    entry, inps, _ = cd.get_computation_and_inputs(*args, **kwargs)
    device = _device(inps)
    results: dict = {}
    windows = CpuMemoryWindows() if device.type == "cpu" else None
    if windows is not None:
        windows.start()

    def measured(kind, run, call_args):
        if windows is not None:
            return windows.run(run, call_args, lambda peak, method: results.update({kind: (peak, method)}))
        out, peak, method = measure_peak(run, call_args, device)
        results[kind] = (peak, method)
        return out

    try:
        result = measured("forward", lambda a: entry.computation_fn(*a), list(inps))
        grads = None
        if entry.backward_fn is not None:
            data, (saved_tensors, saved_other) = result
            del result
            cotangents = [torch.ones_like(o) if isinstance(o, torch.Tensor) else None for o in data["flat_output"]]
            handed = ([list(saved_tensors), list(saved_other)], cotangents)
            del saved_tensors, cotangents
            grads = measured("backward", lambda a: entry.backward_fn(*a), handed)
            del handed
            outputs = data["output"]
            flat_args = list(data["flat_args"])
        else:
            outputs, flat_args = result, []
    finally:
        if windows is not None:
            windows.close()
    comparison = None
    if check:
        comparison = _compare_with_eager(cd.fn, args, kwargs, outputs, flat_args, grads)
    return results, comparison


def _tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return []


def _compare_with_eager(fn, args, kwargs, outputs, flat_args, grads):
    """Thunder's outputs and gradients (``backward_fn`` with ones as cotangents) vs eager's, by trace_lab's rule."""
    with torch.enable_grad():
        eager_out = fn(*args, **kwargs)
    eager_outs = _tensors(eager_out)
    wrt = [a for a in flat_args if isinstance(a, torch.Tensor) and a.requires_grad]
    eager_grads: list = []
    if grads is not None and wrt:
        diff = [o for o in eager_outs if o.requires_grad]
        got = torch.autograd.grad(diff, wrt, [torch.ones_like(o) for o in diff], allow_unused=True)
        by_id = {id(a): g for a, g in zip(wrt, got)}
        eager_grads = [by_id.get(id(a)) for a in flat_args if isinstance(a, torch.Tensor) and a.requires_grad]
    thunder_grads = [g for a, g in zip(flat_args, grads or ()) if isinstance(a, torch.Tensor) and a.requires_grad]
    compiled = Snapshot([t.detach() for t in _tensors(outputs)], [g.detach() if g is not None else None
                                                                   for g in thunder_grads], [])
    eager = Snapshot([t.detach() for t in eager_outs], [g.detach() if g is not None else None for g in eager_grads], [])
    return compare_runs(compiled, eager)


def _report(label, fw_stages, bw_stages, notes, measured, comparison, thunder, jfn=None) -> Report:
    parts, programs_entry, memory = [], {"index": 0, "reason": "first compile", "inputs": []}, []
    live = {}
    for kind, stages in (("forward", fw_stages), ("backward", bw_stages)):
        if not stages:
            continue
        parts.append(PartView(f"{kind} #0", kind, 0, 0, [stage_view(t) for t in stages],
                              graphs_of(stages[0], stages[-1])))
        live[kind] = CompilationRecord(0, kind, list(stages), executor="thunder")
        summary = part_summary(live[kind], False)
        summary["executor"] = "thunder"
        summary["regions"] = []  # Thunder's fusions carry no trace_lab compile records (cache hits, seconds)
        summary["notes"] = [n for n in notes if n.startswith(kind)]
        programs_entry[kind] = summary
        if measured is not None and kind in measured:
            peak, method = measured[kind]
            memory.append({"program": 0, "kind": kind,
                           "predicted_peak_above_inputs_bytes": stages[-1].liveness().peak_above_inputs_bytes,
                           "measured_peak_above_inputs_bytes": peak, "method": method})
    device = str(fw_stages[-1].device) if fw_stages else "cpu"
    executors = []
    if jfn is not None:
        try:
            executors = [getattr(e, "name", str(e)) for e in thunder.compile_data(jfn).executors_list
                         if not str(getattr(e, "name", "")).startswith("__")]  # not the ad-hoc executor
        except Exception:  # noqa: BLE001 - only a label
            executors = []
    compile_seconds = _compile_seconds(thunder, jfn)
    warnings = [n for n in notes if "not shown" in n or "del " in n]
    for m in memory:
        if m["measured_peak_above_inputs_bytes"] is not None:
            pred, meas = m["predicted_peak_above_inputs_bytes"], m["measured_peak_above_inputs_bytes"]
            if abs(pred - meas) > 0.01 * meas + 1024:
                warnings.append(f"{m['kind']}: predicted peak {format_bytes(pred)} vs measured {format_bytes(meas)} "
                                "(more than 1% + 1 KiB apart)")
    return Report(
        name=label, options={"fusion": "thunder", "executor": "thunder"}, device=device,
        executor_reasons=[f"lightning-thunder {getattr(thunder, '__version__', '?')}"
                          + (f": executors {', '.join(executors)}" if executors else "")],
        programs=[programs_entry], compile_seconds=compile_seconds, first_run_seconds=0.0, steady_seconds=None,
        run_seconds=[], comparison=comparison.to_dict() if comparison is not None else None, memory=memory,
        warnings=warnings, created=datetime.datetime.now().isoformat(timespec="seconds"),
        torch_version=torch.__version__, view=ViewModel(parts, None),
        compilations=list(live.values()))


def _compile_seconds(thunder, jfn) -> dict:
    """Thunder's own clocks of its last compile (tracing; transforms of prologue and computation)."""
    out = {"capture": 0.0, "passes": 0.0, "executor": 0.0, "total": 0.0}
    if jfn is None:
        return out
    try:
        cs = thunder.compile_stats(jfn)
        span = lambda a, b: max(0, (getattr(cs, b, 0) or 0) - (getattr(cs, a, 0) or 0)) / 1e9  # noqa: E731
        out["capture"] = span("last_trace_tracing_start", "last_trace_tracing_stop")
        out["passes"] = (span("last_prologue_transformation_start", "last_prologue_transformation_stop")
                         + span("last_computation_transformation_start", "last_computation_transformation_stop"))
    except Exception:  # noqa: BLE001 - clocks are extra
        pass
    out["total"] = out["capture"] + out["passes"]
    return out
