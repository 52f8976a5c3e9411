"""Printer: a Trace as Thunder-style Python text, annotated with memory.

The text is a real Python function (``exec`` it with :func:`exec_namespace` and
it computes the program), so what the lab shows is exactly what runs::

    def forward(x, w):
      # x: "cpu f32[256, 256]"
      # /path/model.py:12   y = torch.relu(x)
      t0 = aten.relu.default(x)  # t0: "cpu f32[256, 256]"  | live 0.50 MiB (+0.25)
      del t0 ...

Each op line carries its value's type comment, then (when ``annotate``) a
memory column: live bytes after the line (inputs included) and what the line
allocated or freed; the peak line is marked ``<- peak N above inputs`` (trace_lab's one
meaning of peak: the most a program allocates beyond its inputs; the header also gives
the high-water mark, inputs included). Source lines of the user's code (from the
node's stack trace) are printed as comments when they change. Fused regions
(``call_module`` nodes) print as ``(t2, t8) = fusion0(t0, t1)`` followed by
their ops, indented and commented out; where the fusion pass recorded why a region
ends (``trace.info["region_ends"]``) its line ends with ``# ends: executor x2, cycle``.

:func:`trace_lines` is the printer: it returns the lines as data (:class:`Line`:
text, op, region, memory figures, peak, recomputed, source line), and
:func:`format_trace` joins their text, so the views that read the records
(:mod:`trace_lab.report.view_model`) and the text cannot disagree.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields

import torch
import torch.fx as fx

from .fx_util import is_getitem, tensor_values

__all__ = ["Line", "trace_lines", "format_trace", "format_bytes", "plural", "type_comment", "source_line", "exec_namespace", "target_name"]

_DTYPE_SHORT = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "b8", torch.complex64: "c64", torch.complex128: "c128",
}


def _inside(workspace: int) -> str:
    """A line's bytes inside its own call: scratch (``~N inside``), or, for a region that frees donated inputs
    inside its call before making its outputs, the net bytes gone at its high-water mark (``~N freed inside``)."""
    if workspace > 0:
        return f"~{format_bytes(workspace)} inside"
    return f"~{format_bytes(-workspace)} freed inside" if workspace < 0 else ""


def format_bytes(n: float) -> str:
    n = float(n)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """'1 op', '3 ops', '1 cache hit', '0 cache hits' (``nouns``: an irregular plural)."""
    return f"{n:,} {noun if n == 1 else (nouns or noun + 's')}"


def type_comment(val) -> str:
    if isinstance(val, torch.Tensor):
        dev = str(val.device)
        return f"{dev} {_DTYPE_SHORT.get(val.dtype, str(val.dtype).replace('torch.', ''))}{list(val.shape)}"
    if val is None:
        return "None"
    return type(val).__name__


def source_line(node: fx.Node) -> str | None:
    """'file.py:12  code' for the user's frame that produced the node."""
    st = node.meta.get("stack_trace")
    if not st:
        return None
    lines = st.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        m = re.match(r'\s*File "([^"]+)", line (\d+), in (.+)', lines[i])
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            path = m.group(1)
            short = "/".join(path.split("/")[-2:])
            return f"{short}:{m.group(2)}  {code}"
    return None


def target_name(target) -> str:
    printed = getattr(target, "__trace_lab_name__", None)  # a target that says how it prints (a Thunder symbol)
    if isinstance(printed, str):
        return printed
    if isinstance(target, torch._ops.OpOverload):
        ns = target.namespace
        base = "aten" if ns == "aten" else f"torch.ops.{ns}"
        return f"{base}.{target._opname}.{target._overloadname}"
    if isinstance(target, torch._ops.OpOverloadPacket):
        return f"torch.ops.{target._qualified_op_name.replace('::', '.')}"
    if isinstance(target, str):
        return target
    mod = getattr(target, "__module__", "") or ""
    name = getattr(target, "__qualname__", getattr(target, "__name__", repr(target)))
    if mod in ("_operator", "operator"):
        return f"operator.{name}"
    if mod.startswith("torch"):
        return f"{mod}.{name}"
    return "_fn_" + re.sub(r"\W", "_", f"{mod}_{name}")


