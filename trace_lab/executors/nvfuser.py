"""nvFuser executor: every fused region runs as nvFuser FusionDefinitions.

A region (``call_module`` node from a fusion pass) is split by
:mod:`.nvfuser_region` into segments the op table (:mod:`.nvfuser_ops`) can
translate and torch steps for the rest (attention, RNG, ...); a layer's region
(``fusion="layers"``) also hands its matmuls to nvFuser (``can_compile``). Each segment
becomes a ``nvfuser_direct.FusionDefinition``, compiled ahead of the first run
on placeholder inputs of the recorded layouts, so ``compile_seconds`` holds the
whole cost and the first iteration runs compiled code.

The structural cache (``fusion_cache=True``, per executor, i.e. per jitted
function) maps a segment's structural signature to its definition: the same
layer repeated eight times builds and compiles once. nvFuser's ``LruFusionCache``
sits underneath and catches identical fusions with different signatures. With
the cache off every segment builds and compiles its own definition - the
iteration-0 cost of Thunder issue #2700. Anything nvFuser rejects at build or
compile time falls back to torch for that segment, and the notes say so.

Donation, as the Inductor executor's (``donate_inputs``, ``donate_inplace``): the liveness model names each
region's arguments that die on its line; the program hands them over in a list the region program clears
(``RegionProgram.boxed``: each goes after the last step that reads it), and an elementwise segment may write an
output over one of them (``alias_input``: :func:`.nvfuser_region.plan_in_place`), with the in-place positions
shared per signature (:func:`.donation.inplace_positions`) so repeated layers still build one set of definitions.
"""
from __future__ import annotations

import time

import torch
import torch.fx as fx

from ..errors import MissingDependencyError
from ..ir.trace import Trace
from .interface import CompiledProgram, Executor, register
from ..analysis.region_record import plan_record
from ..analysis.liveness import CUDA_ROUNDING
from ..runtime import generate
from .workspace import compiled_region, measure_workspace
from .nvfuser_import import require_nvfuser
from .nvfuser_ops import fusible_reason
from .nvfuser_region import (RegionProgram, Segment, build_definition, lifted_inputs, output_places, plan_in_place,
                             segment_signature, split_region, torch_target, written_back)
from .donation import inplace_key, region_jobs
from .nvfuser_batch import BatchedRunner, batch_plan, stack_workspace
from .region_cover import cover_details, cover_notes, covered_call, headroom, plan_covers, refusal_details

__all__ = ["NvFuserExecutor", "region_definitions"]


class _Definition:
    """One built (and compiled) FusionDefinition plus what it cost; ``places``: where each of the segment's
    outputs comes from (:func:`.nvfuser_region.output_places`: a visible output, or an input written over)."""

    def __init__(self, fd, places: tuple[int, list], build_seconds: float, compile_seconds: float,
                 lift: tuple[int, tuple] = (0, ()), back: tuple[int, ...] = ()):
        self.fd = fd
        self.lift = lift  # (rank, input positions) handed over as [1] * rank views (nvfuser_region.lifted_inputs)
        self.lifted, self.lift_shape = lift[1], (1,) * lift[0]
        self.n_visible, self.places = places
        # lifted inputs the definition returns fresh, copied back by the runner (nvfuser_region.written_back)
        self.back_from = [self.n_visible + j for j in range(len(back))]
        self.back_into = list(back)
        self.build_seconds = build_seconds
        self.compile_seconds = compile_seconds
        self.uses = 0


