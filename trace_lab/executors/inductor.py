"""Inductor executor: each fused region compiled by TorchInductor, the rest run eagerly.

Every ``fusionK`` region of the final Trace is handed to ``torch._inductor.compile``
(Inductor's own entry point for an FX graph: C++/OpenMP kernels on CPU, Triton
on CUDA) with example inputs of the region's recorded shapes, strides and
storage offsets. The program then runs in trace order through the eager
interpreter (:func:`.eager.interpret`): regions call their compiled code, other
ops run as aten calls, and values are dropped after their last use exactly as
the liveness model says. Inner values of a region stay inside Inductor's
kernels (``materializes_regions = False``).

Compiled regions are kept in a :class:`.fusion_cache.FusionCache` keyed by the
region's structural signature, so identical layers compile once. With
``fusion_cache=False`` every region compiles on its own *and* Inductor's own
caches (FX graph cache, autotune caches, its code caches, through
``force_disable_caches``) are off, so the cost measured is the real one.

A compiled region may allocate scratch buffers inside its call (a region Inductor
splits into several kernels with intermediate buffers, split reductions). The
executor measures that workspace once per compiled region, at compile time: it
runs the region on placeholder inputs of the recorded layouts (a warm-up call,
then a measured one, with :func:`trace_lab.runtime.measure.measure_peak`: CUDA
``max_memory_allocated``, CPU profiler allocator events) and records
peak - outputs as ``workspace_bytes`` in the region's record
(``CompiledProgram.regions``, op id -> RegionRecord), where the liveness model
counts it on the region's line once the Trace is joined to the program. Where it
cannot be measured (another profiler active) it is 0 and a note says so. The same call records how the compiled code lays out its outputs (which
are views of inputs or of each other, the bytes of each fresh storage), and the
liveness model follows that rather than the captured aliasing (see
:mod:`.workspace`).

Donation (``donate_inputs``, on by default): a region's arguments that die on its line (the liveness model's
``LineMemory.donatable``) are handed over in the list Inductor's generated ``call(args)`` clears (``fn.boxed``), so
each goes at its last use inside the call; the region is measured that way (a signed workspace). With
``donate_inplace`` the region is also compiled so that a kernel may write its output over such an input
(:func:`compile_region`'s ``donated``).

Which ops Inductor takes is decided in :data:`FUSIBLE` / :func:`inductor_can_fuse`,
the one place that says it (see the table there).
"""
from __future__ import annotations

import contextlib
import copy
import threading
import time

import torch
import torch.fx as fx

from ..analysis.region_record import RegionRecord
from ..analysis.storage import CUDA_ROUNDING
from ..errors import TraceLabError
from ..ir.trace import Trace, is_getitem, tensor_values
from .interface import CompiledProgram, Executor, register
from .inductor_ops import FUSIBLE, FUSIBLE_TAGS, NOT_FUSED, inductor_can_compile, inductor_can_fuse, inductor_fuse_reason  # noqa: F401 - the table, re-exported
from ..runtime import generate
from .compile_pool import THREADS, compile_all
from .fusion_cache import FusionCache, signature_hash
from .donation import region_jobs
from .region_cover import cover_details, cover_notes, covered_call, headroom, plan_covers, refusal_details
from .workspace import example_tensor as _example
from .workspace import compiled_region, measure_workspace

__all__ = ["InductorExecutor", "inductor_can_fuse", "FUSIBLE", "NOT_FUSED", "compile_region", "warm_compile_workers", "prepare_inductor"]

# ---- compiling one region ------------------------------------------------------------------------
# Outputs the direct call returns as AOTAutograd's inference wrapper would: fresh buffers, and views
# of inputs / inputs themselves (Inductor returns them in the input's storage with the recorded
# size, stride and offset; the wrapper only rebuilds them as autograd views, which nothing inside
# a trace_lab program reads: programs run with grad off).
_DIRECT_OUTPUT_TYPES = ("non_alias", "alias_of_input", "is_input")


