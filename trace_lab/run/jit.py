"""jit: the user-facing compiled callable and its recorded programs.

``trace_lab.jit(fn, **options)`` returns a :class:`JitFunction`. Calling it runs
``fn`` through ``torch.compile`` with trace_lab's capture backend; every program
that capture records (forward, backward, inference; one per graph of a graph
break; a new one per recompilation) goes through the pass pipeline and the
chosen executor, and all its stages are kept on the JitFunction:

* ``jfn.programs`` - every :class:`~trace_lab.capture.Program` compiled so far;
* ``jfn.compilations()`` - one :class:`~.compilation.CompilationRecord` per compiled program part
  (stages, executor and why, regions, notes, CUDA graphs, timings): what a Report keeps and the views read;
* ``last_traces(jfn)`` / ``last_backward_traces(jfn)`` - the stages of the
  forward / backward program that ran most recently.

Memory measurement is opt-in (``with jfn.measuring(): ...``) so that timing runs
are not disturbed by it; see :mod:`trace_lab.runtime.measure`.

Compile progress: a JitFunction made inside ``with compile_progress(callback):`` (in that
thread) calls ``callback(event)`` while it compiles - ``{"event": "part", "part": "forward #0"}``
when a program part starts (capture and passes), and ``{"event": "region", "part": ..., "done": k,
"total": n, "region": name}`` before each fused region the executor compiles and once all are
done (the executor's ``report_region``, inside ``executors.interface.region_progress``). Compile time only; a call that compiles nothing says nothing.
The callback may raise (the notebook's Stop) and the compile ends there.
"""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, replace

import torch

from ..analysis.handover import owned_backward_inputs
from .loss import default_loss_copies_gradient
from ..capture.session import CaptureSession, Program, ProgramPart, program_parts
from ..errors import TraceLabError, dynamo_break_counts, dynamo_breaks_since, explain_compile_error, nothing_captured
from ..executors import get_executor, resolve_executor
from ..options import FUSION_STRATEGIES, Options, check_names, with_signature
from ..passes import PassContext, run_pipeline
from ..torch_support import release
from ..ir.trace import Trace, node_device
from ..runtime.op_scratch import complete_op_scratch, measure_op_scratch
from ..executors.interface import region_progress
from .compilation import CompilationRecord

__all__ = ["Options", "JitFunction", "jit", "resolve_fusion", "resolve_run_executor", "last_traces", "last_backward_traces", "FUSION_STRATEGIES",
           "compile_progress", "joint_graph_hook", "final_stage", "compiled_of"]

_PROGRESS = threading.local()  # the compile_progress callback of this thread


@contextlib.contextmanager
def _in_this_thread(local: threading.local, name: str, value):
    """``local.name`` is ``value`` while the block runs, then what it was."""
    old = getattr(local, name, None)
    setattr(local, name, value)
    try:
        yield
    finally:
        setattr(local, name, old)


def compile_progress(callback):
    """JitFunctions made in this thread while the block runs report their compiling to ``callback(event)``
    (see the module docstring); they keep the callback for compiles that happen later (a backward)."""
    return _in_this_thread(_PROGRESS, "callback", callback)

# fusion="auto" (the default): what runs no slower than eager PyTorch on each device, measured on an
# H100 (benchmarks/BENCHMARKS.md): on CUDA, unfused programs are host-bound (one launch per decomposed
# op: 1.6x eager's step for an 8-layer llama) and dataflow regions are not (1.0x with nvFuser, 0.8x with
# Inductor); on CPU, fusing means compiling C++ per region, so the default stays unfused there. One exception
# (resolve_fusion): a program of identical updates that nvFuser batches gets horizontal regions.
AUTO_FUSION = {"cuda": "dataflow"}


@dataclass
class Measurement:
    program: int
    kind: str
    measured_peak_above_inputs: int | None
    predicted_peak_above_inputs: int
    method: str

    def set_measured(self, measured: int | None, method: str) -> None:
        self.measured_peak_above_inputs, self.method = measured, method


def _entry(fn):
    """What Dynamo compiles for ``fn``: a plain Python function of torch's own (``F.softmax``) is called from a
    trampoline, because Dynamo skips a frame whose code lives in torch (torch 2.10 ran ``F.softmax`` eagerly,
    capturing nothing) but inlines the same function called from user code."""
    import functools
    import inspect as _inspect

    if _inspect.isfunction(fn) and (getattr(fn, "__module__", "") or "").split(".")[0] == "torch":
        @functools.wraps(fn)
        def trampoline(*args, **kwargs):
            return fn(*args, **kwargs)

        return trampoline
    return fn


