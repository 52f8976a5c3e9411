"""The peak explainer (issue 28 item 2): what makes a program's peak, which remedies apply with their predicted
savings, and a call that reruns with one and measures the saving beside the prediction.

``trace_lab.explain_peak(fn, *args, **options)``:

1. runs ``trace_lab.inspect(fn, *args, runs=0, **options)``: the program as asked, checked against eager and
   measured;
2. breaks the peak of one part down (:mod:`trace_lab.analysis.peak`; default: the part, forward or backward,
   whose measured peak above its inputs is higher): the buffers alive on the peak line by kind and source line;
3. prices remedies without running them: every other fusion strategy (``memory`` reorders for the lowest peak;
   the others fuse otherwise), predicted on the meta device by :func:`trace_lab.predict` with the same executor
   and the run's allocator. A remedy's predicted saving is the prediction of the current options minus the
   remedy's, for that part: both figures come from the same model, so their difference is the saving;
   For an ``nn.Module`` with repeated blocks (the longest ``ModuleList``/``Sequential`` of two or more modules of one
   class) one more remedy is priced the same way: ``checkpoint blocks``, a copy of the module whose blocks each run
   under ``torch.utils.checkpoint`` (non-reentrant): the forward keeps only each block's input and the backward
   recomputes the rest. The copy shares nothing with the user's module (its rerun holds a second set of weights
   while it runs);
   And ``recompute NAME``: the largest saved-for-backward activation that is cheap to recompute
   (:mod:`trace_lab.analysis.saved`: pointwise or layout, not random) is tagged ``MUST_RECOMPUTE`` on AOTAutograd's
   joint graph (:func:`trace_lab.run.jit.joint_graph_hook`, as ZeRO-3 tags its gathers), with the views it is
   read through: the min-cut partitioner then saves what it is made from (or recomputes that too, where cheaper)
   and the backward computes it again. Priced for a run of one program only (each program has its own joint graph
   and node names); the node is found by its fx name, op and shape, and a capture without it (the meta device's
   decomposition differs) says so instead of pricing;
4. :meth:`PeakExplanation.try_remedy` reruns with a remedy's options (and program, and joint-graph tags) and
   measures: ``measured_saving`` (the run's measured peak minus the remedy run's) stands beside ``predicted_saving``.
   Displayed in a notebook, an explanation is a panel with a **Try** button per remedy (the Peak tab of a
   ``%%thunder_trace`` output has it too): :mod:`trace_lab.notebook.lab_panels`.

   And, for a module with parameters, ``fsdp zero3 on 2 ranks``: one rank's high-water mark with the inputs counted
   (:func:`trace_lab.predict` with ``fsdp="zero3", world_size=2``: the parameter shards, the gathered copies) against
   the run's. Predicted only: it needs two processes to run, so ``try_remedy`` says how to measure it instead.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from ..analysis.peak import PeakBreakdown
from ..errors import TraceLabError

__all__ = ["Remedy", "PeakExplanation", "explain_peak"]


@dataclass
class Remedy:
    name: str
    options: dict  # what changes (passed to trace_lab.inspect over the run's own options)
    why: str
    predicted_saving: int  # bytes, for the explained part (negative: it would cost memory)
    measured_saving: int | None = None  # after try_remedy
    measured_peak: int | None = None
    ok: bool | None = None  # the remedy's run matched eager
    fn: object = None  # the program the remedy runs instead of the user's (None: the same, other options)
    recompute: tuple = ()  # joint-graph nodes tagged MUST_RECOMPUTE: (fx name, op, shape)
    measurable: bool = True  # try_remedy can run it in this process (FSDP needs N processes: predicted only)

    def to_dict(self) -> dict:
        return {k: (list(v) if k == "recompute" else v) for k, v in vars(self).items() if k != "fn"}


@dataclass
class PeakExplanation:
    breakdown: PeakBreakdown
    measured_peak: int | None
    remedies: list[Remedy] = field(default_factory=list)  # predicted to save bytes, largest first
    considered: list[Remedy] = field(default_factory=list)  # every remedy priced
    notes: list[str] = field(default_factory=list)
    report: object = None  # the run explained (trace_lab.report.Report)
    _rerun: object = None  # options -> Report
    _position: int = -1  # the explained program's position among the run's programs (Report's indexing)

    def remedy(self, name: str) -> Remedy:
        for r in self.considered:
            if r.name == name:
                return r
        raise TraceLabError(f"explain_peak: no remedy {name!r}; priced: {', '.join(r.name for r in self.considered)}")

    def try_remedy(self, name: str, progress=None) -> Remedy:
        """Rerun with remedy ``name``'s options, measure the explained part's peak; the remedy, with
        ``measured_saving`` filled in beside ``predicted_saving``. ``progress``: as trace_lab.inspect's."""
        remedy = self.remedy(name)
        if not remedy.measurable:
            raise TraceLabError(f"{name}: predicted only, it needs more than this process to run ({remedy.why})")
        tags = _RecomputeTags(remedy.recompute) if remedy.recompute else None
        report = self._rerun(remedy.options, remedy.fn, tags, progress)
        if tags is not None and tags.missing():
            raise TraceLabError(f"{name}: the rerun's joint graph has no {', '.join(tags.missing())} (as priced): "
                                "nothing was recomputed, so nothing is measured")
        b = self.breakdown
        if report.traces(b.kind, self._position) and len(report.programs) != len(self.report.programs):
            raise TraceLabError(f"{name} split the run into {len(report.programs)} programs (was "
                                f"{len(self.report.programs)}): its peak is not comparable part for part")
        remedy.measured_peak = report.measured_peak(b.kind, self._position)
        remedy.ok = report.ok
        if remedy.measured_peak is not None and self.measured_peak is not None:
            remedy.measured_saving = self.measured_peak - remedy.measured_peak
        return remedy

    def to_dict(self) -> dict:
        return {"breakdown": self.breakdown.to_dict(), "measured_peak": self.measured_peak,
                "remedies": [r.to_dict() for r in self.remedies], "considered": [r.to_dict() for r in self.considered],
                "notes": list(self.notes)}

    def __str__(self) -> str:
        from ..ir.printer import format_bytes

        lines = [str(self.breakdown)]
        if self.measured_peak is not None:
            lines.append(f"  measured: {format_bytes(self.measured_peak)} above inputs")
        if self.remedies:
            lines.append("remedies (predicted saving on this part; try_remedy(name) measures it):")
        for r in self.remedies:
            measured = "" if r.measured_saving is None else f", measured {format_bytes(r.measured_saving)}"
            lines.append(f"  {r.name}: {format_bytes(r.predicted_saving)}{measured}  ({r.why})")
        if not self.remedies:
            lines.append("no priced remedy is predicted to lower this peak")
        return "\n".join(lines + [f"note: {n}" for n in self.notes])

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        """The breakdown (the report's Peak view) and the remedies table: static HTML, every name escaped, with the
        report's CSS (an export where no report was shown before styles it too)."""
        from ..report.assets_html import styled
        from ..report.depth_html import peak_html, remedies_html

        return styled(peak_html({"peak": {"data": self.breakdown.to_dict()}}) + remedies_html(self))

    def _repr_mimebundle_(self, include=None, exclude=None):
        """In a notebook: the interactive panel a front end registered (:data:`PANEL`: the notebook's Peak panel,
        a Try button per remedy) with the static HTML and the text beside it, for exports without widget state."""
        data = dict(PANEL(self) or {}) if PANEL is not None else {}
        return {**data, "text/plain": str(self), "text/html": self._repr_html_()}


