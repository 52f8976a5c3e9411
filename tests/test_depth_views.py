"""The depth views (issue 17 items 2-4, issue 28 item 2 as views): Peak, Saved, Diff and Regions tabs, and why regions end on the trace.

The figures are checked against what the program itself says, computed here from its Traces
and graphs (not from the view code): the saved activations against the tensors the forward
returns for its backward, the fused ops against the regions' submodules, the boundaries against
the fusion pass's reasons; the notebook widget shows the same HTML as the static report, and a
report reloaded from JSON renders the same tabs.
"""
from __future__ import annotations

import html
import json
import re

import pytest
import torch

import trace_lab
from trace_lab.report import html as H
from trace_lab.report.depth_html import DEPTH_VIEWS, part_depth_html
from trace_lab.report.report import Report


class _Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)) * torch.sigmoid(self.up(x)))


@pytest.fixture(scope="module")
def report():
    torch.manual_seed(0)
    return trace_lab.inspect(_Mlp(), torch.randn(8, 16), fusion="dataflow", executor="inductor", runs=0)


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


def test_peak_tab_adds_up_to_the_measured_peak_and_names_what_the_forward_saves(report):
    forward, backward = report.traces("forward")[-1], report.traces("backward")[-1]
    n_saved = sum(1 for n in backward.inputs if not n.name.startswith("tangent"))
    returned = list(forward.output_node.args[0])
    saved = {forward.name(o) for o in returned[len(returned) - n_saved:]}
    for label, kind in (("forward #0", "forward"), ("backward #0", "backward")):
        d = report.view.part(label).depth["peak"]["data"]
        counted = sum(r["bytes"] for r in d["rows"]) + d["transient"] - d["inputs_freed"]
        assert counted == d["peak_above_inputs"] == report.measured_peak(kind)  # CPU: to the byte
        shown = _text(part_depth_html("Peak", report.view.part(label)))
        assert trace_lab.report.html._fmt_bytes(d["peak_above_inputs"]) in shown
        for r in d["rows"]:
            assert r["kind"] in shown and r["tensors"][0] in shown
    forward_rows = report.view.part("forward #0").depth["peak"]["data"]["rows"]
    named_saved = {n for r in forward_rows if r["kind"] == "saved for backward" for n in r["tensors"]}
    assert named_saved and named_saved <= saved | {forward.name(n) for n in forward.ops}


def test_saved_tab_lists_what_the_forward_returns_for_the_backward(report):
    forward, backward = report.traces("forward")[-1], report.traces("backward")[-1]
    n_saved = sum(1 for n in backward.inputs if not n.name.startswith("tangent"))
    returned = list(forward.output_node.args[0])
    saved = [forward.name(o) for o in returned[len(returned) - n_saved:]]
    part = report.view.part("forward #0")
    rows = part.depth["saved"]["rows"]
    assert sorted(r["name"] for r in rows) == sorted(saved)
    # activations: storages the forward made (not a parameter or the batch), each counted once
    inputs = {forward.name(n) for n in forward.inputs}
    activations = {r["name"] for r in rows if r["held_by"] == "activation"}
    assert activations and not activations & inputs
    shown = _text(part_depth_html("Saved", part))
    for name in saved:
        assert name in shown
    assert trace_lab.report.html._fmt_bytes(part.depth["saved"]["activation_bytes"]) in shown
    assert "saves nothing" not in shown and "only a forward" in _text(part_depth_html("Saved", report.view.part("backward #0")))


def test_diff_tab_names_every_op_the_fusion_put_in_a_region(report):
    last = report.traces("forward")[-1]
    inside = {m.name for n in last.ops if n.op == "call_module"
              for m in last.gm.get_submodule(n.target).graph.nodes if m.op == "call_function"
              and "getitem" not in m.name}
    part = report.view.part("forward #0")
    fused = {op for ops in part.depth["diff"]["data"]["fused"].values() for op in ops}
    assert inside and fused == inside
    shown = _text(part_depth_html("Diff", part))
    assert all(op in shown for op in inside)


def test_regions_tab_and_trace_lines_say_why_each_region_ends(report):
    last = report.traces("forward")[-1]
    ends = next(t.info["region_ends"] for t in reversed(report.traces("forward")) if t.info.get("region_ends"))
    regions = [str(n.target) for n in last.ops if n.op == "call_module"]
    assert regions and set(regions) <= set(ends)
    text = str(last)
    for region in regions:
        line = next(ln for ln in text.splitlines() if re.search(rf"= {region}\(", ln))
        if ends[region]:
            counted = re.search(r"# ends: ([^|]+?)\s*(?:\||$)", line).group(1)
            total = sum(int(m.group(1)) if m.group(1) else 1 for m in re.finditer(r"\w+(?: x(\d+))?", counted))
            assert total == len(ends[region]), (line, ends[region])
    shown = _text(part_depth_html("Regions", report.view.part("forward #0")))
    for region, rows in ends.items():
        assert region in shown
        for r in rows:
            assert r["reason"] in shown


def test_static_report_and_reloaded_report_show_the_same_tabs(report, tmp_path):
    page = H.report_html(report)
    for view in DEPTH_VIEWS:
        assert f">{view}</label>" in page
    again = Report.from_dict(json.loads(json.dumps(report.to_dict())))
    for view in DEPTH_VIEWS:
        for label in ("forward #0", "backward #0"):
            assert part_depth_html(view, again.view.part(label)) == part_depth_html(view, report.view.part(label))


