"""fusion="layers" (regional compilation, issue 27 item 3): one region per repeated layer, matmuls inside.

Checked against eager PyTorch through ``inspect`` (outputs and gradients) with the measured peak equal to the
predicted one; the structure (one region per layer, identical layers compiled once, no matmul left between
regions) is read off the final trace; the layer of an op is read from module paths written by hand.
"""
from __future__ import annotations

import re

import pytest
import torch

import trace_lab
from examples.llama import LlamaStack
from fusion_support import SCALAR_SLACK, captured
from trace_lab.executors.inductor import InductorExecutor
from trace_lab.passes.fusion import plan_units
from trace_lab.passes.layers import layer_of
from trace_lab.run.jit import Options, resolve_run_executor


class _Path:  # an fx.Node stand-in: layer_of reads meta only
    def __init__(self, path, key="nn_module_stack"):
        self.meta = {key: {"a": ("L['self']", object), "b": (path, object)}} if path else {}


@pytest.mark.parametrize("path,layer", [
    ("L['self'].layers.3.attn.wqkv", "L['self'].layers.3"),
    ("L['self'].layers.10", "L['self'].layers.10"),
    ("blocks[2].mlp", "blocks[2]"),
    ("L['self'].encoder.layers.0.experts.5", "L['self'].encoder.layers.0"),  # the outermost numbered child
    ("L['self'].norm", None),
    ("L['self'].w2x", None),  # a digit inside a name is not an index
    (None, None),
])
def test_an_ops_layer_is_its_module_path_up_to_the_first_numbered_child(path, layer):
    assert layer_of(_Path(path)) == layer
    assert layer_of(_Path(path, key="fwd_nn_module_stack")) == layer  # a backward op: its forward op's path


def _assert_memory(report):
    assert report.memory
    for m in report.memory:
        measured, predicted = m["measured_peak_above_inputs_bytes"], m["predicted_peak_above_inputs_bytes"]
        assert measured is not None, m
        assert 0 <= measured - predicted <= SCALAR_SLACK, m


def _regions(report, kind):
    trace = report.traces(kind)[-1]
    return trace, [n for n in trace.ops if n.op == "call_module"]


@pytest.mark.parametrize("executor", ["inductor", "eager"])
def test_each_layer_is_one_region_with_its_matmuls_and_identical_layers_compile_once(executor):
    torch.manual_seed(0)
    model = LlamaStack(layers=3, dim=32, heads=2)
    x = torch.randn(2, 16, 32, requires_grad=True)
    report = trace_lab.inspect(model, x, fusion="layers", executor=executor, runs=1)
    assert report.ok, report.comparison
    assert report.comparison["checked"]["grads"] > 0
    _assert_memory(report)
    for kind in ("forward", "backward"):
        trace, regions = _regions(report, kind)
        plain = [n for n in trace.ops if n.op == "call_function"]
        assert not [n for n in plain if "mm" in str(n.target)], (kind, [str(n.target) for n in plain])
        layers = {}
        for r in regions:
            sub = trace.gm.get_submodule(r.target)
            inner = [n for n in sub.graph.nodes if n.op == "call_function"]
            if any("mm" in str(n.target) for n in inner):
                layers[r.target] = inner
        assert len(layers) == 3, (kind, list(layers))  # one region per layer, each with its matmuls
        ends = [e for rows in trace.info["region_ends"].values() for e in rows]
        assert any(e["kind"] == "layer" and "L['self'].layers." in e["reason"] for e in ends), ends
        if kind == "forward":  # the causal mask's values every layer reads run once, outside the layers
            assert {"aten.full.default", "aten.arange.start_step"} <= {str(n.target) for n in plain}, plain
            assert any(e["kind"] == "layer" and "a value the layers share" in e["reason"] for e in ends), ends
    rows = dict(report.summary_rows())
    assert "3 layers in 3 regions" in rows["forward #0"] and "3 layers in 3 regions" in rows["backward #0"], rows
    if executor == "inductor":
        # every layer is one region, compiled once each way: layer 0 made the causal mask's shared values (they run
        # outside every layer) and was saved for differently by the partitioner (aligned: passes/layer_saves.py)
        assert "2 cache hits" in rows["regions forward #0"], rows["regions forward #0"]
        assert "2 cache hits" in rows["regions backward #0"], rows["regions backward #0"]


