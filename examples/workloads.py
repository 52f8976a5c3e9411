"""Workloads: the seed programs from the Thunder/nvFuser threads, built fresh on demand.

Each :class:`Workload` has ``make(device, size) -> (fn, args)``: a new function
(or module / bound method) and its arguments, seeded, so that two calls give
identical, independent instances (one for eager, one compiled). ``size`` is
"small" (CPU tests, seconds) or "full" (the sizes of the GPU anchor figures).

* ``memory_peak``  - Thunder #1337: 10 paths of f32[256,256] relu/matmul/relu/matmul
* ``adam_step``    - Thunder #1173: ``torch.optim.Adam(...).step()`` over many params
* ``llama2`` / ``llama8`` (+ ``_ckpt``) - Llama-style decoder stack, forward+backward
* ``transformer_encoder`` - ``torch.nn.TransformerEncoderLayer`` (GELU, random LayerNorm affine parameters)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .llama import LlamaStack

__all__ = ["Workload", "WORKLOADS", "get", "memory_peak_efficient_func"]


@dataclass
class Workload:
    name: str
    description: str
    make: Callable[..., tuple]
    backward: bool


def memory_peak_efficient_func(t0s, a):
    """Thunder issue #1337's function: each path's temporaries die before the next path."""
    for t0 in t0s:
        t1 = torch.nn.functional.relu(t0)
        t2 = torch.matmul(t1, t1)
        t3 = torch.nn.functional.relu(t2)
        a = torch.matmul(t3, a)
    return a


def make_memory_peak(device="cpu", size="small", paths=10, n=256):
    g = torch.Generator().manual_seed(0)
    # scaled so that ten chained matmuls stay finite
    t0s = [(torch.randn(n, n, generator=g) / n ** 0.5).to(device) for _ in range(paths)]
    a = (torch.randn(n, n, generator=g) / n ** 0.5).to(device)
    return memory_peak_efficient_func, (t0s, a)


def make_adam_step(device="cpu", size="small", n_params=None, numel=65536):
    n_params = n_params or (200 if size == "full" else 24)
    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(numel, generator=g).to(device)) for _ in range(n_params)]
    for p in params:
        p.grad = torch.randn(numel, generator=g).to(device)
    # foreach=False: one small program per parameter, the copy-heavy shape of Thunder #1173
    opt = torch.optim.Adam(params, lr=1e-3, foreach=False)
    return opt.step, ()


def make_llama(layers, checkpoint=False):
    def make(device="cpu", size="small", dtype=None):
        if size == "full":
            d, heads, seq, batch = 1024, 16, 512, 4
            dtype = dtype or (torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32)
        else:
            d, heads, seq, batch = 64, 4, 16, 2
            dtype = dtype or torch.float32
        torch.manual_seed(0)
        model = LlamaStack(layers=layers, dim=d, heads=heads, checkpoint=checkpoint).to(device=device, dtype=dtype)
        x = torch.randn(batch, seq, d, device=device, dtype=dtype)
        return model, (x,)

    return make


def make_transformer_encoder(device="cpu", size="small"):
    d, heads, seq, batch = (512, 8, 256, 8) if size == "full" else (32, 4, 10, 3)
    torch.manual_seed(0)
    # GELU, not the default ReLU: a fused program rounds differently from eager by ~1e-7, which
    # flips ReLU's mask wherever a pre-activation sits at ~0; each flip moves a gradient by a
    # whole term (measured: linear1's gradients 1.4e-3 apart at full size on CUDA), which no f32
    # tolerance can tell from a wrong program. GELU is smooth, so gradients stay comparable.
    layer = torch.nn.TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, dropout=0.0, batch_first=True,
                                             activation="gelu")
    # Random LayerNorm affine parameters: with the default weight 1 / bias 0 the final norm's
    # outputs sum to a constant, so ``out.sum()`` would give every earlier parameter a zero
    # gradient (rounding noise), and comparing gradients with eager would test nothing.
    with torch.no_grad():
        for norm in (layer.norm1, layer.norm2):
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_(0.0, 0.1)
    layer = layer.to(device)
    x = torch.randn(batch, seq, d, device=device)
    return layer, (x,)


WORKLOADS: dict[str, Workload] = {w.name: w for w in [
    Workload("memory_peak", "Thunder #1337: 10 relu/matmul paths, f32[256,256]", make_memory_peak, False),
    Workload("adam_step", "Thunder #1173: Adam.step over many parameters (copy-heavy)", make_adam_step, False),
    Workload("llama2", "Llama-style decoder, 2 layers, fwd+bwd", make_llama(2), True),
    Workload("llama8", "Llama-style decoder, 8 layers, fwd+bwd", make_llama(8), True),
    Workload("llama2_ckpt", "Llama-style decoder, 2 layers, activation checkpointing", make_llama(2, True), True),
    Workload("llama8_ckpt", "Llama-style decoder, 8 layers, activation checkpointing", make_llama(8, True), True),
    Workload("transformer_encoder", "torch.nn.TransformerEncoderLayer, fwd+bwd", make_transformer_encoder, True),
]}


def get(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}") from None
