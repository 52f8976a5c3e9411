"""Issue 27 (Adam with nvFuser): the host time the batched runner (``batch_updates``) adds to a call.

    PYTHONPATH=$PWD python3 benchmarks/batched_runner_host.py [--updates 10 200]      # any machine

A region of N identical Adam-shaped updates (parameter, gradient, two moments, a 0-d step count each) runs batched
as one definition (trace_lab/executors/nvfuser_batch.py): the runner stacks the five inputs of every update, calls
the definition, views each of its four outputs as N slices (``unbind``) and writes all of them back with one
``torch._foreach_copy_``. Here the definition is a stand-in whose execute returns ready outputs, and the tensors
have 4 elements, so what is timed is the runner's own host work (median of 7 rounds of 200 calls), whole and by
part. nvFuser's own execute comes on top (tens of us a call on the H200)."""
import argparse
import statistics
import time

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from trace_lab.executors import nvfuser_batch
from trace_lab.executors.nvfuser_region import split_region

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--updates", type=int, nargs="+", default=[10, 200])
args = ap.parse_args()


def updates(*ts):
    for i in range(0, len(ts), 5):
        p, g, m, v, s = ts[i:i + 5]
        s.copy_(s + 1)
        m.copy_(m * 0.9 + g * 0.1)
        v.copy_(v * 0.999 + g * g * 0.001)
        p.copy_(p - 0.01 * m / (v.sqrt() + 1e-8) / (1 - 0.9 ** s))
    return ()


def median_us(fn, calls=200, rounds=7) -> float:
    for _ in range(20):
        fn()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(times)


class _Definition:  # what the runner reads of a built definition: fd.execute
    def __init__(self, group):
        outs = [torch.zeros(o.meta["val"].shape) for o in group.seg.outputs]
        self.fd = type("FD", (), {"execute": staticmethod(lambda given: outs)})()


print(f"torch {torch.__version__}; the runner's host time a call (median of 7 rounds of 200 calls)")
for n in args.updates:
    gm = make_fx(updates)(*(torch.empty(s, device="meta") for s in ([(4,)] * 4 + [()]) * n))
    steps, _ = split_region(gm)
    (seg,) = [s for kind, s in steps if kind == "fuse"]
    t = time.perf_counter()
    plan = nvfuser_batch.batch_plan(seg)
    planned = time.perf_counter() - t
    runner = nvfuser_batch.BatchedRunner(plan, [_Definition(g) for g in plan.groups])
    ins = [torch.zeros(x.meta["val"].shape) for x in seg.inputs]
    group, d = plan.groups[0], runner.definitions[0]
    stacked = [which for kind, which, _ in group.inputs if kind == "stack"]
    outs = d.fd.execute(None)
    views = [v for (view, _), o in zip(group.outputs, outs) for v in o.view(view).unbind(0)]
    dests = [ins[i] for _, into in group.outputs for i in into]
    parts = {
        "whole call": median_us(lambda: runner(ins)),
        f"stack {len(stacked)} inputs": median_us(lambda: [torch.stack([ins[i] for i in w]) for w in stacked]),
        f"unbind {len(outs)} outputs": median_us(lambda: [o.view(v).unbind(0) for (v, _), o in zip(group.outputs, outs)]),
        f"_foreach_copy_ of {len(views)} slices": median_us(lambda: torch._foreach_copy_(dests, views)),
    }
    print(f"\n{n} updates ({[g.n for g in plan.groups]} per group; planned in {planned * 1e3:.1f} ms at compile time)")
    for what, us in parts.items():
        print(f"  {what:<32} {us:8.1f} us")