class JitFunction:
    """A function compiled by trace_lab; call it like the original."""

    def __init__(self, fn, options: Options):
        self.options = options
        self.fn = fn = _fsdp_prepare(fn, self.options)
        self._fsdp_unchecked = bool(self.options.fsdp)  # until a call shows sharded parameters reached programs
        self.session = CaptureSession(self._compile_part, prepare_joint=_joint_preparer(self.options),
                                      wrap_partition=_partition_wrapper(self.options))
        self._executors: dict[str, object] = {}
        self.executor_reasons: list[str] = []
        self._last_forward: ProgramPart | None = None
        self._last_backward: ProgramPart | None = None
        self._measure = False
        self._cpu_windows = None  # measure.CpuMemoryWindows while measuring()
        self.measurements: list[Measurement] = []
        self.calls = 0
        # how the backward's gradients arrive: fake value -> whether AOTAutograd copies that gradient (matters on
        # torch before 2.13: analysis/handover.py). Default: as the gradients of ``out.sum()`` / the default loss
        # (run/loss.py); None: the caller's or autograd's own tensors, never copied (a custom loss)
        self.gradients_copied = default_loss_copies_gradient
        self.dynamo_breaks: list[str] = []  # Dynamo's graph-break messages while nothing was captured
        self.parts_run_in_last_call = 0
        self._records: dict[tuple[int, str], CompilationRecord] = {}  # (program, kind) -> what compiling made
        self._scratch_pending = False  # an op's scratch could not be measured under a profiler: measure it later
        self.progress = getattr(_PROGRESS, "callback", None)  # compile events (compile_progress)
        _raise_recompile_limits()
        self._compiled = torch.compile(_entry(fn), backend=self.session.backend, dynamic=False)
        _warm_inductor(self.options)

    # -- calling -------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        self.calls += 1
        self.parts_run_in_last_call = 0
        if self._scratch_pending:
            self.complete_measurements()
        breaks = None if self.programs else dynamo_break_counts()  # why nothing is captured (last_traces)
        try:
            out = self._compiled(*args, **kwargs)
            if self._fsdp_unchecked:
                _fsdp_check_reached(self)
            return out
        except TraceLabError:
            raise
        except Exception as e:  # noqa: BLE001 - translated into a specific message, cause kept
            explained = explain_compile_error(e)
            if explained is e:
                raise
            raise explained from e
        finally:
            if breaks is not None:
                self.dynamo_breaks += [m for m in dynamo_breaks_since(breaks) if m not in self.dynamo_breaks]

    @property
    def programs(self) -> list[Program]:
        return self.session.programs

    def compilations(self) -> list[CompilationRecord]:
        """One :class:`~.compilation.CompilationRecord` per compiled program part, in program order, a
        program's forward (or inference) before its backward (what a Report keeps and every view reads)."""
        return [self._records[k] for k in sorted(self._records, key=lambda k: (k[0], k[1] == "backward"))]

    def graphed_runs(self) -> list:
        """The GraphedRun of every program part compiled with ``cuda_graphs=True`` on CUDA."""
        return [r.graphs for r in self._records.values() if r.graphs is not None]

    @contextlib.contextmanager
    def measuring(self):
        """Measure each program's peak memory while the block runs (CPU figures are filled in
        when the block ends: one profiler session covers it, see measure.CpuMemoryWindows)."""
        from ..runtime.measure import CpuMemoryWindows

        old, self._measure = self._measure, True
        old_windows, self._cpu_windows = self._cpu_windows, CpuMemoryWindows()
        try:
            yield self.measurements
        finally:
            self._measure = old
            windows, self._cpu_windows = self._cpu_windows, old_windows
            windows.close()
            if self._scratch_pending:
                self.complete_measurements()

    def complete_measurements(self) -> None:
        """Measure the op scratch a profiler kept from being measured at capture (if no profiler runs now):
        the traces' records are completed and their liveness is priced again."""
        complete_op_scratch([part.traces[0] for _, _, part in program_parts(self) if part.traces])
        self._scratch_pending = any(part.traces[0].op_scratch.pending for _, _, part in program_parts(self)
                                    if part.traces and part.traces[0].op_scratch is not None)

    def use_executor(self, executor) -> "JitFunction":
        """Run the programs compiled from now on that resolve to ``executor.name`` on this
        :class:`~trace_lab.executors.Executor` instance instead of a new one from the registry (a
        test's or a probe's variant of an executor). Returns this JitFunction."""
        self._executors[executor.name] = executor
        return self

    # -- the per-program compiler (called by capture) ---------------------------------------
    def _executor(self, name: str):
        if name not in self._executors:
            self._executors[name] = get_executor(name, self.options)
        return self._executors[name]

    def _compile_part(self, program: Program, part: ProgramPart):
        # A backward compiles lazily, inside a measuring() block's profiler session. Compiling Inductor
        # regions under the profiler can crash its stop(), so that session ends first: the figures of
        # the runs before are final, and the runs of this call that follow say they were not measured
        # (autograd keeps the ended session for the rest of the backward; a later call measures).
        windows = self._cpu_windows
        if windows is not None and self.options.fusion != "none" and \
                resolve_run_executor(self.options, node_device(part.gm))[0] == "inductor":
            windows.interrupt("this call compiled Inductor regions inside the measurement; measure a later call")
        return self._compile_part_unmeasured(program, part)

    def _compile_part_unmeasured(self, program: Program, part: ProgramPart):
        names = part.input_names
        owned = {}
        if part.kind == "backward" and program.forward is not None and program.forward.traces:
            fw_names = program.forward.traces[0].names_by_fx_name()
            names = [fw_names.get(n, n.replace("tangents_", "tangent_")) for n in part.input_names]
            # saved activations AOTAutograd hands over: freed at their last use (analysis/handover.py)
            owned = owned_backward_inputs(program.forward.gm, part.gm, self.gradients_copied)
        device = node_device(part.gm)
        exec_name, reason = resolve_run_executor(self.options, device)
        batching = exec_name == "nvfuser" and self.options.batch_updates
        fusion, fusion_reason = resolve_fusion(self.options.fusion, device, part.gm if batching else None)
        for why in (reason, fusion_reason):
            if why not in self.executor_reasons:
                self.executor_reasons.append(why)
        executor = self._executor(exec_name)
        say = self.progress
        label = f"{part.kind} #{program.index}"
        if say is not None:
            say({"event": "part", "part": label})
        on_region = None if say is None else (
            lambda done, total, name: say({"event": "region", "part": label, "done": done, "total": total,
                                           "region": name}))
        options = replace(self.options, fusion=fusion)
        started = time.perf_counter()
        # every stage prints its liveness as this executor runs regions (derived stages keep the flag)
        trace = Trace(part.gm, part.kind, "as captured", names, owned_inputs=owned,
                      materialized_regions=executor.materializes_regions)
        # what the ops take inside their calls is measured now, once, as records every stage reads
        measure_op_scratch(trace)
        scratch_seconds = time.perf_counter() - started
        self._scratch_pending = self._scratch_pending or bool(trace.op_scratch.pending)

        def build(keep_unfused=frozenset(), keep_apart=frozenset()):
            part.traces = run_pipeline(trace, PassContext(options, executor, keep_unfused, keep_apart))  # kept if compiling fails
            compiled = executor.compile(part.traces[-1])
            # what compiling found is data on the program; the last stage is joined to it by op id
            part.traces = part.traces[:-1] + [part.traces[-1].with_regions(compiled.regions)]
            return part.traces, compiled

        with region_progress(on_region):
            stages, compiled = build()
            if fusion == "memory" and not executor.materializes_regions:
                from .memory_guard import keep_promise

                part.traces, compiled = keep_promise(stages, compiled, build, executor.can_fuse)
        part.compiled = compiled
        graphed, graph_notes = _graphed_run(self.options, part.traces[-1], compiled)
        self._records[(program.index, part.kind)] = CompilationRecord(
            program.index, part.kind, list(part.traces), exec_name, fusion, [reason, fusion_reason], compiled,
            graph_notes, graphed, part.capture_seconds, time.perf_counter() - started, scratch_seconds,
            _aligned_saves(part))
        jfn = self

        def run(args):
            if part.kind == "backward":
                jfn._last_backward = part
            else:
                jfn._last_forward = part
                jfn._last_backward = None
            jfn.parts_run_in_last_call += 1
            if jfn._measure:
                from ..runtime.measure import measure_peak

                device = part.traces[-1].device
                predicted = part.traces[-1].liveness(executor.materializes_regions).peak_above_inputs_bytes
                record = Measurement(program.index, part.kind, None, predicted, "pending")
                jfn.measurements.append(record)
                # measured un-graphed: a replay allocates nothing, its graph's pool did before
                if device.type == "cpu" and jfn._cpu_windows is not None:
                    return jfn._cpu_windows.run(compiled.run, args, record.set_measured)
                outs, measured, method = measure_peak(compiled.run, args, device)
                record.set_measured(measured, method)
                return outs
            return compiled.run(args) if graphed is None else graphed(args)

        # Never let Dynamo trace trace_lab's own runtime: a cell that calls .backward() inside
        # the compiled function runs this backward from within Dynamo's frame hook.
        run = torch._dynamo.disable(run)
        run._boxed_call = True
        return _without_disable_marks(run) if release(torch.__version__) < (2, 11) else run


