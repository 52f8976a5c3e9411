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


def test_repeat_gives_each_line_the_median_of_its_calls(monkeypatch):
    """Three profiled calls with made-up times: each line's host and device time is the median of its three,
    the call time too, and the spans are those of the call whose lines' total is the median (call b)."""
    from trace_lab.run import line_profile as lp

    def call(name, host_a, host_b, device_b, call_us):
        lines = [lp.LineTime(0, "forward", 0, "forward #0 L0 t0 = aten.mm", "x.py:1", host_a, 0.0),
                 lp.LineTime(0, "forward", 1, "forward #0 L1 t1 = aten.relu", "x.py:2", host_b, device_b)]
        return lp.LineProfile(lines=lines, device="cuda", spans=[("host", name, 0.0, 1.0)], call_us=call_us)

    made = iter([call("a", 10.0, 1.0, 5.0, 100.0), call("b", 30.0, 2.0, 50.0, 300.0),
                 call("c", 20.0, 90.0, 7.0, 200.0)])
    monkeypatch.setattr(lp, "_profile_one_call", lambda *a, **k: next(made))
    jfn = type("J", (), {"programs": [object()]})()
    prof = lp.profile_lines(jfn, repeat=3)
    assert [(ln.host_us, ln.device_us) for ln in prof.lines] == [(20.0, 0.0), (2.0, 7.0)]
    # and the fastest and slowest of the three (the Timeline's range columns)
    assert [(ln.host_range, ln.device_range) for ln in prof.lines] == [((10.0, 30.0), (0.0, 0.0)),
                                                                      ((1.0, 90.0), (5.0, 50.0))]
    assert prof.call_us == 200.0 and prof.calls == 3
    # line totals per call: a 10 + 5 = 15, b 30 + 50 = 80, c 20 + 90 = 110: the median is b
    assert prof.spans == [("host", "b", 0.0, 1.0)]
    assert "median of 3 calls" in str(prof) and prof.to_dict()["calls"] == 3
    # the lines' share of the call is the medians': (20 + 2) us of 200 us
    assert prof.coverage == pytest.approx(0.11) and "11% of the profiled call (0.200 ms)" in prof.note


def test_repeat_profiles_real_calls_and_leaves_the_fast_program(profiled):
    jfn, args, runs, _ = profiled
    prof = trace_lab.profile_lines(jfn, *args, repeat=3)
    fw = trace_lab.last_traces(jfn)[-1]
    assert sorted(ln.index for ln in prof.lines if ln.kind == fw.kind) == list(range(len(fw.ops)))
    assert prof.calls == 3 and all(ln.host_us > 0 for ln in prof.lines)
    assert [part.compiled.run for p in jfn.programs for part in p.parts] == runs


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_repeat_must_be_a_whole_number_of_calls(profiled, bad):
    jfn, args, _, _ = profiled
    with pytest.raises(trace_lab.TraceLabError, match="repeat must be a whole number of calls"):
        trace_lab.profile_lines(jfn, *args, repeat=bad)


def test_the_profiler_starts_up_before_the_call_not_on_its_first_line(profiled, tmp_path):
    """The profiler's first range and first op cost it most (its start-up): a warm-up range runs under the
    profiler before the call, ends before the call's first line starts, and is neither a line nor a span."""
    from trace_lab.run.line_profile import CALL_LABEL, WARMUP_LABEL

    jfn, args, _, _ = profiled
    prof = trace_lab.profile_lines(jfn, *args)
    events = json.load(open(prof.export_chrome_trace(tmp_path / "trace.json")))["traceEvents"]
    ranges = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "user_annotation":
            ranges.setdefault(e["name"], float(e["ts"]) + (float(e["dur"]) if e["name"] == WARMUP_LABEL else 0.0))
    first_line = min(ranges[ln.label] for ln in prof.lines)
    assert ranges[WARMUP_LABEL] <= ranges[CALL_LABEL] <= first_line
    assert WARMUP_LABEL not in {ln.label for ln in prof.lines} | {sp[1] for sp in prof.spans}


def test_the_warm_up_runs_the_calls_own_ops_untimed_then_shifts_the_profilers_blocks(profiled, tmp_path, monkeypatch):
    """Each op's first run after the profiler starts is slow (cold): the warm-up runs the call once with the fast
    programs (the same ops, no line ranges) before the timed call. And the profiler's block start lands on the
    same line of every call: with repeat=N, call i records i x PAD_RANGES empty ranges first, to move it."""
    from trace_lab.run import line_profile as LP

    jfn, args, _, _ = profiled
    prof = trace_lab.profile_lines(jfn, *args)
    events = [e for e in json.load(open(prof.export_chrome_trace(tmp_path / "t.json")))["traceEvents"]
              if e.get("ph") == "X"]
    call_start = min(float(e["ts"]) for e in events if e["name"] == LP.CALL_LABEL)
    labels = {ln.label for ln in prof.lines}
    assert all(float(e["ts"]) >= call_start for e in events if e["name"] in labels)  # no line range untimed
    mm_before = sum(1 for e in events if e["name"] == "aten::mm" and float(e["ts"]) < call_start)
    mm_in_call = sum(1 for e in events if e["name"] == "aten::mm" and float(e["ts"]) >= call_start)
    assert mm_in_call > 0 and mm_before == mm_in_call  # the untimed call ran the same matmuls

    pads, real = [], LP._warm_up
    monkeypatch.setattr(LP, "_warm_up", lambda devices, call, pad=0: (pads.append(pad), real(devices, call, pad)))
    trace_lab.profile_lines(jfn, *args, repeat=3)
    assert pads == [0, LP.PAD_RANGES, 2 * LP.PAD_RANGES]


def test_profiling_lines_leaves_no_profiler_noise_on_stderr_and_keeps_other_messages(capfd):
    """Notebook 06 (torch 2.13): kineto writes 'USDT:... profiler_start' and '... profiler_stop' to fd 2 for every
    profiler session, which a notebook shows as a pink stderr box under the cell. ``profile_lines`` runs its
    session inside ``profiler_stderr()``: the noise is dropped, and a native message that is not the profiler's
    still reaches fd 2 (delayed, not lost)."""
    import os

    from trace_lab.runtime import measure

    jfn = trace_lab.jit(lambda x: torch.sin(x) * 2, fusion="none", executor="eager")
    x = torch.randn(8)
    jfn(x)
    capfd.readouterr()
    trace_lab.profile_lines(jfn, x)
    measure._flush_c_streams()
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "profiler_stop" not in err and "USDT" not in err, err
    with measure.profiler_stderr():
        os.write(2, b"USDT:2026-11-29 0:0 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"a program's own native message\n")
    assert capfd.readouterr().err == "a program's own native message\n"
