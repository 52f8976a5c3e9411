"""Notebooks 06 (where the time goes) and 07 (where the bytes go): the figures their prose quotes.

Each notebook is executed once (as ``test_teaching_notebooks.py`` executes every teaching notebook:
nbclient, ``TRACE_LAB_EXECUTOR=eager``, CPU sizes) and every figure a markdown paragraph quotes is
checked against the executed outputs. Memory figures and counts must equal what the outputs print;
times are never compared with a number, only the ratios the prose states with wide margins (a matmul
against a relu, flop per microsecond of two programs three orders of magnitude apart).
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from test_teaching_notebooks import _code, _md, _stdout, execute, quotes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Executes a notebook once per module; returns the executed notebook node (its copy in a tmp dir)."""
    cache = {}

    def run(stem):
        if stem not in cache:
            tmp = tmp_path_factory.mktemp(stem)
            shutil.copy(ROOT / "notebooks" / f"{stem}.ipynb", tmp / f"{stem}.ipynb")
            nb = execute(tmp / f"{stem}.ipynb", tmp)
            path = tmp / f"executed_{stem}.ipynb"
            nbformat.write(nb, path)
            errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
            assert not errors, errors[0].get("evalue")
            cache[stem] = nb, path.stat().st_size
        return cache[stem]

    return run


def _device(nb) -> str:
    return re.search(r"device: (\w+)", _stdout(nb.cells[1])).group(1)


def test_06_where_the_time_goes(executed):
    nb, size = executed("06_where_the_time_goes")
    assert size < 2_000_000, f"executed 06 is {size:,} bytes"
    # the two programs: 120 tiny ops on 64 floats, 3 ops of ~4.3 billion flop
    flops = _stdout(_code(nb, "TINY_FLOPS ="))
    tiny_flops, big_flops = (int(v.replace(",", "")) for v in re.search(
        r"tiny_chain: ([\d,]+) floating-point operations; big_matmuls: ([\d,]+)", flops).groups())
    assert tiny_flops == 120 * 64 and round(big_flops / 1e9, 1) == 4.3
    quotes(_md(nb, "## Two programs"), "120 ops, each touching 256 bytes", "3 ops, about 4.3 billion floating-point operations")
    quotes(_md(nb, "# 6. Where the time goes"), "(120 tiny elementwise ops)", "(two large matmuls)")
    # per-line profiles: line counts, the matmuls' share, flop per microsecond
    out = _stdout(_code(nb, "def summary(name, prof, flops)"))
    rows = {m[0]: m[1:] for m in re.findall(r"^(tiny_chain|big_matmuls): (\d+) lines, .*; matmul lines: (\d+)% of the time; "
                                            r"([\d,]+) flop per us$", out, re.M)}
    assert int(rows["tiny_chain"][0]) == 120 and int(rows["big_matmuls"][0]) == 3
    assert int(rows["big_matmuls"][1]) > 75, "the two mm lines take more than three quarters of the time"
    ratio = int(re.search(r"big_matmuls computes ([\d,]+) times more per microsecond", out).group(1).replace(",", ""))
    assert ratio > 1000, "tiny_chain computes more than a thousand times less per microsecond"
    big = {m[1]: float(m[0]) for m in re.findall(r"^\s*([\d.]+) us host .* (L\d) t\d+ = aten\.(?:mm|relu)", _stdout(
        _code(nb, "print(prof_big)")), re.M)}
    labels = re.findall(r"(L\d) t\d+ = aten\.(mm|relu)", _stdout(_code(nb, "print(prof_big)")))
    relu = next(big[line] for line, op in labels if op == "relu")
    assert all(relu < big[line] for line, op in labels if op == "mm"), "the relu takes less than either matmul"
    prose = _md(nb, "What to look for")
    quotes(prose, "its 3 lines", "more than three quarters of the time", "takes less than either", "its 120 lines",
           "more than a thousand times less")
    # per source line: all 120 lines of tiny_chain from one line of its code
    by_source = _stdout(_code(nb, "prof.by_source()"))
    assert re.findall(r"^tiny_chain: (\d+) trace lines from  (.*)$", by_source, re.M) == [
        ("120", "x = torch.sin(x) * 1.01 + 0.1")]
    assert re.findall(r"^big_matmuls: (\d+) trace lines from", by_source, re.M) == ["3"]
    quotes(_md(nb, "All 120 lines of `tiny_chain`"), "All 120 lines of `tiny_chain` come from one source line, "
                                                        "`x = torch.sin(x) * 1.01 + 0.1`")
    # the Chrome trace holds one range per line, named as in the trace
    chrome = _stdout(_code(nb, "export_chrome_trace("))
    assert re.search(r": \d+ events, 120 of them trace-line ranges, e\.g\. 'inference L0 t0 = aten\.sin\.default'", chrome)
    quotes(_md(nb, "## The Chrome / Perfetto trace"), "(120 of them for `tiny_chain`, each named as in the trace)")
    # fusion: 120 lines -> 1 region holding the 120 ops, profiled as 1 line
    fusion = _stdout(_code(nb, 'for fusion in ("none", "dataflow")'))
    assert re.findall(r"fusion=(\w+)\s*: (\d+) lines launched, (\d+) fused regions holding (\d+) ops; profiled lines: (\d+)",
                      fusion) == [("none", "120", "0", "0", "120"), ("dataflow", "1", "1", "120", "1")]
    quotes(_md(nb, 'With `fusion="none"`'), "the host launches 120 lines", "1 fused region holding the 120 ops",
           "the profile has 1 line")
    # CUDA graphs: on a CPU, the option's own note, no figure
    notes = _stdout(_code(nb, "rep_graphs.to_dict()"))
    if _device(nb) == "cpu":
        said = "CUDA graphs need a CUDA device, so it runs without one"
        assert said in notes
        quotes(_md(nb, "On this CPU the note reads"), f'"{said}"')
    else:
        assert "cuda_graphs: " in notes and "recording" in notes
