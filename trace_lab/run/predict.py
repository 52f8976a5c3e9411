"""Will it fit? Predicted peak memory of each program without allocating a byte (issue 17 item 8).

``trace_lab.predict(fn, *args)`` runs the same capture, passes and liveness model as
``trace_lab.jit`` on the **meta** device: every tensor argument, and a module's
parameters and buffers, are replaced by meta tensors of the same shape, dtype, strides
and ``requires_grad`` (a module is called through ``torch.func.functional_call``, so the
user's module and its weights are left as they are; a module built under
``torch.device("meta")`` works directly). Only what reaches ``fn`` through its arguments can
be replaced: a module or tensor ``fn`` reads from its globals or closure (a notebook's model)
would mix real and meta tensors, so predict names it and says to pass it as an argument
(``reached_outside_arguments``), before anything runs. The compiled program then runs on meta tensors,
which only propagate shapes, and the backward runs too when an output requires grad.
What comes back is the liveness model's figures per program part and per fusion
strategy: the peak above the program's inputs (the figure the Report calls "peak") and
the high-water mark with the inputs counted.

``device`` picks the allocator modelled: ``"cuda"`` rounds each allocation as the CUDA
caching allocator does (512 B), ``"cpu"`` counts exact bytes. Regions are modelled as
compiled code runs them (inner values never touch memory) unless ``executor="eager"``
(op by op). The fusion strategies plan with ``executor``'s rules (what it fuses, whether its regions'
inner values touch memory: the memory strategy merges by that model), and the planned program runs op
by op on meta, since nothing compiles for the meta device (:class:`_MetaPlanner`). Limits, said in the result's notes: ops with internal scratch memory
(convolutions, FFTs, sorts) and compiled regions' workspace are measured on a real
device, so on meta they count as zero (the Trace marks them as lower bounds); kernels
chosen per device (attention) are the meta device's. One workspace is known before compiling and priced:
the stacks of the updates nvFuser batches (``executor="nvfuser"``, :meth:`NvFuserExecutor.planned_workspace`).

An optimizer is replaced too, by a twin whose parameters, gradients and state are meta tensors (an
argument, a notebook cell's variable, or the object of ``predict(opt.step)``, which stepped the real
optimizer before session 42; also where an LR scheduler replaced ``opt.step`` by its wrapper): predicting a step
takes none. Where Dynamo's capture would make the real one
``capturable`` (every parameter on CUDA, no state yet), the twin is made so, so that its program is the one
the GPU runs.

FSDP (issue 28 item 4): ``predict(model, x, fsdp="zero3", world_size=N)`` predicts what each of N ranks
holds without N processes. A fake process group of N ranks (:func:`trace_lab.distributed.fake_group.fake_group`:
torch's ``FakeProcessGroup``; a default group the user already has is left alone) names the group; a
meta twin of the module (and of the modules among the arguments) is sharded as ``trace_lab.jit(model,
fsdp=...)`` shards the real one (:func:`~trace_lab.distributed.sharding.shard_parameters`: flat padded 1-D
shards read through ``fsdp_unshard``), and the jit's own fsdp lowering, ``sort_waits`` and in-flight limit
make the programs whose liveness is priced. Every rank holds a shard of ``ceil(numel / N)`` elements per
parameter (the last rank's is padded with zeros), so every rank runs the same programs on tensors of the
same shapes: the figures are each rank's, given the inputs one rank is called with. The notes say what the
model leaves out (the communication library's buffers, fragmentation, the optimizer state).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace

import torch

from ..analysis.liveness import compute_liveness
from ..analysis.op_scratch import fused_away, scratch_unknown
from ..analysis.region_record import plan_record
from ..analysis.storage import CUDA_ROUNDING
from ..capture.session import program_parts
from ..errors import TraceLabError
from ..executors.base import get_executor, resolve_executor, strategies_for
from ..passes.fusion import layers_refused
from ..executors.interface import CompiledProgram, Executor
from ..options import FUSION_STRATEGIES
from ..runtime import generate
from .compare import reachable_tensors

__all__ = ["predict", "Prediction", "PartPeak"]


@dataclass(frozen=True)
class PartPeak:
    """One program part's predicted memory under one strategy (bytes)."""

    strategy: str
    program: int
    kind: str
    peak_above_inputs: int
    high_water: int
    inputs: int
    # why the figure is a lower bound: the lines whose op scratch or region workspace is unknown on meta
    # (the printed trace marks them '[>= lower bound: ...]'); empty when the figure is exact
    lower_bound: str = ""