def _direct_call(graph, aot_fn):
    """``fn(*inputs) -> tuple``: Inductor's generated wrapper (``CompiledFxGraph.current_callable``, its
    input-alignment check included) called on a new boxed list, which that code clears; grad off, as
    AOTAutograd's inference wrapper sets it. ``fn.compiled_graph`` is the ``CompiledFxGraph``,
    ``fn.aot_fn`` AOTAutograd's callable for the same compilation (not called)."""
    call = graph.current_callable
    grad_enabled = torch.is_grad_enabled
    no_grad = torch.no_grad

    def region(*args):
        if grad_enabled():
            with no_grad():
                return call(list(args))
        return call(list(args))

    def boxed(args: list):  # the caller hands its list over: inputs only it holds go at their last use
        if grad_enabled():
            with no_grad():
                return call(args)
        return call(args)

    for fn in (region, boxed):  # what a reader of the program's regions looks for (either entry)
        fn.compiled_graph = graph
        fn.aot_fn = aot_fn
    region.boxed = boxed
    return region


def _wrapper_is_identity(meta, n_outputs: int) -> bool:
    """Does AOTAutograd's inference wrapper only pass the compiled graph's outputs through? (no input
    mutation to replay, no intermediate bases or effect tokens appended, no tensor subclasses)"""
    if meta is None:
        return False
    try:
        if any(getattr(i, "mutates_data", False) or getattr(i, "mutates_metadata", False)
               or getattr(i, "mutates_storage_metadata", False) for i in meta.input_info):
            return False
        if getattr(meta, "num_intermediate_bases", 0) or getattr(meta, "tokens", None) \
                or any("Subclass" in type(m).__name__ for m in getattr(meta, "subclass_inp_meta", None) or ()):
            return False
        infos = list(meta.output_info)
        return len(infos) == n_outputs and all(o.output_type.name in _DIRECT_OUTPUT_TYPES for o in infos)
    except AttributeError:  # another torch's metadata: keep the wrapper
        return False


