"""``trace_lab.from_compile``: the program torch.compile (Inductor) runs, as the lab's traces.

``from_compile(fn, *args)`` compiles ``fn`` with torch.compile's default backend, Inductor, unchanged;
:mod:`trace_lab.capture.inductor_program` keeps each graph AOTAutograd handed Inductor as it stands after
Inductor's post-grad passes, which post-grad nodes each kernel computes (Inductor's provenance
tracking) and the output code. Each part becomes two stages: ``post-grad`` (the graph, one op a line)
and ``Inductor kernels`` (the same nodes in the order the kernels run, each generated kernel a region
named as Inductor named it, ``cpp_fused_gelu_0``; extern kernels such as ``mm`` one op each). The memory
column, graphs and curve are the lab's liveness model on that program.

Then it runs the compiled function once more, forward and backward (the default loss, differentiated
with ``torch.autograd.grad``, so no ``.grad`` is written), each of Inductor's compiled programs measured
as it is called (:mod:`trace_lab.runtime.measure`, as ``from_thunder`` measures Thunder's programs), and
checks outputs and gradients against eager PyTorch (:func:`trace_lab.run.compare.compare_runs`).
"""
from __future__ import annotations

import datetime
import inspect as _pyinspect
import time

import torch

from ..analysis.handover import owned_backward_inputs
from ..capture.inductor_program import InductorCapture, caches_off, kernel_units
from ..errors import TraceLabError
from ..run.python_warnings import kept_on_report
from ..ir.printer import format_bytes
from .inductor_reuse import planned_reuse_warnings, with_inplace_reuse
from ..ir.trace import Trace, is_getitem
from ..passes.regions import build_trace, computes_something
from ..report.report import Report, part_summary
from ..report.view_model import PartView, ViewModel, graphs_of, stage_view
from ..run.compare import (Snapshot, compare_runs, deepcopy_for_reference, output_tensors, reachable_tensors,
                           why_not_copyable)
from ..run.compilation import CompilationRecord
from ..run.loss import default_loss, default_loss_copies_gradient
from ..runtime.measure import CpuMemoryWindows, measure_peak
from ..runtime.op_scratch import measure_op_scratch

__all__ = ["from_compile", "SOURCE", "inductor_traces"]

SOURCE = "torch.compile (Inductor)"
_TOLERANCE = "1% + 1 KiB"


def _label(fn) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def _check_call(fn, args, kwargs) -> None:
    if not callable(fn):
        raise TraceLabError(f"from_compile: {type(fn).__name__} object is not callable; pass a function or an "
                            "nn.Module and the arguments to call it with")
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        sig = _pyinspect.signature(target)
    except (TypeError, ValueError):  # a builtin without a signature: the call itself will say
        return
    try:
        sig.bind(*args, **kwargs)
    except TypeError as e:
        raise TraceLabError(f"from_compile: {_label(fn)}{sig} cannot be called with {len(args)} positional and "
                            f"{len(kwargs)} keyword argument(s) ({e}); pass the arguments it needs after it: "
                            "from_compile(fn, *args, **kwargs)") from None


def _compile_error(label: str, e: BaseException) -> TraceLabError:
    inner = getattr(e, "inner_exception", None) or e
    first = (str(inner).strip().splitlines() or [type(inner).__name__])[0][:300]
    return TraceLabError(f"from_compile: torch.compile failed on {label}: {type(inner).__name__}: {first}")