@dataclass
class Prediction:
    """Predicted peaks per strategy and program part; ``str()`` is a table."""

    device: str
    parts: list[PartPeak] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fsdp: str | None = None  # "zero2" / "zero3": the figures are one rank's of ``world_size`` (every rank's alike)
    world_size: int | None = None

    def part(self, strategy: str, kind: str = "forward", program: int = 0) -> PartPeak:
        for p in self.parts:
            if p.strategy == strategy and p.kind == kind and p.program == program:
                return p
        raise KeyError(f"no {kind} program {program} predicted for strategy {strategy!r}")

    def peak(self, strategy: str, kind: str = "forward", program: int = 0) -> int:
        """Peak above inputs of one part (bytes); a lower bound where ``part(...).lower_bound`` says why."""
        return self.part(strategy, kind, program).peak_above_inputs

    def to_dict(self) -> dict:
        return {"device": self.device, "parts": [vars(p) for p in self.parts], "notes": list(self.notes),
                "fsdp": self.fsdp, "world_size": self.world_size}

    def _scope(self) -> str:
        """What the figures are of: one process, or each rank of an FSDP run."""
        if not self.fsdp:
            return ""
        return f", fsdp {self.fsdp} on {self.world_size} rank{'s' if self.world_size != 1 else ''}: each rank's figures"

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython's text form: the table
        printer.text(str(self))

    def _repr_html_(self) -> str:
        from html import escape

        from ..ir.printer import format_bytes

        rows = "".join(f"<tr><td>{escape(p.strategy)}</td><td>{escape(p.kind)} #{p.program}</td>"
                       f"<td>{escape(_figure(p, p.peak_above_inputs))}</td><td>{escape(_figure(p, p.high_water))}</td></tr>"
                       for p in self.parts)
        notes = "".join(f"<li>{escape(n)}</li>" for n in self._bound_notes() + self.notes)
        return (f"<div class='tl-report'><b>predicted on the meta device ({escape(self.device)} allocator "
                f"modelled{escape(self._scope())}): nothing was allocated or run</b><table><tr><th>strategy</th><th>program</th>"
                f"<th>peak above inputs</th><th>high-water incl. inputs</th></tr>{rows}</table><ul>{notes}</ul></div>")

    def __str__(self) -> str:
        from ..ir.printer import format_bytes

        head = ("strategy", "program", "peak above inputs", "high-water incl. inputs")
        rows = [head] + [(p.strategy, f"{p.kind} #{p.program}", _figure(p, p.peak_above_inputs),
                          _figure(p, p.high_water)) for p in self.parts]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [f"predicted on the meta device, {self.device} allocator modelled{self._scope()}"]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        return "\n".join(lines + [f"note: {n}" for n in self._bound_notes() + self.notes])

    def _bound_notes(self) -> list[str]:
        return [f"{p.strategy} {p.kind} #{p.program} is a lower bound (>=): {p.lower_bound}" for p in self.parts
                if p.lower_bound]


def _figure(part: PartPeak, n: int) -> str:
    """A row's bytes, written '>= N' where the row is a lower bound (as the trace marks such a line)."""
    from ..ir.printer import format_bytes

    return (">= " if part.lower_bound else "") + format_bytes(n)