def compile_settings(disable_inductor_caches: bool = False):
    """The configuration every region compiles under (a context). :func:`compile_region` enters it; with regions
    compiled side by side the executor also enters it around the pool: torch's configuration patches are
    per thread in newer releases (then each job's own counts) and process-wide in older ones (then the pool's
    holds throughout, and a job's enter/exit, interleaved with another's at a kernel wait, restores the same values).

    Inductor's per-call size asserts are off (``size_asserts``): the first call's layout check
    (:mod:`trace_lab.runtime.dtype_guard`) does that job once. AOTAutograd's own cache is off so that
    ``compile_fx_inner`` always runs (Inductor's FX graph cache still serves it unless ``disable_inductor_caches``)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    patches = {"size_asserts": False}
    if disable_inductor_caches:
        patches.update({"force_disable_caches": True, "fx_graph_cache": False, "autotune_local_cache": False,
                        "autotune_remote_cache": False, "fx_graph_remote_cache": False})
    stack = contextlib.ExitStack()
    stack.enter_context(inductor_config.patch(patches))
    stack.enter_context(functorch_config.patch(enable_autograd_cache=False))
    return stack


@contextlib.contextmanager
def kernel_waits_release(lock):
    """While concurrent region compiles run (:func:`.compile_pool.compile_all`): Inductor's wait for the kernels
    it compiles in its worker processes (``AsyncCompile._wait_futures``) lets the pool's ``lock`` go, so that
    another region's lowering and code generation run meanwhile; nothing else interleaves.

    Contexts Inductor holds across that wait and that save and restore a process-wide flag (or, in older
    torch releases, a configuration patch) are entered here first with the value Inductor sets, so that two
    compiles' enter/exit in either order leave it as it was
    (lazy graph modules, preserving node meta, effect-token unlifting, compiled autograd off). A torch without
    ``_wait_futures`` compiles the regions one after another (each on its own thread)."""
    from torch._inductor import async_compile

    original = getattr(async_compile.AsyncCompile, "_wait_futures", None)
    if original is None:
        yield
        return

    def _wait_futures(self, scope):
        with lock.released():
            return original(self, scope)

    with contextlib.ExitStack() as stack:
        for enter in _process_wide_contexts():
            stack.enter_context(enter())
        async_compile.AsyncCompile._wait_futures = _wait_futures
        try:
            yield
        finally:
            async_compile.AsyncCompile._wait_futures = original


def warm_compile_workers() -> bool:
    """Start Inductor's kernel-compiling worker processes now, as torch.compile's own ``inductor`` backend does when
    a frame first reaches it (``maybe_warm_pool``). Until that pool reports ready, Inductor compiles each Triton
    kernel in this process, one after another; started when a jit is made (:func:`prepare_inductor`), the workers boot while Dynamo and
    AOTAutograd capture, and the regions' kernels compile in parallel from the first one. Returns whether this
    torch has the hook (it does nothing without Triton, with ``TORCH_WARM_POOL=0`` or one compile thread)."""
    try:
        from torch._inductor.async_compile import maybe_warm_pool
    except ImportError:
        return False
    maybe_warm_pool()
    return True


def prepare_inductor(device_type: str) -> None:
    """What making ``torch.compile(fn)`` with its ``inductor`` backend does before the first call (issue 27, first
    iteration): import Inductor's compile path (``torch._inductor.compile_fx``: its code generators and kernel
    templates, ~2 s in a fresh process, more where the installed torch has no cached bytecode), then start its
    compile workers (``"cuda"``: :func:`warm_compile_workers`) or its C++ toolchain checks (``"cpu"``:
    :func:`warm_cpu_toolchain`)."""
    import importlib

    importlib.import_module("torch._inductor.compile_fx")  # the import itself is the point
    if device_type == "cuda":
        warm_compile_workers()
    else:
        warm_cpu_toolchain()


def warm_cpu_toolchain() -> bool:
    """Run Inductor's one-off C++ checks now, on a background thread: before its first CPU kernel Inductor finds the
    vector instruction sets this CPU and compiler support by compiling and loading a test library for each
    (``cpu_vec_isa.valid_vec_isa_list``, cached for the process; 8.7 s of a 12 s first compile on a 2-core CPU with
    an empty cache). The work is compiler subprocesses, so the thread overlaps Dynamo's and AOTAutograd's capture;
    Inductor's own call later takes the cached answer or, while the thread still builds, waits on the same file
    locks and reuses its libraries. Returns whether it started (or had already run)."""
    global _CPU_TOOLCHAIN
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        return False
    check = getattr(cpu_vec_isa, "valid_vec_isa_list", None)
    if check is None:
        return False
    if _CPU_TOOLCHAIN is None:
        # The checks import Inductor's code cache and C++ builder (about 900 modules, torch.distributed's among
        # them) on first use. Imported on the thread, they raced the caller's Dynamo, which imports the same
        # packages while it traces: in a fresh environment (nothing compiled to .pyc yet) a first call once failed
        # with "No module named 'torch.distributed.tensor.experimental._context_parallel'". They are imported
        # here, before the thread starts; Inductor imports them for its first compile anyway.
        try:
            import torch._inductor.codecache  # noqa: F401
            import torch._inductor.cpp_builder  # noqa: F401
        except ImportError:
            pass

        def run():
            try:
                check()
            except Exception:  # noqa: BLE001 - Inductor runs the checks again itself and reports what fails
                pass

        _CPU_TOOLCHAIN = threading.Thread(target=run, name="trace_lab-cpu-toolchain", daemon=True)
        _CPU_TOOLCHAIN.start()
    return True


_CPU_TOOLCHAIN = None  # the warm-up thread, started once per process


def _process_wide_contexts():
    """Inductor's contexts around a compile that set a process-wide flag, as it enters them (those this torch has)."""
    import torch._dynamo.config as dynamo_config
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    import torch.fx.traceback as fx_traceback

    found = []
    try:
        from torch.fx._lazy_graph_module import _use_lazy_graph_module

        found.append(lambda: _use_lazy_graph_module(dynamo_config.use_lazy_graph_module))
    except ImportError:
        pass
    level = getattr(getattr(inductor_config, "trace", None), "provenance_tracking_level", None)
    found.append(lambda: fx_traceback.preserve_node_meta(level == 1) if level is not None
                 else fx_traceback.preserve_node_meta())
    flags = {"unlift_effect_tokens": True}
    if hasattr(inductor_config, "selective_decompose") and hasattr(functorch_config, "selective_decompose"):
        flags["selective_decompose"] = inductor_config.selective_decompose
    found.append(lambda: functorch_config.patch(**flags))
    try:
        from torch._dynamo import compiled_autograd

        if hasattr(compiled_autograd, "_disable"):
            found.append(compiled_autograd._disable)
    except ImportError:
        pass
    return found


