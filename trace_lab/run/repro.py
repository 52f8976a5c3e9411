"""Repro export: one program or one fused region as a standalone Python file (issue 17 item 5).

``trace_lab.export_repro(trace_or_jfn, path, region=None, executor="inductor")`` writes a
file that runs with nothing but torch installed:

* the program (or the region) as the lab prints it - the printed trace is a Python
  function of aten calls - and, for a whole program, each of its fused regions as a
  function of its own (the lab's ``fusionK`` submodules, printed the same way);
* ``make_inputs()``: inputs of the recorded shapes, strides, dtypes and devices (floating
  values random from a fixed seed, integer and bool values zero so that index inputs stay
  in range); a floating input that an op with a restricted domain reads (through views and
  fused regions) is drawn inside it, as the recorded values were: ``sqrt``, ``log``, ``rsqrt``,
  a fractional ``pow`` get non-negative values, ``asin`` / ``atanh`` values in (-1, 1), ``acosh``
  values >= 1 (``randn`` there made NaNs that no run of the program saw);
* a ``__main__`` that runs the function eagerly and through the executor
  (``"inductor"``: ``torch.compile(fn, backend="inductor", fullgraph=True)``; ``"eager"``:
  the function itself; ``"nvfuser"``, for one region the nvFuser executor compiled as one
  segment: its ``FusionDefinition`` as nvFuser prints it, executed as trace_lab calls it) and
  compares the two as the lab's own eager check does (:mod:`trace_lab.run.compare`: the largest
  error within the dtype's tolerance of the largest expected magnitude plus an absolute floor,
  NaN and infinities in the same places, integers exactly; the constants are written into the
  file), printing ``repro: matches eager`` or raising with the difference. ``assert_close``'s
  elementwise defaults called float32 rounding of a reordered reduction a difference.

What cannot be written as text is refused with the reason: ops with no torch name (a
Python callable captured in the graph) and tensor constants of the graph (``get_attr``).
"""
from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.fx as fx

from ..errors import TraceLabError
from ..ir.printer import format_trace, target_name
from ..ir.trace import Trace

__all__ = ["export_repro", "repro_source", "nvfuser_call_text", "input_domains"]

EXECUTORS = ("inductor", "eager", "nvfuser")

# ops whose first argument has a restricted domain (outside it they return NaN): (low, high), None = unbounded
_DOMAIN = {"sqrt": (0.0, None), "rsqrt": (0.0, None), "log": (0.0, None), "log2": (0.0, None),
           "log10": (0.0, None), "log1p": (0.0, None), "asin": (-1.0, 1.0), "acos": (-1.0, 1.0),
           "atanh": (-1.0, 1.0), "erfinv": (-1.0, 1.0), "acosh": (1.0, None)}
# ops that hand their first argument's values on unchanged (a domain of the result is one of the input)
_SAME_VALUES = {"view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "squeeze", "unsqueeze",
                "slice", "select", "alias", "clone", "_to_copy", "contiguous", "as_strided", "unfold", "flatten",
                "detach", "lift_fresh_copy"}


def _domain_of_use(user, arg_pos: int) -> tuple | None:
    """The domain ``user`` needs of its argument ``arg_pos`` (None: any value)."""
    if user.op != "call_function" or not isinstance(user.target, torch._ops.OpOverload) or arg_pos != 0:
        return None
    name = user.target.overloadpacket.__name__
    if name in _DOMAIN:
        return _DOMAIN[name]
    if name == "pow":  # a fractional power of a negative base is NaN
        exponent = user.args[1] if len(user.args) > 1 else None
        if isinstance(exponent, (int, bool)) or (isinstance(exponent, float) and exponent.is_integer()):
            return None
        return (0.0, None)
    return None