def test_two_layers_compile_once_each_way():
    """Two layers tie one to one on what they save; the later layer's choice is the one the first is aligned to."""
    torch.manual_seed(0)
    model = LlamaStack(layers=2, dim=32, heads=2)
    x = torch.randn(2, 16, 32, requires_grad=True)
    report = trace_lab.inspect(model, x, fusion="layers", executor="inductor", runs=1)
    assert report.ok, report.comparison
    _assert_memory(report)
    rows = dict(report.summary_rows())
    assert "1 cache hit," in rows["regions forward #0"] and "1 cache hit," in rows["regions backward #0"], rows


def test_without_aligned_saves_the_first_layer_compiles_apart():
    """The ablation of align_layer_saves: AOTAutograd's own partition saves the first layer's attention projection
    where its repeats save the residual sum, so layer 0's regions (forward and backward) compile once more."""
    torch.manual_seed(0)
    model = LlamaStack(layers=3, dim=32, heads=2)
    x = torch.randn(2, 16, 32, requires_grad=True)
    report = trace_lab.inspect(model, x, fusion="layers", executor="inductor", runs=1, align_layer_saves=False)
    assert report.ok, report.comparison
    _assert_memory(report)
    rows = dict(report.summary_rows())
    assert "1 cache hit," in rows["regions forward #0"] and "1 cache hit," in rows["regions backward #0"], rows


def _unique_signatures(report) -> int:
    rows = dict(report.summary_rows())
    return sum(int(re.search(r"(\d+) unique signatures", rows[f"regions {kind} #0"]).group(1))
               for kind in ("forward", "backward"))


@pytest.mark.parametrize("strategy", ["dataflow", "memory", "auto"])
def test_glue_strategies_align_layer_saves_too(strategy, monkeypatch):
    """dataflow and memory regions follow the layers as well: with AOTAutograd's own partition the first layer saves
    other values than its repeats and brings regions (nvFuser definitions) of its own; aligned, fewer distinct
    regions compile, outputs and gradients match eager and the peaks, measured as predicted, are no higher.
    ``auto`` is resolved on the program's device (made to pick dataflow on the CPU here, as it does on CUDA)."""
    from tests.nvfuser_cpu import cpu_nvfuser
    from trace_lab.run import jit as jit_module

    cpu_nvfuser(monkeypatch)
    monkeypatch.setitem(jit_module.AUTO_FUSION, "cpu", "dataflow")
    unique, peaks = {}, {}
    for align in (True, False):
        torch.manual_seed(0)
        model = LlamaStack(layers=3, dim=32, heads=2)
        x = torch.randn(2, 16, 32, requires_grad=True)
        report = trace_lab.inspect(model, x, fusion=strategy, executor="nvfuser", runs=1, align_layer_saves=align)
        assert report.ok and report.comparison["checked"]["grads"] > 0, report.comparison
        for m in report.memory:
            assert m["measured_peak_above_inputs_bytes"] == m["predicted_peak_above_inputs_bytes"], m
        unique[align] = _unique_signatures(report)
        peaks[align] = [m["measured_peak_above_inputs_bytes"] for m in report.memory]
        # the Summary's compile row says what the capture's second partition did, and what it cost
        again = re.search(r"AOTAutograd [\d.]+ s \(([\d.]+) s of it partitioning again so that (.*?) saves what its "
                          r"repeats save, 1 value marked: align_layer_saves\)",
                          dict(report.summary_rows())["compile forward #0"])
        assert bool(again) == align, dict(report.summary_rows())["compile forward #0"]
        if align:
            assert again.group(2) == "L['self'].layers.0" and float(again.group(1)) > 0
    assert unique[True] < unique[False], unique
    assert all(a <= b for a, b in zip(peaks[True], peaks[False])), peaks