def compile_region(sub: fx.GraphModule, input_vals, disable_inductor_caches: bool = False, settings: bool = True,
                   donated: tuple = ()):
    """Compile one region's GraphModule with Inductor; returns ``fn(*inputs) -> tuple`` of its outputs.

    The region is compiled through ``torch._inductor.compile_fx.compile_fx`` (AOTAutograd's
    functionalization and Inductor's decompositions, then ``compile_fx_inner``), exactly as
    ``torch._inductor.compile`` does, with an ``inner_compile`` that keeps the ``CompiledFxGraph``
    and AOTAutograd's view/mutation metadata. Where that metadata says the inference wrapper
    would pass the outputs through unchanged (regions hold no mutating ops: :func:`inductor_can_fuse`),
    the returned function calls Inductor's generated code directly (:func:`_direct_call`), which is all a
    call then costs; otherwise it calls AOTAutograd's callable as before. It compiles under
    :func:`compile_settings` (entered here unless ``settings=False``).

    ``donated``: input positions the caller hands over and never reads again (``donate_inplace``): Inductor may
    then write an output over such an input, as it does over a graph's own dying intermediates. That is its
    ``DonatedBuffer`` reuse, which it offers for AOTAutograd backward graphs (``is_backward`` with
    ``fw_metadata.bw_donated_idxs``); the FX graph cache does not key on those indices, so the compile carries them in
    ``torch.compiler.config.cache_key_tag`` and a non-donating compile of the same graph never gets this code.
    """
    from torch._guards import TracingContext, tracing
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    inner_calls = []

    def inner_compile(gm, example_inputs, *args, **kwargs):
        ctx = TracingContext.try_get()
        if donated and ctx is not None and getattr(ctx, "fw_metadata", None) is not None \
                and len([n for n in gm.graph.nodes if n.op == "placeholder"]) == len(input_vals):
            ctx.fw_metadata.bw_donated_idxs = list(donated)
            kwargs["is_backward"] = True
        graph = compile_fx_inner(gm, example_inputs, *args, **kwargs)
        inner_calls.append((graph, getattr(ctx, "fw_metadata", None) if ctx is not None else None,
                            kwargs.get("is_inference", False)))
        return graph

    # The executor is called from inside the capture's AOTAutograd compile (its fake mode and
    # tracing context are active); a region is a separate program, compiled in a clean context.
    with unset_fake_temporarily(), tracing(None), _donation_tag(donated), \
            (compile_settings(disable_inductor_caches) if settings else contextlib.nullcontext()):
        gm = copy.deepcopy(sub)
        examples = [_example(v) for v in input_vals]
        aot_fn = compile_fx(gm, examples, inner_compile=inner_compile)

    spec = next(n for n in reversed(sub.graph.nodes) if n.op == "output").args[0]
    if len(inner_calls) == 1:
        graph, meta, is_inference = inner_calls[0]
        if is_inference and isinstance(spec, (tuple, list)) and getattr(graph, "current_callable", None) \
                is not None and _wrapper_is_identity(meta, len(spec)):
            with unset_fake_temporarily(), tracing(None), torch.no_grad():
                graph(list(examples))  # the first call through CompiledFxGraph.__call__ (autotune-cache bundle)
            return _direct_call(graph, aot_fn)

    def run(*args):  # AOTAutograd's inference wrapper replays what the direct call would not
        return aot_fn(*args)

    return run


def _donation_tag(donated: tuple):
    """A context: the FX graph cache key of a compile that may overwrite the inputs at ``donated`` carries them."""
    if not donated:
        return contextlib.nullcontext()
    import torch.compiler.config as compiler_config

    tag = f"{compiler_config.cache_key_tag}|trace_lab donated inputs {','.join(map(str, donated))}"
    return compiler_config.patch(cache_key_tag=tag)