def _lower_bound(trace, compiled: bool) -> str:
    """Why ``trace``'s priced peak is a lower bound: the ops (regions' inner ops too) whose scratch is unknown.
    ``compiled`` (the executor compiles its regions): a region's inner op whose scratch is only a composite
    kernel's temporaries (``prims.fma``, Adam's lerp) is not one, since the region's code never makes them."""
    ops: dict[str, str] = {}
    modules = [trace.gm] + [m for _, m in trace.gm.named_modules() if m is not trace.gm and hasattr(m, "graph")]
    for gm in modules:
        for n in gm.graph.nodes:
            if compiled and gm is not trace.gm and fused_away(n):
                continue
            why = scratch_unknown(n, trace.op_scratch) if n.op == "call_function" else None
            if why:
                ops.setdefault(str(n.target), why)
    if not ops:
        return ""
    return "scratch inside " + ", ".join(f"{op} ({why})" for op, why in ops.items()) + " counts 0"


class _MetaPlanner(Executor):
    """``real``'s fusion rules on the meta device: the passes fuse and price regions as ``real`` does (what it
    can fuse, whether its regions' inner values touch memory: the memory strategy merges by that), and the
    planned program runs op by op, since nothing compiles for meta."""

    def __init__(self, real: Executor, rounding: int = 1):
        self.real, self.name, self.materializes_regions = real, real.name, real.materializes_regions
        self.rounding = rounding  # the allocator modelled (the liveness rounds as it does)
        self.compiles_library_ops = real.compiles_library_ops

    def can_fuse(self, node) -> bool:
        return self.real.can_fuse(node)

    def can_compile(self, node) -> bool:
        return self.real.can_compile(node)

    def fuse_reason(self, node) -> str | None:
        return self.real.fuse_reason(node)

    def compile(self, trace) -> CompiledProgram:
        program = generate(trace, materialized_regions=self.materializes_regions)
        return CompiledProgram(run=program.run, executor=f"{self.name} (planned on meta, run op by op)",
                               source=program.source, generated=program, regions=self._known_workspace(trace))

    def _known_workspace(self, trace) -> dict:
        """Records of the regions whose workspace ``real`` knows before compiling (nvFuser's batched updates:
        their stacks), so the liveness prices it; every other region's workspace counts zero on meta."""
        planned = getattr(self.real, "planned_workspace", None)
        if planned is None:
            return {}
        nodes = {n.name: n for n in trace.gm.graph.nodes if n.op == "call_module"}
        return {op: replace(plan_record(nodes[op]), workspace_bytes=size,
                            details={"workspace": "the stacks of its batched updates, priced before compiling"})
                for op, size in planned(trace, self.rounding).items()}


def _meta_module(module: torch.nn.Module, memo: dict | None = None) -> torch.nn.Module:
    """A twin of ``module`` whose parameters and buffers are meta tensors, made without copying a weight: the
    deep copy finds every tensor already in its memo (the module itself is untouched). Twins made with one
    shared ``memo`` share what their originals share (a submodule passed beside its parent)."""
    import copy

    memo = {} if memo is None else memo
    for t in list(module.parameters()) + list(module.buffers()):
        _twin_into(memo, t)
    return copy.deepcopy(module, memo)


def _twin_into(memo: dict, t: torch.Tensor) -> torch.Tensor:
    """``t``'s meta twin in ``memo`` (a Parameter stays one), made there the first time it is asked for."""
    if id(t) not in memo:
        twin = _meta(t.detach())
        memo[id(t)] = torch.nn.Parameter(twin, requires_grad=t.requires_grad) \
            if isinstance(t, torch.nn.Parameter) else twin
    return memo[id(t)]


