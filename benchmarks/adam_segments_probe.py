"""Diagnostic for issue 27 (Adam.step with graphs is device-bound): how many kernels nvFuser makes of one update.

    python3 benchmarks/adam_segments_probe.py [variant ...] [--params 8] [--show-definition]   # GPU machine
    (on a CPU: a dry run through the tests' nvFuser stand-in, the variants and their checks against eager only)

A replay of ``dataflow + nvFuser`` Adam runs 4 kernels a parameter where reduce-overhead runs 2
(results/2026-11-29-h200-a5445be-replay-profile-adam-cap112.txt): a ``no_op`` kernel on 0-d tensors, two
pointwise kernels without them and one with them. This probe builds Adam.step (``--params`` parameters of 65,536
floats, ``foreach=False``, as bench.py's adam bench) under variants of how the lab hands the update to nvFuser, checks
each against eager (3 steps, every parameter and state), and prints the kernels and device time of a step:

- ``base``: the executor as it is;
- ``noset``: ``copy_`` aliases the computed value itself, without the ``set`` in between;
- ``zerod``: ops with a 0-d result stay in torch (the step count and the bias corrections enter as 0-d inputs);
- ``stepcopy``: a ``copy_`` into a 0-d input (the step count) stays in torch;
- ``stepsplit``: the step count's whole update (its ``add`` and ``copy_``) stays in torch, the bias corrections
  are computed inside the definition from the new count;
- several joined with ``,`` (``stepsplit,noset``);
- ``NAME+hN``: the same with ``fusion="horizontal", max_region_ops=N``.
"""
import argparse
import collections
import dataclasses
import os
import re
import sys

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
from tests.nvfuser_cpu import nvfuser_device  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import trace_lab  # noqa: E402
import trace_lab.executors.nvfuser as nv  # noqa: E402
import trace_lab.executors.nvfuser_ops as nv_ops  # noqa: E402
import trace_lab.executors.nvfuser_region as nv_region  # noqa: E402
from examples import workloads  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("variants", nargs="*", default=["base", "noset", "zerod", "stepcopy"])
ap.add_argument("--params", type=int, default=8)
ap.add_argument("--show-definition", action="store_true", help="print the first definition built (nvFuser's Python)")
args = ap.parse_args()
DEVICE = nvfuser_device()  # CPU: a dry run through the tests' nvfuser_direct stand-in: the variants and the checks

aten = torch.ops.aten
COPY_ = nv_ops.FUSIBLE[aten.copy_.default]
REAL_REASON = nv_ops.fusible_reason


def _zero_d(node) -> bool:
    v = node.meta.get("val") if hasattr(node, "meta") else None
    return isinstance(v, torch.Tensor) and v.dim() == 0


def _copy_no_set(b, n):
    dest, src = n.args[0], n.args[1]
    d = dest.meta["val"]
    v = b.broadcast(b.arg(src, d.dtype), tuple(src.meta["val"].shape), tuple(d.shape), expand=True)
    if id(v) in b.inputs:
        v = b.fd.ops.set(v)
    b.aliases.append((v, b.values[dest]))
    return v


def _check_step_copy(n):
    return "copy_ into a 0-d input (probe: stays in torch)" if _zero_d(n.args[0]) else COPY_.check(n)


def _reason_zero_d(node, index_math=True, library=False):
    if node.op == "call_function" and _zero_d(node):
        return "0-d result (probe: stays in torch)"
    return REAL_REASON(node, index_math=index_math, library=library)


def _is_step_update(node) -> bool:
    """The step count's update: ``copy_`` into a 0-d input, or the 0-d value it copies."""
    if node.op != "call_function":
        return False
    if node.target is aten.copy_.default and _zero_d(node.args[0]):
        return True
    return _zero_d(node) and any(u.target is aten.copy_.default and u.args[1] is node and _zero_d(u.args[0])
                                 for u in node.users)


