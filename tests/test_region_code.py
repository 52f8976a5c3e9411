"""Generated code per region (issue 17 item 6): what Inductor wrote for a fused region, reachable from the
region's name; on CPU its C++ kernel and the wrapper that calls it."""
from __future__ import annotations

import pytest
import torch

import trace_lab


def _fn(x):
    return torch.relu(x) * 2 + 1


def test_inductor_region_code_is_its_output_code():
    jfn = trace_lab.jit(_fn, fusion="dataflow", executor="inductor")
    jfn(torch.randn(16, 16))
    trace = trace_lab.last_traces(jfn)[-1]
    (region,) = [str(n.target) for n in trace.ops if n.op == "call_module"]
    code = trace_lab.region_code(jfn, region)
    assert "def call(" in code  # Inductor's wrapper
    assert "cpp_fused" in code or "kernel" in code  # and the kernel it compiled for the CPU
    with pytest.raises(trace_lab.TraceLabError, match="no generated code for region 'fusion9'"):
        trace_lab.region_code(jfn, "fusion9")


def test_before_a_call_it_says_so():
    with pytest.raises(trace_lab.TraceLabError, match="call the jitted function first"):
        trace_lab.region_code(trace_lab.jit(_fn, executor="inductor"), "fusion0")


def test_nvfuser_region_code_is_its_program_with_a_legend_and_its_definitions(monkeypatch):
    """nvFuser (the CPU stand-in, tests/nvfuser_cpu.py), llama2 dataflow: each region's text is its generated
    program, what each name the program calls is, and its FusionDefinitions. A region that only lays values out
    (an attention head's transpose) has no definition: its program is what it runs, and the legend names the
    clone it copies in words."""
    import re

    from examples.workloads import WORKLOADS
    from tests.nvfuser_cpu import cpu_nvfuser

    cpu_nvfuser(monkeypatch)
    fn, args = WORKLOADS["llama2"].make("cpu", "small")
    jfn = trace_lab.jit(fn, fusion="dataflow", executor="nvfuser")
    jfn(*args)
    regions = [str(n.target) for n in trace_lab.last_traces(jfn)[-1].ops if n.op == "call_module"]
    texts = [trace_lab.region_code(jfn, r) for r in regions]
    # a region that runs another's code (cover_regions: the last norm runs a repeat's) says whose, then shows it
    covered = [(r, t) for r, t in zip(regions, texts) if " runs the compiled code of " in t.split("\n", 1)[0]]
    assert len(covered) == 1, [t.split("\n", 1)[0] for t in texts]
    (name, text), = covered
    assert re.match(rf"# {name} runs the compiled code of fusion\d+ \(cover_regions\), keeping its outputs [\d, ]+; "
                    r"outputs \d+ viewed back in this region's shape\n\n# the region's program", text), text
    texts = [t.split("\n\n", 1)[1] if (r, t) in covered else t for r, t in zip(regions, texts)]
    assert texts and all(t.startswith("# the region's program: torch steps and nvFuser segment calls\n") for t in texts)
    layout = [t for t in texts if "# nvFuser definition" not in t]
    fused = [t for t in texts if "# nvFuser definition 0\n" in t]
    assert layout and fused and len(layout) + len(fused) == len(texts)
    for t in fused:  # the segment call's name is explained as a runner of a definition
        (runner,) = set(re.findall(r"_r = (_g_s\d+)\(", t))
        assert re.search(rf"^#   {runner}: \w*SegmentRunner \(runs an nvFuser definition\)$", t, re.M), t
    copied = []
    for t in layout:
        for name in re.findall(r"^\s+clone\w* = (_g_f\d+)\(", t, re.M):
            copied.append(re.search(rf"^#   {name}: (\S+)$", t, re.M).group(1))
    assert "clone_in_16_byte_words" in copied and "aten.clone.default" in copied, copied  # q, v; and k's transpose