def _meta_optimizer(opt: torch.optim.Optimizer, memo: dict | None = None) -> torch.optim.Optimizer:
    """A twin of ``opt`` whose parameters (with their gradients) and state are meta tensors; made with the
    ``memo`` a module's twin uses, it steps that twin's parameters. ``opt`` itself is untouched: predicting
    ``opt.step()`` takes no step. A state tensor kept on the CPU beside parameters on another device (a step
    count) stays on the CPU, and where Dynamo's capture would make the real optimizer ``capturable`` (every
    parameter on CUDA, no state yet) the twin is made so, as its counts then live beside the parameters."""
    import copy

    memo = {} if memo is None else memo
    params = [p for g in opt.param_groups for p in g["params"]]
    for p in params:
        twin = _twin_into(memo, p)
        if p.grad is not None and twin.grad is None:
            twin.grad = _meta(p.grad.detach())
    for p, state in opt.state.items():
        for v in state.values():
            if isinstance(v, torch.Tensor) and id(v) not in memo:
                on_host = v.device.type == "cpu" and getattr(p, "device", v.device).type != "cpu"
                memo[id(v)] = v.detach().clone() if on_host else _meta(v.detach())
    twin = copy.deepcopy(opt, memo)
    if params and all(p.is_cuda for p in params) and not opt.state:  # torch/_dynamo/variables/optimizer.py
        for group in twin.param_groups:
            if "capturable" in group:
                group["capturable"] = True
    return twin


def _meta(x, memo: dict | None = None):
    if isinstance(x, torch.nn.Module):  # a module the function reads as an argument (a notebook cell's model)
        return _meta_module(x, memo)
    if isinstance(x, torch.optim.Optimizer):  # an optimizer the cell steps: its twin steps meta twins
        return _meta_optimizer(x, memo)
    if isinstance(x, torch.Tensor):
        t = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device="meta")
        return t.requires_grad_(x.requires_grad) if x.is_floating_point() or x.is_complex() else t
    if isinstance(x, (list, tuple)):
        return type(x)(_meta(v, memo) for v in x)
    if isinstance(x, dict):
        return {k: _meta(v, memo) for k, v in x.items()}
    return x


def _on_meta(fn):
    """``fn`` with a module's parameters and buffers as meta tensors (the module itself untouched); a method of
    a module or an optimizer (``opt.step``) bound to the object's meta twin instead."""
    import types

    if isinstance(fn, types.MethodType) and isinstance(fn.__self__, (torch.nn.Module, torch.optim.Optimizer)):
        return types.MethodType(fn.__func__, _meta(fn.__self__))
    scheduled = _scheduled_optimizer(fn)
    if scheduled is not None:  # opt.step once an LR scheduler wrapped it: the twin's own step
        return types.MethodType(fn.__wrapped__, _meta(scheduled))
    if not isinstance(fn, torch.nn.Module):
        return fn
    state = {name: _meta(t) for name, t in list(fn.named_parameters()) + list(fn.named_buffers())}
    if all(t.device.type == "meta" for t in list(fn.parameters()) + list(fn.buffers())):
        return fn

    def call(*args, **kwargs):
        return torch.func.functional_call(fn, state, args, kwargs)

    call.__name__ = type(fn).__name__
    return call


def _scheduled_optimizer(fn) -> torch.optim.Optimizer | None:
    """The optimizer whose ``step`` ``fn`` is, where an LR scheduler replaced ``opt.step`` by its wrapper (a plain
    function holding a weak reference to the optimizer: torch/optim/lr_scheduler.py), else None."""
    import weakref

    if not getattr(fn, "_wrapped_by_lr_sched", False) or not hasattr(fn, "__wrapped__"):
        return None
    for cell in getattr(fn, "__closure__", None) or ():
        value = cell.cell_contents
        target = value() if isinstance(value, weakref.ref) else None
        if isinstance(target, torch.optim.Optimizer):
            return target
    return None


def _loss(out):
    from .loss import default_loss

    return default_loss(out)


FSDP_MODES = ("zero2", "zero3")

