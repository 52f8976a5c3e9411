"""nvFuser region programs fold their view steps after a first call that checks the real layouts.

The region program (trace_lab.executors.nvfuser_region.RegionProgram) runs the torch steps between nvFuser segments;
its view steps (an attention head's ``view`` and ``permute`` between two matmuls) become one stride reinterpretation
each once the first call has seen every view land on its recorded layout (trace_lab.runtime.fast_views). These
tests run the CPU stand-in of ``nvfuser_direct`` (tests/nvfuser_mock.py) and compare with eager PyTorch.
"""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode

from tests import nvfuser_mock
from trace_lab.executors.nvfuser import _view_notes
from trace_lab.executors.nvfuser_region import RegionProgram, build_definition, split_region

aten = torch.ops.aten


class _AtenCalls(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def _heads(a, w):
    q = torch.mm(torch.relu(a), w)  # a segment, then torch's mm
    h = q.view(2, 8, 2, 8).permute(0, 2, 1, 3)  # views only: torch steps
    s = h.reshape(4, 8, 8) @ a.reshape(4, 8, 8)  # torch's bmm
    return (s.exp(),)  # a segment


def _program(fn=None):
    gm = make_fx(fn or _heads)(torch.empty(16, 16, device="meta"), torch.empty(16, 16, device="meta"))
    steps, _ = split_region(gm)
    assert [k for k, _ in steps].count("fuse") == 2, steps
    runners = {id(s): (lambda ins, fd=build_definition(s, nvfuser_mock.module): fd.execute(ins))
               for kind, s in steps if kind == "fuse"}
    return RegionProgram(gm, steps, runners, multi=True)


def test_views_between_segments_fold_after_a_checked_first_call():
    program = _program()
    assert program.views is not None and program.views.fast_chosen is None
    for call in range(3):
        a, w = torch.randn(16, 16), torch.randn(16, 16)
        with _AtenCalls() as seen:
            got = program(a, w)
        torch.testing.assert_close(got[0], _heads(a, w)[0])
        views = [op for op in seen.ops if op in (aten.view.default, aten.permute.default, aten.reshape.default,
                                                  aten._unsafe_view.default)]
        if call == 0:  # the checked call runs them through aten
            assert views, seen.ops
            assert program.views.fast_chosen is True and program.views.mismatch is None
        else:  # folded: no view reaches the dispatcher
            assert not views, views
    got = program.boxed([torch.ones(16, 16), torch.ones(16, 16)])
    torch.testing.assert_close(got[0], _heads(torch.ones(16, 16), torch.ones(16, 16))[0])


def _heads_returned(a, w):
    q = torch.mm(torch.relu(a), w)  # a segment, then torch's mm
    h = q.view(2, 8, 2, 8).permute(0, 2, 1, 3)  # views only: torch steps, and a result of the region
    s = h.reshape(4, 8, 8) @ a.reshape(4, 8, 8)
    return h, s.exp()


def test_a_returned_view_folds_too_and_keeps_its_layout():
    """The region's results go to the lab's own program, so a view it returns folds like the others (llama 8L
    on the stand-in: 200 aten view calls a step fewer): later calls send no view to the dispatcher, and the
    result has eager's values and strides."""
    program = _program(_heads_returned)
    for call in range(3):
        a, w = torch.randn(16, 16), torch.randn(16, 16)
        with _AtenCalls() as seen:
            got = program(a, w)
        want = _heads_returned(a, w)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
            assert g.stride() == e.stride()
        views = [op for op in seen.ops if op in (aten.view.default, aten.permute.default, aten.reshape.default)]
        assert bool(views) == (call == 0), (call, views)
        assert program.views.fast_chosen is True


def test_a_view_that_lands_elsewhere_than_recorded_keeps_the_aten_steps():
    program = _program()
    a = torch.randn(16, 16).t().contiguous().t()  # same values and shape, column-major: its views land elsewhere
    w = torch.randn(16, 16)
    torch.testing.assert_close(program(a, w)[0], _heads(a, w)[0])
    assert program.views.fast_chosen is False and "strides" in program.views.mismatch
    notes = _view_notes({"fusion3": program})  # what the executor's notes say of it
    assert notes[1] == f"fusion3: its view steps stay aten calls: {program.views.mismatch}", notes
    for _ in range(2):  # the recorded layout again: still the aten steps, still right
        a, w = torch.randn(16, 16), torch.randn(16, 16)
        torch.testing.assert_close(program(a, w)[0], _heads(a, w)[0])



def test_the_benchmarks_ab_variant_compiles_without_folding_and_restores_it():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import steady_interleaved as si

    assert si.split_variant("memory-nvfuser~noregionviews") == ("memory-nvfuser", "noregionviews")
    assert si.split_variant("memory-nvfuser") == ("memory-nvfuser", None)
    with pytest.raises(SystemExit, match="unknown variant"):
        si.split_variant("memory-nvfuser~nothing")
    with si.variant_of("noregionviews"):
        plain = _program()
    assert plain.views is None and RegionProgram.fold_views is True and _program().views is not None
    a, w = torch.randn(16, 16), torch.randn(16, 16)
    torch.testing.assert_close(plain(a, w)[0], _heads(a, w)[0])


def _grad_and_its_transpose(g, x):
    """A linear's weight gradient as the backward hands it on: a 2-D view of a segment's result and that view's
    transpose (for the next matmul)."""
    d = (g * torch.sigmoid(x)).view(32, 8)
    return d, d.t()


def _grad_view_only(g, x):
    return ((g * torch.sigmoid(x)).view(32, 8),)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_result_handed_out_as_a_view_and_its_transpose_is_written_once(dtype):
    gm = make_fx(_grad_and_its_transpose)(*[torch.empty(4, 8, 8, device="meta", dtype=dtype) for _ in range(2)])
    steps, _ = split_region(gm)
    (seg,) = [s for kind, s in steps if kind == "fuse"]
    assert len(seg.outputs) == 1 and seg.outputs[0].target is aten.mul.Tensor, seg.outputs  # the product, once
    assert [n.target for kind, n in steps if kind == "torch"] == [aten.view.default, aten.t.default]
    program = RegionProgram(gm, steps, {id(seg): lambda ins, fd=build_definition(seg, nvfuser_mock.module):
                                        fd.execute(ins)}, multi=True)
    for _ in range(3):  # the checked first call, then folded views
        g, x = torch.randn(4, 8, 8, dtype=dtype), torch.randn(4, 8, 8, dtype=dtype)
        d, d_t = program(g, x)
        want, want_t = _grad_and_its_transpose(g, x)
        torch.testing.assert_close(d, want)
        torch.testing.assert_close(d_t, want_t)
        assert d_t.data_ptr() == d.data_ptr() and d_t.stride() == want_t.stride()  # a view of the one result

    gm = make_fx(_grad_view_only)(*[torch.empty(4, 8, 8, device="meta", dtype=dtype) for _ in range(2)])
    steps, _ = split_region(gm)  # leaving only as its view: the view stays in the segment (same bytes either way)
    assert [kind for kind, _ in steps] == ["fuse"] and steps[0][1].outputs[0].target is aten.view.default
