"""Every fusion strategy under the eager executor on the small workloads: outputs and
gradients equal the unfused program's, and the predicted peak equals the measured one.

Gradients: a training workload's backward program returns the gradients, so comparing
the backward part's outputs compares them. Memory tolerance (``fusion_support.SCALAR_SLACK``): measured may exceed
predicted by at most 64 bytes. The CPU measurement counts every
allocation of the CPU allocator; a few ops allocate 0-dim scratch tensors inside
themselves (a Python scalar wrapped for a tensor op), which no model of the program's
values sees: 4-16 bytes here. Anything larger is a real gap in the model and fails.
"""
from __future__ import annotations

import pytest

from fusion_support import STRATEGIES, assert_peak_matches, captured, check_part
from trace_lab.executors.eager import EagerExecutor

SMALL = ("memory_peak", "llama2", "llama2_ckpt", "transformer_encoder", "adam_step")


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", SMALL)
def test_eager_executor_matches_unfused_program(name, strategy):
    executor = EagerExecutor()
    for part in captured(name):
        r = check_part(part, strategy, executor)
        assert_peak_matches(r)
        regions = [n for n in r["trace"].ops if n.op == "call_module"]
        if strategy == "none":
            assert not regions
