"""Generated code: a scheduled Trace compiled to one Python function, as Thunder runs its traces.

Design. The printed trace is already a program; this module emits it once more
for running rather than reading: every op target, fused-region callable and
non-literal constant (dtypes, devices, constant lists, the program's tensor
literals from ``get_attr``) is bound as a global of the generated module, so a
call does no per-op lookup and no argument mapping, only the calls themselves::

    def backward(args):
        t0s_0, primals_3, tangent_1 = args
        args.clear()
        t4 = _g0(tangent_1, primals_3)        # aten.mul.Tensor (OpOverload's C++ entry)
        del tangent_1
        (t5, t6) = _g1(t4, t0s_0)             # fusion0: the executor's compiled region
        del t4, t0s_0
        return (t5, t6)

Frees follow the liveness model line by line (``del`` after a value's last use,
unread outputs dropped at once), so the runtime does what the model predicts.
Inputs the program owns (``Trace.owned_inputs``: a backward's saved activations,
which AOTAutograd hands over in a list it lets the callee clear) are released
too: the function empties the boxed argument list after unpacking it, as
Inductor's generated code does, and each input dies at its last use. A program
that owns no input leaves its caller's list alone.

A region that frees inputs inside its call (the Inductor executor's donations) is handed them in a list
its compiled code clears, after the program drops its own names::

        _d = [t3, primals_2]
        del t3
        (t5,) = _g_r2(_d)                     # fusion1.boxed: t3 goes at its last use inside
        del primals_2, _d

A program with ``wait_tensor`` ops calls the installed wait hook
(:mod:`.wait_hook`) around its run and each wait; others never look at it.
``source`` is kept on the result (``GeneratedProgram.source``) so a traceback
points at a readable line, and ``linecache`` is told about it.
"""
from __future__ import annotations

import functools
import keyword
import linecache
import math
import operator
from dataclasses import dataclass

import torch
import torch.fx as fx

from ..ir.trace import Trace, is_getitem
from .dtype_guard import dtype_guarded
from .fast_views import FirstCallChecked, ViewPlan, reinterpret, unread
from .fast_views import plan as plan_views
from .interpreter import as_reshape, constants_of
from .wait_hook import WAIT, current_hook, hooked_wait

__all__ = ["GeneratedProgram", "Emitter", "compile_function", "folded_view", "view_check", "generate",
           "generate_region"]

_counter = [0]


@dataclass
class GeneratedProgram:
    """A trace compiled to Python: ``run(args)`` (boxed) and the source it runs.

    ``instrumented(program)`` builds (once per program index, on request) the same program with every line
    inside a ``torch.profiler.record_function`` range named by :func:`line_label` with that index, for
    per-line time (:mod:`trace_lab.run.line_profile`); the fast ``run`` never pays for it."""

    run: object
    source: str
    function_name: str
    build_instrumented: object = None

    def instrumented(self, program: int | None = None):
        if self.build_instrumented is None:
            return self.run
        cached = self.__dict__.setdefault("_instrumented", {})
        if program not in cached:
            cached[program] = self.build_instrumented(program)
        return cached[program]


def line_label(trace: Trace, index: int, node: fx.Node, program: int | None = None) -> str:
    """The name of line ``index`` of ``trace`` in a profile: '<kind> #<program> L<index> <value> = <op>'
    (without ``program``: '<kind> L<index> ...'). The program index keeps two programs' identical lines
    (a graph break) apart: the profiler sums ranges by name."""
    from ..ir.printer import target_name

    what = str(node.target) if node.op == "call_module" else target_name(node.target)
    part = trace.kind if program is None else f"{trace.kind} #{program}"
    return f"{part} L{index} {trace.name(node)} = {what}"


def _fma(a, b, c):
    return torch.add(torch.mul(a, b), c)  # the prim's own eager definition: (a * b) + c


@functools.lru_cache(maxsize=1)
def _fast_equivalents() -> dict:
    """Ops whose eager implementation is a Python custom op (a slow path: ~0.7 ms a call on CPU),
    mapped to the same computation through torch's own kernels."""
    fma = getattr(getattr(torch.ops, "prims", None), "fma", None)  # Inductor's decomposition of lerp
    return {fma.default: _fma} if fma is not None and hasattr(fma, "default") else {}


def _callable_of(target):
    """The fastest equivalent callable: an OpOverload's C++ entry point (its ``__call__`` only forwards)."""
    fast = _fast_equivalents().get(target)
    if fast is not None:
        return fast
    if type(target) is torch._ops.OpOverload and hasattr(target, "_op"):
        return target._op
    return target


