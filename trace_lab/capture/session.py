"""Capture: turn a Python callable into recorded fx programs.

Design: trace_lab never traces Python itself. ``torch.compile`` (Dynamo) captures
each graph of the user's function, handling graph breaks, guards and
recompilation; our backend hands every Dynamo graph to AOTAutograd, which
functionalises it, decomposes it to core aten ops and splits forward from
backward (min-cut partitioner, so activation checkpointing shows up as
recomputed ops in the backward). AOTAutograd then calls our forward/backward
"compilers" with plain ``torch.fx.GraphModule`` s whose nodes carry FakeTensors
in ``node.meta['val']``. Each compiler call becomes a :class:`ProgramPart` of a
:class:`Program` (one per Dynamo graph); the ``compile_part`` callback supplied
by the jit layer turns it into something runnable.

Guarantees: shapes are static (``dynamic=False``), so a shape change records a
new program instead of silently generalising an old one; in-place updates of
inputs stay in the graph as trailing ``copy_`` ops
(``keep_inference_input_mutations=True``).
"""
from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.fx as fx


class _DropProfilerRangeNotes:
    """A logging filter: Dynamo's note that a profiler range inside the captured code is ignored ("Profiler
    record function <class ...> will be ignored", logged when it traces ``torch.optim``'s ``step``, which wraps
    itself in ``record_function``) says nothing about the user's program and printed as a pink stderr box in
    notebook 03 (issue 26 item 3). Only those two notes are dropped."""

    def filter(self, record) -> bool:
        msg = str(record.msg)
        return not (msg.startswith(("Profiler record function", "Profiler function")) and "will be ignored" in msg)


def _quiet_dynamo_profiler_notes() -> None:
    import logging

    for name in ("torch._dynamo.variables.ctx_manager", "torch._dynamo.variables.torch"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropProfilerRangeNotes) for f in logger.filters):
            logger.addFilter(_DropProfilerRangeNotes())


_quiet_dynamo_profiler_notes()


__all__ = ["Program", "ProgramPart", "CaptureSession", "readable_input_name", "capture_decompositions", "program_parts"]

# Ops kept whole although the core-aten table decomposes them:
# ``_scaled_dot_product_flash_attention_for_cpu`` (what F.scaled_dot_product_attention calls on
# CPU): its decomposition gives wrong q/k/v gradients under AOTAutograd in torch 2.13 (plain
# SDPA of f32[3, 4, 10, 8], max |grad error| ~40; tests/test_capture.py checks it). Kept whole,
# attention is one opaque op on CPU as on CUDA, and its backward is the fused kernel's.
KEEP_WHOLE = ("_scaled_dot_product_flash_attention_for_cpu",)

# Ops decomposed although core aten keeps them whole, as Inductor's own table does: ``_softmax`` and
# ``_log_softmax``. Whole, their backward needs their full output, so the partitioner must save it (a
# Llama layer's float32 attention probabilities, B x H x T x T: 64 MiB a layer at d=1024, T=512, B=4,
# H=16, the 1.25x peak of issue 27 item 4); decomposed (amax, sub, exp, sum, div), the min-cut
# partitioner saves the bfloat16 scores and the row statistics and recomputes the rest in the
# backward, the same tensors torch.compile saves (benchmarks/saved_tensors_probe.py).
DECOMPOSE_TOO = ("_softmax", "_log_softmax")


def capture_decompositions() -> dict:
    """The decomposition table capture hands to AOTAutograd: core aten, less :data:`KEEP_WHOLE`, plus
    :data:`DECOMPOSE_TOO`.

    Built once per process (torch builds core_aten_decompositions() afresh on every call, ~0.15 s,
    which was a third of capturing a one-op function); each caller gets its own copy."""
    return dict(_capture_decompositions())


@functools.lru_cache(maxsize=1)
def _capture_decompositions() -> dict:
    from torch._decomp import core_aten_decompositions, get_decompositions

    table = {op: fn for op, fn in core_aten_decompositions().items()
             if getattr(getattr(op, "_overloadpacket", op), "__name__", str(op)) not in KEEP_WHOLE}
    table.update(get_decompositions([getattr(torch.ops.aten, name) for name in DECOMPOSE_TOO]))
    return table


@dataclass
class ProgramPart:
    """One AOTAutograd program: 'forward', 'backward' or 'inference'."""

    kind: str
    gm: fx.GraphModule
    input_names: list[str]
    capture_seconds: float = 0.0
    traces: list = field(default_factory=list)  # list[Trace], [0] as captured
    compiled: object = None  # executor-specific record (CompiledProgram)