def _fmt(arg, name_of) -> str:
    if isinstance(arg, fx.Node):
        return name_of(arg)
    if isinstance(arg, (list, tuple)):
        inner = ", ".join(_fmt(a, name_of) for a in arg)
        return f"[{inner}]" if isinstance(arg, list) else f"({inner}{',' if len(arg) == 1 else ''})"
    if isinstance(arg, torch.dtype):
        return str(arg)
    if isinstance(arg, torch.device):
        return f"torch.device({str(arg)!r})"
    if isinstance(arg, (torch.layout, torch.memory_format)):
        return str(arg)
    if isinstance(arg, float):
        if math.isinf(arg):
            return "float('inf')" if arg > 0 else "float('-inf')"
        if math.isnan(arg):
            return "float('nan')"
    if isinstance(arg, dict):
        return "{" + ", ".join(f"{k!r}: {_fmt(v, name_of)}" for k, v in arg.items()) + "}"
    return repr(arg)


def _call(node: fx.Node, name_of) -> str:
    args = [_fmt(a, name_of) for a in node.args]
    args += [f"{k}={_fmt(v, name_of)}" for k, v in node.kwargs.items()]
    if node.op == "call_module":
        return f"{node.target}({', '.join(args)})"
    return f"{target_name(node.target)}({', '.join(args)})"


def _lhs(node: fx.Node, trace) -> str:
    val = node.meta.get("val")
    if isinstance(val, (list, tuple)) and not is_getitem(node):
        getitems = {u.args[1]: u for u in node.users if is_getitem(u)}
        parts = [trace.name(getitems[i]) if i in getitems else "_" for i in range(len(val))]
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    return trace.name(node)


def _types(node: fx.Node, trace) -> str:
    val = node.meta.get("val")
    if isinstance(val, (list, tuple)) and not is_getitem(node):
        getitems = {u.args[1]: u for u in node.users if is_getitem(u)}
        return "  ".join(f'{trace.name(getitems[i])}: "{type_comment(v)}"' for i, v in enumerate(val) if i in getitems)
    return f'{trace.name(node)}: "{type_comment(val)}"'


def _region_lines(node: fx.Node, trace, indent: str) -> list[Line]:
    """The region's ops, commented out, named as the program names them (Thunder style)."""
    sub = trace.gm.get_submodule(node.target)
    out = []
    for n in sub.graph.nodes:
        if n.op not in ("call_function", "call_module", "call_method") or is_getitem(n):
            continue
        out.append(Line(f"{indent}  # {_lhs(n, trace)} = {_call(n, trace.name)}  # {_types(n, trace)}", "region_op",
                        _lhs(n, trace), n.name, region=str(node.target)))
    return out


@dataclass
class Line:
    """One printed line as data (the views read these; ``text`` is the line itself).

    ``role``: title, summary, code (import/def/blank), input, constant, source, op,
    region_op (an op inside the fused region above, commented out), del, return.
    Op lines name their value (``name``: the printed name, ``fx_name``: the fx node's)
    and their index in ``trace.ops`` (``op``); a fused region's line and its inner lines
    carry the region's name (``region``). With memory (``annotate``): live bytes after
    the line, the high water while it runs, what it allocated and freed, and whether it
    is the peak line. ``recomputed``: a backward op recomputed from the forward;
    ``source``: the user's source line (on op lines and their source comment).
    """

    text: str
    role: str
    name: str | None = None
    fx_name: str | None = None
    op: int = -1
    region: str | None = None
    live_after: int | None = None
    high_water: int | None = None
    allocated: int | None = None
    freed: int | None = None
    peak: bool = False
    recomputed: bool = False
    source: str | None = None

    @property
    def has_memory(self) -> bool:
        return self.live_after is not None

    def to_row(self) -> list:
        """The fields in order, as a list without its trailing defaults (JSON stays small)."""
        values = self.__dict__
        row = [values[name] for name in _LINE_FIELDS]
        while len(row) > 2 and row[-1] == _LINE_DEFAULTS[len(row) - 1]:
            row.pop()
        return row

    @classmethod
    def from_row(cls, row: list) -> "Line":
        return cls(*row)


_LINE_FIELDS = [f.name for f in fields(Line)]
_LINE_DEFAULTS = [f.default for f in fields(Line)]