@register("inductor")
class InductorExecutor(Executor):
    materializes_regions = False
    compiles_library_ops = True  # a region calls its matmuls as extern kernels (fusion="layers")

    def __init__(self, fusion_cache: bool = True, donate_inputs: bool = True, donate_inplace: bool = True,
                 cover_regions: bool = True):
        self.fusion_cache = bool(fusion_cache)
        self.cover_regions = self.fusion_cache and bool(cover_regions)
        self.donate_inputs = bool(donate_inputs)
        self.donate_inplace = self.donate_inputs and bool(donate_inplace)
        self.cache = FusionCache(enabled=self.fusion_cache)
        self._measured: dict = {}  # (compiled region, donated positions) -> (workspace, fresh output bytes, layout)

    @classmethod
    def from_options(cls, options) -> "InductorExecutor":
        return cls(fusion_cache=options.fusion_cache, donate_inputs=getattr(options, "donate_inputs", True),
                   donate_inplace=getattr(options, "donate_inplace", True),
                   cover_regions=getattr(options, "cover_regions", True))

    def _covered_calls(self, covers: dict, fresh: dict) -> dict:
        """Key -> the call of each covered region (:func:`.region_cover.covered_call`), from its covering region's
        compiled code (compiled just now, or cached); where that code failed to compile, the covered region is left
        out and compiles on its own."""
        calls = {}
        for key, (by, cover, by_vals) in covers.items():
            done = fresh.get(by)
            fn = done[0] if done is not None else self.cache.peek(by)
            if fn is None or isinstance(fn, Exception):
                continue
            calls[key] = covered_call(fn, cover, by_vals, by)
        return calls

    def can_fuse(self, node: fx.Node) -> bool:
        return inductor_can_fuse(node)

    def can_compile(self, node: fx.Node) -> bool:
        return inductor_can_compile(node)

    def fuse_reason(self, node: fx.Node) -> str | None:
        return inductor_fuse_reason(node)

    def compile(self, trace: Trace) -> CompiledProgram:
        started = time.perf_counter()
        compiled: dict[fx.Node, object] = {}
        donations: dict[fx.Node, tuple] = {}  # region -> argument positions it frees inside its call
        records: dict[str, RegionRecord] = {}
        codes: dict[str, object] = {}
        rounding = CUDA_ROUNDING if trace.device.type == "cuda" else 1
        region_nodes = [n for n in trace.ops if n.op == "call_module"]
        live = trace.liveness(materialized_regions=False) if region_nodes else None
        donatable = {ln.node: ln.donatable for ln in live.lines if ln.donatable} if live and self.donate_inputs else {}
        # (node, region GraphModule, input values, plan, signature, cache key, inputs it may overwrite)
        jobs = region_jobs(trace, region_nodes, donatable, self.donate_inplace)
        # every distinct region the cache lacks (every region with the cache off) compiles at once (compile_pool)
        pending = {}
        for i, (node, sub, input_vals, _plan, _signature, key, over) in enumerate(jobs):
            slot = key if self.fusion_cache else i
            if slot not in pending and key not in self.cache:
                pending[slot] = (sub, input_vals, over)
        covers, covers_refused = plan_covers(jobs, pending, donatable, headroom(live), rounding) \
            if self.cover_regions and pending else ({}, [])
        for key in covers:
            del pending[key]
        disable_caches = not self.fusion_cache
        if pending:
            self.report_region(0, len(pending))
        with compile_settings(disable_caches):
            fresh = compile_all(pending, lambda job: compile_region(job[0], job[1], disable_inductor_caches=disable_caches,
                                                                    donated=job[2]),
                                device=trace.device, releasing=kernel_waits_release,
                                on_done=lambda done, total, _key: self.report_region(done, total))  # no "next" name: they run at once
        covered = self._covered_calls(covers, fresh)
        refused = {key: rest for key, *rest in covers_refused}
        names_by_key = {}
        for node, *_rest, key, _over in jobs:
            names_by_key.setdefault(key, str(node.target))
        for i, (node, sub, input_vals, plan, signature, key, over) in enumerate(jobs):
            done = fresh.pop(key if self.fusion_cache else i, None)
            try:
                if key in covered and key not in self.cache:  # runs the code of a region it is part of
                    fn, hit, seconds = covered[key], True, 0.0
                    self.cache.put(key, fn, hit=True)
                elif done is not None:
                    fn, seconds = done
                    if isinstance(fn, Exception):
                        raise fn
                    self.cache.put(key, fn)
                    hit = False
                else:  # a cache hit (or a region the cache let go of since: compiled now)
                    fn, hit, seconds = self.cache.get_or_compile(
                        key, lambda: compile_region(sub, input_vals, disable_inductor_caches=disable_caches,
                                                    donated=over))
            except Exception as e:  # noqa: BLE001 - said plainly, cause attached
                ops = plan.ops
                first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                raise TraceLabError(
                    f"Inductor could not compile fused region {node.target} ({len(ops)} ops: "
                    f"{', '.join(ops[:4])}{', ...' if len(ops) > 4 else ''}): {type(e).__name__}: {first}. "
                    "executor='eager' runs the same program op by op; fusion='none' leaves every op unfused."
                ) from e
            compiled[node] = fn
            codes[str(node.target)] = _code_reader(fn)
            donate = donatable.get(node, ()) if hasattr(fn, "boxed") else ()  # the direct call only
            if donate:
                donations[node] = donate
            measured = (fn, donate)
            if measured not in self._measured:  # once per compiled region and donation (a cache hit reuses the figure)
                self._measured[measured] = measure_workspace(fn, input_vals, rounding, donate)
            workspace, out_bytes, layout = self._measured[measured]
            if hasattr(fn, "cover"):  # the covering region's code: its own in-place positions apply, not ``over``
                details = cover_details(fn, names_by_key)
            else:
                details = {"in_place_over": list(over)} if over else {}
                if not hit and key in refused:  # it is part of another region, whose code would raise the peak
                    details.update(refusal_details(refused[key]))
            records[node.name] = compiled_region(node, layout, workspace, rounding, executor="inductor",
                                                 name=str(node.target), signature=signature_hash(signature),
                                                 cache_hit=hit, compile_seconds=seconds, output_bytes=out_bytes,
                                                 donated=donate, details=details)
        if region_nodes:
            self.report_region(len(region_nodes), len(region_nodes))
        program = generate(trace, region_runner=compiled.__getitem__, materialized_regions=False, fast_views=True,
                           donations=donations)
        run = program.run
        notes = []
        if records:
            rows = list(records.values())
            hits = sum(r.cache_hit for r in rows)
            notes.append(f"{len(rows)} regions, {len({r.signature for r in rows})} unique signatures, "
                         f"{hits} cache hits" + ("" if self.fusion_cache else " (fusion cache off, Inductor caches off)"))
            if len(pending) > 1 and THREADS > 1:
                notes.append(f"{len(pending)} regions compiled at once on {min(THREADS, len(pending))} threads: "
                             "each region's compile seconds overlap the others'")
            notes.extend(cover_notes(rows))
            notes.extend(_workspace_notes(rows))
            donating = [r for r in rows if r.donated]
            if donating:
                notes.append(f"{len(donating)} regions free {sum(len(r.donated) for r in donating)} dying inputs "
                             "inside their call (donated: each goes at its last use in Inductor's code)")
        return CompiledProgram(run=run, executor="inductor", compile_seconds=time.perf_counter() - started,
                               source=program.source, regions=records, notes=notes, generated=program,
                               region_code=codes)


