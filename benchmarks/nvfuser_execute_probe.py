"""Diagnostic for issue 27 item 1 (nvFuser's steady step is host-bound): host time of each nvFuser call in a step.

    python3 benchmarks/nvfuser_execute_probe.py [strategy] [layers]   # GPU machine: real nvFuser, llama at full size

Compiles llama (bf16, forward + backward) with ``executor="nvfuser"``, warms up, then times every
``FusionDefinition.execute`` of 10 steps on the host (no synchronisation: what the host spends launching), per
definition: calls per step, microseconds per call, its op count and most common ops. Also prints the floor, one
single-op definition executed 2,000 times, and the step's host time against the sum of its executes: what is left
is the lab's own program, the torch ops between regions and autograd. Each definition's row also gives the kernels
one call launches (from one profiled step: the launch calls inside the call's ``record_function`` range), since a
definition nvFuser splits into several kernels pays each launch's host work, and what one call costs when the
definition runs alone, 200 times in a row on one step's inputs (in a step the calls took 2-10x the one-add floor on
2026-12-07: this column says whether that is the definition or the step around it).

``--enable OPT,...`` / ``--disable OPT,...`` hand nvFuser's own options to every ``execute`` (its
``_enable_options`` / ``_disable_options``, e.g. ``--enable host_ir_lowering``, ``--disable nvtx``), the compiles
included; the first and last steps are then checked against eager PyTorch (loss and gradients, the lab's
tolerance), so an option that changes results says so. Run it once without and once with an option for the A/B.

    python3 benchmarks/nvfuser_execute_probe.py dataflow 8 --enable host_ir_lowering

(On 2026-12-07, H100, nvFuser 0.2.36: ``host_ir_lowering`` made 55 of llama's 58 gradients differ from eager's and no
execute faster; ``results/2026-12-07-h100-5378765-dirty-nvfuser-execute-probe-host-ir-ab.txt``.)
"""
import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import trace_lab  # noqa: E402
import trace_lab.executors.nvfuser as nv  # noqa: E402
from examples import workloads  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("strategy", nargs="?", default="memory")
ap.add_argument("layers", nargs="?", type=int, default=8)
ap.add_argument("--enable", default="", help="nvFuser enable options for every execute, comma-separated")
ap.add_argument("--disable", default="", help="nvFuser disable options for every execute, comma-separated")
cli = ap.parse_args()
strategy, layers = cli.strategy, cli.layers
if not torch.cuda.is_available():
    sys.exit("nvfuser_execute_probe: needs a GPU (it times nvFuser's own host path)")

from nvfuser_direct import DataType, FusionDefinition  # noqa: E402

ENABLE = [o for o in cli.enable.split(",") if o]
DISABLE = [o for o in cli.disable.split(",") if o]
if ENABLE or DISABLE:  # every execute from here on, the lab's compiles and warm-ups included
    _plain_execute = FusionDefinition.execute

    def _with_options(self, inputs, **kw):
        return _plain_execute(self, inputs, _enable_options=ENABLE, _disable_options=DISABLE, **kw)

    FusionDefinition.execute = _with_options
    print(f"nvFuser options on every execute: enable {ENABLE or '-'}, disable {DISABLE or '-'}")

with FusionDefinition() as fd:
    a = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16)
    fd.add_output(fd.ops.add(a, a))
t = torch.randn(4 * 512 * 1024, device="cuda", dtype=torch.bfloat16)
for _ in range(20):
    fd.execute([t])
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(2000):
    fd.execute([t])
floor = (time.perf_counter() - t0) / 2000
t0 = time.perf_counter()
for _ in range(2000):
    fd.fec.execute([t], device=0, _enable_options=[], _disable_options=[])
floor_fec = (time.perf_counter() - t0) / 2000
t0 = time.perf_counter()
for _ in range(2000):
    t + t
floor_torch = (time.perf_counter() - t0) / 2000
torch.cuda.synchronize()
print(f"floor: one add definition {floor * 1e6:.1f} us a call through execute, {floor_fec * 1e6:.1f} us through "
      f"fd.fec.execute; torch's t + t {floor_torch * 1e6:.1f} us")

model, (x,) = workloads.make_llama(layers)("cuda", "full")
model, x = model.to(torch.bfloat16), x.to(torch.bfloat16)
jfn = trace_lab.jit(model, fusion=strategy, executor="nvfuser")


def step():
    jfn(x).float().sum().backward()
    model.zero_grad(set_to_none=True)


def check_against_eager(when: str) -> None:
    """One step of the lab and one of eager PyTorch on the same weights: the bf16 output and every gradient,
    at the lab's tolerance for bf16 (run/compare.py). The float32 loss is not compared: it sums 2M bf16
    values, so bf16 rounding (an ulp of 16 at 2,000) adds up to more than float32's tolerance allows."""
    from trace_lab.run.compare import _close

    got_out = jfn(x)
    got_out.float().sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    want_out = model(x)
    want_out.float().sum().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    names = ["output", *(f"grad of {n}" for n, _ in model.named_parameters())]
    bad = [f"{name}: {why}" for name, a, b in zip(names, [got_out, *got], [want_out, *want])
           if (why := _close(a, b, 1.0)) is not None]
    print(f"{when} step against eager: " + ("matches (output and every gradient)" if not bad
                                             else f"DIFFERS in {len(bad)} of {len(names)}: " + "; ".join(bad[:3])))


