"""Layout copies in 16- or 8-byte words (trace_lab/runtime/wide_copy.py), against torch's own clone.

The widened copy must be the clone bit for bit (values, dtype, strides) for every layout it takes, refuse the
layouts it cannot take (a real transpose, words that do not divide the innermost dim, a misaligned start), and fall
back to the clone when a value arrives in another layout than the one its program was generated for. On a program,
the nvFuser executor's layout-only segments (llama's head transposes) take it, and the run still matches eager.
"""
from __future__ import annotations

import collections

import pytest
import torch

import trace_lab
from trace_lab.executors import nvfuser_region
from trace_lab.runtime.wide_copy import wide_clone, word_for


def _heads(dtype, b=2, t=8, h=4, d=16):
    """q of a fused qkv projection, as an attention layer reads it: (B, H, T, D), innermost dim contiguous."""
    qkv = torch.randn(b, t, 3 * h * d).to(dtype)
    return qkv[..., h * d: 2 * h * d].view(b, t, h, d).permute(0, 2, 1, 3)


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same_as_clone(x, got):
    """``got`` is ``x``'s contiguous clone: dtype, shape, strides, and every bit (compared as integers, so NaN
    payloads count too), in storage of its own."""
    want = x.clone(memory_format=torch.contiguous_format)
    assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    bits = _BITS[got.element_size()]
    assert torch.equal(got.view(bits), want.view(bits))
    assert got.data_ptr() != x.data_ptr()


def _every_bit_pattern(dtype, *shape, device="cpu"):
    """A tensor of ``dtype`` holding random bit patterns: NaNs with any payload (quiet and signalling ones, also
    as the halves of a float64 word), infinities and subnormals among them."""
    bits = _BITS[torch.empty((), dtype=dtype).element_size()]
    info = torch.iinfo(bits)
    g = torch.Generator(device=device).manual_seed(0)
    return torch.randint(info.min, info.max, shape, dtype=bits, generator=g, device=device).view(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.int32])
def test_head_transposes_copy_in_16_byte_words_exactly(dtype):
    x = _heads(dtype)
    assert word_for(x) is torch.complex128  # 16 elements of 2 or 4 bytes: whole 16-byte words
    _same_as_clone(x, wide_clone(word_for(x))(x, memory_format=torch.contiguous_format))
    back = x.clone().permute(0, 2, 1, 3)  # the attention output's way back: (B, H, T, D) -> (B, T, H, D)
    _same_as_clone(back, wide_clone(word_for(back))(back, memory_format=torch.contiguous_format))


def test_words_follow_the_innermost_dim_and_the_strides():
    bf16 = torch.bfloat16
    # 4 bfloat16s = 8 bytes: 8-byte words, not 16
    narrow = torch.randn(2, 3, 4).to(bf16).permute(1, 0, 2)
    assert word_for(narrow) is torch.int64
    _same_as_clone(narrow, wide_clone(torch.int64)(narrow, memory_format=torch.contiguous_format))
    # 2 bfloat16s = 4 bytes: narrower than the narrowest word
    assert word_for(torch.randn(3, 5, 2).to(bf16).permute(1, 0, 2)) is None
    # a real transpose (k^T): the innermost dim is strided, torch's clone stays
    assert word_for(torch.randn(4, 8, 16).to(bf16).transpose(1, 2)) is None
    # a start one element into a row, or a row stride of an odd number of elements: not whole words
    base = torch.randn(4, 34).to(bf16)
    assert word_for(base[:, 1:33]) is None
    assert word_for(torch.randn(4, 17).to(bf16)[:, :16]) is None
    # an element already 16 bytes wide, and bool, are left alone
    assert word_for(torch.randn(4, 8, dtype=torch.complex128).t()) is None
    assert word_for(torch.zeros(4, 16, dtype=torch.bool).t().t()) is None
    # a broadcast dim (stride 0) is whole words: the copy repeats it, as the clone does
    wide = torch.randn(1, 8, 16).to(bf16).expand(3, 8, 16)
    assert word_for(wide) is torch.complex128
    _same_as_clone(wide, wide_clone(torch.complex128)(wide, memory_format=torch.contiguous_format))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_every_bit_pattern_survives_the_words(dtype):
    """Copied as complex128 or int64 words, no NaN is quietened and no payload changes: the copy moves bits."""
    x = _every_bit_pattern(dtype, 4, 32, 3 * 4 * 16)[..., 4 * 16: 8 * 16].view(4, 32, 4, 16).permute(0, 2, 1, 3)
    assert torch.isnan(x).any()
    for word in (torch.complex128, torch.int64):
        _same_as_clone(x, wide_clone(word)(x, memory_format=torch.contiguous_format))