def _without_disable_marks(run):
    """torch 2.10: AOTAutograd's unboxed wrapper of an inference program copies the program's attributes
    (functools.wraps), Dynamo's disable marks included; Dynamo then disables that wrapper, ``disable`` unwraps it
    to the marked original, and calls that with the unboxed arguments. A plain function carries no marks."""
    def boxed(args):
        return run(args)

    boxed._boxed_call = True
    return boxed


def _cuda_available() -> bool:
    return torch.cuda.is_available()


def _warm_inductor(options: Options) -> None:
    """When a jit is made whose regions Inductor will compile, what making ``torch.compile(fn)`` does
    (:func:`..executors.inductor.prepare_inductor`: Inductor's imports, then its compile workers on CUDA or its C++
    toolchain checks on the CPU), so that the first call holds neither and the workers boot while Dynamo and
    AOTAutograd capture. Before 2026-11-29 this ran at the first call, whose time then held Inductor's imports,
    which torch.compile's first call does not. Nothing happens when no region would compile with Inductor."""
    device = torch.device("cuda" if _cuda_available() else "cpu")
    if resolve_fusion(options.fusion, device)[0] == "none" or resolve_run_executor(options, device)[0] != "inductor":
        return
    from ..executors.inductor import prepare_inductor

    prepare_inductor(device.type)


