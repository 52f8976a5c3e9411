"""Probe (issue 27 item 2): torch's copy of an attention head's permuted view, element by element vs in 8- or
16-byte words.

A llama layer under nvFuser runs its head transposes as torch clones (layout-only segments, nvFuser_region
._layout_only): torch's copy kernel moves one bfloat16 per element, where Inductor's clone kernels move wide
words. Where the innermost dim stays contiguous (q, v and the attention output: (B, T, H, D) <-> (B, H, T, D)),
the same bytes can be copied as int64 or complex128 words, 4x or 8x fewer elements. Times each way (device
time under torch.profiler, median of 50 calls after 10 warm-up), and Inductor's compiled clone for reference.

    python3 benchmarks/widened_copy_probe.py
"""
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trace_lab.runtime.wide_copy import wide_clone  # noqa: E402

if not torch.cuda.is_available():
    sys.exit("widened_copy_probe.py times CUDA copies: it needs a CUDA device")

B, T, H, D = 4, 512, 16, 64
dev = "cuda"
qkv = torch.randn(B, T, 3 * H * D, device=dev, dtype=torch.bfloat16)
q = qkv[..., : H * D].view(B, T, H, D).permute(0, 2, 1, 3)  # (B, H, T, D), D contiguous
out_grad = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16).permute(0, 2, 1, 3)  # (B, T, H, D)
kT = qkv[..., H * D: 2 * H * D].view(B, T, H, D).permute(0, 2, 3, 1)  # (B, H, D, T): a real transpose


def clone(x):
    return x.clone(memory_format=torch.contiguous_format)


def widened(word):
    """The lab's word copy (trace_lab/runtime/wide_copy.py). The first result file,
    ``results/2026-11-29-h200-83a2ad0-dirty-widened-copy-probe.txt``, timed ``torch.empty`` + ``copy_`` of the two
    word views instead: the same copy kernel on the same words."""
    run = wide_clone(word)
    return lambda x: run(x, memory_format=torch.contiguous_format)


def timed(fn, x, reps=50):
    """Device time of one call (us): the kernels' own time under torch.profiler, median over ``reps`` calls (the
    host's launch cost, which event timing of one call would add, left out)."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(10):
        fn(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn(x)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per_call = len(kernels) // reps
    assert per_call >= 1 and len(kernels) == per_call * reps, (len(kernels), reps)
    return statistics.median(sum(k.device_time for k in kernels[i * per_call:(i + 1) * per_call])
                             for i in range(reps))


compiled_clone = torch.compile(clone)
print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; bfloat16 {B}x{T}x{H}x{D} ({B*T*H*D*2/2**20:.0f} MiB)")
for name, x in (("q (B,T,H,D)->(B,H,T,D)", q), ("dq (B,H,T,D)->(B,T,H,D)", out_grad), ("k^T (a transpose)", kT)):
    ref = clone(x)
    row = [f"{name:28s} clone {timed(clone, x):7.1f} us"]
    for word in (torch.int64, torch.complex128):
        try:
            got = widened(word)(x)
        except RuntimeError as e:
            row.append(f"{str(word).split('.')[1]}: n/a ({str(e).splitlines()[0][:50]})")
            continue
        assert torch.equal(got, ref) and got.stride() == ref.stride()
        row.append(f"{str(word).split('.')[1]} {timed(widened(word), x):7.1f} us")
    assert torch.equal(compiled_clone(x), ref)
    row.append(f"inductor {timed(compiled_clone, x):7.1f} us")
    print("  ".join(row))