def _meet(a: tuple | None, b: tuple | None) -> tuple | None:
    if a is None or b is None:
        return a if b is None else b
    low = max(x for x in (a[0], b[0]) if x is not None) if a[0] is not None or b[0] is not None else None
    highs = [x for x in (a[1], b[1]) if x is not None]
    return (low, min(highs) if highs else None)


def _domain(node, gm, depth: int = 0) -> tuple | None:
    """What every reader of ``node`` (through value-preserving views and into fused regions) allows."""
    if depth > 50:
        return None
    found = None
    for user in node.users:
        for pos, a in enumerate(user.args):
            if a is not node:
                continue
            if user.op == "call_module":  # a fused region: its placeholder number ``pos``
                sub = gm.get_submodule(user.target)
                inner = [n for n in sub.graph.nodes if n.op == "placeholder"]
                if pos < len(inner):
                    found = _meet(found, _domain(inner[pos], sub, depth + 1))
                continue
            found = _meet(found, _domain_of_use(user, pos))
            if (pos == 0 and user.op == "call_function" and isinstance(user.target, torch._ops.OpOverload)
                    and user.target.overloadpacket.__name__ in _SAME_VALUES):
                found = _meet(found, _domain(user, gm, depth + 1))
    return found


def input_domains(trace: Trace) -> list[tuple | None]:
    """Per input of ``trace``: the (low, high) its values must lie in for the program's ops (None: any)."""
    return [_domain(n, trace.gm) for n in trace.inputs]


def _check_text() -> list[str]:
    """The comparison of the lab's eager check (:mod:`.compare`), as text for the repro file."""
    from .compare import ABSOLUTE_FLOOR, TOLERANCES

    def table(d):
        return "{" + ", ".join(f"{k}: {v!r}" for k, v in d.items()) + "}"

    return [
        "# trace_lab's eager check (trace_lab/run/compare.py): per dtype, the largest error may be the tolerance",
        "# times the largest expected magnitude plus an absolute floor; NaN and inf in the same places",
        f"TOLERANCES = {table(TOLERANCES)}",
        f"ABSOLUTE_FLOOR = {table(ABSOLUTE_FLOOR)}",
        "",
        "",
        "def check(got, expected):",
        "    got = list(got) if isinstance(got, (list, tuple)) else [got]",
        "    expected = list(expected) if isinstance(expected, (list, tuple)) else [expected]",
        "    assert len(got) == len(expected), f'{len(got)} outputs, eager has {len(expected)}'",
        "    for i, (a, b) in enumerate(zip(got, expected)):",
        "        if not isinstance(b, torch.Tensor):",
        "            assert a == b, f'output {i}: {a!r} != {b!r}'",
        "            continue",
        "        same = a.shape == b.shape and a.dtype == b.dtype",
        "        assert same, f'output {i}: {tuple(a.shape)}/{a.dtype} vs eager {tuple(b.shape)}/{b.dtype}'",
        "        a, b = a.detach().cpu(), b.detach().cpu()",
        "        if not (b.is_floating_point() or b.is_complex()):",
        "            assert torch.equal(a, b), f'output {i}: integer/bool values differ'",
        "            continue",
        "        dtype, wide = b.dtype, (torch.complex128 if b.is_complex() else torch.float64)",
        "        a, b = a.to(wide), b.to(wide)",
        "        assert torch.equal(a.isnan(), b.isnan()), f'output {i}: NaN in different places'",
        "        inf = b.isinf()",
        "        assert torch.equal(a.isinf(), inf) and torch.equal(a[inf], b[inf]), f'output {i}: inf in different places'",
        "        finite = ~(b.isnan() | inf)",
        "        if not bool(finite.any()):",
        "            continue",
        "        err = float((a[finite] - b[finite]).abs().max())",
        "        ref = float(b[finite].abs().max())",
        "        tol, floor = TOLERANCES.get(dtype, 1e-4), ABSOLUTE_FLOOR.get(dtype, 1e-5)",
        "        bad = f'output {i}: max |diff| {err:.3g} > {floor:.0e} + {tol:.0e} x max |expected| {ref:.3g}'",
        "        assert err <= floor + tol * ref, bad",
    ]


