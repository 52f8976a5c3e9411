"""Diagnostic for issue 27 (Adam.step with graphs): which of a definition's in-place outputs make nvFuser split it.

    python3 benchmarks/nvfuser_inplace_segments_probe.py      # GPU machine with nvfuser_direct

The definition trace_lab builds for one Adam parameter (``dataflow``, printed by adam_segments_probe.py
--show-definition at a5445be) runs as 4 kernels: a ``no_op`` one for the 0-d step count and three pointwise ones.
Here the same definition is executed with its four outputs (param, step, exp_avg, exp_avg_sq, in that order)
written over their inputs or not, and nvFuser's kernels of one execute are counted (torch.profiler).
Then again with the 0-d inputs given as shape [1] tensors whose one dimension is a broadcast one (a static size
of 1, defined as trace_lab's builder defines inputs), so the definition has no broadcast op: nvFuser's
SegmentInplaceUpdate pass (csrc/preseg_passes/segment_inplace_update.cpp) gives an aliased output its own kernel
when it or its input meets a broadcast op's producers or consumers. Each [1] form is checked against the 0-d
form's values (to 1e-6). ``--ones-only``: the [1] forms only."""
import itertools
import os
import sys

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from nvfuser_direct import DataType, FusionDefinition  # noqa: E402,F401

OUTPUTS = ("param", "step", "exp_avg", "exp_avg_sq")


def nvfuser_fusion(fd, aliased: set, ones: bool = False) -> None:
    """trace_lab's definition of one Adam update (fp32, 65,536 elements), outputs aliased where named.
    ``ones``: the 0-d inputs come as shape [1] tensors whose dimension is a broadcast one (no broadcast op)."""
    # as trace_lab's builder defines inputs (sizes, strides, static sizes: a static size 1 is a broadcast dimension)
    zero_d = dict(sizes=[1], strides=[1], static_sizes=True) if ones else dict(shape=[], contiguity=[])
    bcast = (lambda v: v) if ones else (lambda v: fd.ops.broadcast(v, is_broadcast_dim=[True]))
    tv0 = fd.define_tensor(**zero_d, dtype=DataType.Float, is_cpu=False)  # step
    tv1 = fd.define_tensor(**zero_d, dtype=DataType.Bool, is_cpu=False)  # lerp's weight test
    tv2 = fd.define_tensor(shape=[65536], contiguity=[True], dtype=DataType.Float, is_cpu=False)  # grad
    tv3 = fd.define_tensor(shape=[65536], contiguity=[True], dtype=DataType.Float, is_cpu=False)  # exp_avg
    tv4 = fd.define_tensor(**zero_d, dtype=DataType.Float, is_cpu=False)  # lerp's weight
    tv5 = fd.define_tensor(shape=[65536], contiguity=[True], dtype=DataType.Float, is_cpu=False)  # exp_avg_sq
    tv6 = fd.define_tensor(shape=[65536], contiguity=[True], dtype=DataType.Float, is_cpu=False)  # param
    ops = fd.ops
    S = lambda v: fd.define_scalar(v, dtype=DataType.Float)  # noqa: E731
    tv13 = ops.cast(bcast(tv4), dtype=DataType.Float)
    tv14 = ops.mul(tv13, ops.sub(tv2, tv3))
    tv10 = ops.where(ops.cast(bcast(tv1), dtype=DataType.Bool), tv2, tv3)
    tv15 = ops.add(tv14, tv10)
    tv38 = ops.mul(tv15, S(1.0))
    tv19 = ops.add(ops.mul(tv5, S(0.999)), ops.mul(ops.mul(tv2, tv2), S(0.001)))
    tv28 = ops.sqrt(tv19)
    tv7 = ops.add(tv0, S(1.0))
    tv27 = ops.sqrt(ops.sub(S(1.0), ops.pow(S(0.999), tv7)))
    tv26 = ops.neg(ops.mul(ops.reciprocal(ops.sub(S(1.0), ops.pow(S(0.9), tv7))), S(0.001)))
    tv31 = ops.cast(bcast(ops.mul(tv27, tv26)), dtype=DataType.Float)
    tv32 = ops.div(tv28, tv31)
    tv36 = ops.cast(bcast(ops.mul(ops.reciprocal(tv26), S(1e-08))), dtype=DataType.Float)
    tv40 = ops.add(tv6, ops.div(tv38, ops.add(tv32, tv36)))
    for name, value, dest in (("param", tv40, tv6), ("step", tv7, tv0), ("exp_avg", tv15, tv3),
                              ("exp_avg_sq", tv19, tv5)):
        out = ops.cast(value, dtype=DataType.Float)
        if name in aliased:
            fd.add_output(out, dest)
        else:
            fd.add_output(out)


def inputs(ones: bool = False):
    g = torch.Generator(device="cuda").manual_seed(0)
    f = lambda *s: torch.randn(*s, device="cuda", generator=g)  # noqa: E731
    z = (lambda t: t.reshape(1)) if ones else (lambda t: t)  # noqa: E731
    return [z(torch.tensor(3.0, device="cuda")), z(torch.tensor(False, device="cuda")), f(65536), f(65536),
            z(torch.tensor(0.1, device="cuda")), f(65536).abs(), f(65536)]


def results(fd, ones: bool):
    """The values one execute leaves: its visible outputs, then every input (the aliased ones written over)."""
    args = inputs(ones)
    outs = fd.execute(args)
    return [o.reshape(-1) for o in outs] + [a.reshape(-1) for a in args]


def kernels(aliased: set, ones: bool = False) -> list[str]:
    with FusionDefinition() as fd:
        nvfuser_fusion(fd, aliased, ones)
    if ones:  # the same values as the 0-d form's
        with FusionDefinition() as ref:
            nvfuser_fusion(ref, aliased, False)
        worst = max(float((a.float() - b.float()).abs().max()) for a, b in zip(results(fd, True), results(ref, False)))
        if worst > 1e-6:
            raise AssertionError(f"differs from the 0-d form by {worst:.3e}")
    fd.execute(inputs(ones))
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fd.execute(inputs(ones))
        torch.cuda.synchronize()
    return [e.name.split("(")[0].replace("nvf::nvfuser_", "") for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA and "nvfuser" in e.name]


def report(aliased: tuple, ones: bool) -> None:
    label = f"{'[1] ' if ones else '0-d '}aliased {'+'.join(aliased) or 'none'}"
    try:
        names = kernels(set(aliased), ones)
        print(f"{label:44s} {len(names)} kernels: {', '.join(names)}", flush=True)
    except Exception as e:
        print(f"{label:44s} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)


ONLY_ONES = "--ones-only" in sys.argv
for ones in ((True,) if ONLY_ONES else (False, True)):
    for k in range(len(OUTPUTS) + 1):
        for aliased in itertools.combinations(OUTPUTS, k):
            report(aliased, ones)