class Emitter:
    """Collects globals (targets, regions, constants) and local names for one generated function.

    ``name_of(node)`` proposes a readable local name (a Trace's names); ``gm`` resolves ``get_attr``."""

    def __init__(self, name_of, gm):
        self.name_of = name_of
        self.gm = gm
        self.globals: dict[str, object] = {"__builtins__": __builtins__}
        self._by_id: dict[int, str] = {}
        self.locals: dict[fx.Node, str] = {}
        self._used: set[str] = set()

    def bind(self, value, hint: str = "g") -> str:
        key = id(value)
        if key in self._by_id:
            return self._by_id[key]
        name = f"_g_{hint}{len(self._by_id)}"
        self._by_id[key] = name
        self.globals[name] = value
        return name

    def local(self, node: fx.Node) -> str:
        if node in self.locals:
            return self.locals[node]
        name = self.name_of(node)
        if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_g_") or name in self._used \
                or name in ("args", "_", "_h", "_r", "_d"):
            name = f"_v{len(self.locals)}"
        self._used.add(name)
        self.locals[node] = name
        return name

    def arg(self, a) -> str:
        if isinstance(a, fx.Node):
            if a.op == "get_attr":
                return self.bind(_attr(self.gm, a.target), "c")
            return self.local(a)
        if isinstance(a, (list, tuple)):
            if not _has_node(a):
                return self.bind(a, "c")  # a constant list: built once, not per call
            inner = ", ".join(self.arg(x) for x in a)
            return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
        if a is None or isinstance(a, (bool, int, str)):
            return repr(a)
        if isinstance(a, float) and math.isfinite(a):
            return repr(a)
        if isinstance(a, dict):
            return "{" + ", ".join(f"{k!r}: {self.arg(v)}" for k, v in a.items()) + "}"
        return self.bind(a, "c")  # dtype, device, layout, memory_format, inf/nan, anything else


def _has_node(a) -> bool:
    if isinstance(a, fx.Node):
        return True
    if isinstance(a, (list, tuple)):
        return any(_has_node(x) for x in a)
    if isinstance(a, dict):
        return any(_has_node(x) for x in a.values())
    return False


def _attr(gm, target: str):
    return fx.graph_module._get_attr(gm, target) if hasattr(fx.graph_module, "_get_attr") \
        else operator.attrgetter(target)(gm)


def _dead(trace: Trace, materialized_regions: bool) -> dict:
    """node -> the values deleted after its line (the liveness model's frees)."""
    live = trace.liveness(materialized_regions=materialized_regions)
    return {ln.node: ln.dead_nodes for ln in live.lines}


def folded_view(em: Emitter, p: ViewPlan) -> str:
    """A foldable view line's right-hand side in the fast program (:mod:`.fast_views`; nvFuser's region programs too)."""
    if p.identity:
        return em.local(p.root)
    return f"{em.bind(reinterpret, 'v')}({em.local(p.source)}, {em.bind(p.size, 'c')}, {em.bind(p.stride, 'c')}, {p.delta})"


def view_check(em: Emitter, index: int, n: fx.Node, p: ViewPlan) -> str:
    """The line after foldable view line ``n`` in the checked program: :meth:`.fast_views.FirstCallChecked.seen`
    (``_g_seen``) with its result, its source, and its root where the plan says it is the root."""
    return f"_g_seen({index}, {em.local(n)}, {em.local(p.source)}, {em.local(p.root if p.identity else p.source)})"


