"""Issue 18 items 4-8 on CPU: one meaning of peak, the memory plot's labels and hover, the Trace tab's
lines, the Compare table, and progress during a compile.

Each test reads what a user sees (the Summary's text, the Trace header, the Compare cells, the plot's
text boxes as matplotlib drew them, the progress line) and checks it against the data it shows."""
from __future__ import annotations

import html
import itertools
import re
import threading

import pytest
import torch

import trace_lab
from trace_lab.executors.eager import EagerExecutor
from trace_lab.executors.interface import EXECUTORS
from trace_lab.ir.printer import format_bytes
from trace_lab.notebook.progress import RunProgress
from trace_lab.notebook.runner import RunOptions, inspect_cell
from trace_lab.report.html import code_html, compare_html, memory_html, memory_plot_data, report_html, summary_html
from trace_lab.report.memory_plot import _figure, memory_curve_svg
from trace_lab.report.table import report_row, shown_columns

from test_magic import ip  # noqa: F401 - the IPython shell with trace_lab loaded (a fixture)


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def _section(page: str, i: int) -> str:
    return re.search(rf'<section class="tl-p{i}">(.*?)</section>', page, re.S).group(1)


def mlp(x, w1, w2):
    h = torch.relu(x @ w1)
    return torch.tanh(h @ w2).sum()


def mlp_checkpointed(x, w1, w2):
    def block(x):
        h = torch.relu(x @ w1)
        h = torch.sin(h) * torch.cos(h) + h
        return torch.tanh(h @ w2)

    return torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False).sum()


def mlp_plain(x, w1, w2):
    h = torch.relu(x @ w1)
    h = torch.sin(h) * torch.cos(h) + h
    return torch.tanh(h @ w2).sum()


def _args():
    torch.manual_seed(0)
    return (torch.randn(64, 128, requires_grad=True), torch.randn(128, 256, requires_grad=True),
            torch.randn(256, 64, requires_grad=True))


@pytest.fixture(scope="module")
def report():
    return trace_lab.inspect(mlp, *_args(), executor="eager", fusion="horizontal", runs=1, name="mlp")


# -- item 4: one meaning of peak ----------------------------------------------------------------
def test_peak_is_the_same_number_in_summary_compare_trace_and_memory(report):
    row = report_row(report)
    page = report_html(report)
    summary, trace_tab, memory_tab, compare = (_text(_section(page, i)) for i in (0, 1, 3, 4))
    for kind in ("forward", "backward"):
        stage = report.view.part(f"{kind} #0").stages[-1]
        peak = stage.peak_above_inputs_bytes
        shown = format_bytes(peak)
        assert peak == row[f"{kind}_peak_predicted"] > 0
        assert peak != stage.peak_bytes  # inputs are counted in the high-water mark: the two must not be mixed
        # Summary: "peak forward #0  predicted X, measured Y above inputs"
        assert f"predicted {shown}, measured " in dict(report.summary_rows())[f"peak {kind} #0"]
        # the trace's header and its peak marker
        header = stage.lines[1].text
        assert f"peak {shown} above inputs" in header and f"high-water {format_bytes(stage.peak_bytes)} incl. inputs" in header
        (marked,) = [ln for ln in stage.lines if ln.peak]
        assert marked.text.endswith(f"<- peak {shown} above inputs")
        # the Trace tab's stage heading, the Memory tab's label and table, the Compare cell
        assert f"peak {shown} above inputs (high-water {format_bytes(stage.peak_bytes)} incl. inputs)" in trace_tab
        assert memory_plot_data([("mlp", report)], f"{kind} #0")["peaks"]["mlp"] == peak
        assert shown in compare
    memory_svg = memory_html([("mlp", report)], "forward #0")
    fw = format_bytes(row["forward_peak_predicted"])
    assert f"<!-- peak {fw} -->" in memory_svg  # the label drawn on the plot
    measured = row["forward_peak_measured"]
    assert measured is not None and f"measured {format_bytes(measured)} above inputs" in summary
    assert "peaks are above the program's inputs" in compare and "peak" in memory_tab


