"""Measured time per trace line (issue 17 item 1, CPU): every line of the programs a call runs gets its
host time from a profiler range around exactly that line; the sums per source line add up; the Chrome
trace carries the line names; the fast program is back afterwards, and results still match eager."""
from __future__ import annotations

import json

import pytest
import torch

import trace_lab
from examples import workloads


@pytest.fixture(scope="module")
def profiled():
    fn, args = workloads.get("llama2").make("cpu", "small")
    jfn = trace_lab.jit(fn, fusion="dataflow", executor="eager")
    jfn(*args).sum().backward()
    runs = [part.compiled.run for p in jfn.programs for part in p.parts]
    return jfn, args, runs, trace_lab.profile_lines(jfn, *args)


def test_every_line_of_forward_and_backward_is_timed(profiled):
    jfn, _, _, prof = profiled
    fw, bw = trace_lab.last_traces(jfn)[-1], trace_lab.last_backward_traces(jfn)[-1]
    for trace in (fw, bw):
        timed = sorted(ln.index for ln in prof.lines if ln.kind == trace.kind)
        assert timed == list(range(len(trace.ops)))
    assert all(ln.host_us > 0 and ln.device_us == 0 for ln in prof.lines)  # CPU: no device lane
    matmuls = [ln for ln in prof.lines if "aten.mm" in ln.label]
    assert matmuls and all(ln.source and "llama.py" in ln.source for ln in matmuls)


def test_per_source_sums_add_up_and_the_text_reads(profiled):
    _, _, _, prof = profiled
    assert sum(h for _, h, _ in prof.by_source()) == pytest.approx(sum(ln.host_us for ln in prof.lines))
    text = str(prof)
    assert "time per trace line (cpu" in text and "per source line:" in text


def test_chrome_trace_names_the_lines(profiled, tmp_path):
    _, _, _, prof = profiled
    path = prof.export_chrome_trace(tmp_path / "trace.json")
    names = {e.get("name") for e in json.load(open(path))["traceEvents"]}
    assert {ln.label for ln in prof.lines} <= names


def test_the_fast_program_is_back_and_still_matches_eager(profiled):
    jfn, args, runs, _ = profiled
    assert [part.compiled.run for p in jfn.programs for part in p.parts] == runs
    fn, _ = workloads.get("llama2").make("cpu", "small")
    torch.testing.assert_close(jfn(*args), fn(*args))


def test_a_function_that_runs_no_program_says_so():
    jfn = trace_lab.jit(lambda x: x)
    with pytest.raises(trace_lab.TraceLabError):
        trace_lab.profile_lines(jfn, torch.randn(2))
