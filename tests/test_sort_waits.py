"""sort_waits on hand-built fx graphs: the exact orders below are derived by hand from the rules."""
from __future__ import annotations

import pytest
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

from trace_lab.errors import TraceLabError
from trace_lab.run.jit import Options
from trace_lab.passes import PassContext
from trace_lab.passes.sort_waits import default_max_inflight, gathers_per_layer, sort_waits_pass
from trace_lab.analysis.timeline import CostModel, estimate_timeline
from trace_lab.report.timeline import format_timeline, timeline_svg
from trace_lab.ir.trace import Trace

C10D = torch.ops._c10d_functional
aten = torch.ops.aten
N = 32  # weights are [N, N] f32: 4 KiB gathered, 2 KiB per shard


class Builder:
    def __init__(self):
        self.graph = fx.Graph()
        self.mode = FakeTensorMode()

    def input(self, name, shape):
        n = self.graph.placeholder(name)
        with self.mode:
            n.meta["val"] = torch.empty(shape)
        return n

    def op(self, target, *args, name):
        n = self.graph.call_function(target, args)
        n.name = name
        with self.mode:
            n.meta["val"] = target(*fx.node.map_arg(args, lambda a: a.meta["val"]))
        return n

    def gather(self, shard, i):
        g = self.op(C10D.all_gather_into_tensor.default, shard, 2, "0", name=f"g{i}")
        w = self.op(C10D.wait_tensor.default, g, name=f"w{i}")
        return self.op(aten.view.default, w, [N, N], name=f"v{i}")

    def trace(self, out):
        self.graph.output(out)
        return Trace(fx.GraphModule(torch.nn.Module(), self.graph), "forward")