@kept_on_report
def from_compile(fn, *args, name: str | None = None, check: bool = True, loss=None, **kwargs) -> Report:
    """The lab's Report of the program torch.compile runs for ``fn(*args, **kwargs)`` (module docstring).

    ``loss(out)``: the scalar the backward starts from (default: the sum of the floating outputs that require
    grad), differentiated with ``torch.autograd.grad``. A ``loss`` that returns None says that ``fn`` runs its
    own backward (a notebook cell's ``loss.backward()``): then ``fn`` and its arguments are deep-copied (once
    for torch.compile's calls, once for eager's), so the gradients it writes land in the copies (compared
    through ``.grad``), never in the caller's tensors."""
    _check_call(fn, args, kwargs)
    label = name or _label(fn)
    loss_fn = loss or default_loss
    own_backward = loss is not None and _runs_own_backward(loss)
    if own_backward:
        fn, (args, kwargs) = _copies(fn, (args, kwargs), label)
    capture = InductorCapture()
    compiled_fn = capture.compile(fn)
    wrt = [t for t in reachable_tensors(fn, args, kwargs) if t.requires_grad and t.is_leaf]

    def step():
        with torch.enable_grad():
            return _one_step(compiled_fn, args, kwargs, wrt, loss_fn, own_backward)

    started = time.perf_counter()
    try:
        with caches_off():
            step()  # compiles the forward and, differentiating, the backward
    except TraceLabError:
        raise
    except Exception as e:  # noqa: BLE001 - Dynamo's, AOTAutograd's or Inductor's failure, said in one line
        raise _compile_error(label, e) from e
    compile_s = time.perf_counter() - started
    if not capture.parts:
        raise TraceLabError(f"from_compile: torch.compile compiled no graph for {label} (no tensor operation "
                            "reached Inductor): there is no program to show")
    notes: list[str] = []
    stages = inductor_traces(capture, notes)
    device = _device(capture)
    measured: dict = {}
    out, grads = _measured_step(capture, step, device, measured)
    comparison = _compare_with_eager(fn, args, kwargs, wrt, out, grads, loss_fn, own_backward) if check else None
    return _report(label, capture, stages, notes, measured, comparison, device, compile_s)


def _device(capture) -> torch.device:
    for part in capture.parts:
        for n in part.gm.graph.nodes:
            v = n.meta.get("val")
            if isinstance(v, torch.Tensor):
                return v.device
    return torch.device("cpu")


def inductor_traces(capture: InductorCapture, notes: list[str]) -> dict[tuple[int, str], list[Trace]]:
    """(Dynamo graph, kind) -> the part's stages: the post-grad program and the same in Inductor's kernels."""
    out: dict[tuple[int, str], list[Trace]] = {}
    forwards = {p.graph: p for p in capture.parts if p.kind != "backward"}
    for part in sorted(capture.parts, key=lambda p: (p.kind == "backward", p.graph)):
        names, owned = list(part.input_names), {}
        graph_names = capture.graphs[part.graph] if part.graph < len(capture.graphs) else []
        fw = forwards.get(part.graph)
        if part.kind == "backward" and fw is not None and (part.graph, fw.kind) in out:
            fw_names = _value_names(out[(part.graph, fw.kind)][-1])
            names = [fw_names.get(n, n.replace("tangents_", "tangent_")) for n in part.input_names]
            owned = owned_backward_inputs(fw.gm, part.gm, default_loss_copies_gradient)
        else:
            names = graph_names + names[len(graph_names):]
        base = Trace(part.gm, part.kind, "post-grad", names, owned_inputs=owned,
                     info={"source": SOURCE, "output_code": part.output_code})
        measure_op_scratch(base)
        run_gm, units, unit_notes = kernel_units(part.gm, part.kernels)
        notes += [f"{part.kind}: {n}" for n in unit_notes]
        runs = Trace(run_gm, part.kind, "post-grad", names, owned_inputs=owned, op_scratch=base.op_scratch)
        measure_op_scratch(runs)  # the recomputed copies: the same signatures, read from the shared records
        final = build_trace(runs, units, "Inductor kernels",
                            info={"source": SOURCE, "output_code": part.output_code,
                                  "kernels": [{"name": k.name, "generated": k.generated, "nodes": list(k.nodes)}
                                              for k in part.kernels]})
        _name_regions(final, [u.kernel for u in units if u.fused and computes_something(u.nodes)])
        if part.reuses is None:
            notes.append(f"{part.kind}: Inductor's buffer reuse could not be read (its wrapper code was not "
                         "generated in this process): kernels writing over an input are priced as allocating")
        reuse_notes: list[str] = []
        afresh = final.liveness().peak_above_inputs_bytes
        final = with_inplace_reuse(final, part.gm, part.reuses, reuse_notes)
        # what Inductor's in-place reuse saves: the peak were every kernel output allocated afresh, as a program
        # whose regions are compiled one by one (trace_lab's) allocates them (their inputs are not donated)
        final.info["inplace_reuses"] = [{"kernel": str(n.target), "reuse": list(rec.details["inplace_reuse"])}
                                        for n in final.ops if n.op == "call_module"
                                        for rec in [(final.compiled_regions or {}).get(n.name)]
                                        if rec is not None and (rec.details or {}).get("inplace_reuse")]
        final.info["peak_without_inplace_reuse"] = afresh
        reuse_notes += planned_reuse_warnings(final, part.gm, part.reuses)
        notes += [n if n.startswith(part.kind) else f"{part.kind}: {n}" for n in reuse_notes]
        out[(part.graph, part.kind)] = [base, final]
    return out


