"""Shared helpers for the fusion / Inductor tests.

Capturing a workload (torch.compile + AOTAutograd) costs seconds, so each one is
captured once per test session: :func:`captured` jits it with no fusion and the
eager executor, runs it (forward + backward), then runs it again while recording
the real argument list each program part receives. Tests then apply a fusion
strategy to the captured trace, compile it with an executor and run it on copies
of those arguments, comparing every output (the backward part's outputs are
the gradients) with the unfused program run by the eager interpreter.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx

import trace_lab
from examples import workloads
from trace_lab.executors.base import Executor
from trace_lab.run.loss import default_loss
from trace_lab.executors.eager import interpret
from trace_lab.executors.inductor import inductor_can_fuse
from trace_lab.run.jit import Options
from trace_lab.runtime.measure import measure_peak_handing_over
from trace_lab.passes import PassContext
from trace_lab.passes.fusion import fusion_pass
from trace_lab.ir.trace import Trace

STRATEGIES = ("none", "dataflow", "horizontal", "memory", "layers")
# Measured CPU peak may exceed the predicted one by this much: a few ops allocate 0-dim
# scratch tensors inside themselves (a Python scalar wrapped for a tensor op), 4-16 bytes,
# which no model of the program's values sees. Anything more is a gap in the model.
SCALAR_SLACK = 64


def assert_peak_matches(r) -> None:
    assert r["measured"] is not None, r["method"]
    assert 0 <= r["measured"] - r["predicted"] <= SCALAR_SLACK, \
        f"{r['what']}: predicted {r['predicted']} B, measured {r['measured']} B ({r['method']})"


def assert_report_peaks_match(report) -> None:
    """Every part of ``report`` measured, at most :data:`SCALAR_SLACK` above its predicted peak and never below."""
    for m in report.memory:
        measured, predicted = m["measured_peak_above_inputs_bytes"], m["predicted_peak_above_inputs_bytes"]
        assert measured is not None and 0 <= measured - predicted <= SCALAR_SLACK, m


@dataclass
class Part:
    workload: str
    kind: str
    trace: Trace  # as captured
    inputs: list


@functools.lru_cache(maxsize=None)
def captured(name: str) -> tuple:
    """The program parts of a workload (size='small', CPU) with recorded real inputs."""
    w = workloads.get(name)
    fn, args = w.make("cpu", "small")
    jfn = trace_lab.jit(fn, fusion="none", executor="eager")

    def call():
        out = jfn(*args)
        if w.backward:
            default_loss(out).backward()

    call()
    recorded: dict = {}
    for p in jfn.programs:
        for part in p.parts:
            original = part.compiled.run

            def spy(a, _key=(p.index, part.kind), _run=original):
                recorded[_key] = fresh_copies(a)
                return _run(a)

            part.compiled.run = spy
    call()
    parts = []
    for p in jfn.programs:
        for part in p.parts:
            if (p.index, part.kind) in recorded:
                parts.append(Part(name, part.kind, part.traces[0], recorded[(p.index, part.kind)]))
    return tuple(parts)


def fresh_copies(xs) -> list:
    """:func:`fresh_copy` of each, with inputs that shared a storage sharing one copy of it (saved views
    of one forward value stay views of one buffer, as AOTAutograd hands them to a backward)."""
    bases: dict = {}
    out = []
    for x in xs:
        if not isinstance(x, torch.Tensor):
            out.append(x)
            continue
        key = (x.untyped_storage().data_ptr(), x.device, x.dtype)
        if key not in bases:
            bases[key] = fresh_copy(x.as_strided((x.untyped_storage().nbytes() // x.element_size(),), (1,), 0))
        with torch.no_grad():
            out.append(bases[key].as_strided(x.shape, x.stride(), x.storage_offset()))
    return out


def fresh_copy(x):
    """An independent tensor with the same values, sizes, strides and storage offset."""
    if not isinstance(x, torch.Tensor):
        return x
    base = torch.empty(x.untyped_storage().nbytes() // x.element_size(), dtype=x.dtype, device=x.device)
    y = base.as_strided(x.shape, x.stride(), x.storage_offset())
    with torch.no_grad():
        y.copy_(x)
    return y.requires_grad_(False)


def fuse(trace: Trace, strategy: str, executor) -> Trace:
    return fusion_pass(trace, PassContext(Options(fusion=strategy), executor))


def assert_same_outputs(got, expected, what: str) -> None:
    assert len(got) == len(expected), what
    for i, (a, b) in enumerate(zip(got, expected)):
        if isinstance(b, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"{what}: output {i} is {type(a).__name__}"
            assert a.shape == b.shape and a.dtype == b.dtype, f"{what}: output {i} {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
            # Inductor may reorder float reductions: f32 tolerances a little wider than assert_close's.
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m: f"{what}: output {i}: {m}")
        else:
            assert a == b, f"{what}: output {i}"


def check_part(part: Part, strategy: str, executor) -> dict:
    """Fuse, compile, run twice (warm, then measured); compare with unfused eager; return figures."""
    reference = interpret(part.trace)([fresh_copy(x) for x in part.inputs])
    fused = fuse(part.trace, strategy, executor)
    fused.gm.graph.lint()
    program = executor.compile(fused)
    fused = fused.with_regions(program.regions)  # what compiling found (layouts, workspace), joined by op id
    what = f"{part.workload} {part.kind} fusion={strategy} executor={executor.name}"
    assert_same_outputs(program.run([fresh_copy(x) for x in part.inputs]), reference, what)
    # the copies are made inside the measurement: a backward frees the ones it is handed (saved
    # activations); the others stay held here, as the parameters and user tensors are in a real step
    held = []

    def make_args():
        args = fresh_copies(part.inputs)
        held[:] = [a for i, a in enumerate(args) if i not in fused.owned_inputs]
        return args

    outs, measured, method = measure_peak_handing_over(program.run, make_args, fused.device)
    assert_same_outputs(outs, reference, what + " (second run)")
    predicted = fused.liveness(executor.materializes_regions).peak_above_inputs_bytes
    return {"what": what, "predicted": predicted, "measured": measured, "method": method, "trace": fused,
            "program": program}


class StubExecutor(Executor):
    """An executor for pass tests: a fusibility rule and a materialisation flag, nothing else."""

    name = "stub"
    compiles_library_ops = True  # fusion="layers" puts what can_fuse allows (its can_compile) in a layer's region

    def __init__(self, can_fuse=inductor_can_fuse, materializes_regions: bool = False):
        self._can_fuse = can_fuse
        self.materializes_regions = materializes_regions

    def can_fuse(self, node: fx.Node) -> bool:
        return self._can_fuse(node)


def hand_trace(fn, *example_args, names=None, kind="inference") -> Trace:
    """A Trace of ``fn`` traced to aten ops (FakeTensor meta on every node), for hand-worked tests."""
    def as_tuple(*args):  # captured programs return tuples; so do hand-built ones
        out = fn(*args)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    gm = make_fx(as_tuple, tracing_mode="fake")(*example_args)
    return Trace(gm, kind, "as captured", names or [f"x{i}" for i in range(len(example_args))])


def ops_of(trace: Trace) -> list:
    """Each line as (region ops as a tuple of op names) or a plain op name, in order."""
    out = []
    for n in trace.ops:
        if n.op == "call_module":
            out.append(tuple(op.split(".")[1] for op in n.meta["region"]["ops"]))
        else:
            out.append(n.target._opname if hasattr(n.target, "_opname") else str(n.target))
    return out