# A front end's interactive view of an explanation: PeakExplanation -> its mime bundle (or None). The lab does not
# import front ends; trace_lab.notebook.lab_panels sets this when it is imported (the facade's explain_peak and the
# notebook extension import it where ipywidgets is installed).
PANEL = None


def explain_peak(fn, *args, kind: str | None = None, program: int = -1, loss=None, kwargs=None,
                 **options) -> PeakExplanation:
    """Run ``fn(*args)`` as trace_lab.inspect would (``options`` as there), explain one part's peak and price the
    remedies (module docstring)."""
    from ..executors.base import strategies_for
    from ..run.jit import joint_graph_hook
    from ..run.predict import predict
    from .inspection import inspect

    options = {k: v for k, v in options.items() if k != "runs"}

    def rerun(changes: dict, other=None, tags=None, progress=None):
        with joint_graph_hook(tags):
            return inspect(fn if other is None else other, *args, loss=loss, kwargs=kwargs,
                           **{**options, **changes, "runs": 0, **({"progress": progress} if progress else {})})

    report = rerun({})
    breakdown = report.explain_peak(kind or report.peak_part(program), program)
    measured = report.measured_peak(breakdown.kind, program)
    current = _resolved(report, breakdown.kind, breakdown.program)
    device = "cuda" if report.device.startswith("cuda") else "cpu"
    strategies = strategies_for(current["executor"])
    predicted = predict(fn, *args, strategies=strategies, device=device, executor=current["executor"],
                                  loss=loss, kwargs=kwargs)
    part_index = breakdown.program
    base = _peak_of(predicted, current["fusion"], breakdown.kind, part_index)
    explanation = PeakExplanation(breakdown, measured, report=report, _rerun=rerun, _position=program, notes=[
        "remedies priced: the other fusion strategies, checkpointing repeated blocks, recomputing the largest "
        "cheap saved activation (predicted on the meta device with this run's executor and allocator, and measured "
        f"by try_remedy), and for a module FSDP zero3 on {FSDP_RANKS} ranks (predicted only)",
        "a prediction does not see what a compiled region frees inside its call or writes its outputs over "
        "(donate_inputs, donate_inplace: the defaults with Inductor): a measured saving can be larger than the "
        "predicted one by those bytes"])
    if base is None:
        explanation.notes.append(f"the meta-device prediction has no {breakdown.kind} #{part_index} for "
                                 f"{current['fusion']}: no remedy priced")
        return explanation
    blocks = _checkpointed(fn)
    for s in strategies:
        if s == current["fusion"] or (s == "layers" and blocks is None):  # no numbered blocks: layers is dataflow
            continue
        other = _peak_of(predicted, s, breakdown.kind, part_index)
        if other is None:
            continue
        why = ("reorders the program for the lowest predicted peak" if s == "memory"
               else f"the {s} strategy's regions and order")
        explanation.considered.append(Remedy(f"fusion={s}", {"fusion": s, "executor": current["executor"]}, why,
                                             base - other))
    def predicted(program_fn, tags=None) -> int | None:  # the explained part's peak, the current strategy
        with joint_graph_hook(tags):
            prediction = predict(program_fn, *args, strategies=[current["fusion"]], device=device,
                                 executor=current["executor"], loss=loss, kwargs=kwargs)
        return _peak_of(prediction, current["fusion"], breakdown.kind, part_index)

    same = {"fusion": current["fusion"], "executor": current["executor"]}
    if blocks is not None:
        wrapped, where = blocks
        other = predicted(wrapped)
        if other is not None:
            explanation.considered.append(Remedy(
                "checkpoint blocks", dict(same),
                f"{where} each run under torch.utils.checkpoint: the forward keeps each block's input, the backward "
                "recomputes the rest", base - other, fn=wrapped))
    _price_recompute(explanation, report, program, base, lambda tags: predicted(fn, tags), same)
    _price_fsdp(explanation, fn, args, kwargs, loss, current, device, breakdown.kind, part_index, report)
    explanation.remedies = sorted((r for r in explanation.considered if r.predicted_saving > 0),
                                  key=lambda r: -r.predicted_saving)
    return explanation