def resolve_run_executor(options: Options, device: torch.device) -> tuple[str, str]:
    """(executor name, one-line reason) for a jit's options on a device: ``executor="auto"`` with
    ``fusion="layers"`` is Inductor (a layer's region holds its matmuls; nvFuser takes them too, but on the H100
    a layer per nvFuser definition ran no faster than dataflow + nvFuser: BENCHMARKS.md, 2026-11-28), otherwise
    :func:`resolve_executor`'s choice."""
    if options.executor == "auto" and resolve_fusion(options.fusion, device)[0] == "layers":
        return "inductor", ("auto: fusion=layers compiles each layer's matmuls inside its region, which Inductor "
                            "does; using Inductor")
    return resolve_executor(options.executor, device)


def resolve_fusion(name: str, device: torch.device, updates_of=None) -> tuple[str, str]:
    """(strategy, one-line reason) for a requested fusion strategy on a device (see AUTO_FUSION).

    ``updates_of``: the program's graph where nvFuser runs it with ``batch_updates`` on. Where auto would pick
    dataflow and the whole program is identical updates that batch (an optimizer step:
    :func:`..executors.nvfuser_batch.batched_update_program`), auto picks horizontal: dataflow leaves each
    update a region of its own (Adam.step over 200 parameters: 199 definition calls a step, 10.4 ms on an
    H200), horizontal regions run them as one batched definition per group (2.32 ms, median of 3; BENCHMARKS.md,
    session 42), at the price of the stacks (350 MiB for that step)."""
    if name != "auto":
        return name, f"requested fusion={name}"
    chosen = AUTO_FUSION.get(device.type, "none")
    if chosen == "dataflow" and updates_of is not None:
        from ..executors.nvfuser_batch import batched_update_program
        from ..passes.constant_fold import foldable

        updates, groups = batched_update_program(updates_of, foldable(updates_of.graph))
        if updates:
            return "horizontal", (f"fusion auto: horizontal on {device.type} (the program is {updates} identical "
                                  f"independent updates of its inputs, as an optimizer step is: nvFuser runs them "
                                  f"as {groups} batched definition{'s' if groups != 1 else ''}, batch_updates)")
    why = ("unfused programs are host-bound on a GPU" if chosen != "none"
           else "fusing on CPU compiles C++ per region")
    return chosen, f"fusion auto: {chosen} on {device.type} ({why})"


