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
