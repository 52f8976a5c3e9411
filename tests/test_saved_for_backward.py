"""The saved-for-backward table (issue 17 item 4): what a forward keeps for its backward, summing to the
saved part of the peak."""
from __future__ import annotations

import pytest
import torch
import torch.fx as fx

import trace_lab
from examples import workloads
from trace_lab.analysis.handover import storage_root
from trace_lab.analysis.saved import saved_for_backward


def _run(name, **options):
    fn, args = workloads.get(name).make("cpu", "small")
    jfn = trace_lab.jit(fn, **options)
    jfn(*args).sum().backward()
    return jfn


@pytest.mark.parametrize("name,fusion", [("llama2", "none"), ("llama2", "memory"), ("transformer_encoder", "none")])
def test_saved_activations_and_user_outputs_are_what_the_forward_leaves_alive(name, fusion):
    jfn = _run(name, fusion=fusion, executor="eager")
    fw, bw = trace_lab.last_traces(jfn)[-1], trace_lab.last_backward_traces(jfn)[-1]
    table = trace_lab.saved_for_backward(jfn)
    n_saved = sum(1 for n in bw.inputs if not n.name.startswith("tangent"))
    assert len(table) == n_saved  # one row per value the backward reads from the forward
    # the liveness model's bytes alive when the forward returns (above its inputs) = saved activations +
    # the user's outputs (storages not already counted)
    live = fw.liveness()
    outs = fw.output_node.args[0]
    user = [o for o in outs[:len(outs) - n_saved] if isinstance(o, fx.Node)]
    saved_roots = {storage_root(o) for o in outs[len(outs) - n_saved:] if isinstance(o, fx.Node)}
    inputs = set(fw.inputs)
    user_bytes = sum(r.meta["val"].untyped_storage().nbytes() for r in {storage_root(o) for o in user}
                     if r not in saved_roots and r not in inputs)
    assert table.activation_bytes + user_bytes == live.lines[-1].live_after - live.entry_bytes
    assert table.activation_bytes > 0


def test_rows_are_sorted_and_say_where_each_tensor_comes_from():
    jfn = _run("llama2", fusion="none", executor="eager")
    table = trace_lab.saved_for_backward(jfn)
    acts = [r for r in table if r.held_by == "activation"]
    assert [r.bytes for r in acts] == sorted((r.bytes for r in acts), reverse=True)
    assert all(r.source and "llama.py" in r.source for r in acts)  # the user's line that made it
    assert {r.held_by for r in table} == {"activation", "input"}
    by_op = {r.op: r.recomputable for r in acts}
    assert by_op.get("aten.mm.default") is False and by_op.get("aten.rsqrt.default") is True
    text = str(table)
    assert "saved activations:" in text and text.splitlines()[0].split()[:4] == ["name", "shape", "dtype", "bytes"]


def test_checkpointing_saves_less():
    plain = trace_lab.saved_for_backward(_run("llama2", fusion="none", executor="eager"))
    ckpt = trace_lab.saved_for_backward(_run("llama2_ckpt", fusion="none", executor="eager"))
    assert ckpt.activation_bytes < plain.activation_bytes


def test_without_a_backward_it_says_what_to_do():
    fn, args = workloads.get("memory_peak").make("cpu", "small")
    jfn = trace_lab.jit(fn, executor="eager")
    with torch.no_grad():
        jfn(*args)
    with pytest.raises(trace_lab.TraceLabError, match="run a forward and its backward"):
        trace_lab.saved_for_backward(jfn)
