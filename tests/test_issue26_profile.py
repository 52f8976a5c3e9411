"""Issue 26 item 6: ``profile_lines`` with a graph break.

The line ranges were named '<kind> L<index> <value> = <op>', without the program: two programs with an
identical line (here the same matmul and relu in both segments) had one name, and the profiler, summing
ranges by name, gave each the time of both. Now each line's range is its own: one range per line in the
profiled call, and a line's time is that range's duration. And the lines are only part of the call
(Dynamo's guards, AOTAutograd's wrappers, the autograd engine run between them): the profile says how
much of the call they are, with a note when that share is low. No assertion here is about how long
anything takes: only which ranges exist and how the figures relate to one another.
"""
from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

import trace_lab
from trace_lab.run.line_profile import LOW_COVERAGE


def f(x, w):
    y = torch.relu(x @ w)
    print("", end="")  # a graph break: the second program has the same lines as the first
    return torch.relu(y @ w).sum()


@pytest.fixture(scope="module")
def profiled():
    torch.manual_seed(0)
    x, w = torch.randn(32, 64), torch.randn(64, 64, requires_grad=True)
    jfn = trace_lab.jit(f, fusion="none", executor="eager")
    out = jfn(x, w)
    torch.testing.assert_close(out, f(x, w), rtol=1e-4, atol=1e-4)  # compiled = eager
    out.backward()
    assert len(jfn.programs) == 2
    prof = trace_lab.profile_lines(jfn, x, w)
    return jfn, prof


def test_identical_lines_of_two_programs_are_timed_apart(profiled, tmp_path):
    jfn, prof = profiled
    # the two forwards share lines: the same text, op and index
    fw0, fw1 = (p.forward.traces[-1] for p in jfn.programs)
    assert [str(n.target) for n in fw0.ops[:2]] == [str(n.target) for n in fw1.ops[:2]]
    for p in jfn.programs:
        for part in p.parts:
            timed = sorted(ln.index for ln in prof.lines if ln.program == p.index and ln.kind == part.kind)
            assert timed == list(range(len(part.traces[-1].ops)))  # every line of every program
    labels = [ln.label for ln in prof.lines]
    assert len(set(labels)) == len(labels)
    # each line ran once in the call: one range of its name on the host lane, and its time is that range's
    host = Counter(s[1] for s in prof.spans if s[0] == "host")
    assert all(host[label] == 1 for label in labels), {k: v for k, v in host.items() if v != 1}
    duration = {s[1]: s[3] for s in prof.spans if s[0] == "host"}
    for ln in prof.lines:
        assert ln.host_us == pytest.approx(duration[ln.label], rel=1e-3, abs=0.01)
    names = Counter(e.get("name") for e in json.load(open(prof.export_chrome_trace(tmp_path / "t.json")))["traceEvents"]
                    if e.get("ph") == "X")
    assert all(names[label] == 1 for label in labels)


def test_the_profile_says_how_much_of_the_call_the_lines_are(profiled):
    _, prof = profiled
    lines = sum(ln.host_us for ln in prof.lines)
    assert prof.call_us > 0 and prof.coverage == pytest.approx(lines / prof.call_us)
    assert 0 < prof.coverage <= 1  # the line ranges lie inside the call's range, one after another
    share = f"{100 * prof.coverage:.0f}%"
    if prof.coverage < LOW_COVERAGE:
        assert share in prof.note and str(prof).startswith(f"note: {prof.note}")
    else:
        assert not prof.note and f"the lines are {share} of the call" in str(prof)
    data = prof.to_dict()
    assert data["coverage"] == prof.coverage and data["call_us"] == prof.call_us and data["note"] == prof.note