class _SegmentRunner:
    def __init__(self, executor: "NvFuserExecutor", seg: Segment, definition: _Definition):
        self.executor = executor
        self.seg = seg
        self.definition = definition
        self.contiguous = executor.contiguous_inputs
        self.strides = [tuple(s) for s in _dense_strides(seg)] if self.contiguous else \
            [tuple(x.meta["val"].stride()) for x in seg.inputs]
        self.variants: dict[tuple, _Definition] = {}

    def __call__(self, ins):
        if self.contiguous:  # (copy_ destinations stay themselves: they are written in place)
            dests = {id(c.args[0]) for c in self.seg.copies}
            ins = [t if id(x) in dests else t.contiguous() for x, t in zip(self.seg.inputs, ins)]
        d = self.definition
        strides = [t.stride() for t in ins]  # tuples, as self.strides holds them
        if strides != self.strides:  # runtime layout differs from the recorded one
            key = tuple(strides)
            if key not in self.variants:
                self.variants[key], _ = self.executor._definition(self.seg, list(key), in_place=False)
            d = self.variants[key]
        # debug aid (verify): the segment through torch, before an in-place definition writes over its inputs
        ref = _torch_segment(self.seg)(ins) if self.executor.verify and not self.seg.copies else None
        if d.lifted:  # 0-d inputs handed over at the segment's rank (view(1, ...): 0.9 us here, view([1, ...]) 1.5)
            given, lift_shape = list(ins), d.lift_shape
            for i in d.lifted:
                given[i] = given[i].view(*lift_shape)
            res = d.fd.execute(given)
            if d.back_into:  # new values of lifted inputs, written back in one kernel
                torch._foreach_copy_([given[i] for i in d.back_into], [res[j] for j in d.back_from])
        else:
            res = d.fd.execute(ins)
        outs = [res[i] if kind == "out" else ins[i] if shape is None else ins[i].view(shape)
                for kind, i, shape in d.places]
        if ref is not None:
            self._verify(ins, outs, ref, d)
        return outs

    def _verify(self, ins, outs, ref, d) -> None:
        """Debug aid (keep_definitions/verify option): compare with the segment run through torch (``ref``)."""
        for i, (a, b) in enumerate(zip(outs, ref)):
            den = b.double().norm().item() or 1.0
            rel = (a.double() - b.double()).norm().item() / den
            if not rel <= 1e-3:
                self.executor.mismatches.append({
                    "output": i, "rel": rel, "ops": [f"{n.name}={n.target}{tuple(n.args)}" for n in self.seg.ops],
                    "inputs": [(tuple(t.shape), tuple(t.stride()), str(t.dtype)) for t in ins],
                    "out": (tuple(a.shape), tuple(a.stride()), tuple(b.stride())), "definition": repr(d.fd)})
                return


def _region_text(program, definitions: list) -> str:
    """What :func:`trace_lab.region_code` shows for an nvFuser region: its generated program (torch steps and
    segment calls) with what each called name is (``RegionProgram.legend``: a head transpose's
    ``clone_in_16_byte_words`` among them), then each FusionDefinition. A region that only lays values out has no
    definition, and its program is all it runs. A region that runs another region's code has no program here."""
    parts = []
    if program is not None:
        names = "".join(f"\n#   {name}: {what}" for name, what in program.legend().items())
        parts.append("# the region's program: torch steps and nvFuser segment calls\n" + program.source.strip()
                     + ("\n# where" + names if names else ""))
    parts += [f"# nvFuser definition {i}\n{repr(fd).strip()}" for i, fd in enumerate(definitions)]
    return "\n\n".join(parts)


def _covered_text(record, cover, program, definitions: list) -> str:
    """:func:`_region_text` of a region that runs another region's code (``cover_regions``): which region's,
    which of its outputs the covered region keeps, then that region's program and definitions."""
    by = record.details.get("runs_code_of", "another region")
    bases = f"; outputs {', '.join(str(j) for j, _ in cover.unviewed)} viewed back in this region's shape" \
        if cover.unviewed else ""
    head = (f"# {record.name} runs the compiled code of {by} (cover_regions), keeping its outputs "
            f"{', '.join(str(i) for i in cover.kept)}{bases}")
    return head + "\n\n" + _region_text(program, definitions)


def _dense_strides(seg: Segment) -> list:
    return [torch.empty(tuple(x.meta["val"].shape), device="meta").stride() for x in seg.inputs]


def _torch_segment(seg: Segment):
    """Fallback: the segment's ops run through torch, in order.

    ``view`` runs as ``reshape``: inputs produced by nvFuser segments may be laid out
    differently from eager's (same values), where a view would be refused."""
    def run(ins):
        env = dict(zip(seg.inputs, ins))
        lookup = env.__getitem__
        for n in seg.ops:
            r = torch_target(n)(*fx.node.map_arg(n.args, lookup), **fx.node.map_arg(n.kwargs, lookup))
            if isinstance(n.meta.get("val"), (list, tuple)):
                for u in n.users:
                    if u.op == "call_function" and u.args and u.args[0] is n:
                        env[u] = r[u.args[1]]
            else:
                env[n] = r
        return [env[o] for o in seg.outputs]

    return run


