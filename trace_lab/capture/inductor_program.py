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
* the output code itself (``CompiledFxGraph.source_code``), which says which kernels were generated;
* which buffers the output code hands on (:class:`BufferReuse`): a kernel writing its output into an input
  buffer that dies there (``config.inplace_buffers``: the scheduler's ``inplace_update_buffers``, a C++
  ``in_out_ptr`` or Triton ``in_out_ptr`` argument) and a new buffer taking a freed one of the same size
  (the wrapper's memory planning, ``allow_buffer_reuse``); both print as ``buf3 = buf0; del buf0  # reuse``.
  Read from the wrapper Inductor planned (its ``ReuseLine``s and ``reuses``, the in-place ones), each buffer
  named by the post-grad node it holds (``origin_node``; a graph input by its placeholder), through
  ``GraphLowering.save_output_code``, the hook Inductor calls with the code while its graph is still set.

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

__all__ = ["InductorCapture", "InductorPart", "Kernel", "kernel_units", "KernelUnit", "caches_off", "BufferReuse"]


@dataclass
class Kernel:
    """One kernel call of Inductor's output code: its name (``cpp_fused_gelu_0``), whether Inductor generated
    it (C++/Triton) or calls an existing one (``extern_kernels.mm``, a fallback op), the post-grad nodes it
    computes (fx names)."""
    name: str
    generated: bool
    nodes: list[str]


@dataclass(frozen=True)
class BufferReuse:
    """One ``new = old  # reuse`` of Inductor's output code: buffer ``new`` is the storage of buffer ``old``.
    ``inplace``: the kernel computing ``new`` reads ``old`` and writes over it (``old`` dies there); otherwise
    the wrapper's memory planning handed a freed buffer on (``old`` is kept from its last use to ``new``'s
    kernel instead of being freed). ``old_node`` / ``new_node``: the post-grad node (fx name) whose value the
    buffer holds (a view of it, as Inductor records it), None for a kernel's inner buffer."""
    old: str
    new: str
    inplace: bool
    old_node: str | None = None
    new_node: str | None = None


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
    reuses: list[BufferReuse] | None = None  # None: the wrapper's plan could not be read (another code path)


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
        reuses: list = []
        with debug.reset_provenance_globals(), config.patch({"trace.provenance_tracking_level": 1}), \
                _reading_reuses(gm, reuses):
            compiled = compile_fx_inner(gm, example_inputs, **kwargs)
            table = {k: list(v) for k, v in debug._inductor_triton_kernel_to_post_grad_node_info.items()}
        kind = "backward" if kwargs.get("is_backward") else "inference" if kwargs.get("is_inference") else "forward"
        code = str(getattr(compiled, "source_code", "") or "")
        part = InductorPart(kind, gm, _kernels(table, code), code, compiled, names, time.perf_counter() - started,
                            graph, reuses[-1] if reuses else None)
        self.parts.append(part)
        return _Hooked(compiled, part, self)

    def compile(self, fn):
        """``torch.compile(fn)`` through this backend (dynamic=False: concrete sizes, as the lab's capture)."""
        return torch.compile(fn, backend=self.backend, dynamic=False)


def _wrapper_reuses(graph, gm: fx.GraphModule) -> list[BufferReuse]:
    """The ``# reuse`` lines of the wrapper ``graph`` (a GraphLowering whose code is generated) planned."""
    from torch._inductor.codegen.wrapper import ReuseLine

    wrapper = graph.wrapper_code
    inplace = dict(getattr(wrapper, "reuses", None) or {})  # new -> old: codegen_inplace_reuse's record
    placeholders = {str(n.target): n.name for n in gm.graph.nodes if n.op == "placeholder"}

    def node_of(buf) -> str | None:
        if buf.get_name() in placeholders:  # a graph input (a backward's donated saved activation)
            return placeholders[buf.get_name()]
        origin = getattr(buf, "origin_node", None)
        return origin.name if isinstance(origin, fx.Node) and origin.graph is gm.graph else None

    out = []
    for line in wrapper.lines:
        if isinstance(line, ReuseLine) and not getattr(line, "comm_buffer", False):
            old, new = line.node.get_name(), line.reused_as.get_name()
            out.append(BufferReuse(old, new, inplace.get(new) == old, node_of(line.node), node_of(line.reused_as)))
    return out


def _reading_reuses(gm: fx.GraphModule, into: list):
    """While compiling ``gm``: each time Inductor saves an output code with its graph set, the buffer reuses
    that graph's wrapper planned are appended to ``into`` (a list per saved code). Inductor's own hook for
    the code, ``GraphLowering.save_output_code``, kept chained (``run_and_get_code`` sets it too)."""
    import contextlib

    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V

    previous = GraphLowering.save_output_code

    def save_output_code(code: str) -> None:
        graph = V.graph
        if isinstance(graph, GraphLowering) and getattr(graph, "module", None) is gm:  # the graph lowering gm
            into.append(_wrapper_reuses(graph, gm))
        if previous is not None:
            previous(code)

    @contextlib.contextmanager
    def hooked():
        GraphLowering.save_output_code = save_output_code
        try:
            yield into
        finally:
            GraphLowering.save_output_code = previous

    return hooked()


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


def _is_view(n: fx.Node) -> bool:
    schema = getattr(n.target, "_schema", None)
    return is_getitem(n) or bool(schema is not None and schema.returns and schema.returns[0].alias_info is not None)


def _copy_module(gm: fx.GraphModule) -> fx.GraphModule:
    graph = fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return fx.GraphModule(gm, graph)


def kernel_units(gm: fx.GraphModule, kernels: list[Kernel]) -> tuple[fx.GraphModule, list[KernelUnit], list[str]]:
    """The post-grad program as Inductor runs it: (a copy of ``gm``, its units, notes). One unit per kernel in
    call order (a generated kernel's nodes as one fused unit; an extern kernel's op on its own), each preceded by
    the nodes no kernel computes that it reads (views Inductor reinterprets). A kernel's provenance can name
    nodes it cannot compute yet (a ``cat`` names every input the later kernels write into it): a node belongs to
    the first kernel that lists it and has its inputs by then. A computing node Inductor inlines into several
    kernels is computed in each: the copy gets one more node per extra kernel (``add_1_1``), as the generated
    code recomputes it."""
    gm = _copy_module(gm)
    graph = gm.graph
    position = {n: i for i, n in enumerate(graph.nodes)}
    by_name = {n.name: n for n in graph.nodes}
    listed = {by_name[x].args[0] if is_getitem(by_name[x]) else by_name[x]
              for kern in kernels for x in kern.nodes if x in by_name}
    avail = {n for n in graph.nodes if n.op in ("placeholder", "get_attr")}
    owner: dict[fx.Node, int] = {}
    members: dict[int, list[fx.Node]] = {}
    notes: list[str] = []

    def have(n: fx.Node, group: set) -> bool:
        """Whether ``n`` can be read now: computed, in the kernel being formed, or a node no kernel lists
        (a view) whose inputs can be read."""
        n = n.args[0] if is_getitem(n) else n
        if n in avail or n in group:
            return True
        return n not in listed and n.op == "call_function" and all(have(a, group) for a in n.all_input_nodes)

    for k, kern in enumerate(kernels):
        names = dict.fromkeys(by_name[x].args[0] if is_getitem(by_name[x]) else by_name[x]
                              for x in kern.nodes if x in by_name)
        group: set = set()
        again: list[fx.Node] = []
        for n in sorted(names, key=position.__getitem__):
            if n in owner:
                again.append(n)
            elif all(have(a, group) for a in n.all_input_nodes):
                group.add(n)
        for n in again:  # inlined here too: recomputed by this kernel's own copy
            readers = [u for u in n.users if u in group]
            if not kern.generated or not readers or _is_view(n) or isinstance(n.meta.get("val"), (list, tuple)):
                continue
            with graph.inserting_before(min(readers, key=position.__getitem__)):
                copy = graph.node_copy(n)
            for u in readers:
                u.replace_input_with(n, copy)
            position[copy] = position[n] + 0.5
            group.add(copy)
            notes.append(f"{n.name} is computed in {kernels[owner[n]].name} and again in {kern.name}")
        for n in group:
            owner[n] = k
        members[k] = sorted(group, key=position.__getitem__)
        avail |= group
    gm.recompile()
    position = {n: i for i, n in enumerate(graph.nodes)}
    units: list[KernelUnit] = []
    done: set[fx.Node] = set()

    def ready(n: fx.Node, stack: frozenset = frozenset()) -> None:
        """Emit what ``n`` reads that is not emitted yet: loose nodes in place (a kernel early, said)."""
        for a in n.all_input_nodes:
            p = a.args[0] if is_getitem(a) else a
            if p in done or p.op in ("placeholder", "get_attr") or p in stack:
                continue
            if p in owner:
                notes.append(f"{kernels[owner[p]].name} runs before the kernel computing {n.name} needs it")
                emit_kernel(owner[p], stack | {n})
            else:
                ready(p, stack | {n})
                if p not in done:
                    done.add(p)
                    units.append(KernelUnit([p], False))

    def emit_kernel(k: int, stack: frozenset = frozenset()) -> None:
        group = [m for m in members.get(k, []) if m not in done]
        if not group:
            return
        inside = frozenset(group)
        grew = True
        while grew:  # views between the kernel's own nodes (a reshape it reads again) join it
            grew = False
            for m in list(group):
                for a in m.all_input_nodes:
                    p = a.args[0] if is_getitem(a) else a
                    if p not in inside and p not in done and p not in owner and p.op == "call_function" \
                            and any((q.args[0] if is_getitem(q) else q) in inside for q in p.all_input_nodes):
                        inside |= {p}
                        group.append(p)
                        grew = True
        group.sort(key=position.__getitem__)
        for m in group:
            ready(m, stack | inside)
        group = [m for m in group if m not in done]
        done.update(group)
        units.append(KernelUnit(group, kernels[k].generated, kernels[k].name))

    for k in range(len(kernels)):
        emit_kernel(k)
    ready(next(n for n in reversed(graph.nodes) if n.op == "output"))
    for n in graph.nodes:  # computed by no kernel and read by nothing the program returns: kept, in place, said
        if n.op not in ("placeholder", "output", "get_attr") and n not in done and not is_getitem(n):
            done.add(n)
            units.append(KernelUnit([n], False))
            notes.append(f"{n.name} ({n.target}) is in no kernel Inductor called")
    return gm, units, notes
