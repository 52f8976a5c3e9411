"""Thunder-style trace text: type comments, del after last use, source lines, round trip."""
import re

import torch

import trace_lab
from examples.workloads import get, memory_peak_efficient_func


def _run(fn, *args):
    jfn = trace_lab.jit(fn, executor="eager")
    out = jfn(*args)
    return jfn, out


def test_text_has_types_dels_sources_and_one_peak():
    fn, (t0s, a) = get("memory_peak").make("cpu", "small")
    jfn, _ = _run(fn, t0s, a)
    trace = trace_lab.last_traces(jfn)[-1]
    text = str(trace)
    # the function takes one parameter per input, named after the user's arguments (t0s, a list: t0s_<i>)
    (params,) = re.findall(r"^def inference\((.*)\):$", text, re.M)
    params = params.split(", ")
    assert sorted(params) == sorted([f"t0s_{i}" for i in range(len(t0s))] + ["a"]), params
    assert params == [trace.name(n) for n in trace.inputs]
    assert re.search(r'# t0: "cpu f32\[256, 256\]"', text)
    assert text.count("<- peak") == 1
    assert "workloads.py" in text and "torch.matmul(t1, t1)" in text
    # every deleted name is never used again below its del
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"\s+del (.+)$", line)
        if not m:
            continue
        for name in m.group(1).split(", "):
            later = "\n".join(ln.split("#")[0] for ln in lines[i + 1:])
            assert not re.search(rf"\b{name}\b", later), f"{name} used after its del"


def test_peak_of_memory_peak_efficient_func_is_three_quarters_mib():
    fn, (t0s, a) = get("memory_peak").make("cpu", "small")
    jfn, _ = _run(fn, t0s, a)
    # relu out + matmul out + the running 'a' chain: three f32[256,256] = 3 * 0.25 MiB
    assert trace_lab.last_traces(jfn)[-1].liveness().peak_above_inputs_bytes == 3 * 256 * 256 * 4


def test_printed_program_round_trips():
    fn, (t0s, a) = get("memory_peak").make("cpu", "small")
    jfn, out = _run(fn, t0s, a)
    tr = trace_lab.last_traces(jfn)[-1]
    by_name = {f"t0s_{i}": t for i, t in enumerate(t0s)} | {"a": a}
    args = [by_name[tr.name(n)] for n in tr.inputs]
    (again,) = tr.python_callable()(*args)
    torch.testing.assert_close(again, memory_peak_efficient_func(t0s, a))


def test_backward_text_names_saved_values_after_forward():
    model, (x,) = get("llama2").make("cpu", "small")
    jfn = trace_lab.jit(model, executor="eager")
    jfn(x).sum().backward()
    fw, bw = trace_lab.last_traces(jfn)[-1], trace_lab.last_backward_traces(jfn)[-1]
    fw_names = {fw.name(n) for n in fw.graph.nodes if n in fw.names}
    bw_inputs = [bw.name(n) for n in bw.inputs]
    assert all(n in fw_names or n.startswith("tangent") for n in bw_inputs)
    assert "def backward(" in str(bw)