FSDP_NOTES = [
    "every rank holds a flat shard of ceil(numel / world_size) elements per parameter (the last rank's padded "
    "with zeros), so every rank runs the same programs on tensors of the same shapes: these figures are each "
    "rank's, for the inputs one rank is called with (its slice of the batch)",
    "left out of an FSDP rank's figures: the communication library's own memory (gloo stages each collective "
    "through buffers of its own; NCCL's channel buffers and workspace, on the GPU), the allocator's "
    "fragmentation and the blocks it keeps cached (reserved beyond allocated), the CUDA context, the optimizer "
    "state (e.g. Adam's two moments per shard) and gradients kept across steps (.grad of the shards)",
]


def _check_fsdp(fn, args, kwargs, fsdp, world_size) -> None:
    """Bad ``fsdp`` / ``world_size`` arguments: a TraceLabError saying what to give (before anything runs)."""
    if fsdp is None:
        if world_size is not None:
            raise TraceLabError(f"predict(world_size={world_size!r}) without fsdp: the ranks of a world only differ "
                                f"when parameters are sharded; give fsdp='zero2' or 'zero3' too (a replica's "
                                "peak is predict(...) without both)")
        return
    if fsdp not in FSDP_MODES:
        raise TraceLabError(f"predict(fsdp={fsdp!r}): unknown; choose 'zero2' (gathered parameters kept for the "
                            "backward) or 'zero3' (gathered again in the backward)")
    if world_size is None:
        raise TraceLabError(f"predict(fsdp={fsdp!r}) needs world_size=N, the number of ranks the parameters are "
                            "sharded across")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise TraceLabError(f"predict(fsdp={fsdp!r}, world_size={world_size!r}): world_size is the number of "
                            "ranks, an integer >= 1")
    from ..distributed.sharding import sharded_parameters

    modules = [m for m in [fn, *args, *kwargs.values()] if isinstance(m, torch.nn.Module)]
    done = [type(m).__name__ for m in modules if sharded_parameters(m)]
    if done:
        raise TraceLabError(f"predict(fsdp={fsdp!r}): {done[0]} is sharded already (shard_module or "
                            "trace_lab.jit(fsdp=) sharded it); pass the unsharded module: predict shards a meta twin "
                            "of it for the world_size it is given and leaves the module itself alone")
    if not any(p is not None for m in modules for p in m.parameters()):
        raise TraceLabError(f"predict(fsdp={fsdp!r}): nothing to shard: pass an nn.Module with parameters (as fn, "
                            "or among the arguments of a function that calls it)")


def _shard_twins(memo: dict, world_size: int, group_name: str) -> None:
    """Shard, as rank 0 of the fake group, every meta twin module of ``memo`` that no other twin contains."""
    from ..distributed.sharding import shard_parameters

    twins = [m for m in memo.values() if isinstance(m, torch.nn.Module)]
    inner = {id(sub) for m in twins for sub in m.modules() if sub is not m}
    for m in twins:
        if id(m) not in inner and any(True for _ in m.parameters()):
            shard_parameters(m, 0, world_size, group_name)