@dataclass
class Program:
    """Everything recorded for one Dynamo graph (one graph-break segment)."""

    index: int
    dynamo_input_names: list[str]
    input_descriptors: list[str]
    reason: str = ""  # why this graph exists: first compile, graph break, recompile
    forward: ProgramPart | None = None  # forward or inference program
    backward: ProgramPart | None = None

    @property
    def parts(self) -> list[ProgramPart]:
        return [p for p in (self.forward, self.backward) if p is not None]


_DYNAMO_PREFIX = re.compile(r"^(l_|L_)")


_OPT_PARAM = re.compile(r"^(?:l_|L_)?self_+param_groups_+\d+_+params_+(\d+)_*(.*)$")
_OPT_STATE = re.compile(r"^(?:l_|L_)?self_+state_list_dict_keys_L_+self_+state_+(\d+)_+(.*?)_*$")


def readable_input_name(dynamo_name: str) -> str:
    """'L_self_modules_layers_modules_0_modules_attn_parameters_wq_' -> 'layers_0_attn_wq'.

    Optimizer inputs: 'self___param_groups_0__params___3' -> 'param3',
    '..._state___3___exp_avg' -> 'state3_exp_avg' (positional state keys -> 'state3_1').
    """
    m = _OPT_PARAM.match(dynamo_name)
    if m:
        return f"param{m.group(1)}" + (f"_{m.group(2).strip('_')}" if m.group(2).strip("_") else "")
    m = _OPT_STATE.match(dynamo_name)
    if m:
        tail = m.group(2)
        if not re.fullmatch(r"[a-z][a-z_]*[a-z]", tail):
            tail = re.findall(r"\d+", tail)[-1] if re.findall(r"\d+", tail) else "value"
        return f"state{m.group(1)}_{tail}"
    name = _DYNAMO_PREFIX.sub("", dynamo_name)
    name = re.sub(r"^(self|s|fn|model|mod)_", "", name) if name.startswith(
        ("self_modules", "self_parameters", "self_buffers", "s_modules", "fn_modules", "mod_")
    ) else name
    for word in ("modules_", "parameters_", "buffers_", "_modules", "_parameters", "_buffers"):
        name = name.replace(word, "")
    name = re.sub(r"_+", "_", name).strip("_")
    # a parameter sharded by trace_lab.distributed lives at parametrizations.<p>.original
    name = re.sub(r"parametrizations_(.+)_original$", r"\1_shard", name)
    if len(name) > 32:  # keep the informative tail
        name = name[-32:].split("_", 1)[-1] if "_" in name[-32:] else name[-32:]
    if not name:
        name = "in"
    elif name[0].isdigit():
        name = "m" + name  # Sequential children: '0_weight' -> 'm0_weight'
    elif not (name[0].isalpha() or name[0] == "_"):
        name = "in_" + name
    return name


