"""Probe (issue 27 item 2, nvFuser with graphs): the backward's cat of the q/k/v gradients, four ways.

In llama's backward the gradients of q, k and v come out of their bmms as [B*H, T, D] (k's as [B*H, D, T]) and
are laid back out as [B, T, H*D] and concatenated into the gradient of the fused qkv projection. Under nvFuser
the lab runs this as torch steps: a clone of each permuted gradient (q's and v's in 16-byte words,
runtime/wide_copy.py; k's a real transpose) and aten's cat, 0.195 ms a replay for the cat alone at 86376b8
(`results/2026-11-29-h200-86376b8-replay-profile-dataflow-nvfuser.txt`), where Inductor does all of it in one
kernel of 0.052 ms. Times, as device time under torch.profiler (median of 50 calls after 10 warm-up), each way:

- ``lab``: what the lab runs today (two word clones, a clone, ``torch.cat``);
- ``cat_strided``: ``torch.cat`` straight from the permuted views along the head dim (no clones);
- ``nvfuser``: one nvFuser definition reading the bmm outputs (reshape, permute, ``fd.ops.cat``), if nvFuser is here;
- ``inductor``: ``torch.compile`` of the same function;
- ``trace_lab``: ``trace_lab.jit(fusion="dataflow", executor="nvfuser")`` of the function as the capture records
  it (plain clones, then the cat's 2-D view and its transpose, which llama's backward hands to the weight
  gradient's matmul): what the lab runs for this piece, through its own splitter, lowerings and runtime. Without
  ``aten.cat`` in nvFuser's op table that is the torch steps of ``lab``; with it
  (``results/2026-12-07-cpu-63c1699-nvfuser-cat-prototype.patch``) one definition, and the transpose shows
  whether nvFuser writes it as a copy of its own.

Every way is checked equal to ``lab``'s result first. Decides whether ``aten.cat`` should join nvFuser regions
(its lowering is ``fd.ops.cat(tensors, dim)``) or the clones before a cat should go.

    python3 benchmarks/qkv_grad_cat_probe.py
"""
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trace_lab.runtime.wide_copy import wide_clone  # noqa: E402

B, T, H, D = 4, 512, 16, 64


def _heads(gq, gk, gv):
    """The three gradients as (B, T, H, D) views of the bmm outputs (k's a transpose)."""
    q = gq.view(B, H, T, D).permute(0, 2, 1, 3)
    k = gk.view(B, H, D, T).permute(0, 3, 1, 2)
    v = gv.view(B, H, T, D).permute(0, 2, 1, 3)
    return q, k, v


_words = wide_clone(torch.complex128)


def lab(gq, gk, gv):
    q, k, v = _heads(gq, gk, gv)
    q = _words(q, memory_format=torch.contiguous_format)
    k = k.clone(memory_format=torch.contiguous_format)
    v = _words(v, memory_format=torch.contiguous_format)
    return torch.cat([t.view(B, T, H * D) for t in (q, k, v)], 2)


def captured(gq, gk, gv):
    """The piece as the capture records it: clones (the lab's runtime makes q's and v's word copies), the cat,
    its 2-D view and that view's transpose."""
    q, k, v = (t.clone(memory_format=torch.contiguous_format) for t in _heads(gq, gk, gv))
    flat = torch.cat([t.view(B, T, H * D) for t in (q, k, v)], 2).view(B * T, 3 * H * D)
    return flat, flat.t()


def trace_lab_way():
    """The piece through ``trace_lab.jit`` (dataflow + nvFuser), returning the cat's [B, T, 3HD] result."""
    try:
        import trace_lab
        from trace_lab.executors.nvfuser_ops import table_entry
        jitted = trace_lab.jit(captured, fusion="dataflow", executor="nvfuser")
    except Exception as e:  # (a probe: say why and go on with the others)
        print(f"trace_lab: not run ({str(e).splitlines()[0][:80]})")
        return None
    print(f"trace_lab: aten.cat is {'' if table_entry(torch.ops.aten.cat.default) else 'not '}in nvFuser's op table")

    def run(gq, gk, gv):
        flat, flat_t = jitted(gq, gk, gv)
        return flat.view(B, T, 3 * H * D), flat_t
    return run


def cat_strided(gq, gk, gv):
    return torch.cat(_heads(gq, gk, gv), 2).view(B, T, 3 * H * D)


def nvfuser_way():
    """One definition over the three bmm outputs, or None where nvFuser is not importable."""
    try:
        from trace_lab.executors.nvfuser_import import require_nvfuser
        nvf = require_nvfuser()
    except Exception as e:  # (a probe: say why and go on with the others)
        print(f"nvfuser: not run ({str(e).splitlines()[0][:80]})")
        return None
    with nvf.FusionDefinition() as fd:
        ins = [fd.define_tensor(sizes=list(s), strides=list(torch.empty(s).stride()), dtype=nvf.DataType.BFloat16,
                                static_sizes=True, is_cpu=False)
               for s in ((B * H, T, D), (B * H, D, T), (B * H, T, D))]
        q = fd.ops.permute(fd.ops.reshape(ins[0], [B, H, T, D]), [0, 2, 1, 3])
        k = fd.ops.permute(fd.ops.reshape(ins[1], [B, H, D, T]), [0, 3, 1, 2])
        v = fd.ops.permute(fd.ops.reshape(ins[2], [B, H, T, D]), [0, 2, 1, 3])
        fd.add_output(fd.ops.reshape(fd.ops.cat([q, k, v], 2), [B, T, 3 * H * D]))
    return lambda gq, gk, gv: fd.execute([gq, gk, gv])[0]


def timed(fn, args, reps=50):
    """Device time of one call (us): the kernels' own time under torch.profiler, median over ``reps`` calls."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(10):
        fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn(*args)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per_call = len(kernels) // reps
    assert per_call >= 1 and len(kernels) == per_call * reps, (len(kernels), reps)
    return statistics.median(sum(k.device_time for k in kernels[i * per_call:(i + 1) * per_call])
                             for i in range(reps)), per_call


def main():
    if not torch.cuda.is_available():
        sys.exit("qkv_grad_cat_probe.py times CUDA kernels: it needs a CUDA device")
    g = torch.Generator(device="cuda").manual_seed(0)
    args = [torch.randn(s, device="cuda", dtype=torch.bfloat16, generator=g)
            for s in ((B * H, T, D), (B * H, D, T), (B * H, T, D))]
    want = lab(*args)
    ways = {"lab": lab, "cat_strided": cat_strided, "nvfuser": nvfuser_way(), "inductor": torch.compile(cat_strided),
            "trace_lab": trace_lab_way()}
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; q/k/v gradients bfloat16 "
          f"B={B} T={T} H={H} D={D} ({3 * B * T * H * D * 2 / 2**20:.0f} MiB out)")
    for name, fn in ways.items():
        if fn is None:
            continue
        got = fn(*args)
        if isinstance(got, tuple):  # trace_lab's: the cat and its 2-D transpose
            got, got_t = got
            assert torch.equal(got_t, got.view(B * T, -1).t()), name
        assert torch.equal(got, want), name
        us, kernels = timed(fn, args)
        print(f"  {name:12s} {us:8.1f} us  ({kernels} kernel{'s' if kernels > 1 else ''} a call)")


if __name__ == "__main__":
    main()