@register("nvfuser")
class NvFuserExecutor(Executor):
    materializes_regions = False
    compiles_library_ops = True  # a layer's region (fusion="layers") holds its matmuls: fd.ops.matmul

    def __init__(self, fusion_cache: bool = True, keep_definitions: bool = False, verify: bool = False,
                 contiguous_inputs: bool = False, index_math: bool = False, cover_regions: bool = True,
                 donate_inputs: bool = True, donate_inplace: bool = True, batch_updates: bool = True):
        self.nvf = require_nvfuser()
        self.batch_updates = bool(batch_updates)  # identical independent updates: one definition (nvfuser_batch)
        # index_math=False (default): ops with integer/bool results (the causal mask built from
        # arange) run in torch. Fused, nvFuser 0.2.36 got llama's programs wrong on the H200 (they
        # match eager without; benchmarks/BENCHMARKS.md). contiguous_inputs: segments read dense
        # copies of strided inputs (a diagnostic switch for layout bugs).
        self.contiguous_inputs = contiguous_inputs
        self.index_math = index_math
        self.verify = verify  # debug: also run every segment through torch and record disagreements
        self.mismatches: list[dict] = []
        self.fusion_cache = fusion_cache
        self.cover_regions = bool(fusion_cache) and bool(cover_regions)
        # donate_inputs: a region's dying inputs are handed over (RegionProgram.boxed) and go at their last read;
        # donate_inplace: an elementwise segment may write an output over one (nvfuser_region.plan_in_place)
        self.donate_inputs = bool(donate_inputs)
        self.donate_inplace = self.donate_inputs and bool(donate_inplace)
        self._programs: dict[str, tuple] = {}  # region cache key -> (RegionProgram, its definitions), compiled here
        self.keep_definitions = keep_definitions
        self._defs: dict[str, _Definition] = {}
        self._lru = None
        if fusion_cache and hasattr(self.nvf, "LruFusionCache"):
            self._lru = self.nvf.LruFusionCache(max_fusions=16384)(build_definition)
        self.hits = 0
        self.misses = 0
        self._workspace: dict = {}  # region structure -> (workspace bytes, fresh output bytes)

    @classmethod
    def from_options(cls, options) -> "NvFuserExecutor":
        return cls(fusion_cache=options.fusion_cache, cover_regions=getattr(options, "cover_regions", True),
                   donate_inputs=getattr(options, "donate_inputs", True),
                   donate_inplace=getattr(options, "donate_inplace", True),
                   batch_updates=getattr(options, "batch_updates", True))

    def fusible_reason(self, node: fx.Node) -> str | None:
        return fusible_reason(node, index_math=self.index_math)

    def can_fuse(self, node: fx.Node) -> bool:
        return self.fusible_reason(node) is None

    def compile_reason(self, node: fx.Node) -> str | None:
        """Why ``node`` cannot be part of a definition inside a region (None: it can); matmuls can."""
        return fusible_reason(node, index_math=self.index_math, library=True)

    def can_compile(self, node: fx.Node) -> bool:
        return self.compile_reason(node) is None

    def fuse_reason(self, node: fx.Node) -> str | None:
        return self.fusible_reason(node)

    def planned_workspace(self, trace: Trace, rounding: int = CUDA_ROUNDING) -> dict[str, int]:
        """Region op id -> the workspace known before anything compiles: the stacks of the region's batched
        updates (:func:`.nvfuser_batch.stack_workspace`; the largest of its segments', which run one after
        another), for each region with a segment that batches. ``predict`` prices them on meta."""
        if not self.batch_updates:
            return {}
        found = {}
        for node in trace.gm.graph.nodes:
            if node.op != "call_module":
                continue
            steps, _ = split_region(trace.gm.get_submodule(node.target), self.compile_reason)
            plans = [(batch_plan(seg), seg) for kind, seg in steps if kind == "fuse"]
            sizes = [stack_workspace(plan, [x.meta["val"] for x in seg.inputs], rounding, self.donate_inplace)
                     for plan, seg in plans if plan is not None]
            if sizes:
                found[node.name] = max(sizes)
        return found

    # -- definitions -------------------------------------------------------------------------
    def _definition(self, seg: Segment, strides: list | None = None, in_place: bool = True) -> tuple[_Definition, bool]:
        """(definition, cache hit) for a segment; builds and compiles on a miss. ``in_place`` off: its outputs
        are fresh even where ``seg.in_place`` pairs them with inputs (a layout other than the recorded one)."""
        sig = segment_signature(seg, strides, in_place)
        if self.fusion_cache and sig in self._defs:
            self.hits += 1
            d = self._defs[sig]
            d.uses += 1
            return d, True
        self.misses += 1
        started = time.perf_counter()
        build = self._lru if self._lru is not None else build_definition
        lift = lifted_inputs(seg, in_place)
        fd = build(seg, self.nvf, strides, in_place, lift=lift)
        built = time.perf_counter()
        self._warm_up(fd, seg, strides, lift)
        d = _Definition(fd, output_places(seg, in_place), built - started, time.perf_counter() - built, lift,
                        written_back(seg, lift))
        d.uses = 1
        if self.fusion_cache:
            self._defs[sig] = d
        return d, False

    @staticmethod
    def _warm_up(fd, seg: Segment, strides, lift: tuple = (0, ())) -> None:
        """Compile now: execute once on uninitialised inputs of the recorded layouts (lifted ones as the runner
        hands them, :func:`.nvfuser_region.lifted_inputs`)."""
        ins = []
        for i, x in enumerate(seg.inputs):
            t = x.meta["val"]
            if i in lift[1]:
                ins.append(torch.empty([1] * lift[0], dtype=t.dtype, device=t.device))
                continue
            st = strides[i] if strides is not None else t.stride()
            ins.append(torch.empty_strided(tuple(t.shape), tuple(st), dtype=t.dtype, device=t.device))
        fd.execute(ins)
        torch.cuda.synchronize()

    # -- compile a trace -------------------------------------------------------------------
    def compile(self, trace: Trace) -> CompiledProgram:
        if trace.device.type != "cuda":
            raise MissingDependencyError(
                f"executor='nvfuser' runs on CUDA devices only; this program is on {trace.device}. "
                "Move the model and inputs to a GPU, or use executor='auto' (Inductor on CPU).")
        # AOTAutograd calls its compilers under a FakeTensorMode; nvFuser and the warm-up need real tensors
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            return self._compile(trace)

    def _compile(self, trace: Trace) -> CompiledProgram:
        started = time.perf_counter()
        programs: dict[fx.Node, RegionProgram] = {}
        regions: dict = {}  # op id -> RegionRecord
        notes: list[str] = []
        definitions: dict[str, list] = {}
        donations: dict[fx.Node, tuple] = {}  # region -> argument positions handed over (RegionProgram.boxed)
        hits0, misses0 = self.hits, self.misses
        region_nodes = [n for n in trace.ops if n.op == "call_module"]
        live = trace.liveness(materialized_regions=False) \
            if region_nodes and (self.donate_inputs or self.cover_regions) else None
        donatable = {ln.node: ln.donatable for ln in live.lines if ln.donatable} \
            if live is not None and self.donate_inputs else {}
        jobs = self._written_over(region_jobs(trace, region_nodes, donatable, self.donate_inplace))
        covers, refused = self._plan_covers(jobs, live, donatable)
        # regions that run another region's code come last: that region has compiled by then
        order = [n for n in region_nodes if n not in covers] + [n for n in region_nodes if n in covers]
        names: dict[str, str] = {}  # region cache key -> the name of its first region in this program
        job_of = {job[0]: job for job in jobs}
        for done, node in enumerate(order):
            key, over = job_of[node][5:]
            self.report_region(done, len(order), str(node.target))
            donate = donatable.get(node, ())
            if node in covers:
                program, record, fds = self._covered_region(node, covers[node], names, donate)
            else:
                program, record, fds = self._compile_region(trace, node, notes, key, over, donate, refused.get(node))
                names.setdefault(key, record.name)
                self._programs.setdefault(key, (program, fds))
            if donate:
                donations[node] = donate
            programs[node] = program
            regions[node.name] = record
            definitions[record.name] = fds
        regions = {n.name: regions[n.name] for n in region_nodes}  # program order
        if region_nodes:
            self.report_region(len(region_nodes), len(region_nodes))
        notes.extend(cover_notes(list(regions.values())))
        notes.extend(_donation_notes(list(regions.values())))
        # region name -> RegionProgram (its segments and their runners: run/repro.py writes one as a file)
        region_programs = {plan_record(n).name: programs[n] for n in region_nodes if n not in covers}
        notes.extend(_view_notes(region_programs))
        if not regions:
            notes.append("no fused regions: every op ran through torch (pick a fusion strategy to use nvFuser)")
        else:
            notes.append(f"nvFuser definitions: {self.misses - misses0} built and compiled, "
                         f"{self.hits - hits0} reused from the structural cache "
                         f"(fusion_cache={'on' if self.fusion_cache else 'off'})")
        # nvFuser may lay a region's outputs out differently from eager: views become reshapes
        program = generate(trace, region_runner=programs.__getitem__, views_as_reshape=True,
                           materialized_regions=False, fast_views=True, donations=donations)
        run = program.run
        compiled = CompiledProgram(run=run, executor="nvfuser", compile_seconds=time.perf_counter() - started,
                                   source=program.source, regions=regions, notes=notes, generated=program)
        compiled.definitions = definitions  # region name -> [FusionDefinition]; see region_definitions()
        compiled.region_programs = region_programs
        compiled.region_code = {name: (lambda name=name, fds=fds: _region_text(region_programs.get(name), fds))
                                for name, fds in definitions.items()}
        for node in covers:  # a covered region shows the code it runs: its covering region's program
            record = regions[node.name]
            by, cover, _ = covers[node]
            compiled.region_code[record.name] = (lambda record=record, by=by, cover=cover: _covered_text(
                record, cover, self._programs[by][0], definitions[record.name]))
        return compiled

    def _written_over(self, jobs: list) -> list:
        """``jobs`` with each region's in-place positions narrowed to the inputs its segments do write over
        (:func:`.nvfuser_region.plan_in_place` on its split; one split per signature and positions), and its cache
        key with them: a region none of whose segments is elementwise keeps the plain key, and a cover
        (:func:`.region_cover.plan_covers`) is refused only for an input the covering code really writes."""
        narrowed: dict = {}
        out = []
        for node, sub, vals, plan, sig, key, over in jobs:
            if over:
                if (sig, over) not in narrowed:
                    steps, _ = split_region(sub, self.compile_reason)
                    places = [n for n in sub.graph.nodes if n.op == "placeholder"]
                    written = plan_in_place(sub, steps, {places[i] for i in over})
                    narrowed[sig, over] = tuple(i for i in over if places[i] in written)
                over = narrowed[sig, over]
                key = inplace_key(sig, over)
            out.append((node, sub, vals, plan, sig, key, over))
        return out

    def _plan_covers(self, jobs: list, live, donatable: dict) -> tuple[dict, dict]:
        """(covered node -> (covering key, Cover, covering input values), node -> (covering region's name, bytes,
        room) for covers refused by the peak rule): as the Inductor executor plans them
        (:func:`.region_cover.plan_covers`); a covering region's code may write over the inputs its job names,
        so the cover copies an argument the covered region's caller still reads. A region whose cache key
        compiled here before is not covered."""
        pending = {job[5]: None for job in jobs if job[5] not in self._programs}
        if not self.cover_regions or not pending:
            return {}, {}
        covers, too_big = plan_covers(jobs, pending, donatable, headroom(live), CUDA_ROUNDING)
        too_big = {key: rest for key, *rest in too_big}
        return ({job[0]: covers[job[5]] for job in jobs if job[5] in covers},
                {job[0]: too_big[job[5]] for job in jobs if job[5] in too_big})

    def _covered_region(self, node: fx.Node, covering: tuple, names: dict, donate: tuple = ()):
        """A region that runs the code of one it is part of (:func:`.region_cover.covered_call`): no definition
        of its own; its record names the covering region, and its workspace (the dropped outputs among it) is
        measured on the call as any region's (with ``donate``: its dying inputs handed over, as the program
        calls it)."""
        by, cover, by_vals = covering
        program, fds = self._programs[by]
        call = covered_call(program, cover, by_vals, by)
        plan = plan_record(node)
        input_vals = [a.meta.get("val") if isinstance(a, fx.Node) else a for a in node.args]
        key = ("covered", by, cover, donate)
        if key not in self._workspace:
            self._workspace[key] = measure_workspace(call, input_vals, CUDA_ROUNDING, donate)
        workspace, out_bytes, layout = self._workspace[key]
        record = compiled_region(node, layout, workspace, CUDA_ROUNDING, executor="nvfuser", name=plan.name,
                                 signature=plan.signature, cache_hit=True, compile_seconds=0.0,
                                 output_bytes=out_bytes, donated=donate,
                                 details={"segments": [], "torch_ops": [], **cover_details(call, names)})
        return call, record, fds

    def _compile_region(self, trace: Trace, node: fx.Node, notes: list[str], key: str, over: tuple = (),
                        donate: tuple = (), refused: tuple | None = None):
        """(RegionProgram, record, definitions) of one region. ``over``: the input positions its segments may
        write an output over (:func:`.nvfuser_region.plan_in_place` picks the pairs); ``donate``: the positions
        the program hands over (its workspace is measured that way); ``key``: its cache key."""
        gm = trace.gm.get_submodule(node.target)
        plan = plan_record(node)
        name = plan.name
        # a region holds matmuls only where the strategy put them there (fusion="layers")
        steps, split_notes = split_region(gm, self.compile_reason)
        notes.extend(f"{name}: {n}" for n in split_notes)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        plan_in_place(gm, steps, {placeholders[i] for i in over})
        runners: dict[int, object] = {}
        seg_entries, fds = [], []
        for kind, seg in steps:
            if kind != "fuse":
                continue
            entry = {"ops": [str(n.target) for n in seg.ops], "inputs": len(seg.inputs),
                     "outputs": len(seg.outputs)}
            batched = self._batched(seg, name, notes) if self.batch_updates else None
            if batched is not None:
                runner, hits, built, compiled = batched
                entry.update(signature=segment_signature(seg), cache_hit=all(hits), build_seconds=built,
                             compile_seconds=compiled, batched=[g.n for g in runner.plan.groups])
                if self.keep_definitions:
                    entry["definition"] = "\n\n".join(repr(d.fd) for d in runner.definitions)
                runners[id(seg)] = runner
                seg_entries.append(entry)
                fds.extend(d.fd for d in runner.definitions)
                continue
            try:
                try:
                    d, hit = self._definition(seg, _dense_strides(seg) if self.contiguous_inputs else None)
                except Exception as e:  # noqa: BLE001 - refused with outputs over inputs: try fresh outputs
                    if not seg.in_place:
                        raise
                    notes.append(f"{name}: nvFuser refused {len(seg.in_place)} outputs written over their inputs "
                                 f"({type(e).__name__}: {_first_line(e)}); they are fresh buffers")
                    seg.in_place.clear()
                    d, hit = self._definition(seg, _dense_strides(seg) if self.contiguous_inputs else None)
            except Exception as e:  # noqa: BLE001 - nvFuser rejected it: run it through torch, say so
                msg = _first_line(e)
                notes.append(f"{name}: nvFuser could not compile a {len(seg.ops)}-op segment "
                             f"({type(e).__name__}: {msg}); it runs through torch")
                entry.update(signature=None, cache_hit=False, compile_seconds=0.0, fallback=msg)
                runners[id(seg)] = _torch_segment(seg)
                seg_entries.append(entry)
                continue
            entry.update(signature=segment_signature(seg), cache_hit=hit, build_seconds=d.build_seconds,
                         compile_seconds=0.0 if hit else d.build_seconds + d.compile_seconds)
            if self.keep_definitions:
                entry["definition"] = repr(d.fd)
            runners[id(seg)] = _SegmentRunner(self, seg, d)
            seg_entries.append(entry)
            fds.append(d.fd)
        written = {x for kind, seg in steps if kind == "fuse" for x in seg.in_place.values()}
        multi = isinstance(node.meta.get("val"), (list, tuple))
        program = RegionProgram(gm, steps, runners, multi)
        # What the region allocates inside its call beyond its outputs (segment boundaries, nvFuser's
        # own intermediates): measured once per structure and donation, counted on the region's line by liveness.
        measured = (key if plan.signature else tuple(e.get("signature") for e in seg_entries), donate)
        if measured not in self._workspace:
            input_vals = [a.meta.get("val") if isinstance(a, fx.Node) else a for a in node.args]
            self._workspace[measured] = measure_workspace(program, input_vals, CUDA_ROUNDING, donate)
        workspace, out_bytes, layout = self._workspace[measured]
        fused = [e for e in seg_entries if "fallback" not in e]
        record = compiled_region(
            node, layout, workspace, CUDA_ROUNDING, executor="nvfuser", name=name,
            signature=plan.signature or "+".join(e["signature"] for e in fused) or None,
            cache_hit=bool(fused) and all(e["cache_hit"] for e in fused),
            compile_seconds=sum(e["compile_seconds"] for e in seg_entries), output_bytes=out_bytes,
            split=tuple(split_notes), donated=donate,
            details={"segments": seg_entries, "torch_ops": [str(item.target) for kind, item in steps if kind == "torch"],
                     **({"in_place_over": sorted(placeholders.index(x) for x in written)} if written else {}),
                     **(refusal_details(refused) if refused else {})})
        return program, record, fds

    def _batched(self, seg: Segment, name: str, notes: list[str]):
        """(BatchedRunner, cache hits, build seconds, compile seconds) where the segment's updates batch
        (:func:`.nvfuser_batch.batch_plan`), else None; a refused batched definition is a note, and the segment
        then builds as any other."""
        try:
            plan = batch_plan(seg)
            if plan is None:
                return None
            made = [self._definition(g.seg, in_place=self.donate_inplace) for g in plan.groups]
        except Exception as e:  # noqa: BLE001 - nvFuser refused it: the segment builds unbatched
            notes.append(f"{name}: its updates could not be batched ({type(e).__name__}: {_first_line(e)}); "
                         "they build unbatched")
            return None
        defs = [d for d, _ in made]
        groups = len(plan.groups)
        notes.append(f"{name}: {plan.updates} identical updates run as {groups} batched "
                     f"definition{'s' if groups != 1 else ''} (batch_updates)")
        return (BatchedRunner(plan, defs), [hit for _, hit in made],
                sum(d.build_seconds for d, hit in made if not hit),
                sum(d.build_seconds + d.compile_seconds for d, hit in made if not hit))


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__