FSDP_RANKS = 2  # the world the FSDP remedy is priced for


def _price_fsdp(explanation, fn, args, kwargs, loss, current, device, kind, part_index, report) -> None:
    """``fsdp zero3 on N ranks``, predicted only: one rank's high-water mark (its parameter shards and what the program
    allocates: :func:`trace_lab.predict` with ``fsdp=``) against the run's, both with the inputs counted (sharding
    shrinks the inputs, the parameters, and adds gathered copies inside the program: the peak above the inputs alone
    would hide the first and count the second). For a module with parameters, not already sharded."""
    from ..run.predict import predict

    if not isinstance(fn, torch.nn.Module) or not any(True for _ in fn.parameters()) or report.options.get("fsdp"):
        return
    try:
        whole = predict(fn, *args, strategies=[current["fusion"]], device=device, executor=current["executor"],
                        loss=loss, kwargs=kwargs).part(current["fusion"], kind, part_index).high_water
        sharded = predict(fn, *args, strategies=[current["fusion"]], device=device, executor=current["executor"],
                          loss=loss, kwargs=kwargs, fsdp="zero3", world_size=FSDP_RANKS
                          ).part(current["fusion"], kind, part_index).high_water
    except (TraceLabError, KeyError) as e:
        explanation.notes.append(f"fsdp zero3 on {FSDP_RANKS} ranks: not priced ({e})")
        return
    explanation.considered.append(Remedy(
        f"fsdp zero3 on {FSDP_RANKS} ranks", {"fsdp": "zero3", "nproc": FSDP_RANKS},
        f"each rank holds 1/{FSDP_RANKS} of the parameters and gathers each layer's just before use (high-water mark "
        f"with the inputs counted, one rank's; predicted only: measure it with %%thunder_trace --nproc {FSDP_RANKS} "
        "--fsdp zero3 or trace_lab.distributed.run_distributed)", whole - sharded, measurable=False))


def _resolved(report, kind: str, program: int) -> dict:
    """The fusion strategy and executor the run actually used for that part (``auto`` resolved)."""
    record = report.compilation(kind, program)
    return {"fusion": getattr(record, "fusion", None) or report.options.get("fusion"),
            "executor": getattr(record, "executor", None) or report.options.get("executor")}


def _peak_of(prediction, strategy: str, kind: str, program: int) -> int | None:
    try:
        return prediction.peak(strategy, kind, program)
    except KeyError:
        return None