def _value_names(trace: Trace) -> dict[str, str]:
    """Post-grad fx name -> printed name in a kernels stage: a region's outputs as the program names them
    (its inner nodes keep their post-grad names; the getitems outside are new nodes)."""
    out = {n.name: nm for n, nm in trace.names.items()
           if n.graph is trace.graph and not (is_getitem(n) and n.args[0].op == "call_module")}
    out.update({n.name: nm for n, nm in trace.names.items() if n.graph is not trace.graph})
    return out


def _name_regions(trace: Trace, kernels: list[str]) -> None:
    """The regions build_trace made (``fusionK``, in unit order) renamed after the kernels they are."""
    regions = [n for n in trace.ops if n.op == "call_module"]
    if len(regions) != len(kernels):
        return
    renamed, used = {}, {}
    for node, kernel in zip(regions, kernels):
        used[kernel] = used.get(kernel, 0) + 1
        new = kernel if used[kernel] == 1 else f"{kernel}_call{used[kernel]}"  # a Triton kernel called twice
        sub = trace.gm.get_submodule(node.target)
        delattr(trace.gm, node.target)
        trace.gm.add_module(new, sub)
        renamed[str(node.target)] = new
        node.target = new
        node.meta["region"] = dict(node.meta["region"], name=new, kernel=kernel)
    trace.info["regions"] = [dict(r, name=renamed.get(r["name"], r["name"])) for r in trace.info.get("regions", [])]
    trace.gm.recompile()


def _measured_step(capture, step, device, measured: dict):
    """One more forward and backward, each compiled program's call measured (``measured[(graph, kind)]``)."""
    windows = CpuMemoryWindows() if device.type == "cpu" else None

    def on_call(part, compiled, args):
        def record(peak, method):
            measured[(part.graph, part.kind)] = (peak, method)

        if windows is not None:
            return windows.run(compiled, args, record)
        outs, peak, method = measure_peak(compiled, args, device)
        record(peak, method)
        return outs

    capture.on_call = on_call
    if windows is not None:
        windows.start()
    try:
        return step()
    finally:
        capture.on_call = None
        if windows is not None:
            windows.close()


def _runs_own_backward(loss) -> bool:
    """Whether ``loss`` says the function runs its own backward: it returns None for any output."""
    try:
        return loss(None) is None
    except Exception:  # noqa: BLE001 - a real loss fails on None: it is one
        return False


def _copies(fn, call, label):
    copied = deepcopy_for_reference(fn, call)
    if copied is None:
        raise TraceLabError(f"from_compile: {label} runs its own backward, so it runs on copies of its inputs "
                            f"(their .grad must stay yours), and they cannot be copied ({why_not_copyable(fn, call)})")
    return copied