def _donation_notes(records: list) -> list[str]:
    """What the regions' donations did: inputs freed inside their call, outputs written over dying inputs."""
    notes = []
    donating = [r for r in records if r.donated]
    if donating:
        notes.append(f"{len(donating)} regions free {sum(len(r.donated) for r in donating)} dying inputs inside "
                     "their call (donated: each goes after its last read in the region)")
    writing = [r for r in records if (r.details or {}).get("in_place_over")]
    if writing:
        notes.append(f"{len(writing)} regions write {sum(len(r.details['in_place_over']) for r in writing)} outputs "
                     "over dying inputs (donate_inplace: elementwise nvFuser segments, alias_input)")
    return notes


def _view_notes(programs: dict) -> list[str]:
    """What the region programs do with their view steps (:mod:`..runtime.fast_views`): folded after a checked first
    call, or kept as aten calls where a view landed elsewhere than the capture recorded (the line and layouts)."""
    views = {name: p.views for name, p in programs.items() if p.views is not None}
    if not views:
        return []
    notes = [f"{len(views)} region programs fold {sum(len(v.expected) for v in views.values())} view steps between "
             "their nvFuser segments into stride reinterpretations once a first call has checked their layouts"]
    notes += [f"{name}: its view steps stay aten calls: {v.mismatch}" for name, v in views.items() if v.mismatch]
    return notes


def region_definitions(compiled: CompiledProgram, region: str) -> str:
    """The nvFuser definitions (``repr(fd)``) of one region of a compiled program, as text."""
    defs = getattr(compiled, "definitions", None)
    if defs is None:
        raise ValueError(f"this program was compiled by executor={compiled.executor!r}, not nvfuser")
    if region not in defs:
        raise KeyError(f"no region {region!r}; regions: {', '.join(defs) or 'none'}")
    return "\n\n".join(repr(fd) for fd in defs[region]) or f"# {region}: every op runs through torch"