def fsdp_like_program():
    """Gathers in parameter order with waits right after (what the fsdp pass emits when params
    are first used in a different order): weight 2 is used first, then 0, then 1."""
    b = Builder()
    x = b.input("x", [4, N])
    shards = [b.input(f"p{i}", [N * N // 2]) for i in range(3)]
    v = [b.gather(s, i) for i, s in enumerate(shards)]
    a = b.op(aten.mm.default, x, v[2], name="mm_a")
    r = b.op(aten.relu.default, a, name="relu")
    c = b.op(aten.mm.default, r, v[0], name="mm_c")
    d = b.op(aten.mm.default, c, v[1], name="mm_d")
    return b.trace(d)


def names(trace):
    return [n.name for n in trace.ops]


def run_pass(trace, **opts):
    return sort_waits_pass(trace, PassContext(Options(**opts), None))


def test_unlimited_gathers_issue_in_consumption_order_and_waits_meet_consumers():
    t = fsdp_like_program()
    assert names(t) == ["g0", "w0", "v0", "g1", "w1", "v1", "g2", "w2", "v2", "mm_a", "relu", "mm_c", "mm_d"]
    s = run_pass(t)
    assert names(s) == ["g2", "g0", "g1", "w2", "v2", "mm_a", "relu", "w0", "v0", "mm_c", "w1", "v1", "mm_d"]
    assert s.stage == "sort_waits" and s.info["sort_waits"]["peak_inflight_gathers"] == 3


def test_inflight_limit_one():
    s = run_pass(fsdp_like_program(), max_inflight_gathers=1)
    # g0 may start only once w2 is done, g1 once w0 is done
    assert names(s) == ["g2", "w2", "v2", "g0", "mm_a", "relu", "w0", "v0", "g1", "mm_c", "w1", "v1", "mm_d"]
    assert s.info["sort_waits"]["peak_inflight_gathers"] == 1


def test_inflight_limit_bounds_predicted_memory():
    t = fsdp_like_program()
    w = N * N * 4
    unlimited = run_pass(t).liveness().peak_above_inputs_bytes
    one = run_pass(t, max_inflight_gathers=1).liveness().peak_above_inputs_bytes
    act = 4 * N * 4  # one [4, N] activation, 512 B
    # by hand: unlimited holds all 3 gathered weights at mm_a, plus mm_a's output
    assert unlimited == 3 * w + act
    # limit 1: at mm_a weight 2 (in use) + weight 0 (in flight) + output; at mm_c weight 0 (in use)
    # + weight 1 (in flight) + relu output + mm_c output: the larger is 2 W + 2 act
    assert one == 2 * w + 2 * act


def test_reduce_scatter_wait_moves_to_the_end_and_keeps_its_input_alive():
    b = Builder()
    x = b.input("x", [N, N])
    gsum = b.op(aten.mul.Tensor, x, 0.5, name="scaled")
    flat = b.op(aten.view.default, gsum, [N * N], name="flat")
    rs = b.op(C10D.reduce_scatter_tensor.default, flat, "sum", 2, "0", name="rs")
    rw = b.op(C10D.wait_tensor.default, rs, name="rw")
    other = b.op(aten.relu.default, x, name="other")
    t = b.trace((rw, other))
    s = run_pass(t)
    assert names(s) == ["scaled", "flat", "rs", "other", "rw"]
    # the reduce-scatter's input lives until its wait: on 'other', scaled (4 KiB) + rs (2 KiB) + other (4 KiB)
    live = {ln.node.name: ln for ln in s.liveness().lines}
    assert live["other"].live_after - s.liveness().entry_bytes == 4096 + 2048 + 4096
    assert live["rw"].freed == 4096


def test_no_collectives_is_a_noop():
    b = Builder()
    x = b.input("x", [4])
    t = b.trace(b.op(aten.relu.default, x, name="r"))
    assert run_pass(t) is t


def layered_program(weights_per_layer=(3, 2)):
    """Layer i reads ``weights_per_layer[i]`` gathered weights, one mm each (Dynamo's ``nn_module_stack`` set by
    hand on the mms, as it names ops traced inside ``self.layers[i]``); a final mm outside any layer."""
    b = Builder()
    x = b.input("x", [4, N])
    k = 0
    for i, count in enumerate(weights_per_layer):
        for j in range(count):
            v = b.gather(b.input(f"p{k}", [N * N // 2]), k)
            x = b.op(aten.mm.default, x, v, name=f"mm_{i}_{j}")
            x.meta["nn_module_stack"] = {"L__self__": ("L['self']", object),
                                         f"L__self___layers_{i}": (f"L['self'].layers[{i}]", object),
                                         f"L__self___layers_{i}_fc{j}": (f"L['self'].layers[{i}].fc{j}", object)}
            k += 1
    head = b.gather(b.input(f"p{k}", [N * N // 2]), k)
    return b.trace(b.op(aten.mm.default, x, head, name="mm_head"))


def test_auto_limit_is_one_layers_gathers():
    """ZeRO-3's auto limit: the most weights one numbered layer reads (3 here), at least 2; the pass uses it."""
    t = layered_program((3, 2))
    assert gathers_per_layer(t.gm) == 3
    assert default_max_inflight(Options(fsdp="zero3"), t.gm) == 3
    info = run_pass(t, fsdp="zero3").info["sort_waits"]
    assert info["max_inflight_gathers"] == 3 and info["peak_inflight_gathers"] == 3
    # one weight a layer: at least 2; no numbered layer at all (fsdp_like_program): 2; an explicit limit wins
    assert default_max_inflight(Options(fsdp="zero3"), layered_program((1, 1, 1)).gm) == 2
    assert gathers_per_layer(fsdp_like_program().gm) is None
    assert default_max_inflight(Options(fsdp="zero3"), fsdp_like_program().gm) == 2
    assert default_max_inflight(Options(fsdp="zero3", max_inflight_gathers=1), t.gm) == 1
    assert default_max_inflight(Options(fsdp="zero2"), t.gm) is None


def test_default_limit_and_bad_option():
    assert default_max_inflight(Options(fsdp="zero3")) == 2
    assert default_max_inflight(Options(fsdp="zero2")) is None
    assert default_max_inflight(Options(fsdp="zero3", max_inflight_gathers=None)) is None
    with pytest.raises(TraceLabError, match="max_inflight_gathers=0"):
        Options(max_inflight_gathers=0)


def test_estimated_timeline_overlap_by_hand():
    """Cost model with round numbers: each gather 1 s, each mm 1 s, relu 1 s, no latency/overhead."""
    t = fsdp_like_program()
    # gathered bytes 4096 with W=2 -> 2048 B on the link; mm [4,N]x[N,N] = 2*4*N*N flops
    model = CostModel("hand", flops_per_s=2 * 4 * N * N, mem_bytes_per_s=1e30, link_bytes_per_s=2048,
                      latency_s=0.0, op_overhead_s=0.0)
    before = estimate_timeline(t, model)
    # waits right after gathers: 3 s of gathers, then 3 s of mm (relu costs 0 with infinite bandwidth)
    assert before["span_seconds"] == pytest.approx(6.0)
    assert before["exposed_comm_seconds"] == pytest.approx(3.0) and before["overlap_fraction"] == pytest.approx(0.0)
    after = estimate_timeline(run_pass(t), model)
    # gathers back to back from t=0; mm_a waits for g2 (ends 1 s), mm_c runs 2-3 s, g0 ended at 2 s ...
    assert after["span_seconds"] == pytest.approx(4.0)
    assert after["exposed_comm_seconds"] == pytest.approx(1.0)
    assert after["all_gather_hidden_fraction"] == pytest.approx(2 / 3)
    table = format_timeline([before, after])
    assert "exposed ms" in table and len(table.splitlines()) == 3
    assert timeline_svg(after).lstrip().startswith("<?xml")