def test_a_second_partition_not_kept_says_why():
    from trace_lab.report.report import _aligned_text

    text = _aligned_text({"layers": ["L['self'].layers.0"], "values": 2, "kept": False, "seconds": 0.5})
    assert text.startswith(" (0.500 s of it partitioning again") and "2 values marked; not kept" in text, text
    assert _aligned_text(None) == ""


def test_random_ops_inside_layers_keep_eagers_stream():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

        def forward(self, x):
            return x + self.fc2(torch.nn.functional.dropout(torch.relu(self.fc1(x)), 0.5, training=True))

    model = torch.nn.Sequential(Block(), Block())
    x = torch.randn(8, 16, requires_grad=True)
    report = trace_lab.inspect(model, x, fusion="layers", executor="eager", runs=0)
    assert report.ok and report.comparison["mode"] == "exact", report.comparison
    _assert_memory(report)
    trace, regions = _regions(report, "forward")
    # a random op stays out of every region, so each layer is two regions around its dropout
    assert len(regions) == 4
    assert [str(n.target) for n in trace.ops if n.op == "call_function"] == ["aten.native_dropout.default"] * 2


def test_a_program_without_layers_says_so():
    report = trace_lab.inspect(lambda x: (x.sin() * 2).sum(), torch.randn(8, 8), fusion="layers", executor="eager",
                               runs=0)
    assert report.ok
    assert [w for w in report.warnings if "no repeated layer found" in w and w.startswith("inference #0")], \
        report.warnings
    assert "0 layers in 0 regions" in dict(report.summary_rows())["inference #0"]


def test_without_numbered_layers_it_is_the_dataflow_strategy():
    executor = InductorExecutor()
    for part in captured("memory_peak") + captured("adam_step"):
        layers = plan_units(part.trace, "layers", executor.can_fuse, False, can_compile=executor.can_compile)
        dataflow = plan_units(part.trace, "dataflow", executor.can_fuse, False)
        assert [(u.nodes, u.fused) for u in layers] == [(u.nodes, u.fused) for u in dataflow]


def test_nvfuser_takes_a_layers_matmuls_and_auto_picks_inductor():
    """nvFuser compiles a layer's matmuls (``can_compile``) but does not fuse them in the glue strategies
    (``can_fuse``); the options accept the pair, and ``executor="auto"`` still picks Inductor for layers."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from trace_lab.executors.base import strategies_for
    from trace_lab.executors.nvfuser_ops import fusible_reason
    from trace_lab.notebook.runner import RunOptions

    trace_lab.jit(lambda x: x, fusion="layers", executor="nvfuser")  # no OptionError
    RunOptions(fusion="layers", executor="nvfuser")
    assert "layers" in strategies_for("nvfuser")

    shapes = ((4, 8), (8, 3), (2, 4, 5), (2, 5, 6))  # meta tensors: as fusible as on a GPU
    gm = make_fx(lambda a, b, q, k: (a @ b, torch.bmm(q, k)))(
        *[torch.empty(sh, dtype=torch.bfloat16, device="meta") for sh in shapes])
    mms = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert {n.target for n in mms} == {torch.ops.aten.mm.default, torch.ops.aten.bmm.default}
    for n in mms:
        assert fusible_reason(n, index_math=False, library=True) is None, fusible_reason(n, library=True)
        assert "library op" in fusible_reason(n, index_math=False)
    name, why = resolve_run_executor(Options(fusion="layers"), torch.device("cuda"))
    assert name == "inductor" and "layers" in why
    assert resolve_run_executor(Options(fusion="layers", executor="eager"), torch.device("cuda"))[0] == "eager"
    assert resolve_run_executor(Options(fusion="layers", executor="nvfuser"), torch.device("cuda"))[0] == "nvfuser"


def test_predict_runs_layers_for_an_executor_that_compiles_matmuls():
    from trace_lab.executors.base import strategies_for

    assert "layers" in strategies_for("inductor") and "layers" in strategies_for("eager")
    torch.manual_seed(0)
    model = LlamaStack(layers=2, dim=32, heads=2)
    pred = trace_lab.predict(model, torch.randn(2, 16, 32), strategies=["layers", "dataflow"], device="cpu",
                             executor="inductor")
    assert pred.peak("layers", "forward") > 0