def predict(fn, *args, strategies=None, device: str = "cuda", executor: str = "inductor", loss=None,
            kwargs: dict | None = None, fsdp: str | None = None, world_size: int | None = None,
            sort_waits: bool = True, max_inflight_gathers="auto") -> Prediction:
    """Predicted peak memory of ``fn(*args)`` (forward, and backward when an output requires grad) for each
    fusion strategy (default: every strategy but ``auto``), computed on the meta device.

    ``args`` may be real tensors (only their shapes, dtypes and strides are read) or meta tensors;
    ``device`` is the allocator modelled (``"cuda"`` or ``"cpu"``); ``executor``: the strategies plan with its
    rules (``"auto"``: the one the modelled device would get); ``"eager"`` runs regions op by op (their
    values materialise), the others model compiled regions. A row whose figure is a lower bound (an op's
    scratch unknown on meta) is written ``>= N`` with a note naming the ops. ``loss(out)`` gives the
    scalar the backward starts from (default: the sum of the floating outputs that require grad).

    ``fsdp="zero2"|"zero3"`` with ``world_size=N``: each rank's peaks in an FSDP run of N ranks, as
    ``trace_lab.jit(model, fsdp=..., sort_waits=..., max_inflight_gathers=...)`` would run it, without N
    processes: a meta twin of ``fn`` (an ``nn.Module``; or the modules among a function's arguments) is
    sharded for a fake process group of N ranks, and ``args`` are what one rank is called with (its slice of
    the batch). Every rank's shards have the same shapes (the last one padded), so the figures are every
    rank's; the notes say what they leave out (communication buffers, fragmentation, optimizer state).
    The user's module and any process group the user has are left as they are."""
    if device not in ("cuda", "cpu"):
        raise TraceLabError(f"predict(device={device!r}): the allocator modelled is 'cuda' or 'cpu'")
    exec_name, _ = resolve_executor(executor, torch.device(device))
    chosen = list(strategies) if strategies is not None else strategies_for(exec_name)
    unknown = [s for s in chosen if s not in FUSION_STRATEGIES or s == "auto"]
    if unknown:
        raise TraceLabError(f"predict: unknown strategies {unknown}; choose from "
                            f"{', '.join(s for s in FUSION_STRATEGIES if s != 'auto')}")
    if "layers" in chosen and "layers" not in strategies_for(exec_name):
        raise TraceLabError(f"predict: {layers_refused(exec_name)}")
    _check_fsdp(fn, args, dict(kwargs or {}), fsdp, world_size)
    result = Prediction(device=device, fsdp=fsdp, world_size=world_size if fsdp else None, notes=[
        "op scratch (convolutions, FFTs, sorts) and compiled regions' workspace are measured on a real device: "
        "on meta they count as zero, so a program using them is a lower bound (the stacks of nvFuser's batched "
        "updates are known before compiling, and priced)",
        "inputs a compiled Inductor region frees inside its call or writes its outputs over (donate_inputs, "
        "donate_inplace) are not seen on meta: such a program measures at or below its figure",
        "attention runs as the meta device's math path: where a device picks a flash or memory-efficient "
        "attention kernel, its program and peak differ"])
    if not fsdp:
        memo: dict = {}  # one memo: an optimizer passed beside its model steps that model's twin parameters
        meta_args, meta_kwargs = _meta(list(args), memo), _meta(dict(kwargs or {}), memo)
        with _outside_reach_explained(fn):
            _predict_strategies(result, _on_meta(fn), meta_args, meta_kwargs, chosen, exec_name, loss, {})
        return result
    from ..distributed.fake_group import fake_group

    result.notes += FSDP_NOTES
    memo: dict = {}  # one memo: a submodule passed beside its parent is one twin, sharded once with it
    twin = _meta_module(fn, memo) if isinstance(fn, torch.nn.Module) else fn
    meta_args, meta_kwargs = _meta(list(args), memo), _meta(dict(kwargs or {}), memo)
    with fake_group(world_size) as group_name, _outside_reach_explained(fn):
        _shard_twins(memo, world_size, group_name)
        _predict_strategies(result, twin, meta_args, meta_kwargs, chosen, exec_name, loss,
                            dict(fsdp=fsdp, sort_waits=sort_waits, max_inflight_gathers=max_inflight_gathers))
    return result


def reached_outside_arguments(fn) -> list[str]:
    """The modules, optimizers and tensors ``fn`` reads from its closure or its globals (names its code uses), not
    from its arguments, whose memory is on a real device: ``"lin1 (Linear, in the globals, on cpu)"``. predict
    replaces the arguments by meta twins; these it cannot reach, so the program would mix meta and real tensors
    (or, reading nothing else, run for real: a step of an optimizer in the globals)."""
    return [text for text, _value, _tensors in _reached_outside(fn)]


