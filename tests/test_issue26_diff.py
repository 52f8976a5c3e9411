"""Issue 26 item 6: ``diff``'s "moved" names the ops whose relative order changed.

Horizontal fusion hoists six independent adds into the first region; every op behind them then has
another index, and "moved" listed all of them (27 of 30 here, 56 of 58 in the issue). Moved ops are now
the common ops outside a longest common subsequence of the two orders. The reference is independent of
the code under test: the two orders read from the traces, and an LCS length by dynamic programming.
"""
from __future__ import annotations

import torch

import trace_lab
from trace_lab.analysis.diff import _placement


def g(x, w, *bs):
    y, outs = x, []
    for i in range(8):
        y = torch.tanh(y @ w) * 2
        if 2 <= i < 2 + len(bs):
            outs.append(bs[i - 2] + 1)  # independent of y: horizontal fusion hoists it into the first region
    return y, outs


def _lcs_length(a: list, b: list) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def _is_subsequence(sub: list, seq: list) -> bool:
    it = iter(seq)
    return all(x in it for x in sub)


def test_moved_is_the_complement_of_a_longest_common_subsequence():
    torch.manual_seed(0)
    args = (torch.randn(8, 8), torch.randn(8, 8) * 0.3, *[torch.randn(4) for _ in range(6)])
    jfn = trace_lab.jit(g, fusion="horizontal", executor="eager")
    out = jfn(*args)
    torch.testing.assert_close(out, g(*args))  # the fused program computes what eager does
    first, last = trace_lab.last_traces(jfn)[0], trace_lab.last_traces(jfn)[-1]
    d = trace_lab.diff(first, last)

    pa, pb = _placement(first), _placement(last)
    order_a = [n for n, _ in sorted(pa.items(), key=lambda kv: kv[1][0]) if n in pb]
    order_b = [n for n in pb if n in pa]  # b's lines in order, a region's ops in their order
    adds = {n.name for n in first.ops if n.op == "call_function" and "add" in str(n.target)}
    assert len(adds) == 6 and all(pb[n][1] == pb[min(adds)][1] for n in adds)  # hoisted into one region

    kept = [n for n in order_a if n not in set(d.moved)]
    assert _is_subsequence(kept, order_b)  # what is not "moved" keeps its relative order
    assert len(kept) == _lcs_length(order_a, order_b)  # and as few ops as possible are called moved
    assert set(d.moved) == adds  # here: exactly the six hoisted adds

    same = trace_lab.diff(first, first)
    assert same.moved == []