def _function_text(trace: Trace, name: str) -> str:
    """The printed function of ``trace`` renamed ``name``, without the module header."""
    text = format_trace(trace, annotate=False)
    body = text[text.index(f"def {trace.kind_function_name}("):]
    return body.replace(f"def {trace.kind_function_name}(", f"def {name}(", 1)


def _scalar_text(t: torch.Tensor) -> str | None:
    """``torch.tensor(...)`` re-creating a one-element constant (a folded scalar), or None when it has no such text."""
    if t.numel() != 1 or t.is_complex() or t.device.type == "meta":
        return None
    v = t.item()
    text = repr(v) if not isinstance(v, float) or math.isfinite(v) else f"float({str(v)!r})"
    return f"torch.tensor({text}, dtype={t.dtype}, device={str(t.device)!r}).reshape({tuple(t.shape)!r})"


def _writable_constants(trace: Trace, what: str) -> list[tuple[str, str]]:
    """(name, text) of the program's scalar constants (folded at compile time), written as literals; anything else
    a repro cannot hold as text is refused."""
    constants = []
    for n in trace.graph.nodes:
        if n.op == "get_attr":
            text = _scalar_text(fx.graph_module._get_attr(trace.gm, n.target))
            if text is None:
                raise TraceLabError(f"export_repro: {what} reads a tensor constant of the graph ({n.target}); "
                                    "a repro file cannot hold it as text")
            constants.append((trace.name(n), text))
        if n.op == "call_function" and target_name(n.target).startswith("_fn_"):
            raise TraceLabError(f"export_repro: {what} calls {n.target!r}, which has no torch name to write")
    return constants


def _input_line(val, domain: tuple | None = None) -> str:
    if not isinstance(val, torch.Tensor):
        return repr(val)
    within = "" if domain is None or not (val.is_floating_point()) else f", {domain[0]!r}, {domain[1]!r}"
    return (f"_tensor({tuple(val.shape)!r}, {tuple(val.stride())!r}, {val.storage_offset()}, {val.dtype}, "
            f"{str(val.device)!r}{within})")


