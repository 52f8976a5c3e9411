"""Memory curve plots: the plotted data is the liveness curve, peaks are marked, labels are safe."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from trace_lab.report.memory_plot import _figure, curves_from_traces, memory_curve_png, memory_curve_svg

from _graph_programs import small_fused_program, small_program

KIB = 1024


def _comments(svg: str) -> list[str]:
    return re.findall(r"<!-- (.*?) -->", svg)


def test_curves_from_traces_match_hand_computed_liveness():
    # see tests/test_graph.py for the arithmetic: live after each line, entry first
    curves, peaks = curves_from_traces([small_program(), small_fused_program()])
    assert curves == {"as captured": [640, 768, 896, 1152, 896], "fusion": [640, 768, 896, 896]}
    assert peaks == {"as captured": 1408, "fusion": 1152}


def test_plot_draws_each_curve_in_one_unit():
    curves = {"none": [0, 1 * KIB, 3 * KIB, 2 * KIB], "memory": [0, 1 * KIB, 1 * KIB, 512]}
    fig = _figure(curves, None, "t", "line", (6, 3))
    ax = fig.axes[0]
    steps = [ln for ln in ax.lines if ln.get_label() in curves]
    assert [ln.get_label() for ln in steps] == ["none", "memory"]
    assert list(steps[0].get_ydata()) == [0, 1, 3, 2] and list(steps[1].get_ydata()) == [0, 1, 1, 0.5]
    assert ax.get_ylabel() == "live memory (KiB)"
    peaks = [ln for ln in ax.lines if ln.get_marker() == "v"]  # one marker per curve, at its maximum
    assert [(list(p.get_xdata()), list(p.get_ydata())) for p in peaks] == [([2], [3.0]), ([1], [1.0])]


def test_svg_marks_given_peaks_and_is_well_formed():
    svg = memory_curve_svg({"before": [0, 2 << 20, 1 << 20], "after": [0, 1 << 20, 0]},
                           peaks={"before": 3 << 20, "after": 1 << 20}, title="fusion")
    ET.fromstring(svg)  # parses as XML
    texts = _comments(svg)
    assert "peak 3.00 MiB" in texts and "peak 1.00 MiB" in texts
    assert "before" in texts and "after" in texts and "fusion" in texts
    assert svg.count('stroke-dasharray') >= 2  # the two peak levels


def test_labels_from_user_code_are_escaped():
    evil = '--><script>alert("x")</script> $\\frac{a}{b}$'
    svg = memory_curve_svg({evil: [0, 10, 5]}, title=evil)
    assert "<script" not in svg
    ET.fromstring(svg)  # a '-->' in a label did not break out of a comment


def test_png_and_bad_input():
    assert memory_curve_png({"a": [1, 2, 3]}).startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="at least one curve"):
        memory_curve_svg({})
    with pytest.raises(ValueError, match="empty"):
        memory_curve_svg({"a": []})
    with pytest.raises(ValueError, match="not plotted"):
        memory_curve_svg({"a": [1]}, peaks={"b": 2})