def _graphed_run(options: Options, trace: Trace, compiled) -> tuple[object, list[str]]:
    """``cuda_graphs=True``: (the program's run wrapped in a GraphedRun, []), or (None, a note saying why this
    program runs without one); (None, []) when graphs are off. Both go on the part's CompilationRecord."""
    if not options.cuda_graphs:
        return None, []
    if trace.device.type != "cuda":
        return None, [f"cuda_graphs: this program runs on {trace.device.type}; CUDA graphs need a CUDA device, "
                      "so it runs without one"]
    if options.fsdp:
        return None, ["cuda_graphs: left off for FSDP programs (their collectives and the wait hooks that time "
                      "them are host-driven)"]
    from ..executors.cuda_graphs import GraphedRun, written_inputs

    # metadata_guarded: Dynamo guards the inputs' strides, shapes and dtypes (dynamic=False) and AOTAutograd lays
    # the tangents out as traced, so a replay's check compares addresses only
    return GraphedRun(compiled.run, written_inputs(trace), names=[trace.name(n) for n in trace.inputs],
                      metadata_guarded=True), []


def _fsdp_prepare(fn, options: Options):
    """``fsdp=``: an unsharded nn.Module is sharded in place, as torch's ``fully_shard`` does, or a
    TraceLabError says what is missing (trace_lab.distributed.sharding.shard_for_jit)."""
    if not options.fsdp:
        return fn
    from ..distributed.sharding import shard_for_jit

    return shard_for_jit(fn, options.fsdp)


def _fsdp_check_reached(jfn: "JitFunction") -> None:
    """After a call: no sharded parameter in any compiled forward is an error, not a silent unsharded run."""
    from ..distributed.sharding import check_fsdp_reached

    jfn._fsdp_unchecked = not check_fsdp_reached(jfn)


_JOINT = threading.local()  # the joint_graph_hook of this thread


def joint_graph_hook(hook):
    """JitFunctions made in this thread while the block runs call ``hook(joint_gm)`` on AOTAutograd's joint
    graph before the partitioner splits it (after any hook their options need), for compiles that happen later
    too: the peak explainer tags one saved activation ``MUST_RECOMPUTE`` this way (trace_lab.lab.peak)."""
    return _in_this_thread(_JOINT, "hook", hook)


def _joint_preparer(options: Options):
    """Hooks on AOTAutograd's joint graph: what a pass needs (ZeRO-3: regather in the backward), then the one
    :func:`joint_graph_hook` gives."""
    hooks = []
    if options.fsdp == "zero3":
        from ..passes.fsdp import tag_gathers_for_recompute

        hooks.append(tag_gathers_for_recompute)
    if getattr(_JOINT, "hook", None) is not None:
        hooks.append(_JOINT.hook)
    if len(hooks) < 2:
        return hooks[0] if hooks else None

    def both(joint_gm):
        for hook in hooks:
            hook(joint_gm)

    return both


# Strategies whose regions follow the layers (each repeat of a layer the same regions), so that a layer saving
# other activations than its repeats costs a compile of its own (:mod:`..passes.layer_saves`).
ALIGNED_STRATEGIES = ("layers", "dataflow", "memory")


def _partition_wrapper(options: Options):
    """With a strategy of :data:`ALIGNED_STRATEGIES` (``auto`` as resolved on the program's device), repeated
    layers save the same activations, so that each kind of layer compiles one forward and one backward region
    (:mod:`..passes.layer_saves`); otherwise, or with ``align_layer_saves=False``, AOTAutograd's partition."""
    if not options.align_layer_saves or options.fusion not in ALIGNED_STRATEGIES + ("auto",):
        return None
    from ..passes.layer_saves import aligned_partition

    def wrap(partition):
        aligned = aligned_partition(partition)

        def partition_for_strategy(joint_gm, joint_inputs, **kwargs):
            strategy = resolve_fusion(options.fusion, _device_of(joint_inputs))[0]
            chosen = aligned if strategy in ALIGNED_STRATEGIES else partition
            return chosen(joint_gm, joint_inputs, **kwargs)

        return partition_for_strategy

    return wrap


