"""Liveness on hand-made fx graphs: every expected byte count is worked out by hand here."""
import operator

import torch
import torch.fx as fx

from trace_lab.analysis.liveness import compute_liveness
from trace_lab.ir.trace import Trace

aten = torch.ops.aten
N = 64 * 4  # bytes of an f32[64] tensor


def f32(*shape):
    return torch.empty(*shape)


def build(ops):
    """ops: list of (name, target, args(names), val) ; inputs named 'x*'."""
    g = fx.Graph()
    env = {}
    for name, target, args, val in ops:
        if target == "input":
            node = g.placeholder(name)
        elif target == "output":
            node = g.output(tuple(env[a] for a in args))
            continue
        else:
            node = g.call_function(target, tuple(env[a] if isinstance(a, str) and a in env else a for a in args))
        node.meta["val"] = val
        env[name] = node
    gm = fx.GraphModule(torch.nn.Module(), g)
    return Trace(gm, "inference", input_names=[n for n, t, _, _ in ops if t == "input"])


def test_chain_frees_after_last_use():
    # x -> a=relu(x) -> b=mul(a,a) -> c=neg(b) -> out c
    tr = build([("x", "input", (), f32(64)), ("a", aten.relu.default, ("x",), f32(64)),
                ("b", aten.mul.Tensor, ("a", "a"), f32(64)), ("c", aten.neg.default, ("b",), f32(64)),
                ("out", "output", ("c",), None)])
    lv = compute_liveness(tr)
    assert lv.entry_bytes == N
    # line a: +N -> live 2N; line b: +N, a dies -> high 3N, live 2N; line c: +N, b dies -> high 3N, live 2N
    assert [ln.allocated for ln in lv.lines] == [N, N, N]
    assert [ln.freed for ln in lv.lines] == [0, N, N]
    assert [ln.live_after for ln in lv.lines] == [2 * N, 2 * N, 2 * N]
    assert lv.peak_bytes == 3 * N and lv.peak_above_inputs_bytes == 2 * N
    assert lv.lines[1].dead_values == [tr.name(lv.lines[0].node)]


def test_views_alias_their_base():
    # a = relu(x); v = view(a); b = neg(v): a's buffer lives until v is dead
    tr = build([("x", "input", (), f32(64)), ("a", aten.relu.default, ("x",), f32(64)),
                ("v", aten.view.default, ("a", [8, 8]), f32(8, 8)), ("b", aten.neg.default, ("v",), f32(8, 8)),
                ("out", "output", ("b",), None)])
    lv = compute_liveness(tr)
    assert [ln.allocated for ln in lv.lines] == [N, 0, N]
    # the view frees nothing when 'a' dies (v still refers to it); the buffer goes with v
    assert [ln.freed for ln in lv.lines] == [0, 0, N]
    assert lv.peak_bytes == 3 * N


def test_inputs_are_never_freed_and_outputs_kept():
    tr = build([("x", "input", (), f32(64)), ("a", aten.relu.default, ("x",), f32(64)),
                ("out", "output", ("a",), None)])
    lv = compute_liveness(tr)
    assert lv.lines[0].freed == 0  # x's last use, but the caller holds it
    assert lv.exit_bytes == 2 * N


def test_unused_output_of_multi_output_op_dies_immediately():
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = f32(4, 16)
    ln = g.call_function(aten.native_layer_norm.default, (x, [16], None, None, 1e-5))
    ln.meta["val"] = (f32(4, 16), f32(4, 1), f32(4, 1))
    y = g.call_function(operator.getitem, (ln, 0))
    y.meta["val"] = ln.meta["val"][0]
    g.output((y,))
    tr = Trace(fx.GraphModule(torch.nn.Module(), g), "inference", input_names=["x"])
    lv = compute_liveness(tr)
    big, small = 4 * 16 * 4, 4 * 4
    assert lv.lines[0].allocated == big + 2 * small
    assert lv.lines[0].freed == 2 * small  # mean and rstd nobody reads
    assert lv.peak_bytes == big + big + 2 * small


def test_cuda_rounding_to_allocator_blocks():
    tr = build([("x", "input", (), f32(10)), ("a", aten.relu.default, ("x",), f32(10)),
                ("out", "output", ("a",), None)])
    lv = compute_liveness(tr, rounding=512)
    assert lv.entry_bytes == 512 and lv.peak_bytes == 1024


def test_inplace_copy_allocates_nothing():
    tr = build([("x", "input", (), f32(64)), ("a", aten.relu.default, ("x",), f32(64)),
                ("c", aten.copy_.default, ("x", "a"), f32(64)), ("out", "output", (), None)])
    lv = compute_liveness(tr)
    assert [ln.allocated for ln in lv.lines] == [N, 0]
    assert lv.lines[1].freed == N  # a dies after the copy; x (aliased by c) stays with the caller