def trace_lines(trace, annotate: bool = True) -> list[Line]:
    """The trace as printed, one :class:`Line` per line; :func:`format_trace` joins their text."""
    name_of = trace.name
    fn = trace.kind_function_name
    memory = trace.liveness()  # the registered memory model: where each value dies (the `del`s)
    live = memory if annotate else None
    by_node = {ln.node: ln for ln in live.lines} if live else {}
    dels = {ln.node: ln.dead_values for ln in memory.lines}
    out = [Line(f"# trace_lab: {trace.kind} program, stage '{trace.stage}'", "title")]
    if annotate:
        # "peak" is the peak above inputs everywhere (report/table.py); the high-water mark says what it counts
        out.append(Line(f"# {plural(len(trace.ops), 'op')}; inputs {format_bytes(live.entry_bytes)}; "
                        f"peak {format_bytes(live.peak_above_inputs_bytes)} above inputs"
                        + (f" at {live.peak_line.name}" if live.peak_line else "")
                        + f" (high-water {format_bytes(live.peak_bytes)} incl. inputs)", "summary"))
    out += [Line("import torch", "code"), Line("aten = torch.ops.aten", "code"), Line("", "code")]
    params = ", ".join(name_of(n) for n in trace.inputs)
    out.append(Line(f"def {fn}({params}):", "code"))
    for n in trace.inputs:
        out.append(Line(f'  # {name_of(n)}: "{type_comment(n.meta.get("val"))}"', "input", name_of(n), n.name))
    for n in trace.graph.nodes:
        if n.op == "get_attr":  # tensor literals of the user's code, held by the program
            value = fx.graph_module._get_attr(trace.gm, n.target)
            how = f"constant, folded at compile time from {n.meta['folded']}" if n.meta.get("folded") else "constant"
            out.append(Line(f'  # {name_of(n)}: "{type_comment(value)}" ({how})', "constant", name_of(n), n.name))
    last_src = None
    ends = trace.info.get("region_ends") or {}
    for k, n in enumerate(trace.ops):
        src = source_line(n)
        if src and src != last_src:
            out.append(Line(f"  # {src}", "source", source=src))
            last_src = src
        recomputed = n.meta.get("recompute") is not None and trace.kind == "backward"
        region = str(n.target) if n.op == "call_module" else None
        lhs = _lhs(n, trace)
        rec = Line(f"  {lhs} = {_call(n, name_of)}  # {_types(n, trace)}"
                   + (" (recomputed)" if recomputed else ""), "op", lhs, n.name, k, region,
                   recomputed=recomputed, source=src)
        if region is not None and ends.get(region):  # why the region ends (the fusion pass's reasons)
            rec.text += f"  # ends: {region_end_kinds(ends[region])}"  # before the memory column and the peak mark
        ln = by_node.get(n)
        if ln is not None:
            change = " ".join(x for x in (f"+{format_bytes(ln.allocated)}" if ln.allocated else "",
                                          f"-{format_bytes(ln.freed)}" if ln.freed else "",
                                          _inside(ln.workspace)) if x) or "+0"
            if ln.written_over:  # outputs written in place over dying arguments: they allocate nothing
                change += f"; in place: {', '.join(ln.written_over)}"
            rec.peak = live.peak_line is ln
            mark = f"  <- peak {format_bytes(ln.high_water - live.entry_bytes)} above inputs" if rec.peak else ""
            if ln.bound:  # an op whose scratch was not measured (lower bound) or depends on values (upper)
                mark += f"  {ln.bound}"
            rec.text += f"  | live {format_bytes(ln.live_after)} ({change}){mark}"
            rec.live_after, rec.high_water, rec.allocated, rec.freed = ln.live_after, ln.high_water, ln.allocated, ln.freed
        out.append(rec)
        if n.op == "call_module":
            out.extend(_region_lines(n, trace, "  "))
        if dels.get(n):
            out.append(Line(f"  del {', '.join(dels[n])}", "del"))
    ret = trace.output_node.args[0]
    out.append(Line(f"  return {_fmt(ret, name_of)}", "return"))
    return out


def region_end_kinds(rows: list[dict]) -> str:
    """'executor x2, cycle': the kinds of a region's boundaries (passes/region_ends.py), counted."""
    kinds: dict[str, int] = {}
    for r in rows:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    return ", ".join(f"{k} x{n}" if n > 1 else k for k, n in kinds.items())


def format_trace(trace, annotate: bool = True) -> str:
    """The trace as Python text: the text of :func:`trace_lines`, one line each."""
    return "\n".join(ln.text for ln in trace_lines(trace, annotate)) + "\n"


def exec_namespace(trace) -> dict:
    """Globals under which the printed text runs: torch, aten, regions, other targets."""
    import operator

    ns: dict = {"torch": torch, "aten": torch.ops.aten, "operator": operator}
    for n in trace.graph.nodes:
        if n.op == "call_function":
            name = target_name(n.target)
            if name.startswith("_fn_"):
                ns[name] = n.target
        elif n.op == "call_module":
            ns[n.target] = trace.gm.get_submodule(n.target)
        elif n.op == "get_attr":
            ns[trace.name(n)] = fx.graph_module._get_attr(trace.gm, n.target)
    return ns