def _body(em: Emitter, trace: Trace, region_runner, views_as_reshape: bool,
          materialized_regions: bool, instrument: bool = False, program: int | None = None,
          views: tuple | None = None, donations: dict | None = None) -> list[str]:
    """The op lines (with their ``del`` lines) of one function body; ``instrument``: each line (and its
    ``del``) inside a ``record_function`` range named by :func:`line_label`. ``views``: ``("check", plans,
    frees, seen)`` adds a layout check after each foldable view line, ``("fast", plans, frees)`` folds them
    (:mod:`.fast_views`); both follow ``frees`` instead of the liveness model's own. ``donations``: region node ->
    argument positions handed over in a list its compiled code clears (``fn.boxed``), where they die on its line."""
    mode, plans = (views or (None, {}))[:2]
    dead = views[2] if mode in ("check", "fast") else _dead(trace, materialized_regions)
    order = {n: i for i, n in enumerate(plans)}
    skip = unread(plans) if mode == "fast" and not instrument else set()  # a profiled program times every line
    lines: list[str] = []
    if instrument:
        em.globals["_g_range"] = torch.profiler.record_function
    for index, n in enumerate(trace.ops):
        start = len(lines)
        if n in skip:  # nothing reads it in the folded program; what dies here still dies here
            gone = [em.local(d) for d in dead.get(n, []) if d.op != "get_attr" and d not in skip]
            lines.extend([f"del {', '.join(gone)}"] if gone else [])
            continue
        if n.op == "call_module":
            if region_runner is not None:  # a compiled region, checked once against its recorded dtypes
                fn = dtype_guarded(region_runner(n), trace, n, lambda n=n: generate_region(trace, n))
            else:
                fn = generate_region(trace, n)
            callee = em.bind(fn, "r")
        elif n.op == "call_function":
            target = as_reshape(n.target) if views_as_reshape else n.target
            fn = hooked_wait(trace, n, target) if n.target is WAIT else _callable_of(target)
            callee = em.bind(fn, "w" if n.target is WAIT else "f")
        else:  # call_method
            callee = None
        args = [em.arg(a) for a in n.args]
        args += [f"{k}={em.arg(v)}" for k, v in n.kwargs.items()]
        handed = _handed_over(n, (donations or {}).get(n, ()), dead, skip) \
            if n.op == "call_module" and hasattr(fn, "boxed") else []
        if handed:  # the region frees these inside its call
            lines.append(f"_d = [{', '.join(args)}]")
            lines.append(f"del {', '.join(em.local(a) for a in handed)}")
            call = f"{em.bind(fn.boxed, 'r')}(_d)"
        elif callee is None:
            call = f"{args[0]}.{n.target}({', '.join(args[1:])})"
        else:
            call = f"{callee}({', '.join(args)})"
        if mode == "fast" and n in plans:
            call = folded_view(em, plans[n])
        val = n.meta.get("val")
        if isinstance(val, (list, tuple)):
            getitems = {u.args[1]: u for u in n.users if is_getitem(u)}
            names = [em.local(getitems[i]) if i in getitems else "_" for i in range(len(val))]
            lines.append(f"({', '.join(names)}{',' if len(names) == 1 else ''}) = {call}")
            if "_" in names:
                lines.append("del _")
        else:
            lines.append(f"{em.local(n)} = {call}")
        if mode == "check" and n in plans:
            lines.append(view_check(em, order[n], n, plans[n]))
        gone = [em.local(d) for d in dead.get(n, []) if d.op != "get_attr" and d not in skip and d not in handed]
        if handed:
            gone.append("_d")  # empty unless the region fell back to running op by op
        if gone:
            lines.append(f"del {', '.join(gone)}")
        if instrument:
            label = em.bind(line_label(trace, index, n, program), "l")
            lines[start:] = [f"with _g_range({label}):"] + [f"    {ln}" for ln in lines[start:]]
    return lines


def _handed_over(node: fx.Node, positions: tuple, dead: dict, skip: set) -> list:
    """The arguments of region ``node`` at ``positions`` that the program drops on its line (in ``dead``, the
    frees this program follows): the ones the region may free inside its call."""
    dying = set(dead.get(node, ()))
    found = []
    for i in positions:
        a = node.args[i] if i < len(node.args) else None
        if isinstance(a, fx.Node) and a in dying and a not in skip and a.op != "get_attr" and a not in found:
            found.append(a)
    return found


def _output(em: Emitter, trace: Trace) -> str:
    spec = trace.output_node.args[0]
    if isinstance(spec, (list, tuple)):
        return "(" + "".join(f"{em.arg(a)}, " for a in spec) + ")"
    return f"({em.arg(spec)},)"


def compile_function(em: Emitter, fn_name: str, params: str, body: list[str], what: str):
    """``def fn_name(params): body`` compiled under the emitter's globals; (function, source)."""
    _counter[0] += 1
    filename = f"<trace_lab generated {what} #{_counter[0]}>"
    src = f"def {fn_name}({params}):\n" + "".join(f"    {line}\n" for line in body)
    code = compile(src, filename, "exec")
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns = dict(em.globals)
    exec(code, ns)
    return ns[fn_name], src


