"""Probe (issue 27, nvFuser with graphs): llama's attention softmax as the lab lowers it, against Inductor's kernel.

In the replay profile of dataflow + nvFuser with graphs (H200, 86376b8,
`results/2026-11-29-h200-86376b8-replay-profile-dataflow-nvfuser.txt`) the softmax forward kernel took 0.41 ms for
8 layers and its backward 0.33 ms for 7. torch.compile(mode="reduce-overhead") took 0.185 ms and 0.202 ms for the
same work. That is the largest gap left to the graphs target (1.03x). The forward reads the bf16 scores once and
writes the bf16 probabilities (32 MiB each at B=4, H=16, T=512), about 14 us a layer at an H200's bandwidth.

The piece here is the capture's own ops (core ATen, softmax decomposed as the capture does it): scale, causal mask,
float softmax, cast back. It runs through the lab's splitter and lowerings (:func:`split_region`,
:func:`build_definition`, :class:`RegionProgram`, as tests/test_nvfuser_translator.py does), one definition for
each output set, beside Inductor on the same function:

- ``probs``: the bf16 probabilities only;
- ``stats``: and the row max and sum in f32, which the forward hands to the backward in training (the lab's
  forward segment returns both);
- ``stats_t``: and the probabilities' transpose, which the backward's ``P^T @ dO`` reads (the lab's segment returns
  it too). If nvFuser writes it out as a copy of its own, this way's time shows it.
- ``backward``: the softmax backward from the saved probabilities and the incoming gradient, as the capture's
  backward computes it.

Each way is checked against eager PyTorch first. Times are device time a call under torch.profiler (median of 50
calls after 10), with the kernels a call launches.

    python3 benchmarks/softmax_segment_probe.py            # GPU machine, with nvFuser: about 1 min
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
from torch._decomp import core_aten_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from qkv_grad_cat_probe import timed  # noqa: E402

B, H, T, D = 4, 16, 512, 64


def _probs(scores, mask):
    """llama's attention softmax (examples/llama.py) from the [B*H, T, T] scores a bmm made."""
    s = scores.view(B, H, T, T) / math.sqrt(D)
    s = s.masked_fill(~mask, float("-inf")).float()
    m = s.amax(-1, keepdim=True)
    e = (s - m).exp()
    total = e.sum(-1, keepdim=True)
    return (e / total).to(scores.dtype), m, total


def probs(scores, mask):
    return _probs(scores, mask)[0]


def stats(scores, mask):
    return _probs(scores, mask)


def stats_t(scores, mask):
    p, m, total = _probs(scores, mask)
    return p, m, total, p.transpose(-2, -1)


def backward(p, grad):
    """softmax's backward in float from the saved bf16 probabilities, cast back (as the capture's backward)."""
    pf, gf = p.float(), grad.float()
    return (pf * (gf - (gf * pf).sum(-1, keepdim=True))).to(p.dtype)


WAYS = {"probs": probs, "stats": stats, "stats_t": stats_t, "backward": backward}


def lab_program(fn, inputs, nvf):
    """``fn`` as the lab runs it under nvFuser: traced to core ATen, split, each segment one definition."""
    from trace_lab.executors.nvfuser_region import RegionProgram, build_definition, split_region

    gm = make_fx(fn, decomposition_table=core_aten_decompositions())(*inputs)
    steps, _ = split_region(gm)
    runners = {}
    for kind, seg in steps:
        if kind == "fuse":
            fd = build_definition(seg, nvf)
            runners[id(seg)] = lambda ins, fd=fd: fd.execute(ins)
    program = RegionProgram(gm, steps, runners, multi=True)
    n_defs = len(runners)
    return (lambda *args: tuple(program(*args))), n_defs, [k for k, _ in steps].count("torch")


def inputs_of(name: str, device: str):
    g = torch.Generator(device=device).manual_seed(0)
    if name == "backward":
        p = torch.softmax(torch.randn(B, H, T, T, device=device, generator=g), -1).to(torch.bfloat16)
        return [p, torch.randn(B, H, T, T, device=device, generator=g).to(torch.bfloat16)]
    scores = torch.randn(B * H, T, T, device=device, generator=g).to(torch.bfloat16)
    return [scores, torch.ones(T, T, dtype=torch.bool, device=device).tril()]


def _close(got, want):
    """Every output against eager's at the lab's own tolerance (``run/compare.py``)."""
    from trace_lab.run.compare import _close as close

    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        why = close(a, b, 1.0)
        assert why is None, f"output {i}: {why}"


def main(nvf=None, device="cuda", time_it=True):
    if nvf is None:
        if not torch.cuda.is_available():
            sys.exit("softmax_segment_probe.py times CUDA kernels: it needs a CUDA device")
        from trace_lab.executors.nvfuser_import import require_nvfuser
        nvf = require_nvfuser()
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; B={B} H={H} T={T} D={D}, bfloat16")
    for name, fn in WAYS.items():
        args = inputs_of(name, device)
        want = fn(*args)
        lab, n_defs, n_torch = lab_program(fn, args, nvf)
        _close(lab(*args), want)
        line = f"  {name:9s} lab: {n_defs} definition{'s' if n_defs != 1 else ''}, {n_torch} torch steps"
        if time_it:
            compiled = torch.compile(fn)
            _close(compiled(*args), want)
            (lab_us, lab_k), (ind_us, ind_k) = timed(lab, args), timed(compiled, args)
            line += f"; {lab_us:7.1f} us ({lab_k} kernels)  Inductor {ind_us:7.1f} us ({ind_k})  " \
                    f"ratio {lab_us / ind_us:.2f}x"
        print(line, flush=True)


if __name__ == "__main__":
    main()