def test_compare_shows_forward_and_backward_peaks_apart():
    """Notebook 04's lesson: checkpointing lowers the forward's peak; the backward's may rise. One max column
    showed the checkpointed run as the worse one."""
    plain = trace_lab.inspect(mlp_plain, *_args(), executor="eager", runs=0, name="plain")
    ckpt = trace_lab.inspect(mlp_checkpointed, *_args(), executor="eager", runs=0, name="checkpointed")
    rows = [report_row(plain), report_row(ckpt)]
    assert rows[1]["forward_peak_predicted"] < rows[0]["forward_peak_predicted"]
    table = compare_html(rows)
    heads = re.findall(r'<th data-col="(\w+)">', table)
    assert "forward_peak_predicted" in heads and "backward_peak_predicted" in heads and "peak_predicted" not in heads
    forward_cells = re.findall(r'<td data-col="forward_peak_predicted"([^>]*)>([^<]*)</td>', table)
    assert [html.unescape(v) for _, v in forward_cells] == [format_bytes(r["forward_peak_predicted"]) for r in rows]
    assert "tl-best" in forward_cells[1][0] and "tl-best" not in forward_cells[0][0]  # the checkpointed forward


# -- item 5: the memory plot ---------------------------------------------------------------------
def _boxes(fig):
    renderer = fig.canvas.get_renderer()
    from matplotlib.text import Text

    seen, out = set(), []
    for label, _, _, t in fig.tl_peaks:  # curves whose peaks coincide share one label
        if t is not None and id(t) not in seen:
            seen.add(id(t))
            out.append((label, Text.get_window_extent(t, renderer)))
    return out


@pytest.mark.parametrize("case", ["identical", "near", "at the edges"])
def test_peak_labels_never_overlap_and_stay_inside_the_frame(case):
    mib = 1 << 20
    base = [0, mib, 3 * mib, 2 * mib, 3 * mib]
    if case == "identical":  # notebook 01: reruns with the same program
        curves = {f"run {k}": list(base) for k in range(4)}
        peaks = {k: 3 * mib + mib // 4 for k in curves}
    elif case == "near":  # peaks a few KiB apart at the same line: "peak 3.25 Mi3.25 MiB"
        curves = {f"run {k}": base[:-1] + [3 * mib + k * 4096] for k in range(6)}
        peaks = {k: max(v) + 4096 for k, v in curves.items()}
    else:  # peaks at the first and the last line, at the top of the data
        curves = {"first": [5 * mib, mib, mib, mib], "last": [0, mib, mib, 5 * mib], "mid": [0, 5 * mib, 0, 0]}
        peaks = {k: 5 * mib for k in curves}
    peak_at = {k: max(range(len(v)), key=v.__getitem__) for k, v in curves.items()}
    fig = _figure(curves, peaks, "t", "op", (7.5, 3.6), peak_at=peak_at)
    frame = fig.axes[0].get_window_extent(fig.canvas.get_renderer())
    boxes = _boxes(fig)
    assert boxes, "no peak label was drawn"
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        assert not box_a.overlaps(box_b), f"labels of {a} and {b} overlap: {box_a} {box_b}"
    for label, box in boxes:
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, label
    # every curve's peak is named: on the plot, or (no room left) in the legend
    legend = " ".join(t.get_text() for t in fig.legends[0].get_texts())
    for label, _, level, text in fig.tl_peaks:
        assert text is not None or f"{label} (peak {format_bytes(level)})" in legend
    # identical curves stay visible: each has its own line style
    styles = [(ln.get_linestyle(), ln.get_linewidth()) for ln in fig.axes[0].lines if ln.get_label() in curves]
    assert len(set(styles)) == min(len(curves), 5)


def test_hover_names_the_op_and_source_line(report):
    svg = memory_html([("mlp", report)], "forward #0")
    titles = [html.unescape(t) for t in re.findall(r"<title>(.*?)</title>", svg, re.S)]
    stage = report.view.part("forward #0").stages[-1]
    assert len(titles) == len(stage.curve())  # one target per step of the curve
    peak_line = next(ln for ln in stage.op_lines if ln.peak)
    peak_title = next(t for t in titles if t.endswith("<- peak"))
    assert peak_line.text.split("  #")[0].strip() in peak_title and peak_line.source in peak_title
    assert "test_views_peak_plot_progress.py:" in peak_title  # the user's source line


def test_hover_text_is_escaped():
    evil = '</title><script>alert(1)</script>'
    svg = memory_curve_svg({evil: [0, 5, 2]}, hover={evil: [evil, evil, evil]})
    assert "<script" not in svg and svg.count("<title>") == 3


# -- item 6: trace lines -----------------------------------------------------------------------
def test_trace_tab_jumps_to_the_peak_and_folds_parameter_comments():
    layers = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(4)])
    rep = trace_lab.inspect(layers, torch.randn(2, 8), executor="eager", runs=0, name="seq")
    stage = rep.view.part("forward #0").stages[-1]
    inputs = [ln for ln in stage.lines if ln.role == "input"]
    assert len(inputs) == 9
    view = code_html(stage, anchor="pk1")
    # a link to the peak line, whose code carries the id
    assert '<a href="#pk1">' in view and re.search(r'<div class="tl-l tl-pk">.*?<code id="pk1">', view)
    # the input comments: the first shown, the other eight folded (a closed <details>)
    fold = re.search(r'<details class="tl-region tl-params"><summary>(.*?)</summary>(.*?)</details>', view, re.S)
    assert "8 more inputs" in _text(fold.group(1)) and inputs[0].text.strip() in _text(fold.group(1))
    assert all(ln.text.strip() in _text(fold.group(2)) for ln in inputs[1:])
    # lines wrap beside a fixed gutter: nothing is cut off at the right
    page = report_html(rep)
    assert "white-space:pre-wrap" in page and "overflow-wrap:anywhere" in page


