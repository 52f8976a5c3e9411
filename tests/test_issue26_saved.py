"""Issue 26 item 6: ``saved_for_backward`` after a graph break pairs each forward with its own backward.

With two programs the backwards run in reverse order, so "the last forward" (program 1) and "the last
backward" (program 0's) are not a pair: the table was program 1's last two outputs, 0 bytes, two
"input" rows. What eager autograd saves (saved-tensor hooks) is the reference: program 0 keeps the tanh
output, program 1 something of the relu's [64, 512] result.
"""
from __future__ import annotations

import torch
import torch.fx as fx

import trace_lab
from trace_lab.analysis.handover import storage_root


def f(x, w1, w2):
    h = torch.tanh(x @ w1)
    print("", end="")  # a graph break: two programs
    return (torch.relu(h @ w2) * 3).sum()


def _args():
    torch.manual_seed(0)
    return torch.randn(64, 128), torch.randn(128, 256, requires_grad=True), torch.randn(256, 512, requires_grad=True)


def _eager_saved(args):
    """The shape of every tensor eager autograd saves for the backward."""
    saved = []

    def pack(t):
        saved.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        f(*args)
    return saved


def test_graph_break_pairs_each_forward_with_its_own_backward():
    args = _args()
    jfn = trace_lab.jit(f, fusion="none", executor="eager")
    out = jfn(*args)
    out.backward()
    expected = f(*(a.detach().requires_grad_(a.requires_grad) for a in args))
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)  # the compiled step is the eager one
    assert len(jfn.programs) == 2 and all(p.backward is not None and p.backward.traces for p in jfn.programs)

    table = trace_lab.saved_for_backward(jfn)
    assert {r.program for r in table} == {0, 1}
    for p in jfn.programs:
        fw, bw = p.forward.traces[-1], p.backward.traces[-1]
        rows = [r for r in table if r.program == p.index]
        n_saved = sum(1 for n in bw.inputs if not n.name.startswith("tangent"))
        assert len(rows) == n_saved  # one row per value this program's backward reads
        # the activations are what the liveness model holds when this forward returns, less the user's outputs
        outs = fw.output_node.args[0]
        saved_roots = {storage_root(o) for o in outs[len(outs) - n_saved:] if isinstance(o, fx.Node)}
        user = {storage_root(o) for o in outs[:len(outs) - n_saved] if isinstance(o, fx.Node)}
        user_bytes = sum(r.meta["val"].untyped_storage().nbytes() for r in user
                         if r not in saved_roots and r not in set(fw.inputs))
        live = fw.liveness()
        assert sum(r.bytes for r in rows if r.held_by == "activation") + user_bytes == \
            live.lines[-1].live_after - live.entry_bytes

    eager = _eager_saved(args)
    acts = {r.program: r for r in table if r.held_by == "activation"}
    # program 0 keeps the tanh output, as eager's tanh does: [64, 256] float32
    assert (64, 256) in eager and acts[0].op == "aten.tanh.default" and acts[0].shape == (64, 256)
    assert acts[0].bytes == 64 * 256 * 4
    # program 1 keeps what the relu's backward needs, of the relu's shape (eager saves the [64, 512] output)
    assert (64, 512) in eager and acts[1].shape == (64, 512) and acts[1].bytes > 0
    assert table.activation_bytes == sum(r.bytes for r in acts.values())
    text = str(table)
    assert text.splitlines()[0].split()[:2] == ["program", "name"] and "2 programs (a graph break)" in text


def test_one_program_table_is_unchanged():
    def g(x, w):
        return torch.tanh(x @ w).sum()

    x, w = torch.randn(8, 16), torch.randn(16, 32, requires_grad=True)
    jfn = trace_lab.jit(g, fusion="none", executor="eager")
    jfn(x, w).backward()
    table = trace_lab.saved_for_backward(jfn)
    assert {r.program for r in table} == {0}
    assert str(table).splitlines()[0].split()[:4] == ["name", "shape", "dtype", "bytes"]
    assert "programs (a graph break)" not in str(table)
