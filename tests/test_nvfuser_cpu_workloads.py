"""The nvFuser executor's planning on every fusion strategy, on the CPU, through the ``nvfuser_direct`` stand-in.

tests/nvfuser_cpu.py lets the executor run without a GPU: segments, covers, donation and in-place outputs, and the
programs generated around them. For the cheap workloads (memory_peak, Adam's step with its ``copy_`` updates, a
two-layer llama) and the strategies that make regions (:data:`CASES`): outputs, gradients and updated values against eager PyTorch,
the measured peak of every part equal to the predicted one, no segment the stand-in could not build (none may
fall back to torch), and no result written over an input that nvFuser would split into a copy kernel with a fresh
intermediate, unpriced (the stand-in's ``split_writes``: a broadcast op on its path). The real nvFuser runs the same matrix in tests/test_gpu_workloads.py on the GPU; a full sweep
through the stand-in (every workload) is `benchmarks/results/2026-11-28-cpu-34ed10b-nvfuser-stand-in-sweep.txt`.
"""
from __future__ import annotations

import warnings

import pytest

import trace_lab
from examples.workloads import WORKLOADS
from fusion_support import SCALAR_SLACK
from tests.nvfuser_cpu import cpu_nvfuser
from tests.nvfuser_support import record_definitions

# every strategy on memory_peak; Adam (copy_ updates) and llama2 where their regions differ most (the CI tier's time:
# llama2's dataflow and horizontal programs, 11 s each, and Adam's horizontal one are in the sweep file below)
CASES = [("memory_peak", s) for s in ("dataflow", "horizontal", "memory", "layers")] + \
    [("adam_step", s) for s in ("dataflow", "memory", "layers")] + [("llama2", s) for s in ("memory", "layers")]


@pytest.mark.parametrize("name,strategy", CASES, ids=[f"{w}-{s}" for w, s in CASES])
def test_workload_through_the_stand_in_matches_eager_and_measures_as_predicted(name, strategy, monkeypatch):
    cpu_nvfuser(monkeypatch)
    definitions = record_definitions(monkeypatch)
    fn, args = WORKLOADS[name].make("cpu", "small")
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # each warning of the run reaches its Report (run/python_warnings.py)
        report = trace_lab.inspect(fn, *args, fusion=strategy, executor="nvfuser", runs=1)
    # every region is handed the layouts it was compiled for (llama2 memory: a region's view of its input, passed
    # on through nvFuser, came out as a copy in nvFuser's layout, and the region reading it ran op by op)
    assert not [w for w in report.warnings if "runs op by op" in w], report.warnings
    assert report.ok, report.comparison
    assert sum(report.comparison["checked"].values()) > 1
    for m in report.memory:
        measured, predicted = m["measured_peak_above_inputs_bytes"], m["predicted_peak_above_inputs_bytes"]
        assert measured is not None and abs(measured - predicted) <= SCALAR_SLACK, m
    for kind in ("forward", "backward"):
        record = report.compilation(kind, 0)
        if record is not None:
            assert record.compiled.executor == "nvfuser"
            assert not [n for n in record.compiled.notes if "could not compile" in n], record.compiled.notes
    ran = [d.fd for d, _ in definitions if hasattr(d.fd, "split_writes")]
    assert ran and not [fd.split_writes for fd in ran if fd.split_writes], [fd.split_writes for fd in ran]
