"""Why each region ends (issue 17 item 3): every boundary of every fused region carries a reason, and the
reasons are the true ones for programs built so the answer is known."""
from __future__ import annotations

import torch

import trace_lab
from examples import workloads
from trace_lab.passes.schedule import MemoryModel  # noqa: F401 - the model the memory reasons quote


def _final(fn, args, **options):
    jfn = trace_lab.jit(fn, executor="eager", **options)
    jfn(*args)
    return jfn, trace_lab.last_traces(jfn)[-1]


def test_memory_peak_regions_end_at_the_matmuls_inductor_leaves_to_a_library():
    fn, args = workloads.get("memory_peak").make("cpu", "small")
    _, t = _final(fn, args, fusion="horizontal")
    ends = t.info["region_ends"]
    assert set(ends) == {t.name(n) for n in t.ops if n.op == "call_module"}  # every region has its reasons
    edge = [e for rows in ends.values() for e in rows if e["side"] != "next"]
    assert edge and all(e["op"] == "aten.mm.default" and e["kind"] == "executor" and "matmul" in e["reason"]
                        for e in edge)
    # the second ReLUs' region cannot take the first ReLUs': each second ReLU reads a matmul of a first one
    assert any(e["side"] == "next" and e["kind"] == "cycle" for rows in ends.values() for e in rows)


def _diamond(x, w):
    a = torch.relu(x)
    b = a @ w  # not fusible: feeds c from outside any region
    return torch.sin(a) + b


def test_a_merge_that_would_close_a_cycle_says_so():
    _, t = _final(_diamond, (torch.randn(8, 8), torch.randn(8, 8)), fusion="dataflow")
    kinds = {(e["op"], e["kind"]) for rows in t.info["region_ends"].values() for e in rows}
    assert ("aten.mm.default", "executor") in kinds
    assert any(k == "cycle" for _, k in kinds) or any(k == "executor" for _, k in kinds)
    text = trace_lab.region_ends(t)
    assert "ends at:" in text and "matmul (extern library kernel)" in text


def test_the_horizontal_cap_is_named():
    fn, args = workloads.get("memory_peak").make("cpu", "small")
    _, t = _final(fn, args, fusion="horizontal", max_region_ops=3)
    caps = [e for rows in t.info["region_ends"].values() for e in rows if e["kind"] == "cap"]
    assert caps and all("max_region_ops=3" in e["reason"] for e in caps)
    assert all(len([m for m in t.gm.get_submodule(n.target).graph.nodes if m.op == "call_function"]) <= 3
               for n in t.ops if n.op == "call_module")


def test_the_memory_strategy_says_how_much_a_refused_merge_would_raise_the_peak():
    fn, args = workloads.get("memory_peak").make("cpu", "small")
    _, t = _final(fn, args, fusion="memory")
    memory = [e for rows in t.info["region_ends"].values() for e in rows if e["kind"] == "memory"]
    raised = [e for e in memory if "raises the predicted high-water mark" in e["reason"]]
    assert raised
    # a merge the strategy refused would keep more of the ten paths' f32[256, 256] buffers alive at once
    rises = [int(e["reason"].rsplit("by ", 1)[1].split()[0].replace(",", "")) for e in raised]
    assert all(r > 0 and r % (256 * 256 * 4) == 0 for r in rises)


def test_no_regions_no_reasons():
    fn, args = workloads.get("memory_peak").make("cpu", "small")
    jfn, t = _final(fn, args, fusion="none")
    assert trace_lab.region_ends(jfn) == "no fused regions"
