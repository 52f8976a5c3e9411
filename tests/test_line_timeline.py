"""Measured time per line as views (issue 17 item 1): the Trace tab's time column and the Timeline tab.

Checked against the run's own Traces (every line of every final stage is timed, once) and
against the profiler's spans (the host lane holds one range per line, in order, not overlapping);
never against a time value.
"""
from __future__ import annotations

import json
import re

import pytest
import torch

import trace_lab
from trace_lab.report import html as H
from trace_lab.report.line_timeline import timeline_html
from trace_lab.report.report import Report


@pytest.fixture(scope="module")
def profiled():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    return trace_lab.inspect(model, torch.randn(8, 32), runs=1, profile=True)


def test_every_line_of_every_final_stage_is_timed_once(profiled):
    expected = {(kind, i) for kind in ("forward", "backward") for i in range(len(profiled.traces(kind)[-1].ops))}
    got = [(ln["kind"], ln["index"]) for ln in profiled.line_times["lines"]]
    assert sorted(got) == sorted(expected)
    assert all(ln["host_us"] > 0 for ln in profiled.line_times["lines"])


def test_host_lane_is_one_range_per_line_in_order(profiled):
    host = [s for s in profiled.line_times["spans"] if s[0] == "host"]
    labels = {ln["label"] for ln in profiled.line_times["lines"]}
    assert len(host) == len(profiled.line_times["lines"]) and {s[1] for s in host} == labels
    for (_, _, start, dur), (_, _, nxt, _) in zip(host, host[1:]):
        assert start + dur <= nxt + 1e-3  # one line after the other, as the program runs them


def test_trace_tab_shows_a_time_on_each_timed_line_and_the_timeline_draws_the_lanes(profiled):
    traces = H.traces_html(profiled)
    n_lines = len(profiled.line_times["lines"])
    assert traces.count('class="tl-time"') == n_lines
    tab = timeline_html(profiled)
    host = [s for s in profiled.line_times["spans"] if s[0] == "host"]
    assert len(re.findall(r'<rect x="[\d.]+" y="10" width="[\d.]+" height="20" fill="#4c78a8"', tab)) == len(host)
    assert "slowest lines" in tab and "per source line" in tab
    again = Report.from_dict(json.loads(json.dumps(profiled.to_dict())))
    assert timeline_html(again) == tab and H.traces_html(again).count('class="tl-time"') == n_lines


def test_an_unprofiled_run_says_how_to_time_it():
    report = trace_lab.inspect(lambda x: x.relu() * 2, torch.randn(4, 4), runs=0)
    assert report.line_times is None
    assert "--profile" in timeline_html(report) and 'class="tl-time"' not in H.traces_html(report)


def test_profile_calls_times_each_line_as_its_median_over_the_calls(profiled):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    report = trace_lab.inspect(model, torch.randn(8, 32), runs=0, profile=True, profile_calls=3)
    assert report.comparison["ok"]  # the compiled run still matches eager
    assert report.line_times["calls"] == 3 and profiled.line_times["calls"] == 1
    expected = {(kind, i) for kind in ("forward", "backward") for i in range(len(report.traces(kind)[-1].ops))}
    assert sorted((ln["kind"], ln["index"]) for ln in report.line_times["lines"]) == sorted(expected)
    assert "Every line of 3 more calls" in timeline_html(report)
    assert "Every line of one more call" in timeline_html(profiled)


def test_profile_calls_without_profile_times_nothing_and_says_so():
    report = trace_lab.inspect(lambda x: x.relu() * 2, torch.randn(4, 4), runs=0, profile_calls=2)
    assert report.line_times is None
    assert any("profile_calls=2 without profile" in w for w in report.warnings), report.warnings


@pytest.mark.parametrize("bad", [0, -1, 2.5, "3"])
def test_profile_calls_must_be_a_whole_number_of_calls(bad):
    from trace_lab.options import OptionError

    with pytest.raises(OptionError, match="whole number of calls, 1 or more"):
        trace_lab.inspect(lambda x: x.relu(), torch.randn(4, 4), runs=0, profile=True, profile_calls=bad)
