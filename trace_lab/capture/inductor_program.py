"""torch.compile's own program: AOTAutograd's graphs after Inductor's post-grad passes, grouped by kernel.

Design: ``torch.compile(fn, backend=InductorCapture().backend)`` is Inductor, unchanged
(``compile_fx``), with one supported hook: its ``inner_compile`` argument. Inductor hands that
function AOTAutograd's forward and backward graphs; ``compile_fx_inner`` runs the post-grad passes
on the graph module in place, lowers it, schedules and fuses, and generates the output code. So
after the call the graph module is the post-grad program Inductor compiled, and two facts come back
from the same compile:

* which post-grad nodes each kernel computes, in the order the kernels are generated (the order the
  output code calls them): Inductor's own provenance tracking
  (``config.trace.provenance_tracking_level = 1``; ``torch._inductor.debug``'s kernel -> post-grad
  node table, reset around each compile); extern kernels (``extern_kernels.mm``, fallbacks) are one
  op each, the rest are kernels Inductor generated (C++ or Triton);
* the output code itself (``CompiledFxGraph.source_code``), which says which kernels were generated.

The FX graph and AOTAutograd caches are off for the capture (a cache hit skips the passes and the
scheduler). :func:`kernel_units` orders the post-grad nodes as the kernels run, each kernel a unit:
plain data the lab stage turns into a Trace with regions (:mod:`trace_lab.lab.compile_view`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from ..ir.fx_util import is_getitem

__all__ = ["InductorCapture", "InductorPart", "Kernel", "kernel_units", "KernelUnit", "caches_off"]


@dataclass
class Kernel:
    """One kernel call of Inductor's output code: its name (``cpp_fused_gelu_0``), whether Inductor generated
    it (C++/Triton) or calls an existing one (``extern_kernels.mm``, a fallback op), the post-grad nodes it
    computes (fx names)."""
    name: str
    generated: bool
    nodes: list[str]


@dataclass
class InductorPart:
    """One graph Inductor compiled: ``kind`` forward / backward / inference, the post-grad graph module, the
    kernels in call order, the output code, Inductor's compiled callable (boxed: takes a list it may clear)."""
    kind: str
    gm: fx.GraphModule
    kernels: list[Kernel]
    output_code: str
    compiled: object
    input_names: list[str] = field(default_factory=list)
    compile_seconds: float = 0.0
    graph: int = 0  # which Dynamo graph (a graph break makes several)


class _Hooked:
    """Inductor's compiled program as AOTAutograd calls it (boxed), every call going through the capture's
    ``on_call`` when one is set; anything else is the compiled object's."""

    _boxed_call = True

    def __init__(self, compiled, part, capture):
        # in the instance dict too: wrappers (torch._dynamo.disable) copy it with functools.wraps
        self.__dict__.update(_compiled=compiled, _part=part, _capture=capture, _boxed_call=True)

    def __call__(self, args):
        hook = self._capture.on_call
        return self._compiled(args) if hook is None else hook(self._part, self._compiled, args)

    def __getattr__(self, name):
        return getattr(self.__dict__["_compiled"], name)


def _generated_names(code: str) -> set[str]:
    """Kernels the output code defines (``name = async_compile.cpp_pybinding(...)`` / ``.triton(...)``)."""
    return set(re.findall(r"^(\w+) = async_compile\.\w+\(", code or "", re.M))


def _kernels(table: dict[str, list[str]], code: str) -> list[Kernel]:
    generated = _generated_names(code)
    out = []
    for key, nodes in table.items():  # insertion order: the debug handle, the order the kernels are generated
        name = key.rsplit(":", 1)[0]
        out.append(Kernel(name, name in generated, list(nodes)))
    return out