def _one_step(f, args, kwargs, wrt, loss_fn, own_backward):
    """(outputs, gradients of ``wrt``): by ``torch.autograd.grad`` of ``loss_fn(out)``, or, where ``f`` runs its
    own backward (on copies), the ``.grad`` that backward wrote, starting from None."""
    if own_backward:
        for t in wrt:
            t.grad = None
    out = f(*args, **kwargs)
    lv = loss_fn(out)
    if lv is None:
        return out, [t.grad for t in wrt]
    return out, (torch.autograd.grad(lv, wrt, allow_unused=True) if wrt else None)


def _compare_with_eager(fn, args, kwargs, wrt, out, grads, loss_fn=default_loss, own_backward=False):
    """torch.compile's outputs and gradients vs eager's, by trace_lab's rule; eager runs on copies where the
    function runs its own backward (its ``.grad`` would land on the compiled run's tensors)."""
    if own_backward:
        fn, (args, kwargs) = _copies(fn, (args, kwargs), _label(fn))
        wrt = [t for t in reachable_tensors(fn, args, kwargs) if t.requires_grad and t.is_leaf]
    with torch.enable_grad():
        eager_out, eager_grads = _one_step(fn, args, kwargs, wrt, loss_fn, own_backward)

    def snap(outs, gs):
        return Snapshot([t.detach() for t in output_tensors(outs)],
                        [g.detach() if g is not None else None for g in (gs or ())], [])

    return compare_runs(snap(out, grads), snap(eager_out, eager_grads))


def _report(label, capture, stages, notes, measured, comparison, device, compile_s) -> Report:
    programs: dict[int, dict] = {}
    parts, memory, records, warnings = [], [], [], []
    for (graph, kind), traces in stages.items():
        parts.append(PartView(f"{kind} #{graph}", kind, graph, len(parts), [stage_view(t) for t in traces],
                              graphs_of(traces[0], traces[-1])))
        rec = CompilationRecord(graph, kind, list(traces), executor="inductor", fusion="torch.compile",
                                reasons=[SOURCE])
        records.append(rec)
        summary = part_summary(rec, False)
        summary.update(executor="inductor", regions=[], notes=[n for n in notes if n.startswith(kind)])
        programs.setdefault(graph, {"index": graph, "reason": "first compile" if graph == 0 else "graph break",
                                    "inputs": []})[kind] = summary
        peak, method = measured.get((graph, kind), (None, "not called in the measured run"))
        predicted = traces[-1].liveness().peak_above_inputs_bytes
        memory.append({"program": graph, "kind": kind, "predicted_peak_above_inputs_bytes": predicted,
                       "measured_peak_above_inputs_bytes": peak, "method": method})
        if peak is not None and abs(predicted - peak) > 0.01 * peak + 1024:
            warnings.append(f"{kind} #{graph}: predicted peak {format_bytes(predicted)} vs measured "
                            f"{format_bytes(peak)} (more than {_TOLERANCE} apart)")
    warnings += [n for n in notes if "no kernel" in n or "runs before" in n or "not modelled" in n
                 or "could not be read" in n]
    seconds = sum(p.compile_seconds for p in capture.parts)
    return Report(
        name=label, options={"fusion": "torch.compile", "executor": "inductor"}, device=str(device),
        executor_reasons=[f"{SOURCE}, torch {torch.__version__}: the post-grad graphs Inductor compiled, its kernels "
                          "as regions"],
        programs=[programs[k] for k in sorted(programs)],
        compile_seconds={"capture": max(0.0, compile_s - seconds), "passes": 0.0, "executor": seconds,
                         "total": compile_s},
        first_run_seconds=compile_s, steady_seconds=None, run_seconds=[],
        comparison=comparison.to_dict() if comparison is not None else None, memory=memory, warnings=warnings,
        created=datetime.datetime.now().isoformat(timespec="seconds"), torch_version=torch.__version__,
        view=ViewModel(parts, None), compilations=records)