check_against_eager("first")
for _ in range(4):
    step()
torch.cuda.synchronize()
spent: dict[int, list] = collections.defaultdict(list)
ops_of: dict[int, list] = {}
real_call = nv._SegmentRunner.__call__


class Timed:
    def __init__(self, fd, key):
        self.fd, self.key = fd, key

    def execute(self, ins):
        s = time.perf_counter()
        r = self.fd.execute(ins)
        spent[self.key].append(time.perf_counter() - s)
        return r


def wrapping_call(wrapper):
    """A ``_SegmentRunner.__call__`` that runs the segment with its definition's ``fd`` seen through
    ``wrapper(fd, key)`` (key: the definition's id), inside a ``record_function`` range named by the key."""
    def call(self, ins):
        d = self.definition
        key = id(d)
        ops_of.setdefault(key, [str(n.target).replace("aten.", "") for n in self.seg.ops])
        fd = d.fd
        d.fd = wrapper(fd, key)
        try:
            with torch.profiler.record_function(f"nvfuser_definition_{key}"):
                return real_call(self, ins)
        finally:
            d.fd = fd

    return call


timed_call = wrapping_call(Timed)


def isolated_per_call(calls: int = 200) -> dict[int, float]:
    """Definition key -> host seconds a call when the definition runs alone: one more step keeps each definition's
    first inputs, then each is executed ``calls`` times in a row on them (no synchronisation inside; the launch queue
    holds them). Beside the in-step figure it says whether a call's cost is nvFuser's own path for that definition or
    the step around it (allocator, caches). An in-place definition writes over its kept inputs: values, not time."""
    kept: dict[int, tuple] = {}

    class Keep:
        def __init__(self, fd, key):
            self.fd, self.key = fd, key

        def execute(self, ins):
            kept.setdefault(self.key, (self.fd, list(ins)))
            return self.fd.execute(ins)

    nv._SegmentRunner.__call__ = wrapping_call(Keep)
    try:
        step()
    finally:
        nv._SegmentRunner.__call__ = real_call
    torch.cuda.synchronize()
    out = {}
    for key, (fd, ins) in kept.items():
        for _ in range(5):
            fd.execute(ins)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fd.execute(ins)
        out[key] = (time.perf_counter() - t0) / calls
        torch.cuda.synchronize()
    return out


def kernels_per_call() -> dict[int, float]:
    """Definition key -> kernel launches a call, from one profiled step (launch calls inside its range)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
        torch.cuda.synchronize()
    launches: dict[int, list] = collections.defaultdict(list)
    for e in prof.events():
        if e.name.startswith("nvfuser_definition_"):
            n = sum(1 for c in _descendants(e) if "LaunchKernel" in c.name)
            launches[int(e.name.rsplit("_", 1)[1])].append(n)
    return {k: sum(v) / len(v) for k, v in launches.items()}


def _descendants(e):
    for c in e.cpu_children:
        yield c
        yield from _descendants(c)


def host_per_step(n=10) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    seconds = (time.perf_counter() - t0) / n
    torch.cuda.synchronize()
    return seconds


plain = host_per_step()
nv._SegmentRunner.__call__ = timed_call
timed = host_per_step()
per_def = {k: list(v) for k, v in spent.items()}  # the 10 timed steps' (the profiled step below adds to spent)
kernels = kernels_per_call()
nv._SegmentRunner.__call__ = real_call
check_against_eager("last")
isolated = isolated_per_call()
total = sum(sum(v) for v in per_def.values()) / 10
calls = sum(len(v) for v in per_def.values()) / 10
print(f"{strategy} + nvFuser, llama {layers} layers: host {plain * 1e3:.2f} ms a step ({timed * 1e3:.2f} ms timed); "
      f"{calls:.0f} executes a step take {total * 1e3:.2f} ms of it ({total / calls * 1e6:.1f} us each); "
      f"{len(per_def)} definitions")
rows = sorted(per_def.items(), key=lambda kv: -sum(kv[1]))
print(f"{'calls/step':>10} {'us/call':>8} {'alone us':>8} {'ms/step':>8} {'kernels':>7}  ops  (alone: the same "
      "definition executed 200 times in a row on one step's inputs)")
for key, v in rows:
    ops = ops_of[key]
    top = ", ".join(f"{op} x{k}" for op, k in collections.Counter(ops).most_common(4))
    k = kernels.get(key)
    alone = isolated.get(key)
    shown = "-" if alone is None else format(alone * 1e6, "8.1f")
    print(f"{len(v) / 10:10.1f} {sum(v) / len(v) * 1e6:8.1f} {shown:>8} "
          f"{sum(v) / 10 * 1e3:8.2f} "
          f"{'-' if k is None else format(k, '7.1f'):>7}  {len(ops)} ops: {top}")