def repro_source(trace: Trace, region: str | None = None, executor: str = "inductor", nvfuser: str | None = None) -> str:
    """The text of the repro file for ``trace`` (or its region named ``region``, e.g. ``"fusion0"``); ``nvfuser``:
    the region's nvFuser call as text (:func:`nvfuser_call_text`), for ``executor="nvfuser"``."""
    if executor not in EXECUTORS:
        raise TraceLabError(f"export_repro(executor={executor!r}): choose one of {', '.join(EXECUTORS)}")
    regions = {n.target: n for n in trace.ops if n.op == "call_module"}
    if region is not None:
        if region not in regions:
            raise TraceLabError(f"export_repro: {trace.kind} '{trace.stage}' has no region {region!r}; its regions: "
                                f"{', '.join(regions) or 'none'}")
        sub = Trace(trace.gm.get_submodule(region), "inference", op_scratch=trace.op_scratch)
        constants = _writable_constants(sub, f"region {region}")
        defs, entry, inputs = [_function_text(sub, region)], region, sub.inputs
        domains = input_domains(sub)
        title = f"region {region} of the {trace.kind} program, stage '{trace.stage}'"
    else:
        constants = _writable_constants(trace, f"the {trace.kind} program")
        defs = []
        for name, node in regions.items():
            sub = Trace(trace.gm.get_submodule(node.target), "inference", op_scratch=trace.op_scratch)
            _writable_constants(sub, f"region {name}")
            defs.append(_function_text(sub, name))
        entry = trace.kind_function_name
        defs.append(_function_text(trace, entry))
        inputs = trace.inputs
        domains = input_domains(trace)
        title = f"the {trace.kind} program, stage '{trace.stage}'"
    vals = [n.meta.get("val") for n in inputs]
    run = (f"torch.compile({entry}, backend=\"inductor\", fullgraph=True)" if executor == "inductor" else entry)
    if executor == "nvfuser":
        if nvfuser is None or region is None:
            raise TraceLabError("export_repro(executor='nvfuser'): one fused region of a program the nvFuser executor "
                                "compiled (pass the jitted function and region='fusionK'); a whole program's "
                                "regions are written for Inductor or eager")
        defs.append(nvfuser)
        run = "run_nvfuser"
    cuda = any(isinstance(v, torch.Tensor) and v.device.type == "cuda" for v in vals)
    lines = [
        f'"""trace_lab repro: {title}, run eagerly and through {executor}.',
        "",
        "    python this_file.py     # prints 'repro: matches eager' or raises with the difference",
        "",
        "Inputs: random, drawn inside the domain of the ops that read them (sqrt, log: >= 0); compared as",
        "trace_lab compares a compiled run with eager (check below).",
        '"""',
        "import operator",
        "",
        "import torch",
        "",
        "aten = torch.ops.aten",
        "",
        "",
        "def _tensor(shape, stride, offset, dtype, device, low=None, high=None):",
        "    t = torch.empty_strided(shape, stride, dtype=dtype, device=device)",
        "    if dtype.is_floating_point or dtype.is_complex:",
        "        v = torch.randn(t.shape, dtype=dtype, device=device)",
        "        if low is not None and high is not None:  # inside (low, high), away from its ends",
        "            v = low + (high - low) * (0.05 + 0.9 * torch.rand(t.shape, dtype=dtype, device=device))",
        "        elif low is not None:  # at or above low (sqrt, log: >= 0)",
        "            v = low + v.abs()",
        "        return t.copy_(v)",
        "    return t.zero_()  # integer / bool inputs: zeros keep index inputs in range",
        "",
        "",
        *_check_text(),
        "",
        "",
        *[d.rstrip() + "\n\n" for d in defs],
        "def make_inputs():",
        "    torch.manual_seed(0)",
        "    return [" + ", ".join(_input_line(v, d) for v, d in zip(vals, domains)) + "]",
        "",
        "",
        'if __name__ == "__main__":',
    ]
    if cuda:
        lines += ["    if not torch.cuda.is_available():",
                  "        raise SystemExit('this repro was recorded on CUDA: run it on a machine with a GPU')"]
    # the program's folded scalars, as module globals its function reads (created once a device is known to be there)
    lines += [f"    {name} = {text}" for name, text in dict(constants).items()]
    lines += [
        "    inputs = make_inputs()",
        f"    expected = {entry}(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])",
        f"    got = {run}(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])",
        "    check(got, expected)",
        "    print('repro: matches eager')",
    ]
    return "\n".join(lines) + "\n"


def export_repro(trace_or_jfn, path, region: str | None = None, executor: str = "inductor",
                 kind: str = "forward", program: int | None = None) -> str:
    """Write the repro of a Trace (or of a jitted function's ``kind`` program: ``program=i``, the i-th of its
    programs, one per graph of a graph break; default the one that ran last) to ``path``; ``region``: one
    fused region (``"fusion0"``) instead of the whole program. Returns the path."""
    trace = trace_or_jfn
    nvfuser = None
    if not isinstance(trace, Trace):
        from .jit import compiled_of, final_stage

        trace = final_stage(trace_or_jfn, kind, program, "export_repro")
        if executor == "nvfuser" and region is not None:
            nvfuser = nvfuser_call_text(compiled_of(trace_or_jfn, trace), region)
    text = repro_source(trace, region, executor, nvfuser)
    compile(text, str(path), "exec")  # a file that does not parse is never written
    Path(path).write_text(text)
    return str(path)