def _code_reader(fn):
    """() -> Inductor's output code for a compiled region (the wrapper and its kernels' source)."""
    def read():
        graph = getattr(fn, "compiled_graph", None)
        code = getattr(graph, "source_code", None)
        return code if code else "(Inductor's output code is not kept for this region: it runs through AOTAutograd's wrapper)"
    return read


def _workspace_notes(records: list[RegionRecord]) -> list[str]:
    notes = []
    with_ws = [r for r in records if (r.workspace_bytes or 0) > 0]  # a donating region may be below zero
    if with_ws:
        top = max(with_ws, key=lambda r: r.workspace_bytes)
        notes.append(f"{len(with_ws)} regions allocate workspace inside their call (largest: {top.name}, "
                     f"{top.workspace_bytes} B); counted on their lines")
    if any(r.workspace_bytes is None for r in records):
        notes.append("region workspace not measured (another profiler is active): counted as 0")
    odd = [f"{r.name} ({r.model_output_bytes - r.planned_output_bytes:+d} B)" for r in records
           if r.model_output_bytes != r.planned_output_bytes]
    if odd:
        notes.append("regions whose compiled code lays its outputs out otherwise than the fusion plan assumed "
                     f"(own storages for views): {', '.join(odd[:6])}; predicted memory follows the code")
    return notes