def test_a_value_in_another_layout_than_recorded_falls_back_to_the_clone():
    run = wide_clone(torch.complex128)
    transposed = torch.randn(4, 8, 16).to(torch.bfloat16).transpose(1, 2)  # innermost dim strided at run time
    _same_as_clone(transposed, run(transposed, memory_format=torch.contiguous_format))
    odd = torch.randn(4, 40).to(torch.bfloat16)[:, 1:33]  # starts one element (2 bytes) past a word
    assert odd.data_ptr() % 16 != 0
    _same_as_clone(odd, run(odd, memory_format=torch.contiguous_format))
    kept = _heads(torch.bfloat16)  # another memory format asked for: the clone's own
    got = run(kept, memory_format=torch.preserve_format)
    want = kept.clone(memory_format=torch.preserve_format)
    assert got.stride() == want.stride() and torch.equal(got, want)


def test_llama_head_transposes_under_nvfuser_copy_in_words_and_match_eager(monkeypatch):
    """llama2 through the nvFuser stand-in (tests/nvfuser_cpu.py), dataflow: its layout-only segments' clones of q,
    v, the attention output and their gradients run in words (k's transpose does not), and outputs, gradients and
    the measured peaks are eager's and the prediction's."""
    from examples.workloads import WORKLOADS
    from fusion_support import SCALAR_SLACK
    from tests.nvfuser_cpu import cpu_nvfuser

    cpu_nvfuser(monkeypatch)
    made = nvfuser_region.wide_clone
    layouts = collections.Counter()

    def spy(word):
        run = made(word)

        def counted(x, memory_format=torch.contiguous_format):
            layouts[tuple(x.stride())] += 1
            return run(x, memory_format=memory_format)
        return counted

    monkeypatch.setattr(nvfuser_region, "wide_clone", spy)
    fn, args = WORKLOADS["llama2"].make("cpu", "small")
    report = trace_lab.inspect(fn, *args, fusion="dataflow", executor="nvfuser", runs=1)
    assert report.ok, report.comparison
    for m in report.memory:
        assert abs(m["measured_peak_above_inputs_bytes"] - m["predicted_peak_above_inputs_bytes"]) <= SCALAR_SLACK, m
    # q and v out of the fused projection (row stride 3 x 64), the attention output and the gradients' way back
    assert {(3072, 16, 192, 1), (1024, 16, 256, 1), (1024, 16, 64, 1)} <= set(layouts), layouts
    assert all(s[-1] == 1 for s in layouts)  # k's transpose, whose innermost dim is strided, is not among them


def _clone_node(value):
    """An fx ``aten.clone(x, memory_format=contiguous)`` node whose input recorded ``value``'s layout."""
    import torch.fx as fx

    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = value
    return g.call_function(torch.ops.aten.clone.default, (x,), {"memory_format": torch.contiguous_format})


def test_the_executor_picks_words_from_the_recorded_layout_and_the_benchmarks_ab_turns_them_off():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import steady_interleaved as si

    heads = _clone_node(_heads(torch.bfloat16))
    transpose = _clone_node(torch.randn(4, 8, 16).to(torch.bfloat16).transpose(1, 2))
    assert nvfuser_region.torch_target(heads) is wide_clone(torch.complex128)
    assert nvfuser_region.torch_target(transpose) is torch.ops.aten.clone.default
    assert si.split_variant("dataflow-nvfuser~nowidecopy") == ("dataflow-nvfuser", "nowidecopy")
    with si.variant_of("nowidecopy"):
        assert nvfuser_region.torch_target(heads) is torch.ops.aten.clone.default
    assert nvfuser_region.torch_target(heads) is wide_clone(torch.complex128)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_head_transposes_on_cuda_copy_in_words_exactly(dtype):
    """On the device the words are the copy kernel's vector loads: the result is still the clone's, bit for bit
    (NaN payloads included), and an input that starts off a word's alignment takes the clone."""
    qkv = _every_bit_pattern(dtype, 4, 64, 3 * 8 * 64, device="cuda")  # NaN payloads included
    q = qkv[..., 8 * 64: 2 * 8 * 64].view(4, 64, 8, 64).permute(0, 2, 1, 3)
    run = wide_clone(word_for(q))
    _same_as_clone(q, run(q, memory_format=torch.contiguous_format))
    back = torch.randn(4, 8, 64, 64, device="cuda").to(dtype).permute(0, 2, 1, 3)
    _same_as_clone(back, run(back, memory_format=torch.contiguous_format))
    odd = torch.randn(4, 80, device="cuda").to(dtype)[:, 1:65]
    _same_as_clone(odd, run(odd, memory_format=torch.contiguous_format))
