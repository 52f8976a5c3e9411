"""The nvFuser executor on the CPU, through the ``nvfuser_direct`` stand-in (:mod:`tests.nvfuser_mock`).

For checking the executor's own planning without a GPU: how regions split into segments, which run another
region's code (covers), which inputs are handed over (donation), which outputs are written over a dying input
(in-place) and what the generated programs do with all that, against eager PyTorch and the liveness model.
The stand-in evaluates each definition with torch, so the workspace it measures is its own, not nvFuser's; the
GPU tests (tests/test_nvfuser_gpu.py, the GPU check) run the real thing.

``cpu_nvfuser(monkeypatch)`` lets the executor take CPU tensors (``nvfuser_ops.HOST_DEVICE``), gives it the
stand-in, compiles outside the CUDA check, skips the warm-up (a CUDA synchronize) and rounds as the CPU does.
"""
from __future__ import annotations

from tests import nvfuser_mock


def nvfuser_device() -> str:
    """For the benchmarks' probes: ``"cuda"`` where there is a GPU (real nvFuser), else ``"cpu"`` with the stand-in
    installed for the rest of the process (a dry run: the same segments and definitions, no kernels)."""
    import pytest
    import torch

    if torch.cuda.is_available():
        return "cuda"
    cpu_nvfuser(pytest.MonkeyPatch())
    return "cpu"


def cpu_nvfuser(monkeypatch) -> None:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    import trace_lab.executors.nvfuser as nv
    import trace_lab.executors.nvfuser_ops as ops

    def compile_on_cpu(self, trace):
        with unset_fake_temporarily():
            return self._compile(trace)

    monkeypatch.setattr(nv, "require_nvfuser", lambda: nvfuser_mock.module)
    monkeypatch.setattr(nv.NvFuserExecutor, "compile", compile_on_cpu)
    monkeypatch.setattr(nv.NvFuserExecutor, "_warm_up", staticmethod(lambda fd, seg, strides, lift=(0, ()): None))
    monkeypatch.setattr(nv, "CUDA_ROUNDING", 1)
    monkeypatch.setattr(ops, "HOST_DEVICE", "none")