class _Checkpointed(torch.nn.Module):
    """One block run under ``torch.utils.checkpoint`` (non-reentrant)."""

    def __init__(self, block: torch.nn.Module):
        super().__init__()
        self.block = block

    def forward(self, *args, **kwargs):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.block, *args, use_reentrant=False, **kwargs)


def _checkpointed(fn):
    """(a copy of module ``fn`` whose repeated blocks run checkpointed, where they are) or None: not a module, or no
    ``ModuleList``/``Sequential`` of two or more modules of one class in it (the longest such is taken)."""
    if not isinstance(fn, torch.nn.Module):
        return None
    lists = [(name, m) for name, m in fn.named_modules()
             if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)) and len(m) >= 2
             and len({type(c) for c in m}) == 1 and not isinstance(m[0], _Checkpointed)]
    if not lists:
        return None
    name, _ = max(lists, key=lambda nm: len(nm[1]))
    wrapped = copy.deepcopy(fn)
    blocks = wrapped.get_submodule(name) if name else wrapped
    for i in range(len(blocks)):
        blocks[i] = _Checkpointed(blocks[i])
    return wrapped, f"the {len(blocks)} blocks of {name or type(fn).__name__}"


class _RecomputeTags:
    """A joint-graph hook: the nodes named in ``wanted`` ((fx name, op, shape) each) are tagged ``MUST_RECOMPUTE``
    where a node of that name has that op and shape; :meth:`missing` lists those it did not meet."""

    def __init__(self, wanted):
        self.wanted = {name: (op, tuple(shape)) for name, op, shape in wanted}
        self.found: set[str] = set()

    def __call__(self, joint_gm: fx.GraphModule) -> None:
        from torch.utils.checkpoint import CheckpointPolicy

        for n in joint_gm.graph.nodes:
            want = self.wanted.get(n.name)
            if want is not None and n.op == "call_function" and _signature(n)[1:] == want:
                n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
                n.meta.setdefault("ac_graph_id", 0)
                self.found.add(n.name)

    def missing(self) -> list[str]:
        return [name for name in self.wanted if name not in self.found]


def _signature(n: fx.Node) -> tuple:
    val = n.meta.get("val")
    return n.name, str(n.target), tuple(val.shape) if isinstance(val, torch.Tensor) else ()


def _read_through(node: fx.Node) -> list[fx.Node] | None:
    """A saved value and the views it is read through, down to the op that made its storage ([saved, ..., maker]);
    None where that passes a multi-output op or an input (not one node to recompute)."""
    from ..analysis.buffers import alias_sources
    from ..ir.fx_util import is_getitem

    chain = [node]
    while True:
        n = chain[-1]
        if n.op != "call_function" or is_getitem(n) or not isinstance(n.meta.get("val"), torch.Tensor):
            return None
        sources = alias_sources(n)
        if not sources or not isinstance(sources[0], fx.Node):
            return chain
        chain.append(sources[0])


def recompute_candidates(report, program: int = -1) -> list[tuple]:
    """(saved row, nodes to tag) of program ``program``'s saved activations that are cheap to recompute
    (:func:`trace_lab.analysis.saved.saved_for_backward` on the captured stages), largest first."""
    from ..analysis.saved import saved_for_backward

    forward, backward = report.traces("forward", program), report.traces("backward", program)
    if not forward or not backward:
        return []
    by_name = {forward[0].name(n): n for n in forward[0].gm.graph.nodes}
    out = []
    for row in saved_for_backward(forward[0], backward[0]):
        if row.held_by != "activation" or not row.recomputable or not row.bytes:
            continue
        chain = _read_through(by_name[row.name])
        if chain is not None:
            out.append((row, tuple(_signature(n) for n in chain)))
    return out


def _price_recompute(explanation: PeakExplanation, report, program: int, base: int, peak_with, options: dict) -> None:
    """Price ``recompute NAME`` for the largest cheap saved activation (module docstring, 3.)."""
    from ..ir.printer import format_bytes

    if len(report.programs) != 1:
        explanation.notes.append("recompute: not priced for a run of several programs (each has its own joint graph "
                                 "and node names)")
        return
    candidates = recompute_candidates(report, program)
    if not candidates:
        return
    row, nodes = candidates[0]
    tags = _RecomputeTags(nodes)
    other = peak_with(tags)
    if tags.missing():
        explanation.notes.append(f"recompute {row.name}: not priced, the meta-device capture has no "
                                 f"{', '.join(tags.missing())} of that op and shape")
        return
    if other is None:
        return
    explanation.considered.append(Remedy(
        f"recompute {row.name}", dict(options),
        f"{row.name} ({row.op}, {format_bytes(row.bytes)}, {row.source or 'no source line'}) is saved for the "
        "backward; tagged MUST_RECOMPUTE, the partitioner saves what it is made from and the backward computes it "
        "again", base - other, recompute=nodes))
