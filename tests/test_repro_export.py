"""Repro export (issue 17 item 5): a standalone file that runs a program or one fused region eagerly and
through the executor, with inputs of the recorded layouts; executed here in a fresh interpreter."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch

import trace_lab
from examples import workloads


def _run_file(path):
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600)


def _load(path):
    spec = importlib.util.spec_from_file_location("repro_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # the __main__ block does not run on import
    return mod


@pytest.fixture(scope="module")
def llama_jfn():
    fn, args = workloads.get("llama2").make("cpu", "small")
    jfn = trace_lab.jit(fn, fusion="dataflow", executor="eager")
    jfn(*args).sum().backward()
    return jfn


def test_a_region_runs_through_inductor_and_matches_eager(llama_jfn, tmp_path):
    trace = trace_lab.last_traces(llama_jfn)[-1]
    region = next(n for n in trace.ops if n.op == "call_module")
    path = trace_lab.export_repro(trace, tmp_path / "region.py", region=region.target)
    text = open(path).read()
    assert f"def {region.target}(" in text and 'torch.compile(' in text and "aten." in text
    inner_vals = [n.meta["val"] for n in trace.gm.get_submodule(region.target).graph.nodes if n.op == "placeholder"]
    inputs = _load(path).make_inputs()
    assert [(tuple(t.shape), t.stride(), t.dtype) for t in inputs] == \
        [(tuple(v.shape), v.stride(), v.dtype) for v in inner_vals]
    r = _run_file(path)
    assert r.returncode == 0 and r.stdout.strip() == "repro: matches eager", r.stderr[-2000:]


@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_a_whole_program_with_its_regions_runs_standalone(llama_jfn, tmp_path, kind):
    path = trace_lab.export_repro(llama_jfn, tmp_path / f"{kind}.py", kind=kind, executor="eager")
    trace = (trace_lab.last_backward_traces if kind == "backward" else trace_lab.last_traces)(llama_jfn)[-1]
    text = open(path).read()
    for n in trace.ops:
        if n.op == "call_module":
            assert f"def {n.target}(" in text  # every region is written out
    r = _run_file(path)
    assert r.returncode == 0 and "repro: matches eager" in r.stdout, r.stderr[-2000:]


def test_memory_peak_program_through_inductor(tmp_path):
    fn, args = workloads.get("memory_peak").make("cpu", "small")
    jfn = trace_lab.jit(fn, fusion="horizontal", executor="eager")
    jfn(*args)
    r = _run_file(trace_lab.export_repro(jfn, tmp_path / "mp.py"))
    assert r.returncode == 0 and "repro: matches eager" in r.stdout, r.stderr[-2000:]


def test_what_cannot_be_exported_is_refused_with_the_reason(llama_jfn, tmp_path):
    trace = trace_lab.last_traces(llama_jfn)[-1]
    with pytest.raises(trace_lab.TraceLabError, match="has no region 'fusion99'"):
        trace_lab.export_repro(trace, tmp_path / "x.py", region="fusion99")
    with pytest.raises(trace_lab.TraceLabError, match="choose one of inductor, eager"):
        trace_lab.export_repro(trace, tmp_path / "x.py", executor="tvm")

    def with_constant(x):
        return x + torch.tensor([1.0, 2.0])  # a tensor literal: a get_attr constant in the graph

    jfn = trace_lab.jit(with_constant, executor="eager")
    jfn(torch.randn(2))
    with pytest.raises(trace_lab.TraceLabError, match="tensor constant"):
        trace_lab.export_repro(jfn, tmp_path / "c.py")
    assert not (tmp_path / "c.py").exists()


def test_a_layer_region_with_its_matmuls_exports_and_matches_eager(tmp_path):
    fn, args = workloads.get("llama2").make("cpu", "small")
    jfn = trace_lab.jit(fn, fusion="layers", executor="eager")
    jfn(*args).sum().backward()
    trace = trace_lab.last_traces(jfn)[-1]
    region = next(n for n in trace.ops if n.op == "call_module"
                  and any("mm" in str(m.target) for m in trace.gm.get_submodule(n.target).graph.nodes))
    path = trace_lab.export_repro(trace, tmp_path / "layer.py", region=region.target)
    r = _run_file(path)
    assert r.returncode == 0 and r.stdout.strip() == "repro: matches eager", r.stderr[-2000:]


def test_an_nvfuser_region_that_runs_another_regions_code_says_which_to_export():
    """cover_regions: a covered nvFuser region has no definition of its own; exporting it names the region whose
    program it runs (the nvFuser executor's records, as it leaves them: runs_code_of, no region program)."""
    from types import SimpleNamespace

    from trace_lab.errors import TraceLabError
    from trace_lab.run.repro import nvfuser_call_text

    compiled = SimpleNamespace(
        region_programs={"fusion2": object()},
        regions={"t5": SimpleNamespace(name="fusion2", details={}),
                 "t9": SimpleNamespace(name="fusion7", details={"runs_code_of": "fusion2"})})
    with pytest.raises(TraceLabError, match=r"fusion7 has no code of its own: it runs fusion2's code "
                                            r"\(cover_regions\)\. Export fusion2, or jit with cover_regions=False"):
        nvfuser_call_text(compiled, "fusion7")
    with pytest.raises(TraceLabError, match="was not compiled by nvFuser here"):
        nvfuser_call_text(compiled, "fusion9")
