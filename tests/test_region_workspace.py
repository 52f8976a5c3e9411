"""Workspace of compiled regions: scratch bytes a region allocates and frees inside its call.

The Inductor executor measures it once per compiled region (placeholder inputs,
warm-up call, measured call) and returns it in the region's record
(``CompiledProgram.regions``, op id -> RegionRecord); a Trace joined to those records
(``Trace.with_regions``) counts it on the region's line only. Figures worked out by hand
unless the test says it measures them.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from fusion_support import SCALAR_SLACK, StubExecutor, fuse, hand_trace
from trace_lab.analysis.liveness import compute_liveness
from trace_lab.analysis.region_record import plan_record, region_record
from trace_lab.executors.inductor import InductorExecutor
from trace_lab.executors.workspace import fresh_output_bytes, output_layout, with_measured_layout, workspace_bytes
from trace_lab.runtime.measure import measure_peak
from trace_lab.passes.fusion import plan_units
from trace_lab.passes.partition import OpGraph
from trace_lab.passes.schedule import MemoryModel

B = 8 * 8 * 4  # one f32[8, 8]: 256 bytes


def relu_then_mm(x):
    y = torch.relu(x)
    return torch.mm(y, y)


def _fused_relu_mm():
    trace = hand_trace(relu_then_mm, torch.randn(8, 8))
    fused = fuse(trace, "dataflow", StubExecutor())
    (region,) = [n for n in fused.ops if n.op == "call_module"]
    return fused, region


def test_liveness_counts_a_region_workspace_on_its_line_only():
    fused, region = _fused_relu_mm()
    # Without workspace: fusion0 writes y (B); mm holds y and writes its output: peak 2 B at mm.
    before = fused.liveness(False)
    assert before.peak_above_inputs_bytes == 2 * B and before.peak_line.node is not region

    plain = fused
    fused = plain.with_regions({region.name: replace(plan_record(region), compiled=True, workspace_bytes=1000)})
    assert plain.liveness(False).peak_above_inputs_bytes == 2 * B  # the plan's stage is left as it was
    live = fused.liveness(False)  # the joined stage prices the compiled record
    line = {ln.node: ln for ln in live.lines}[region]
    # fusion0: the input x (B) live before it; writes y (B), holds 1000 B of scratch during the call
    assert live.entry_bytes == B
    assert (line.allocated, line.workspace, line.high_water, line.live_after) == (B, 1000, 2 * B + 1000, 2 * B)
    assert live.peak_above_inputs_bytes == B + 1000 and live.peak_line is line
    # the mm line is unchanged: the workspace is gone once the region returned
    mm_line = live.lines[-1]
    assert (mm_line.high_water, mm_line.workspace) == (3 * B, 0)  # x, y and the product
    # CUDA rounding: y -> 512 B, 1000 -> 1024 B
    assert compute_liveness(fused, rounding=512).peak_above_inputs_bytes == 512 + 1024
    # run op by op (eager executor) the region's own inner peak counts, not compiled workspace
    assert fused.liveness(True).peak_above_inputs_bytes == 2 * B
    # the printed text shows it, and the peak marker includes it
    text = str(fused)
    assert "| live 512 B (+256 B ~1000 B inside)  <- peak 1.23 KiB above inputs" in text, text  # 256 + 1000 above x
    # the scheduler prices an already fused region the same way
    graph = OpGraph(fused, StubExecutor().can_fuse)
    units = plan_units(fused, "none", StubExecutor().can_fuse, False)
    assert MemoryModel(fused, graph, False).peak(units) == B + 1000


def test_workspace_arithmetic():
    # peak above entry 3000 B, outputs 2048 B: 952 B of scratch, 1024 in 512-byte blocks
    assert workspace_bytes(3000, 2048) == 952
    assert workspace_bytes(3000, 2048, rounding=512) == 1024
    assert workspace_bytes(2048, 2048, rounding=512) == 0
    assert workspace_bytes(1000, 2048) == 0  # a call that freed something: never negative
    x = torch.zeros(8, 8)
    y = torch.zeros(4)
    # a view of an input allocates nothing; two outputs on one storage count once
    assert fresh_output_bytes([x[0], y, y[1:]], [x]) == 16
    assert fresh_output_bytes([y], [x], rounding=512) == 512


def softmax_rows(x):
    return torch.softmax(x, dim=-1)


def test_inductor_region_workspace_is_measured_and_predicted():
    """softmax over rows of f32[64, 128] compiles to a region whose C++ code keeps per-row
    partials in scratch buffers (measured here, not assumed). Output: 64 * 128 * 4 = 32 KiB."""
    x = torch.randn(64, 128)
    trace = hand_trace(softmax_rows, x)
    executor = InductorExecutor()
    fused = fuse(trace, "dataflow", executor)
    program = executor.compile(fused)
    (record,) = program.regions.values()
    workspace = record.workspace_bytes
    # large enough that leaving it out would fail the comparison below
    assert workspace > SCALAR_SLACK, record
    assert record.output_bytes == record.model_output_bytes == 32768
    (region,) = [n for n in fused.ops if n.op == "call_module"]
    assert region_record(program, region) is record and record.compiled
    assert "workspace_bytes" not in region.meta["region"]  # compiling wrote nothing on the IR
    assert fused.liveness(False).peak_above_inputs_bytes == 32768  # the plan alone: outputs only
    fused = fused.with_regions(program.regions)
    assert region_record(fused, region) is record
    predicted = fused.liveness(False).peak_above_inputs_bytes
    assert predicted == 32768 + workspace
    outs, measured, method = measure_peak(program.run, [x.clone()], fused.device)
    torch.testing.assert_close(outs[0], torch.softmax(x, dim=-1))
    assert 0 <= measured - predicted <= SCALAR_SLACK, (predicted, measured, method)
    assert any("allocate workspace" in n for n in program.notes), program.notes


def test_output_layout_names_views_shared_storages_and_fresh_bytes():
    x = torch.zeros(8, 8)  # input 0: 256 B
    qkv = torch.zeros(3, 4, 4)  # a fresh 192 B storage
    alone = torch.zeros(2, 8)  # another fresh storage, 64 B
    aliases, storage_bytes = output_layout([x[1:], qkv[0], qkv[1], alone, qkv[2]], [x])
    assert aliases == [("input", 0), None, ("output", 1), None, ("output", 1)]
    assert storage_bytes == [None, 192, None, 64, None]


def test_liveness_follows_the_compiled_output_layout():
    """The capture says output 1 is a view of output 0 (one 512 B buffer); the compiled code
    returned it in a storage of its own (1000 B): the model counts what the code did."""
    def split_rows(x):
        y = x + 1
        return y[:4], y[4:]

    trace = hand_trace(split_rows, torch.randn(8, 16))  # y: 8 x 16 f32 = 512 B
    fused = fuse(trace, "dataflow", StubExecutor())
    (region,) = [n for n in fused.ops if n.op == "call_module"]
    assert region.meta["region"]["aliases"] == [None, ("output", 0)]
    assert fused.liveness(False).peak_above_inputs_bytes == 512
    plan = plan_record(region)
    record = with_measured_layout(plan, ([None, None], [256, 1000]), [object(), object()])
    assert (record.aliases, record.output_storage_bytes) == ((None, None), (256, 1000))
    joined = fused.with_regions({region.name: record})
    live = joined.liveness(False)  # the joined stage follows the compiled layout
    assert live.peak_above_inputs_bytes == 256 + 1000
    assert compute_liveness(joined, rounding=512).peak_above_inputs_bytes == 512 + 1024
    assert fused.liveness(False).peak_above_inputs_bytes == 512  # the plan's stage is unchanged
    # outputs that do not line up with the captured ones leave the captured aliasing
    assert with_measured_layout(plan, ([None, None, None], [1, 2, 3]), [object(), object()]) is plan


class _DonatingRegion:
    """A region program that frees its first input inside its call (``boxed``), as a donating region does."""

    def __call__(self, *args):
        return self.boxed(list(args))

    def boxed(self, args):
        a, b = args
        args.clear()
        t = a * 2
        del a
        return [t + b]


def test_a_donating_regions_workspace_is_measured_without_a_full_collection(monkeypatch):
    """On the CPU a donating region's workspace is measured in a profiler window without a full garbage collection
    first (~0.3 s each in a process that has compiled a model; a window's peak is a running sum inside it, so
    garbage from before changes nothing), and the figure is the one measured with the collection."""
    import gc

    from trace_lab.runtime import call_memory

    vals = [torch.randn(64), torch.randn(64)]
    with_collection = call_memory.measure_workspace(_DonatingRegion(), vals, 1, donate=(0,))
    real_collect, collections = gc.collect, []
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(a) or real_collect(*a))
    got = call_memory.measure_workspace(_DonatingRegion(), vals, 1, donate=(0,))
    assert collections == [], "a full collection ran before the workspace window"
    assert got[:2] == with_collection[:2] and got[0] is not None, (got, with_collection)