class InductorCapture:
    """The torch.compile backend that records Inductor's programs (module docstring)."""

    def __init__(self):
        self.parts: list[InductorPart] = []
        self.graphs: list[list[str]] = []  # per Dynamo graph: its readable input names (parameters lifted first)
        # on_call(part, compiled, args) -> outputs, when set: how every call of a compiled program runs (measured)
        self.on_call = None

    def backend(self, gm: fx.GraphModule, example_inputs):
        import functools

        from torch._inductor.compile_fx import compile_fx

        from .session import _unique, readable_input_name

        lifted = list(dict(gm.named_parameters(remove_duplicate=False))) + \
            list(dict(gm.named_buffers(remove_duplicate=False)))
        dyn = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        self.graphs.append(_unique([readable_input_name(n) for n in lifted + dyn]))
        inner = functools.partial(self._inner_compile, len(self.graphs) - 1)
        return compile_fx(gm, example_inputs, inner_compile=inner)

    def _inner_compile(self, graph: int, gm: fx.GraphModule, example_inputs, **kwargs):
        import time

        from torch._inductor import config, debug
        from torch._inductor.compile_fx import compile_fx_inner

        started = time.perf_counter()
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        with debug.reset_provenance_globals(), config.patch({"trace.provenance_tracking_level": 1}):
            compiled = compile_fx_inner(gm, example_inputs, **kwargs)
            table = {k: list(v) for k, v in debug._inductor_triton_kernel_to_post_grad_node_info.items()}
        kind = "backward" if kwargs.get("is_backward") else "inference" if kwargs.get("is_inference") else "forward"
        code = str(getattr(compiled, "source_code", "") or "")
        part = InductorPart(kind, gm, _kernels(table, code), code, compiled, names, time.perf_counter() - started,
                            graph)
        self.parts.append(part)
        return _Hooked(compiled, part, self)

    def compile(self, fn):
        """``torch.compile(fn)`` through this backend (dynamic=False: concrete sizes, as the lab's capture)."""
        return torch.compile(fn, backend=self.backend, dynamic=False)


def caches_off():
    """The FX graph and AOTAutograd caches off (a hit would skip the passes and the scheduler)."""
    import contextlib

    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    stack = contextlib.ExitStack()
    stack.enter_context(inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False))
    stack.enter_context(functorch_config.patch(enable_autograd_cache=False))
    return stack


@dataclass
class KernelUnit:
    """Nodes that run as one step of the program: a generated kernel (``fused``) or one op."""
    nodes: list[fx.Node]
    fused: bool
    kernel: str | None = None


def kernel_units(gm: fx.GraphModule, kernels: list[Kernel]) -> tuple[list[KernelUnit], list[str]]:
    """The post-grad graph's nodes as Inductor runs them: one unit per kernel in call order (a generated
    kernel's nodes as one fused unit; an extern kernel's op on its own), each preceded by the nodes no kernel
    computes that it reads (views Inductor reinterprets, getitems); then what the output reads. A node in
    more than one kernel (inlined into each) belongs to the first. Returns (units, notes)."""
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output", "get_attr")]
    by_name = {n.name: n for n in nodes}
    position = {n: i for i, n in enumerate(gm.graph.nodes)}
    owner: dict[fx.Node, int] = {}
    notes: list[str] = []
    for k, kern in enumerate(kernels):
        for name in kern.nodes:
            n = by_name.get(name)
            if n is None:
                continue
            if is_getitem(n):
                n = n.args[0]  # a multi-output op's element runs with its op
            if n in owner and owner[n] != k:
                notes.append(f"{name} is computed in {kernels[owner[n]].name} and again in {kern.name}")
                continue
            owner[n] = k
    members: dict[int, list[fx.Node]] = {}
    for n, k in owner.items():
        members.setdefault(k, []).append(n)
    units: list[KernelUnit] = []
    done: set[fx.Node] = set()

    def ready(n: fx.Node, stack: tuple = ()) -> None:
        """Emit what ``n`` reads that is not emitted yet: loose nodes in place, a later kernel early."""
        for a in n.all_input_nodes:
            p = a.args[0] if is_getitem(a) else a
            if p in done or p.op in ("placeholder", "get_attr") or p in stack:
                continue
            if p in owner:
                k = owner[p]
                notes.append(f"{kernels[k].name} runs before the kernel computing {n.name} needs it")
                emit_kernel(k, stack + (n,))
            else:
                ready(p, stack + (n,))
                if p not in done:
                    done.add(p)
                    units.append(KernelUnit([p], False))

    def emit_kernel(k: int, stack: tuple = ()) -> None:
        group = sorted((m for m in members.get(k, []) if m not in done), key=position.__getitem__)
        if not group:
            return
        inside = set(group)
        for m in group:
            ready(m, stack + tuple(inside))
        group = [m for m in group if m not in done]
        done.update(group)
        kern = kernels[k]
        units.append(KernelUnit(group, kern.generated, kern.name))

    for k in range(len(kernels)):
        emit_kernel(k)
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    ready(output)
    for n in nodes:  # computed by no kernel and read by nothing the program returns: kept, in place, said
        if n not in done and not is_getitem(n):
            done.add(n)
            units.append(KernelUnit([n], False))
            notes.append(f"{n.name} ({n.target}) is in no kernel Inductor called")
    return units, notes