def test_an_unchanged_sort_waits_stage_is_not_listed(report):
    part = report.view.part("forward #0")
    names = [t.stage for t in part.stages]
    assert "sort_waits" in names  # the pipeline ran it (single process: nothing to sort)
    assert "sort_waits" not in [t.stage for _, t in part.listed_stages()]
    trace_tab = _section(report_html(report), 1)
    assert not re.search(r"stage \d+: sort_waits", trace_tab) and "not listed: sort_waits" in trace_tab


# -- item 8: Compare -----------------------------------------------------------------------------
def test_compare_labels_columns_and_plurals(report):
    row = report_row(report, "mlp")
    assert row["sort_waits"] is None  # one process, no fsdp: nothing to sort, not shown as on/off
    other = dict(row, run="rerun of mlp with fusion=none", fusion="none", kernels=1, fusions=0)
    cols, shared = shown_columns([row, other])
    assert "fusion" in cols and "executor" not in cols and shared == {"executor": "eager", "fusion_cache": True}
    assert "sort_waits" not in cols
    table = compare_html([row, other])
    assert "every run: executor=eager, fusion cache on" in _text(table)
    assert "position:sticky" in report_html(report)  # the run column stays while the table scrolls
    # a kernel count is no merit: the run with fewer kernels gets no star for it
    assert not re.search(r'data-col="kernels" class="[^"]*tl-best', table)
    # plurals in the Summary
    one = trace_lab.inspect(lambda x: x.sin(), torch.randn(3), executor="eager", runs=0, name="one")
    text = _text(summary_html(one))
    assert "1 op," in text and "1 ops" not in text and "1 kernel" in text and "1 kernels" not in text


# -- item 7: progress -----------------------------------------------------------------------------
class _Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        self.t += 1.5
        return self.t


class _RegionCompiler(EagerExecutor):
    """The eager executor, saying each region as a compiling executor does (``report_region``)."""

    def compile(self, trace):
        regions = [n for n in trace.ops if n.op == "call_module"]
        for k, node in enumerate(regions):
            self.report_region(k, len(regions), str(node.target))
        if regions:
            self.report_region(len(regions), len(regions))
        return super().compile(trace)


def test_making_the_jit_is_under_the_first_calls_progress_not_the_eager_references(monkeypatch):
    """Making a jit whose regions Inductor compiles imports Inductor (~2 s in a fresh process): the progress line
    says the compiler's step while it happens, not the eager reference's that ran before it."""
    import trace_lab.lab.inspection as inspection

    shown = []
    progress = RunProgress(lambda text, frac: shown.append((text, frac)), clock=_Clock(), tick_seconds=60)
    seen_when_made = []

    class Recording(inspection.JitFunction):
        def __init__(self, *a, **kw):
            seen_when_made.append(shown[-1][0] if shown else None)
            super().__init__(*a, **kw)

    monkeypatch.setattr(inspection, "JitFunction", Recording)
    x = torch.randn(4, 4, requires_grad=True)

    def cell(x):
        (torch.relu(x) * 2).sum().backward()
        return {"x": x}

    inspect_cell(cell, (x,), RunOptions(executor="eager", fusion="dataflow", runs=0), "cell", progress)
    assert seen_when_made and seen_when_made[0].startswith("compiling and running the first call"), seen_when_made