def generate(trace: Trace, region_runner=None, views_as_reshape: bool = False,
             materialized_regions: bool = True, instrument: bool = False,
             program: int | None = None, fast_views: bool = False, _views: tuple | None = None,
             donations: dict | None = None) -> GeneratedProgram:
    """Compile ``trace`` to ``run(args) -> tuple`` (boxed: a list of inputs).

    ``region_runner(node) -> callable(*inputs)`` gives each fused region's callable (a
    compiled region returns a tuple when the region has several outputs, else the value);
    without one, regions run as generated code themselves, op by op.
    ``views_as_reshape``: ``aten.view`` runs as ``aten.reshape`` (executors whose regions may
    lay a value out otherwise than eager). ``materialized_regions`` picks the liveness mode
    whose frees the code follows. ``instrument``: each line in a profiler range (:func:`line_label`, with
    ``program``'s index). ``fast_views``: view lines outside regions run as stride reinterpretations once the
    first call has checked the real layouts (:mod:`.fast_views`); ``source`` is then the folded program's.
    ``donations``: region node -> argument positions it frees inside its call (:func:`_body`).
    """
    if fast_views and not instrument and _views is None:
        # a backward's results are gradients autograd accumulates, no caller's views: its returned views fold too
        plans, frees = plan_views(trace.ops, _outputs(trace), _dead(trace, materialized_regions),
                                  fold_returned=trace.kind == "backward")
        if plans:
            return _first_call_checked(trace, region_runner, views_as_reshape, materialized_regions, program,
                                       plans, frees, donations)
    em = Emitter(trace.name, trace.gm)
    params = [em.local(p) for p in trace.inputs]
    body: list[str] = []
    if params:
        body.append(f"{', '.join(params)}{',' if len(params) == 1 else ''} = args")
    if trace.owned_inputs:
        body.append("args.clear()")  # the caller handed its list over: inputs die at their last use
    waits = any(n.op == "call_function" and n.target is WAIT for n in trace.ops)
    if waits:
        em.globals["_g_hook"] = current_hook
        em.globals["_g_trace"] = trace
        body += ["_h = _g_hook()", "if _h is not None:", "    _h.enter(_g_trace)"]
    body += _body(em, trace, region_runner, views_as_reshape, materialized_regions, instrument, program, _views,
                  donations)
    out = _output(em, trace)
    if waits:
        body += ["if _h is not None:", "    _h.exit(_g_trace)"]
    body.append(f"return {out}")
    fn_name = trace.kind_function_name
    if _views is not None and _views[0] == "check":
        em.globals["_g_seen"] = _views[3]
    what = {"check": " (first call: view layouts checked)", "fast": " (views folded)"}.get((_views or ("",))[0], "")
    fn, src = compile_function(em, fn_name, "args", body, f"{trace.kind} '{trace.stage}'"
                               + (" (instrumented)" if instrument else "") + what)
    if instrument:
        return GeneratedProgram(fn, src, fn_name)

    def build_instrumented(program=None):
        return generate(trace, region_runner, views_as_reshape, materialized_regions, instrument=True,
                        program=program, _views=_views, donations=donations).run

    return GeneratedProgram(fn, src, fn_name, build_instrumented)


def _outputs(trace: Trace) -> list:
    spec = trace.output_node.args[0]
    return list(spec) if isinstance(spec, (list, tuple)) else [spec]


def _first_call_checked(trace, region_runner, views_as_reshape, materialized_regions, program, plans, frees,
                        donations=None):
    """The program behind :class:`.fast_views.FirstCallChecked`: checked first call, then folded or plain."""
    def build(views):
        return generate(trace, region_runner, views_as_reshape, materialized_regions, program=program,
                        _views=views, donations=donations)

    names = [trace.name(n) for n in plans]
    state = FirstCallChecked(plans, names, lambda: build(("plain", {})).run)
    state.checked = build(("check", plans, frees, state.seen)).run
    fast = build(("fast", plans, frees))
    state.fast = fast.run

    def build_instrumented(program=None):
        views = ("fast", plans, frees) if state.fast_chosen else None
        return generate(trace, region_runner, views_as_reshape, materialized_regions, instrument=True,
                        program=program, _views=views or ("plain", {}), donations=donations).run

    result = GeneratedProgram(state, fast.source, fast.function_name, build_instrumented)
    result.views = state
    return result


def generate_region(trace: Trace, node: fx.Node):
    """A fused region run op by op as generated code: ``fn(*inputs)`` -> value or tuple.

    Strict views (``view``, ``_unsafe_view``) run as ``reshape``: this is also the fallback for a compiled region
    handed other layouts than it was compiled for (:mod:`.dtype_guard`), where a view may be refused; where a view
    is possible, reshape is that view."""
    sub = trace.gm.get_submodule(node.target)
    inner = Trace(sub, "region")
    em = Emitter(inner.name, inner.gm)
    params = [em.local(p) for p in inner.inputs]
    body = _body(em, inner, None, True, True)
    out = _output(em, inner)
    multi = isinstance(node.meta.get("val"), (list, tuple))
    body.append(f"return {out}" if multi else f"return {out}[0]")
    name = str(node.target) if str(node.target).isidentifier() else "region"
    fn, _ = compile_function(em, name, ", ".join(params), body, f"region {node.target}")
    return fn
