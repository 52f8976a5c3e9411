"""A fused region handed another dtype than it was compiled for runs op by op (runtime/dtype_guard.py).

The case the OpInfo corpus found: on CPU, ``_native_batch_norm_legit_functional`` records float32
running statistics for a bfloat16 input but returns bfloat16 ones; the fused ``_to_copy`` regions
that follow were compiled for float32 and wrote garbage into the module's running statistics.
Checked against eager PyTorch.
"""
from __future__ import annotations

import pytest
import torch

import trace_lab


def _batch_norm(x, w, b, running_mean, running_var):
    return torch.ops.aten._native_batch_norm_legit(x, w, b, running_mean, running_var, True, 0.5, 1e-5)


@pytest.mark.parametrize("fusion", ["dataflow", "horizontal", "memory"])
def test_running_statistics_match_eager_under_fusion(fusion):
    torch.manual_seed(0)
    x = torch.randn(3, 5, 4, dtype=torch.bfloat16)
    w, b = torch.randn(5, dtype=torch.bfloat16), torch.randn(5, dtype=torch.bfloat16)
    mean, var = torch.randn(5, dtype=torch.bfloat16), torch.rand(5, dtype=torch.bfloat16)
    eager_mean, eager_var = mean.clone(), var.clone()
    expected = _batch_norm(x, w, b, eager_mean, eager_var)
    jfn = trace_lab.jit(_batch_norm, fusion=fusion, executor="inductor")
    got_mean, got_var = mean.clone(), var.clone()
    with pytest.warns(UserWarning, match=r"compiled for input 0 as float32\[5\] .*, but the program hands it bfloat16\[5\]"):
        got = jfn(x, w, b, got_mean, got_var)
    torch.testing.assert_close(got_mean, eager_mean)
    torch.testing.assert_close(got_var, eager_var)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_an_input_with_other_strides_than_recorded_runs_op_by_op():
    """On torch 2.11 fft.irfft's CPU kernel returns other strides than its meta records, and Inductor's code for
    the region after it asserted on the recorded ones (corpus, 2026-11-24; torch 2.13's meta agrees). The
    guard is given such a region directly: recorded strides (1, 7), real ones (7, 1)."""
    import torch.fx as fx

    from trace_lab.runtime.dtype_guard import dtype_guarded

    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty_strided((6, 7), (1, 6))
    node = g.call_module("fusion0", (x,))
    calls = []

    def compiled(t):  # stands for code compiled for the recorded strides: must not see other ones
        calls.append("compiled")
        raise AssertionError("expected stride 1==7")

    def eager():
        calls.append("eager built")
        return lambda t: (t.relu() * 2,)

    region = dtype_guarded(compiled, None, node, eager)
    real = torch.randn(6, 7)  # strides (7, 1)
    with pytest.warns(UserWarning, match=r"strides \(1, 6\).*strides \(7, 1\)"):
        (out,) = region(real)
    torch.testing.assert_close(out, real.relu() * 2)
    (again,) = region(real)  # decided once: no second check, no second warning
    assert calls == ["eager built"]
    torch.testing.assert_close(again, out)


def _flat_double(x):
    return x.view(-1) * 2


def test_the_op_by_op_fallback_reshapes_where_a_view_is_refused():
    """The fallback exists for inputs laid out otherwise than recorded, which a strict ``view`` may refuse (found on
    the H100: a region after an nvFuser segment under the memory strategy): it runs views as reshapes."""
    from trace_lab.runtime.codegen import generate_region
    from trace_lab.runtime.dtype_guard import dtype_guarded

    x = torch.randn(4, 6)
    jfn = trace_lab.jit(_flat_double, fusion="dataflow", executor="eager")
    jfn(x)
    trace = trace_lab.last_traces(jfn)[-1]
    node = next(n for n in trace.ops if n.op == "call_module")

    def compiled(*args):
        raise AssertionError("the region compiled for the recorded layout must not see another one")

    region = dtype_guarded(compiled, trace, node, lambda: generate_region(trace, node))
    strided = torch.randn(6, 4).t()  # the recorded shape, a layout view() refuses
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        strided.view(-1)
    with pytest.warns(UserWarning, match="runs op by op"):
        got = region(strided)
    torch.testing.assert_close(got if isinstance(got, torch.Tensor) else got[0], _flat_double(strided.contiguous()))
