"""Calling an Inductor region costs only Inductor's generated wrapper (issue 14: the H100 llama step was
host-bound on AOTAutograd's inference wrapper around each of ~98 region calls per step).

``compile_region`` compiles through ``compile_fx`` as ``torch._inductor.compile`` does and returns a
function that calls the ``CompiledFxGraph``'s ``current_callable`` directly; these tests check that no
AOTAutograd (or ``torch._dynamo.disable``) frame runs inside a region call, that outputs, views of
inputs, gradients and the region workspace are what eager and the AOTAutograd callable give.
"""
from __future__ import annotations

import sys

import torch
import torch.fx as fx

import trace_lab
from trace_lab.executors.inductor import compile_region
from trace_lab.executors.workspace import measure_workspace

aten = torch.ops.aten
WRAPPER_FILES = ("_aot_autograd", "eval_frame.py")  # AOTAutograd's runtime wrappers, torch._dynamo.disable


def python_frames(fn, *args):
    """(result, list of (file, function) of every Python frame entered while ``fn(*args)`` runs)."""
    seen = []

    def prof(frame, event, _arg):
        if event == "call":
            seen.append((frame.f_code.co_filename, frame.f_code.co_name))

    sys.setprofile(prof)
    try:
        out = fn(*args)
    finally:
        sys.setprofile(None)
    return out, seen


def wrapper_frames(frames):
    return sorted(f for f in frames if any(w in f[0] for w in WRAPPER_FILES))


def region_gm(fn) -> fx.GraphModule:
    return fx.symbolic_trace(fn)


def views_region(x, y):
    a = aten.sin.default(x)
    b = aten.view.default(a, [4, 4])
    c = aten.split.Tensor(b, 2)
    return (c[0], c[1], b, aten.t.default(y), aten.add.Tensor(x, 1))


def test_region_call_skips_aotautograd_runtime_wrapper():
    x, y = torch.randn(16), torch.randn(3, 5)
    fn = compile_region(region_gm(views_region), [torch.empty(16), torch.empty(3, 5)])
    from torch._inductor.output_code import CompiledFxGraph

    assert isinstance(fn.compiled_graph, CompiledFxGraph)
    out, frames = python_frames(fn, x, y)
    assert wrapper_frames(frames) == []
    # the premise: the AOTAutograd callable of the same compilation does go through those frames
    ref, aot_frames = python_frames(fn.aot_fn, x, y)
    assert wrapper_frames(aot_frames)
    assert isinstance(out, tuple) and len(out) == len(ref) == 5
    for o, r in zip(out, ref):
        assert o.shape == r.shape and o.stride() == r.stride() and o.storage_offset() == r.storage_offset()
        torch.testing.assert_close(o, r)
    # y.t() is returned in y's storage, as the AOTAutograd wrapper returns it
    assert out[3].untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    torch.testing.assert_close(out[4], x + 1)


def test_region_call_with_grad_enabled_runs_as_inference():
    x = torch.randn(16, requires_grad=True)
    fn = compile_region(region_gm(lambda a: (aten.mul.Tensor(aten.exp.default(a), 2.0),)), [torch.empty(16)])
    (out,) = fn(x)
    assert not out.requires_grad and torch.is_grad_enabled()
    torch.testing.assert_close(out, x.detach().exp() * 2)


def test_region_workspace_measured_through_direct_call():
    fn = compile_region(region_gm(lambda a: (aten.sum.dim_IntList(aten.exp.default(a), [1]),)),
                        [torch.empty(64, 32)])
    assert hasattr(fn, "compiled_graph")
    workspace, out_bytes, (aliases, storage) = measure_workspace(fn, [torch.empty(64, 32)], 1)
    assert aliases == [None] and storage == [64 * 4]
    assert out_bytes in (None, 64 * 4)


def block(x, w):
    for _ in range(3):
        x = torch.tanh(x * 1.5 + 0.25) @ w
    return (x.sin() * x).sum()


def test_jitted_program_regions_are_direct_and_match_eager():
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(8, 8, generator=g)
    w0 = torch.randn(8, 8, generator=g) * 0.3
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    expected = block(x, w)
    expected.backward()

    jfn = trace_lab.jit(block, fusion="dataflow", executor="inductor")
    xj, wj = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    out = jfn(xj, wj)
    out.backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(xj.grad, x.grad)
    torch.testing.assert_close(wj.grad, w.grad)

    forward = jfn.programs[0].forward.compiled
    assert forward.regions
    runners = [v for k, v in forward.run.__globals__.items() if k.startswith("_g_r")]
    assert runners and all(hasattr(r, "compiled_graph") for r in runners)

    # steady state: AOTAutograd's runtime wrapper runs for the captured program, not once per region
    xj.grad = wj.grad = None
    _, frames = python_frames(lambda: jfn(xj, wj).backward())
    calls = sum(1 for f in frames if "_aot_autograd" in f[0] and f[1] == "runtime_wrapper")
    n_regions = sum(len(p.compiled.regions) for p in jfn.programs[0].parts)
    assert n_regions > 2 and calls <= 2  # the captured forward's (and backward's) own, none per region
    torch.testing.assert_close(xj.grad, x.grad)
    torch.testing.assert_close(wj.grad, w.grad)


def test_first_call_starts_inductor_compile_workers_before_capture(monkeypatch):
    """Issue 27 (first iteration): on a machine with CUDA, a jit whose programs run regions through Inductor starts
    Inductor's compile workers at its first call, before Dynamo captures (as torch.compile's backend does), so that
    the first regions' kernels do not compile in this process while the pool boots; other executors, fusion="none"
    and later calls start nothing. (CUDA is reported available here; the programs run where the inputs are.)"""
    import torch._inductor.async_compile as async_compile
    import trace_lab.run.jit
    from trace_lab.capture.session import CaptureSession

    events = []
    monkeypatch.setattr(async_compile, "maybe_warm_pool", lambda: events.append("warm"))
    original = CaptureSession.backend
    monkeypatch.setattr(CaptureSession, "backend", lambda self, gm, ex: (events.append("capture"), original(self, gm, ex))[1])
    monkeypatch.setattr(trace_lab.run.jit, "_cuda_available", lambda: True)

    def f(x):
        return (x.sin() * 2).cos()

    x = torch.randn(8)
    for executor, fusion, expected in (("inductor", "dataflow", ["warm", "capture"]), ("eager", "dataflow", ["capture"]),
                                       ("inductor", "none", ["capture"])):
        events.clear()
        jf = trace_lab.jit(f, executor=executor, fusion=fusion)
        torch.testing.assert_close(jf(x), f(x))
        assert events == expected, (executor, fusion)
        events.clear()
        torch.testing.assert_close(jf(x + 1), f(x + 1))
        assert events == [], "a later call starts nothing"