def _aligned_saves(part) -> dict | None:
    """What aligning the layers' saves did in this forward's capture (:func:`_partition_wrapper`), or None."""
    if part.kind == "backward":
        return None
    from ..passes.layer_saves import ALIGNED_META

    found = part.gm.meta.get(ALIGNED_META)
    return dict(found) if found else None


def _device_of(values) -> torch.device:
    """The device of the first tensor among AOTAutograd's joint inputs (nested lists), CPU if none."""
    from torch.utils._pytree import tree_leaves

    first = next((t for t in tree_leaves(values) if isinstance(t, torch.Tensor)), None)
    return first.device if first is not None else torch.device("cpu")


def _raise_recompile_limits() -> None:
    # Each JitFunction of the same Python function adds cache entries; keep them all
    # compiled rather than letting Dynamo fall back to plain eager after 8.
    cfg = torch._dynamo.config
    for attr, value in (("recompile_limit", 256), ("cache_size_limit", 256), ("accumulated_recompile_limit", 4096),
                        ("accumulated_cache_size_limit", 4096)):
        if hasattr(cfg, attr) and getattr(cfg, attr) < value:
            setattr(cfg, attr, value)


@with_signature
def jit(fn=None, **options) -> JitFunction:
    """Compile ``fn`` (a function or ``nn.Module``) with trace_lab; the options are those of
    :data:`trace_lab.options.SCHEMA` offered to ``jit`` (see :class:`Options`; the signature lists them).

    ``cuda_graphs=True`` replays each CUDA program from a recorded CUDA graph after a warm-up call
    (:mod:`trace_lab.executors.cuda_graphs`): outputs then live in the graph's memory until the next call."""
    check_names(options, "jit", "trace_lab.run.jit")
    opts = Options(**options)
    if fn is None:
        return lambda f: JitFunction(f, opts)
    if not callable(fn):
        raise TypeError(f"trace_lab.jit needs a function or nn.Module, got {type(fn).__name__}")
    return JitFunction(fn, opts)


def final_stage(jfn, kind: str, program: int | None, caller: str) -> Trace:
    """The final stage of a jitted function's ``kind`` part: of program ``program`` (its index in
    ``jfn.programs``: a graph break makes one program per graph), or of the one that ran last (None)."""
    if program is None:
        traces = last_backward_traces(jfn) if kind == "backward" else last_traces(jfn)
        if not traces:
            raise TraceLabError(f"{caller}: no {kind} program has run yet: call the jitted function first")
        return traces[-1]
    kinds = ("inference", "forward") if kind == "forward" else (kind,)
    found = [part for pos, _, part in program_parts(jfn) if pos == program and part.kind in kinds]
    if not found:
        have = sorted({f"{pos} ({part.kind})" for pos, _, part in program_parts(jfn)})
        raise TraceLabError(f"{caller}(program={program!r}, kind={kind!r}): no such program part; this function "
                            f"has {', '.join(have) or 'none yet (call it first)'}")
    return found[-1].traces[-1]


def compiled_of(jfn, trace: Trace):
    """The compiled program of the part of ``jfn`` whose final stage is ``trace`` (None if no part's is)."""
    return next((part.compiled for _, _, part in program_parts(jfn) if part.traces[-1] is trace), None)


def last_traces(jfn: JitFunction) -> list[Trace]:
    """Stages of the forward (or inference) program that ran last; [0] as captured."""
    _check(jfn)
    if jfn._last_forward is None:
        why = nothing_captured(jfn)
        raise TraceLabError(f"no program was captured: {why}" if why else
                            "nothing has run yet: call the jitted function first, then ask for its traces")
    return list(jfn._last_forward.traces)


def last_backward_traces(jfn: JitFunction) -> list[Trace]:
    """Stages of the backward program that ran last; [] if no backward ran."""
    _check(jfn)
    return list(jfn._last_backward.traces) if jfn._last_backward is not None else []


def _check(jfn) -> None:
    if not isinstance(jfn, JitFunction):
        raise TypeError(f"expected a function made by trace_lab.jit, got {type(jfn).__name__}")
