"""Measured time per line as views (issue 17 item 1): the Trace tab's time column and the Timeline tab.

Checked against the run's own Traces (every line of every final stage is timed, once) and
against the profiler's spans (the host lane holds one range per line, in order, not overlapping);
never against a time value.
"""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

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
    # the slowest lines table gives each line's fastest-slowest over the calls beside its median
    for ln in report.line_times["lines"]:
        assert ln["host_range"][0] <= ln["host_us"] <= ln["host_range"][1], ln
    html = timeline_html(report)
    slowest = max(report.line_times["lines"], key=lambda ln: ln["host_us"])
    lo, hi = slowest["host_range"]
    assert "<th>host range</th>" in html and f"{lo:,.1f}&ndash;{hi:,.1f}" in html
    assert "host range" not in timeline_html(profiled)  # one call: no range


def test_profile_calls_without_profile_times_nothing_and_says_so():
    report = trace_lab.inspect(lambda x: x.relu() * 2, torch.randn(4, 4), runs=0, profile_calls=2)
    assert report.line_times is None
    assert any("profile_calls=2 without profile" in w for w in report.warnings), report.warnings


@pytest.mark.parametrize("bad", [0, -1, 2.5, "3"])
def test_profile_calls_must_be_a_whole_number_of_calls(bad):
    from trace_lab.options import OptionError

    with pytest.raises(OptionError, match="whole number of calls, 1 or more"):
        trace_lab.inspect(lambda x: x.relu(), torch.randn(4, 4), runs=0, profile=True, profile_calls=bad)


def _gpu_profile_data():
    """A GPU profile as the views read it, made up so that the three ways of ranking lines disagree: two host-bound
    lines whose kernels take the same (B listed first), one device-bound line that launches fast."""
    def line(index, host, dev, source):
        return {"program": 0, "kind": "forward", "index": index, "label": f"forward #0 L{index} t{index} = aten.x",
                "host_us": host, "device_us": dev, "source": source}
    return {"device": "cuda", "calls": 1, "spans": [], "spans_cut": 0, "note": "", "call_us": 3000.0,
            "coverage": 0.7, "lines": [line(1, 31.0, 1.3, "b.py:1"), line(0, 98.0, 1.3, "a.py:1"),
                                       line(2, 5.0, 2000.0, "c.py:1")]}


def test_on_a_gpu_the_slowest_lines_are_ranked_by_the_longer_of_host_and_device():
    tab = timeline_html(SimpleNamespace(line_times=_gpu_profile_data()))
    slowest = tab.split("<h5>slowest lines</h5>")[1].split("<h5>per source line</h5>")[0]
    order = re.findall(r"L(\d) t\d = aten", slowest)
    assert order == ["2", "0", "1"], order  # by device alone: 2, 1, 0; by host alone: 0, 1, 2
    sources = re.findall(r"<code>(\w\.py:1)</code>", tab.split("<h5>per source line</h5>")[1])
    assert sources == ["c.py:1", "a.py:1", "b.py:1"], sources
    assert "longer of its host and device times" in tab


def test_the_profile_text_ranks_lines_and_sources_the_same_way():
    from trace_lab.run.line_profile import LineProfile, LineTime

    data = _gpu_profile_data()
    prof = LineProfile(lines=[LineTime(**{k: ln[k] for k in ("program", "kind", "index", "label", "host_us",
                                                             "device_us", "source")}) for ln in data["lines"]],
                       device="cuda", call_us=3000.0, coverage=0.7)
    text = str(prof)
    assert [int(m) for m in re.findall(r"L(\d) t\d = aten", text)] == [2, 0, 1]
    assert [src for src, _, _ in prof.by_source()] == ["c.py:1", "a.py:1", "b.py:1"]


def test_on_a_gpu_the_regions_table_says_which_region_is_host_bound():
    """Issue 27 item 1: which region is host-bound. Made-up figures around the 0.8 rule: fusion0 launches in 50 us
    kernels of 10 us (host-bound), fusion1 5 us against 400 us (device-bound), fusion2 30 us against 35 us (30 >=
    0.8 x 35: host-bound); an op line is not a region."""
    from trace_lab.runtime.measure import HOST_BOUND_RATIO

    assert HOST_BOUND_RATIO == 0.8  # the figures above sit on either side of it
    data = _gpu_profile_data()
    data["lines"] = [dict(ln, region=False) for ln in data["lines"]] + [
        {"program": 0, "kind": "backward", "index": 10 + i, "label": f"backward #0 L{10 + i} fusion{i} = fusion{i}",
         "host_us": h, "device_us": d, "source": "r.py:1", "region": True}
        for i, (h, d) in enumerate([(50.0, 10.0), (5.0, 400.0), (30.0, 35.0)])]
    tab = timeline_html(SimpleNamespace(line_times=data))
    table = tab.split("<h5>fused regions</h5>")[1].split("<h5>per source line</h5>")[0]
    rows = re.findall(r"<code>backward #0 L\d+ (fusion\d) = fusion\d</code></td><td class='tl-num'>[\d.,]+</td>"
                      r"<td class='tl-num'>[\d.,]+</td><td>(\w+-bound)</td>", table)
    assert rows == [("fusion1", "device-bound"), ("fusion0", "host-bound"), ("fusion2", "host-bound")]
    assert "2 of 3 fused region calls host-bound" in table
    assert "aten.x" not in table  # op lines stay out


def test_a_profiled_run_marks_its_region_lines_and_lists_them(tmp_path):
    from examples import workloads

    fn, args = workloads.get("llama2").make("cpu", "small")
    report = trace_lab.inspect(fn, *args, fusion="dataflow", executor="eager", runs=0, profile=True)
    assert report.comparison["ok"]
    regions = {(kind, i) for kind in ("forward", "backward") for i, n in enumerate(report.traces(kind)[-1].ops)
               if n.op == "call_module"}
    assert regions  # dataflow fused something
    marked = {(ln["kind"], ln["index"]) for ln in report.line_times["lines"] if ln["region"]}
    assert marked == regions
    tab = timeline_html(report)
    assert f"<p>{len(regions)} fused region calls, longest first.</p>" in tab  # CPU: host times only, no verdict
    assert "-bound</td>" not in tab
    again = Report.from_dict(json.loads(json.dumps(report.to_dict())))
    assert timeline_html(again) == tab
    old = dict(report.line_times,
               lines=[{k: v for k, v in ln.items() if k != "region"} for ln in report.line_times["lines"]])
    assert "fused regions" not in timeline_html(SimpleNamespace(line_times=old))  # a report saved before: no table