def _reached_outside(fn) -> list[tuple[str, object, list]]:
    """(description, object, its real tensors) of what ``fn`` reads outside its arguments (see above)."""
    import inspect as _inspect

    if isinstance(fn, torch.nn.Module) or not _inspect.isfunction(fn):
        return []
    found = []
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    places = [(name, cell.cell_contents, "in the closure") for name, cell in cells.items()
              if cell.cell_contents is not None] if cells else []
    places += [(name, fn.__globals__[name], "in the globals") for name in fn.__code__.co_names
               if name in fn.__globals__]
    for name, value, where in places:
        try:
            if isinstance(value, torch.nn.Module):
                tensors = list(value.parameters()) + list(value.buffers())
            elif isinstance(value, torch.optim.Optimizer):
                tensors = reachable_tensors(value)
            else:
                tensors = [value] if isinstance(value, torch.Tensor) else []
        except Exception:  # noqa: BLE001 - an object that only looks like a module: not ours to judge
            continue
        real = [t for t in tensors if t.device.type != "meta"]
        if real:
            devices = ", ".join(sorted({t.device.type for t in real}))
            found.append((f"{name} ({type(value).__name__}, {where}, on {devices})", value, real))
    return found


def _outside_message(fn, outside: list[str]) -> str:
    return (f"predict runs {getattr(fn, '__name__', 'fn')} on the meta device, replacing its arguments' tensors, "
            f"modules and optimizers by meta twins, but it also reads {', '.join(outside)}, which predict cannot "
            f"replace. Pass {'it as an argument' if len(outside) == 1 else 'them as arguments'} "
            "(predict(lambda model, x: ..., model, x)), or predict the module itself (predict(model, x)); nothing "
            "was allocated or changed")


@contextlib.contextmanager
def _outside_reach_explained(fn):
    """``fn`` reads modules, optimizers or tensors (beyond 0-d ones, which mix with meta) outside its arguments:
    a TraceLabError naming them and saying what to pass instead, before anything runs (run, such a function
    would mix meta and real tensors, or step a real optimizer). A run that fails on the mixing all the same is
    explained the same way; other errors pass through."""
    unsafe = [text for text, value, real in _reached_outside(fn)
              if isinstance(value, (torch.nn.Module, torch.optim.Optimizer)) or any(t.dim() > 0 for t in real)]
    if unsafe:
        raise TraceLabError(_outside_message(fn, unsafe))
    try:
        yield
    except TraceLabError:
        raise
    except Exception as e:  # noqa: BLE001 - explained when it is the mixing of meta and real tensors
        outside = reached_outside_arguments(fn)
        if not outside or "meta" not in str(e):
            raise
        raise TraceLabError(_outside_message(fn, outside)) from e


def _predict_strategies(result: Prediction, fn, meta_args, meta_kwargs, chosen, exec_name, loss, options) -> None:
    """Each strategy's program run on meta (and its backward), its parts priced into ``result``."""
    from .jit import jit

    rounding = CUDA_ROUNDING if result.device == "cuda" else 1
    for strategy in chosen:
        jfn = jit(fn, fusion=strategy, executor=exec_name, **options)
        planner = _MetaPlanner(get_executor(exec_name, jfn.options), rounding)
        jfn.use_executor(planner)
        if loss is not None:  # a custom loss's gradients are autograd's fresh tensors (analysis/handover.py)
            jfn.gradients_copied = None
        out = jfn(*meta_args, **meta_kwargs)
        scalar = (loss or _loss)(out)
        if scalar is not None and scalar.requires_grad:
            scalar.backward()
        for _, program, part in program_parts(jfn):
            live = compute_liveness(part.traces[-1], materialized_regions=planner.materializes_regions,
                                    rounding=rounding)
            result.parts.append(PartPeak(strategy, program.index, part.kind, live.peak_above_inputs_bytes,
                                         live.peak_bytes, live.entry_bytes,
                                         _lower_bound(part.traces[-1], not planner.materializes_regions)))
