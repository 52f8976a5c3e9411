"""The static report's CSS and scripts come from files under trace_lab/static/, and the Compare table's
option columns are named by the options schema (issue 29: one place for each)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import trace_lab
from trace_lab.options import SCHEMA
from trace_lab.report import assets_html, compare_html as C, table
from trace_lab.report import html as H
from trace_lab.report.packing import INFLATE_JS

STATIC = Path(trace_lab.__file__).resolve().parent / "static"


def test_static_files_load_once_and_are_injected_verbatim():
    for name in ("report.css", "trace_view.js", "plots.js"):
        assert (STATIC / name).is_file()
        text = assets_html.static_text(name)
        assert text == (STATIC / name).read_text(encoding="utf-8") and text.strip()
        assert assets_html.static_text(name) is text  # read once, cached
    assert H.css().startswith(assets_html.static_text("report.css"))
    assert ".tl-tabs>input.tl-t0:checked~section.tl-p0{display:block}" in H.css()  # the tabs' rules, per tab
    assert H.TRACE_JS == INFLATE_JS + assets_html.static_text("trace_view.js")
    assert H.PLOTS_JS == assets_html.static_text("plots.js")
    assert "window.__tlTraceDraw" in H.TRACE_JS and "tl-svgz" in H.PLOTS_JS


def _rows():
    base = {c: None for c in table.COLUMNS}
    return [dict(base, run="a", fusion="none", executor="eager", fusion_cache=True, sort_waits=True, kernels=3),
            dict(base, run="b", fusion="dataflow", executor="eager", fusion_cache=False, sort_waits=True, kernels=2)]


def test_option_columns_are_named_by_the_schema(monkeypatch):
    names = {o.name for o in SCHEMA}
    assert set(table.OPTION_COLUMNS) <= names and set(table.OPTION_SCHEMA) == set(table.OPTION_COLUMNS)
    assert C.column_title("fusion") == "fusion" and C.column_title("fusion_cache") == "fusion<br>cache"
    page = H.compare_html(_rows())
    assert '<th data-col="fusion_cache">fusion<br>cache</th>' in page
    assert "every run: executor=eager, sort waits on" in page  # a switch: its label, on/off; else name=value
    # renaming an option in the schema renames its column and its words
    opt = dataclasses.replace(table.OPTION_SCHEMA["fusion_cache"], label="kernel reuse")
    monkeypatch.setitem(table.OPTION_SCHEMA, "fusion_cache", opt)
    monkeypatch.setitem(table.OPTION_SCHEMA, "sort_waits",
                        dataclasses.replace(table.OPTION_SCHEMA["sort_waits"], label="wait order"))
    page = H.compare_html(_rows())
    assert '<th data-col="fusion_cache">kernel<br>reuse</th>' in page and "wait order on" in page


def test_part_data_puts_the_forms_of_one_op_side_by_side():
    """The packed table of lines is ordered from the printer's records (the value a line computes), not by
    re-parsing the text: every form of one op (each stage's line, its line inside a fused region) is adjacent."""
    import torch

    def fn(x, w):
        y = torch.relu(x @ w) * 2 + 1
        return torch.tanh(y).sum(dim=0) - 0.5

    x, w = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    rep = trace_lab.inspect(fn, x, w, executor="eager", fusion="horizontal", runs=0)
    regions = 0
    for part in rep.view.parts:
        name_of = {ln.text: ln.name for st in part.stages for ln in st.lines if ln.role in ("op", "region_op")}
        regions += sum(ln.role == "region_op" for st in part.stages for ln in st.lines)
        names = [name_of.get(text) for text in H.part_data(part.stages)["lines"]]
        for name in {n for n in names if n}:
            at = [i for i, n in enumerate(names) if n == name]
            assert at == list(range(at[0], at[0] + len(at))), (part.label, name)
    assert regions  # a fused region's op lines were among them
