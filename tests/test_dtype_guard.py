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
    with pytest.warns(UserWarning, match="compiled for input 0 as torch.float32, but the program hands it torch.bfloat16"):
        got = jfn(x, w, b, got_mean, got_var)
    torch.testing.assert_close(got_mean, eager_mean)
    torch.testing.assert_close(got_var, eager_var)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