def _reason_step_update(node, index_math=True, library=False):
    if _is_step_update(node):
        return "the step count's update (probe: stays in torch)"
    return REAL_REASON(node, index_math=index_math, library=library)


VARIANTS = ("base", "noset", "zerod", "stepcopy", "stepsplit")


def apply(variant: str) -> None:
    """``variant``: names from VARIANTS joined with ``,`` (e.g. ``stepsplit,noset``)."""
    nv_ops.FUSIBLE[aten.copy_.default] = COPY_
    reason = REAL_REASON
    entry = COPY_
    for part in variant.split(","):
        if part == "noset":
            entry = dataclasses.replace(entry, build=_copy_no_set)
        elif part == "stepcopy":
            entry = dataclasses.replace(entry, check=_check_step_copy)
        elif part == "zerod":
            reason = _reason_zero_d
        elif part == "stepsplit":
            reason = _reason_step_update
        elif part != "base":
            sys.exit(f"unknown variant {part!r}: {', '.join(VARIANTS)} (joined with ','; each may end +hN)")
    nv_ops.FUSIBLE[aten.copy_.default] = entry
    nv.fusible_reason = nv_region.fusible_reason = reason  # the fusion pass's and the region splitter's


built = []
real_definition = nv.NvFuserExecutor._definition


def recording(self, seg, strides=None, in_place=True):
    d, hit = real_definition(self, seg, strides, in_place)
    if not hit:
        built.append(d)
    return d, hit


nv.NvFuserExecutor._definition = recording


def state(opt):
    out = []
    for group in opt.param_groups:
        for p in group["params"]:
            out.append(p.detach().clone())
            out.extend(v.detach().clone().to(p.device) for v in opt.state[p].values())
    return out


def make(n):
    fn, _ = workloads.make_adam_step(DEVICE, "full", n_params=n)
    return fn, fn.__self__


def short(name: str) -> str:
    name = name.split("(")[0]
    return re.sub(r"_g\d+$", "_gN", re.sub(r"_f\d+_c\d+_r\d+", "", name))


def run(spec: str) -> None:
    variant, _, h = spec.partition("+h")
    apply(variant)
    opts = {"fusion": "horizontal", "max_region_ops": int(h)} if h else {"fusion": "dataflow"}
    built.clear()
    fn, opt = make(args.params)
    ref_fn, ref_opt = make(args.params)
    jfn = trace_lab.jit(fn, executor="nvfuser", **opts)
    try:
        for _ in range(3):
            jfn()
            ref_fn()
    except Exception as e:  # a variant nvFuser refuses: say so, go on to the next
        print(f"\n== {spec}: failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        return
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    got, want = state(opt), state(ref_opt)
    worst = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got, want))
    steps = 3
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            jfn()
        if DEVICE == "cuda":
            torch.cuda.synchronize()
    kernels = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[short(e.name)][0] += 1
            kernels[short(e.name)][1] += e.device_time
    launches = sum(c for c, _ in kernels.values()) / steps
    device_ms = sum(t for _, t in kernels.values()) / steps / 1e3
    n = args.params
    print(f"\n== {spec} ({opts}): {len(built)} definitions built; matches eager: "
          f"{'yes' if worst < 1e-5 else 'NO'} (max abs diff {worst:.2e})")
    print(f"   a step: {launches:.0f} launches ({launches / n:.2f} a parameter), device {device_ms:.3f} ms "
          f"({device_ms * 1e3 / n:.2f} us a parameter)")
    for name, (c, t) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"   {t / steps / 1e3:8.4f} ms  {c / steps:5.1f}x  {name[:100]}")
    notes = [line for r in jfn.compilations() for line in r.all_notes() if "probe" in str(line)][:3]
    for line in notes:
        print(f"   note: {str(line)[:160]}")
    if args.show_definition and built:
        print("   first definition built:")
        print("\n".join("     " + line for line in repr(built[0].fd).splitlines()[:80]))


for spec in args.variants:
    run(spec)
