"""Diagnostic for issue 27 (Adam.step under nvFuser): does one definition of N Adam updates run as few kernels?

    python3 benchmarks/nvfuser_horizontal_probe.py [--n 1 4 32]      # GPU machine with nvfuser_direct

adam_caps_probe.py at 7cbf9ae found 400 kernels a step whatever the horizontal cap: one definition of all 200
updates still ran as 2 kernels an update. NVFUSER_DUMP=segmented_fusion showed why for 4 updates: "Has segment
hints, skip un-segmented scheduling": nvFuser's MarkAliasesPrepare pass put a ``segment_set`` before each step
count's output (``set`` of a broadcast-only value, aliased to its input: a meta op, so a "bookend" no-op segment),
so the whole definition was segmented, and segments are merged along edges only: one pointwise kernel per
update plus one no-op segment. Here N updates (nvfuser_inplace_segments_probe.py's definition, [1] step inputs)
go into one definition, the step count written

- ``alias-set``: as trace_lab builds ``copy_`` (``set`` of the value, aliased to the input),
- ``alias-direct``: the computed value itself aliased to the input (no ``set``). One kernel that reads the step
  in every block and writes it in one may race: the values are checked,
- ``fresh``: a new [1] output, not aliased (the caller would copy it back: ``torch._foreach_copy_``),
- ``absent``: not an output at all (the caller increments the steps itself before the call),

and each prints nvFuser's kernels of one execute (torch.profiler), the host us of an execute (median of 50,
synchronised every call), and the largest difference from torch's own Adam arithmetic."""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from nvfuser_direct import DataType, FusionDefinition  # noqa: E402

N_EL = 65536
MODES = ("alias-set", "alias-direct", "fresh", "absent")


def update(fd, mode: str) -> None:
    """One Adam update (lr 1e-3, betas 0.9/0.999, eps 1e-8), param/exp_avg/exp_avg_sq written over their inputs."""
    one = dict(sizes=[1], strides=[1], static_sizes=True)
    ops = fd.ops
    S = lambda v: fd.define_scalar(v, dtype=DataType.Float)  # noqa: E731
    step = fd.define_tensor(**one, dtype=DataType.Float, is_cpu=False)
    grad, exp_avg, exp_avg_sq, param = (fd.define_tensor(shape=[N_EL], contiguity=[True], dtype=DataType.Float,
                                                         is_cpu=False) for _ in range(4))
    s1 = step if mode == "absent" else ops.add(step, S(1.0))  # absent: the caller has incremented it
    m = ops.add(ops.mul(exp_avg, S(0.9)), ops.mul(grad, S(0.1)))
    v = ops.add(ops.mul(exp_avg_sq, S(0.999)), ops.mul(ops.mul(grad, grad), S(0.001)))
    bc1 = ops.sub(S(1.0), ops.pow(S(0.9), s1))
    bc2 = ops.sqrt(ops.sub(S(1.0), ops.pow(S(0.999), s1)))
    denom = ops.add(ops.div(ops.sqrt(v), bc2), S(1e-8))
    p = ops.sub(param, ops.mul(ops.div(m, denom), ops.div(S(1e-3), bc1)))
    fd.add_output(p, param)
    fd.add_output(m, exp_avg)
    fd.add_output(v, exp_avg_sq)
    if mode == "alias-set":
        fd.add_output(ops.set(s1), step)
    elif mode == "alias-direct":
        fd.add_output(s1, step)
    elif mode == "fresh":
        fd.add_output(s1)


def make_inputs(n: int, seed: int = 0) -> list:
    g = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for _ in range(n):
        out += [torch.full((1,), 3.0, device="cuda"), torch.randn(N_EL, device="cuda", generator=g),
                torch.randn(N_EL, device="cuda", generator=g), torch.rand(N_EL, device="cuda", generator=g),
                torch.randn(N_EL, device="cuda", generator=g)]
    return out


def reference(ins: list, mode: str) -> list:
    """torch's arithmetic of the same update: (step, param, exp_avg, exp_avg_sq) of each update after one call."""
    out = []
    for k in range(0, len(ins), 5):
        step, grad, m, v, p = (t.clone() for t in ins[k:k + 5])
        s1 = step if mode == "absent" else step + 1
        m = m * 0.9 + grad * 0.1
        v = v * 0.999 + grad * grad * 0.001
        denom = v.sqrt() / (1 - 0.999 ** s1).sqrt() + 1e-8
        p = p - (m / denom) * (1e-3 / (1 - 0.9 ** s1))
        out += [s1, p, m, v]
    return out


def probe(n: int, mode: str) -> str:
    with FusionDefinition() as fd:
        for _ in range(n):
            update(fd, mode)
    ins = make_inputs(n)
    want = reference(ins, mode)
    res = fd.execute(ins)
    got = []
    for k in range(n):
        step, _, m, v, p = ins[5 * k:5 * k + 5]
        got += [res[k] if mode == "fresh" else step, p, m, v]
    worst = max(float((a - b).abs().max()) for a, b in zip(got, want))
    ins = make_inputs(n, 1)
    fd.execute(ins)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fd.execute(ins)
        torch.cuda.synchronize()
    names = [e.name.split("(")[0].replace("nvf::nvfuser_", "") for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA]
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        fd.execute(ins)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    kinds = {x: names.count(x) for x in dict.fromkeys(names)}
    return (f"n={n:3d} {mode:12s} {len(names):4d} kernels ({', '.join(f'{k} x{c}' for k, c in kinds.items())}), "
            f"execute {statistics.median(times) * 1e6:8.1f} us, max diff from torch {worst:.2e}")


ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--n", type=int, nargs="+", default=[1, 4, 32])
ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
args = ap.parse_args()
for n in args.n:
    for mode in args.modes:
        try:
            print(probe(n, mode), flush=True)
        except Exception as e:  # a refused definition is a result here
            print(f"n={n:3d} {mode:12s} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