def test_user_names_are_escaped_in_the_depth_views():
    from trace_lab.report.view_model import PartView

    evil = "<img src=x onerror=alert(1)>"
    part = PartView("forward #0", "forward", 0, 0, [], {}, {
        "saved": {"rows": [{"name": evil, "shape": [2], "dtype": "float32", "bytes": 8, "held_by": "activation",
                            "recomputable": False, "op": evil, "source": evil}], "activation_bytes": 8},
        "region_ends": {"stage": 1, "stage_name": evil, "ends": {evil: [{"node": evil, "name": evil, "op": evil,
                                                                          "side": "input", "kind": "executor",
                                                                          "reason": evil}]}},
        "diff": {"error": evil},
        "peak": {"data": {"peak_above_inputs": 8, "line": 0, "op": evil, "transient": 0, "inputs_freed": 0,
                          "rows": [{"kind": "temporary", "source": evil, "op": evil, "bytes": 8, "tensors": [evil]}],
                          "held": []}}})
    for view in DEPTH_VIEWS:
        out = part_depth_html(view, part)
        assert "<img" not in out and "&lt;img" in out


def test_widget_has_the_depth_tabs_of_the_selected_part(report):
    from trace_lab.notebook.runner import RunOptions
    from trace_lab.notebook.session import Session
    from trace_lab.notebook.widgets import LabView

    view = LabView(runner=None, options=RunOptions(), runs=Session())
    view.add_run("run 1", report)
    assert tuple(view.tabs.titles[-len(DEPTH_VIEWS) - 1:-1]) == DEPTH_VIEWS and view.tabs.titles[-1] == "Timeline"
    part = report.view.part("forward #0")
    for name, w in view.depth.items():
        # the Diff tab's picker draws the diff of the shown part (first -> last stage to start with)
        shown = view.diff_picker.out.value if name == "Diff" else w.value
        assert part_depth_html(name, part) in shown


def test_regions_tab_shows_a_regions_code_and_writes_its_repro(report, tmp_path):
    import subprocess
    import sys

    import ipywidgets as W

    from trace_lab.notebook.region_tools import RegionTools

    tools = RegionTools(W)
    part = report.view.part("forward #0")
    tools.show(report, part)
    last = report.traces("forward")[-1]
    assert list(tools.pick.options) == [str(n.target) for n in last.ops if n.op == "call_module"]
    code = tools.show_code()
    assert "def " in code or "kernel" in code  # Inductor's output code for the region
    shown = tools.export(str(tmp_path))
    (path,) = tmp_path.glob("repro_*.py")
    assert path.name in shown
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "repro: matches eager" in run.stdout, run.stdout + run.stderr
    again = Report.from_dict(json.loads(json.dumps(report.to_dict())))  # no live program: says so
    tools.show(again, again.view.part("forward #0"))
    assert "live program" in tools.show_code() and "live program" in tools.export(str(tmp_path))


def test_diff_picker_diffs_any_two_stages_of_one_part_across_runs(report):
    import ipywidgets as W

    from trace_lab.notebook.diff_picker import DiffPicker

    torch.manual_seed(0)
    other = trace_lab.inspect(_Mlp(), torch.randn(8, 16), fusion="memory", executor="inductor", runs=0)
    picker = DiffPicker(W)
    picker.show([("dataflow", report), ("memory", other)], "forward #0", report)
    n_stages = len(report.traces("forward")) + len(other.traces("forward"))
    assert len(picker.source.options) == n_stages
    # it starts on the shown run's first and last stage: the same diff the stored view draws
    assert picker.source.value == ("dataflow", 0)
    assert picker.target.value == ("dataflow", len(report.traces("forward")) - 1)
    assert part_depth_html("Diff", report.view.part("forward #0")) in picker.out.value
    picker.target.value = ("memory", len(other.traces("forward")) - 1)  # across runs: dataflow's start -> memory's end
    shown = _text(picker.out.value)
    assert "fusion (memory)" in shown or "memory" in shown
    assert other.traces("forward")[-1].stage in shown
    picker.show([("loaded", Report.from_dict(json.loads(json.dumps(report.to_dict()))))], "forward #0")
    assert picker.source.options == () and picker.out.value == ""  # no live Traces: the stored diff only


def test_graph_says_why_each_region_ends(report):
    """Open regions (clusters) carry it in their label, collapsed ones (nodes) in a row and the tooltip."""
    from trace_lab.ir.printer import region_end_kinds
    from trace_lab.report.graph import graph_data

    last = report.traces("forward")[-1]
    ends = {r: rows for r, rows in last.info["region_ends"].items() if rows}
    assert ends
    for collapse in (False, True):
        data = graph_data(last, collapse_regions=collapse)
        labels = [html.unescape(c["attrs"]["label"]) for c in data["clusters"]] if not collapse else \
            [html.unescape(n[1]) + html.unescape(n[2].get("tooltip", "")) for n in data["nodes"]]
        for region, rows in ends.items():
            said = f"ends: {region_end_kinds(rows)}"
            assert any(region in lab and said in lab for lab in labels), (collapse, region, said)
