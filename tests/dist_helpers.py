"""Independent checks on scheduled traces, written without the passes' own helpers."""
from __future__ import annotations

import torch

C10D = torch.ops._c10d_functional
WAIT = C10D.wait_tensor.default
GATHER = C10D.all_gather_into_tensor.default
COLLECTIVE = {GATHER, C10D.reduce_scatter_tensor.default, C10D.all_reduce.default}
VIEWS = {torch.ops.aten.view.default, torch.ops.aten.slice.Tensor}


def ops_of(trace):
    return list(trace.ops)


def first_real_consumer(wait):
    """The first op (graph order) that reads the wait's value other than through view/slice."""
    order = {n: i for i, n in enumerate(wait.graph.nodes)}
    frontier, found = [wait], []
    while frontier:
        n = frontier.pop()
        for u in n.users:
            if u.op == "call_function" and u.target in VIEWS:
                frontier.append(u)
            else:
                found.append(u)
    return min(found, key=order.__getitem__)


def schedule_facts(trace) -> dict:
    """Positions of collectives, waits and consumers in ``trace.ops`` (plain data)."""
    ops = ops_of(trace)
    pos = {n: i for i, n in enumerate(ops)}
    waits = [n for n in ops if n.op == "call_function" and n.target is WAIT]
    facts = {"n_ops": len(ops), "waits": []}
    for w in waits:
        c = w.args[0]
        consumer = first_real_consumer(w)
        between = ops[pos[w] + 1: pos.get(consumer, len(ops))]
        facts["waits"].append({
            "collective": "gather" if c.target is GATHER else str(c.target),
            "collective_pos": pos[c], "wait_pos": pos[w],
            "consumer_pos": pos.get(consumer, len(ops)),  # len(ops): the program output
            # between a sorted wait and its consumer: only views, other waits due at the same op and
            # gathers issued because this wait freed an in-flight slot; no compute
            "only_views_between": all(b.op == "call_function" and (b.target in VIEWS or b.target is GATHER or (
                b.target is WAIT and first_real_consumer(b) is consumer)) for b in between),
        })
    gathers = sorted((f for f in facts["waits"] if f["collective"] == "gather"), key=lambda f: f["collective_pos"])
    facts["gather_consumer_order"] = [f["consumer_pos"] for f in gathers]
    inflight, peak = 0, 0
    events = sorted([(f["collective_pos"], 1) for f in gathers] + [(f["wait_pos"], -1) for f in gathers])
    for _, d in events:
        inflight += d
        peak = max(peak, inflight)
    facts["peak_inflight_gathers"] = peak
    facts["gathers"] = len(gathers)
    facts["reduce_scatters"] = sum(1 for n in ops if n.op == "call_function"
                                   and n.target is C10D.reduce_scatter_tensor.default)
    return facts


def collective_bytes(trace) -> int:
    """Bytes of every collective's input and output in a program (what gloo may stage beside them)."""
    total = 0
    for n in trace.ops:
        if n.op == "call_function" and getattr(n.target, "namespace", "") == "_c10d_functional" \
                and "wait" not in str(n.target):
            for v in (n.args[0].meta["val"], n.meta["val"]):
                total += v.numel() * v.element_size()
    return total
