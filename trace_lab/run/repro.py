"""Repro export: one program or one fused region as a standalone Python file (issue 17 item 5).

``trace_lab.export_repro(trace_or_jfn, path, region=None, executor="inductor")`` writes a
file that runs with nothing but torch installed:

* the program (or the region) as the lab prints it - the printed trace is a Python
  function of aten calls - and, for a whole program, each of its fused regions as a
  function of its own (the lab's ``fusionK`` submodules, printed the same way);
* ``make_inputs()``: inputs of the recorded shapes, strides, dtypes and devices (floating
  values random from a fixed seed, integer and bool values zero so that index inputs stay
  in range);
* a ``__main__`` that runs the function eagerly and through the executor
  (``"inductor"``: ``torch.compile(fn, backend="inductor", fullgraph=True)``; ``"eager"``:
  the function itself; ``"nvfuser"``, for one region the nvFuser executor compiled as one
  segment: its ``FusionDefinition`` as nvFuser prints it, executed as trace_lab calls it) and
  compares the two with ``torch.testing.assert_close``, printing ``repro: matches eager`` or
  raising with the difference.

What cannot be written as text is refused with the reason: ops with no torch name (a
Python callable captured in the graph) and tensor constants of the graph (``get_attr``).
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..errors import TraceLabError
from ..ir.printer import format_trace, target_name
from ..ir.trace import Trace

__all__ = ["export_repro", "repro_source", "nvfuser_call_text"]

EXECUTORS = ("inductor", "eager", "nvfuser")


def _function_text(trace: Trace, name: str) -> str:
    """The printed function of ``trace`` renamed ``name``, without the module header."""
    text = format_trace(trace, annotate=False)
    body = text[text.index(f"def {trace.kind_function_name}("):]
    return body.replace(f"def {trace.kind_function_name}(", f"def {name}(", 1)


def _refuse_unwritable(trace: Trace, what: str) -> None:
    for n in trace.graph.nodes:
        if n.op == "get_attr":
            raise TraceLabError(f"export_repro: {what} reads a tensor constant of the graph ({n.target}); "
                                "a repro file cannot hold it as text")
        if n.op == "call_function" and target_name(n.target).startswith("_fn_"):
            raise TraceLabError(f"export_repro: {what} calls {n.target!r}, which has no torch name to write")


def _input_line(val) -> str:
    if not isinstance(val, torch.Tensor):
        return repr(val)
    return (f"_tensor({tuple(val.shape)!r}, {tuple(val.stride())!r}, {val.storage_offset()}, {val.dtype}, "
            f"{str(val.device)!r})")


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
        sub = Trace(trace.gm.get_submodule(region), "inference")
        _refuse_unwritable(sub, f"region {region}")
        defs, entry, inputs = [_function_text(sub, region)], region, sub.inputs
        title = f"region {region} of the {trace.kind} program, stage '{trace.stage}'"
    else:
        _refuse_unwritable(trace, f"the {trace.kind} program")
        defs = []
        for name, node in regions.items():
            sub = Trace(trace.gm.get_submodule(node.target), "inference")
            _refuse_unwritable(sub, f"region {name}")
            defs.append(_function_text(sub, name))
        entry = trace.kind_function_name
        defs.append(_function_text(trace, entry))
        inputs = trace.inputs
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
        '"""',
        "import operator",
        "",
        "import torch",
        "",
        "aten = torch.ops.aten",
        "",
        "",
        "def _tensor(shape, stride, offset, dtype, device):",
        "    t = torch.empty_strided(shape, stride, dtype=dtype, device=device)",
        "    if dtype.is_floating_point or dtype.is_complex:",
        "        return t.copy_(torch.randn(t.shape, dtype=dtype, device=device))",
        "    return t.zero_()  # integer / bool inputs: zeros keep index inputs in range",
        "",
        "",
        *[d.rstrip() + "\n\n" for d in defs],
        "def make_inputs():",
        "    torch.manual_seed(0)",
        "    return [" + ", ".join(_input_line(v) for v in vals) + "]",
        "",
        "",
        'if __name__ == "__main__":',
    ]
    if cuda:
        lines += ["    if not torch.cuda.is_available():",
                  "        raise SystemExit('this repro was recorded on CUDA: run it on a machine with a GPU')"]
    lines += [
        "    inputs = make_inputs()",
        f"    expected = {entry}(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])",
        f"    got = {run}(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])",
        "    torch.testing.assert_close(got, expected)",
        "    print('repro: matches eager')",
    ]
    return "\n".join(lines) + "\n"


def export_repro(trace_or_jfn, path, region: str | None = None, executor: str = "inductor",
                 kind: str = "forward") -> str:
    """Write the repro of a Trace (or of the last ``kind`` program of a jitted function) to ``path``;
    ``region``: one fused region (``"fusion0"``) instead of the whole program. Returns the path."""
    trace = trace_or_jfn
    nvfuser = None
    if not isinstance(trace, Trace):
        from .jit import last_backward_traces, last_traces

        traces = last_backward_traces(trace_or_jfn) if kind == "backward" else last_traces(trace_or_jfn)
        if not traces:
            raise TraceLabError(f"export_repro: no {kind} program has run yet: call the jitted function first")
        trace = traces[-1]
        if executor == "nvfuser" and region is not None:
            nvfuser = nvfuser_call_text(_compiled_of(trace_or_jfn, trace), region)
    text = repro_source(trace, region, executor, nvfuser)
    compile(text, str(path), "exec")  # a file that does not parse is never written
    Path(path).write_text(text)
    return str(path)


def _compiled_of(jfn, trace):
    from ..capture.session import program_parts

    return next((part.compiled for _, _, part in program_parts(jfn) if part.traces and part.traces[-1] is trace), None)


def nvfuser_call_text(compiled, region: str) -> str:
    """``run_nvfuser(*region_inputs)`` as text: the region's one nvFuser segment as its FusionDefinition (the
    code nvFuser prints for it) and the call trace_lab makes (inputs in the segment's order, contiguous where
    the definition says so, the visible outputs in the region's order). A region nvFuser split, or one that
    writes an input in place, is refused with the reason."""
    programs = getattr(compiled, "region_programs", None) or {}
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
    if seg.copies:
        raise TraceLabError(f"export_repro(executor='nvfuser'): {region} writes an input in place; not written")
    order = [program.placeholders.index(x) for x in seg.inputs]
    missing = [o for o in program.outputs if o not in seg.outputs]
    if missing:
        raise TraceLabError(f"export_repro(executor='nvfuser'): {region} returns values its segment does not compute")
    out_order = [seg.outputs.index(o) for o in program.outputs]
    fd_text = repr(runner.definition.fd)
    body = []
    for line in fd_text.splitlines():  # the printed function only (nvFuser may append a usage example)
        if body and line and not line[0].isspace():
            break
        if line.startswith("def ") or body:
            body.append(line)
    contiguous = bool(getattr(runner, "contiguous", False))
    return "\n".join([
        "from nvfuser_direct import DataType, FusionDefinition  # noqa: E402, F401 - the definition uses both",
        "",
        "",
        *body,
        "",
        "",
        "def run_nvfuser(*inputs):",
        f"    ins = [inputs[i]{'.contiguous()' if contiguous else ''} for i in {order!r}]  # the segment's input order",
        "    with FusionDefinition() as fd:",
        "        nvfuser_fusion(fd)",
        f"    outs = fd.execute(ins)[:{runner.definition.n_visible}]",
        f"    return tuple(outs[j] for j in {out_order!r})",
    ])