def describe_tensor(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"{t.device} {str(t.dtype).replace('torch.', '')}{list(t.shape)}"
    return type(t).__name__


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        if n in seen:
            seen[n] += 1
            out.append(f"{n}_{seen[n]}")
        else:
            seen[n] = 0
            out.append(n)
    return out


class CaptureSession:
    """Owns the torch.compile backend and the list of recorded programs.

    ``compile_part(program, part) -> callable(list_of_args) -> outputs`` is called
    for every forward/backward program; it must return a *boxed* callable.
    ``prepare_joint(joint_gm)``, when given, may tag nodes of AOTAutograd's joint
    forward+backward graph before the min-cut partitioner splits it (the ZeRO-3
    FSDP mode marks parameter gathers ``MUST_RECOMPUTE`` this way).
    ``wrap_partition(partition) -> partition``, when given, wraps the partitioner itself
    (``align_layer_saves``: repeated layers save the same values, :mod:`trace_lab.passes.layer_saves`).
    """

    def __init__(self, compile_part: Callable[[Program, ProgramPart], Callable],
                 prepare_joint: Callable[[fx.GraphModule], None] | None = None,
                 wrap_partition: Callable[[Callable], Callable] | None = None):
        self.compile_part = compile_part
        self.prepare_joint = prepare_joint
        self.wrap_partition = wrap_partition
        self.programs: list[Program] = []
        from torch._dynamo.utils import counters

        self._graph_breaks_before: dict[str, int] = dict(counters["graph_break"])
        self._pending_breaks: list[str] = []

    # -- the torch.compile backend -------------------------------------------------
    def backend(self, gm: fx.GraphModule, example_inputs):
        from functorch.compile import min_cut_rematerialization_partition
        from torch._functorch.aot_autograd import aot_module_simplified

        backend_started = time.perf_counter()  # Dynamo has traced; AOTAutograd's capture starts here
        dyn_names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        descriptors = [describe_tensor(t) for t in example_inputs]
        program = Program(
            index=len(self.programs),
            dynamo_input_names=dyn_names,
            input_descriptors=descriptors,
            reason=self._reason_for_new_graph(descriptors),
        )
        self.programs.append(program)
        # aot_module_simplified lifts the graph module's own parameters and buffers
        # (get_attr in Dynamo's graph, e.g. an optimizer's state) in front of its inputs.
        lifted = list(dict(gm.named_parameters(remove_duplicate=False))) + \
            list(dict(gm.named_buffers(remove_duplicate=False)))
        readable = _unique([readable_input_name(n) for n in lifted + dyn_names])
        program.lifted_names = lifted

        def make_compiler(kind: str):
            def compiler(fx_gm: fx.GraphModule, _example):
                started = time.perf_counter()
                placeholders = [n for n in fx_gm.graph.nodes if n.op == "placeholder"]
                if kind == "backward":
                    names = [n.name for n in placeholders]
                else:
                    # AOT forward inputs are Dynamo's inputs in order (params lifted).
                    names = readable + [n.name for n in placeholders[len(readable):]]
                part = ProgramPart(kind=kind, gm=fx_gm, input_names=names)
                if kind == "backward":
                    program.backward = part
                else:
                    program.forward = part
                # AOTAutograd's capture (functionalization, the joint graph and its partition) runs between the
                # backend's entry and the first compiler it calls, the forward's (or the inference program's); the
                # backward's graph comes out of that same capture, so the backward's own share is none
                part.capture_seconds = 0.0 if kind == "backward" else started - backend_started
                from functorch.compile import make_boxed_func

                runnable = self.compile_part(program, part)
                return make_boxed_func(runnable) if not getattr(runnable, "_boxed_call", False) else runnable

            # AOTAutograd compiles the backward lazily, inside loss.backward(); when that call
            # happens in a function Dynamo is running, keep Dynamo out of our compiler.
            return torch._dynamo.disable(compiler)

        fw = make_compiler("forward")
        compiled = aot_module_simplified(
            gm,
            example_inputs,
            fw_compiler=fw,
            bw_compiler=make_compiler("backward"),
            inference_compiler=make_compiler("inference"),
            decompositions=capture_decompositions(),
            partition_fn=self._partition_fn(min_cut_rematerialization_partition),
            keep_inference_input_mutations=True,
        )
        return compiled

    def _partition_fn(self, partition):
        if self.wrap_partition is not None:
            partition = self.wrap_partition(partition)
        if self.prepare_joint is None:
            return partition

        def partition_with_tags(joint_gm, joint_inputs, **kwargs):
            self.prepare_joint(joint_gm)
            return partition(joint_gm, joint_inputs, **kwargs)

        return partition_with_tags

    def _reason_for_new_graph(self, descriptors: list[str]) -> str:
        # Dynamo counts a graph break before it compiles the graph that ends at the
        # break, so a break seen now explains the *next* graph of the frame.
        from torch._dynamo.utils import counters

        breaks = dict(counters["graph_break"])
        new = [msg for msg, c in breaks.items() if c > self._graph_breaks_before.get(msg, 0)]
        self._graph_breaks_before = breaks
        pending, self._pending_breaks = self._pending_breaks, new
        if not self.programs:
            return "first compile"
        if pending or new:
            return "graph break: " + "; ".join(dict.fromkeys(_first_line(m) for m in pending + new))
        same_arity = [p for p in self.programs if len(p.input_descriptors) == len(descriptors)]
        for p in reversed(same_arity):
            changed = [f"{a} -> {b}" for a, b in zip(p.input_descriptors, descriptors) if a != b]
            if changed:
                return "recompiled: inputs changed (" + ", ".join(changed[:3]) + ")"
        return "new graph (graph break or recompilation)"


def _first_line(msg: str) -> str:
    line = str(msg).strip().splitlines()[0] if str(msg).strip() else str(msg)
    return line[:200]


def program_parts(jfn):
    """(position in ``jfn.programs``, program, part) for every part that has Traces: the programs x parts
    walk, written once (a JitFunction, or anything with ``programs``; None walks nothing)."""
    for pos, p in enumerate(jfn.programs if jfn is not None else []):
        for part in p.parts:
            if part.traces:
                yield pos, p, part