def test_progress_says_part_region_and_elapsed_time(monkeypatch):
    monkeypatch.setitem(EXECUTORS, "eager", _RegionCompiler)
    shown = []
    progress = RunProgress(lambda text, frac: shown.append((text, frac)), clock=_Clock(), tick_seconds=60)
    x, w = torch.randn(8, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)

    def cell(x, w):
        y = torch.relu(x @ w) * 2 + 1
        z = torch.tanh(y) - torch.sigmoid(y)
        z.sum().backward()
        return {"z": z}

    opts = RunOptions(executor="eager", fusion="horizontal", runs=1)
    inspect_cell(cell, (x, w), opts, "cell", progress)
    texts = [t for t, _ in shown]
    first_call = [t for t in texts if t.startswith("compiling and running the first call")]
    assert first_call[0].startswith("compiling and running the first call · ")
    assert "compiling and running the first call · forward #0: passes · " in first_call[1]
    regions = [t for t in first_call if re.search(r"forward #0: region \d+ of \d+ \(fusion\d+\)", t)]
    n = int(re.search(r"of (\d+)", regions[0]).group(1))
    assert n >= 1 and [int(re.search(r"region (\d+) of", t).group(1)) for t in regions] == list(range(1, n + 1))
    assert any(f"forward #0: {n} region{'s' if n != 1 else ''} compiled" in t for t in first_call)
    assert any("backward #0: region 1 of" in t for t in first_call)
    assert any(t.startswith("measuring peak memory") for t in texts)
    # every line ends with the seconds so far (the fake clock moves 1.5 s a reading), and they grow
    seconds = [int(re.search(r" · (\d+) s$", t).group(1)) for t in texts]
    assert seconds == sorted(seconds) and seconds[-1] > seconds[0]
    fractions = [f for _, f in shown]
    assert fractions == sorted(fractions) and 0 < fractions[-1] < 1
    assert progress._ticker is None  # the ticker stopped with the run


def test_stop_between_regions_ends_the_run_and_the_ticker(monkeypatch):
    monkeypatch.setitem(EXECUTORS, "eager", _RegionCompiler)
    events = []

    def check():
        if any("region 2 of" in t for t in events):
            raise KeyboardInterrupt("stopped")

    progress = RunProgress(lambda text, frac: events.append(text), check=check, tick_seconds=0.01)
    x, w = torch.randn(8, 8), torch.randn(8, 8)

    def cell(x, w):
        a = torch.relu(x @ w) * 2
        b = torch.sin(a @ w) + 1
        return {"c": torch.cos(b @ w) - 1}

    with pytest.raises(KeyboardInterrupt):
        inspect_cell(cell, (x, w), RunOptions(executor="eager", fusion="dataflow", runs=0), "cell", progress)
    assert progress._ticker is None and not any(t.name == "trace_lab-progress" and t.is_alive()
                                                for t in threading.enumerate())
    assert not any("region 3 of" in t for t in events)  # nothing compiled after the Stop


@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace")
def test_stop_clears_stopping_and_the_next_rerun_starts_clean(ip):
    import time

    ip.user_ns.update(p=torch.randn(4, 4))
    assert ip.run_cell("%%thunder_trace --executor eager --runs 0\nr2 = p + 1\nimport time\n"
                       "for _ in range(200):\n    time.sleep(0.01)").success
    view = ip.magics_manager.registry["ThunderTraceMagics"].views[-1]
    assert view.rerun()
    time.sleep(0.5)
    view.stop()
    assert view.step.value == "stopping..."
    assert view.wait(30)
    assert view.step.value == "" and "rerun stopped" in view.status.value
    seen = []
    view.step.observe(lambda change: seen.append(change["new"]), names="value")
    assert view.rerun() and view.wait(60) and view.last_error is None
    assert seen and not any("stopping" in s for s in seen)
    assert any(re.search(r" · \d+ s$", s) for s in seen)  # the rerun's own progress, with its elapsed time
    assert view.step.value.startswith("done in") and view.run_select.label.startswith("rerun of ")