def nvfuser_call_text(compiled, region: str) -> str:
    """``run_nvfuser(*region_inputs)`` as text: the region's one nvFuser segment as its FusionDefinition (the
    code nvFuser prints for it) and the call trace_lab makes (inputs in the segment's order, contiguous where
    the definition says so, 0-d ones as the [1] views the definition takes where it lifts them, the outputs in the
    region's order: visible ones, or the inputs the definition writes them over). A region nvFuser split, or one
    that writes an input in place (``copy_``), is refused with the reason."""
    programs = getattr(compiled, "region_programs", None) or {}
    runs = {r.name: r.details.get("runs_code_of") for r in (getattr(compiled, "regions", None) or {}).values()}
    if region not in programs and runs.get(region):
        raise TraceLabError(f"export_repro(executor='nvfuser'): {region} has no code of its own: it runs "
                            f"{runs[region]}'s code (cover_regions). Export {runs[region]}, or jit with "
                            "cover_regions=False")
    if region not in programs:
        raise TraceLabError(f"export_repro(executor='nvfuser'): region {region!r} was not compiled by nvFuser here "
                            f"(nvFuser regions: {', '.join(programs) or 'none'})")
    program = programs[region]
    steps = [(kind, item) for kind, item, _ in program.plan]
    if len(steps) != 1 or steps[0][0] != "fuse":
        raise TraceLabError(f"export_repro(executor='nvfuser'): {region} runs as {len(steps)} steps (nvFuser split it, "
                            "or runs part of it through torch); only a one-segment region is written as a "
                            "FusionDefinition: use executor='inductor' or 'eager' for it")
    seg, runner = steps[0][1]
    if not hasattr(runner, "definition"):
        raise TraceLabError(f"export_repro(executor='nvfuser'): {region} runs {runner.plan.updates} updates batched "
                            f"into {len(runner.plan.groups)} stacked definition(s); not written. Export it with "
                            "jit(..., batch_updates=False)")
    if seg.copies:
        raise TraceLabError(f"export_repro(executor='nvfuser'): {region} writes an input in place; not written")
    order = [program.placeholders.index(x) for x in seg.inputs]
    missing = [o for o in program.outputs if o not in seg.outputs]
    if missing:
        raise TraceLabError(f"export_repro(executor='nvfuser'): {region} returns values its segment does not compute")
    places = runner.definition.places  # a visible output, or an input the definition writes it over
    returned = []
    for o in program.outputs:
        kind, i, shape = places[seg.outputs.index(o)]
        returned.append(f"outs[{i}]" if kind == "out" else f"ins[{i}]" if shape is None else f"ins[{i}].view({shape})")
    fd_text = repr(runner.definition.fd)
    body = []
    for line in fd_text.splitlines():  # the printed function only (nvFuser may append a usage example)
        if body and line and not line[0].isspace():
            break
        if line.startswith("def ") or body:
            body.append(line)
    contiguous = bool(getattr(runner, "contiguous", False))
    rank, lifted = runner.definition.lift  # 0-d inputs the definition takes as [1] * rank (lifted_inputs)
    lift_lines = [f"    for i in {list(lifted)!r}:  # 0-d inputs, handed over as [1] * {rank} views as trace_lab does",
                  f"        ins[i] = ins[i].view({', '.join(['1'] * rank)})"] if lifted else []
    return "\n".join([
        "from nvfuser_direct import DataType, FusionDefinition  # noqa: E402, F401 - the definition uses both",
        "",
        "",
        *body,
        "",
        "",
        "def run_nvfuser(*inputs):",
        f"    ins = [inputs[i]{'.contiguous()' if contiguous else ''} for i in {order!r}]  # the segment's input order",
        *lift_lines,
        "    with FusionDefinition() as fd:",
        "        nvfuser_fusion(fd)",
        f"    outs = fd.execute(ins)[:{runner.definition.n_visible}]",
        f"    return ({', '.join(returned)},)",
    ])
