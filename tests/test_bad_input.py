"""Bad input: clear messages or correct recordings, never a crash or a wrong trace."""
import pytest
import torch

import trace_lab
from trace_lab.errors import TraceLabError


def test_user_exception_propagates_unchanged_and_jfn_stays_usable():
    def fn(x, fail):
        y = x * 2
        if fail:
            raise ValueError("bad value in user code")
        return y

    jfn = trace_lab.jit(fn, executor="eager")
    with pytest.raises(ValueError, match="bad value in user code"):
        jfn(torch.ones(3), True)
    torch.testing.assert_close(jfn(torch.ones(3), False), torch.full((3,), 2.0))


def test_unsupported_python_construct_breaks_the_graph_and_stays_correct():
    def fn(x):
        n = float(x.sum().item())  # data-dependent Python value: a graph break
        return torch.sin(x) * n

    jfn = trace_lab.jit(fn, executor="eager")
    x = torch.randn(5)
    torch.testing.assert_close(jfn(x), fn(x))
    assert len(jfn.programs) >= 2


def test_non_tensor_outputs_are_returned_as_is():
    def fn(x):
        return x.sum(), "label", 3

    jfn = trace_lab.jit(fn, executor="eager")
    x = torch.arange(4.0)
    total, label, three = jfn(x)
    assert label == "label" and three == 3
    torch.testing.assert_close(total, x.sum())


def test_meta_tensors_record_a_program_without_running_kernels():
    jfn = trace_lab.jit(lambda x: torch.relu(x) @ x, executor="eager")
    out = jfn(torch.empty(128, 128, device="meta"))
    assert out.device.type == "meta" and out.shape == (128, 128)
    tr = trace_lab.last_traces(jfn)[-1]
    assert '"meta f32[128, 128]"' in str(tr)
    assert tr.liveness().peak_above_inputs_bytes == 2 * 128 * 128 * 4
    report = trace_lab.inspect(lambda x: torch.relu(x) @ x, torch.empty(8, 8, device="meta"), executor="eager",
                               runs=0)
    assert all(m["measured_peak_above_inputs_bytes"] is None for m in report.memory)
    assert "n/a" in str(report)


def test_invalid_options_name_the_choices():
    with pytest.raises(ValueError, match="none, dataflow, horizontal, memory"):
        trace_lab.jit(lambda x: x, fusion="bogus")
    with pytest.raises(ValueError, match="choose one of"):
        trace_lab.jit(lambda x: x, executor="tpu")
    with pytest.raises(TypeError, match="needs a function"):
        trace_lab.jit(42)


def test_traces_before_any_call_explain_what_to_do():
    jfn = trace_lab.jit(lambda x: x + 1)
    with pytest.raises(TraceLabError, match="call the jitted function first"):
        trace_lab.last_traces(jfn)
    assert trace_lab.last_backward_traces(jfn) == []


def test_function_with_no_tensor_ops_says_so():
    report = trace_lab.inspect(lambda: 3, runs=0)
    assert any("no program was compiled" in w for w in report.warnings)


def test_misspelt_option_is_an_error_that_names_the_right_one():
    with pytest.raises(TypeError, match="'cuda_graph' \\(did you mean 'cuda_graphs'\\?\\)"):
        trace_lab.jit(lambda x: x + 1, cuda_graph=True)
    trace_lab.jit(lambda x: x + 1, max_region_ops=4)  # a pass's option is accepted
