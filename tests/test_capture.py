"""Capture: forward/backward programs, graph breaks, checkpointing, in-place updates, recompiles."""
import torch

import trace_lab
from examples.workloads import get


def test_module_forward_and_backward_recorded_with_readable_names():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8, requires_grad=True)
    jfn = trace_lab.jit(model, executor="eager")
    out = jfn(x)
    out.sum().backward()
    fw, bw = trace_lab.last_traces(jfn), trace_lab.last_backward_traces(jfn)
    assert fw[0].kind == "forward" and bw[0].kind == "backward"
    assert fw[0].stage == "as captured"
    names = [fw[-1].name(n) for n in fw[-1].inputs]
    assert "m0_weight" in names and "m2_bias" in names
    grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    for p in model.parameters():
        p.grad = None
    x2 = x.detach().clone().requires_grad_()
    model(x2).sum().backward()
    for g, p in zip(grads, list(model.parameters()) + [x2]):
        torch.testing.assert_close(g, p.grad)


def test_function_without_autograd_is_an_inference_program():
    jfn = trace_lab.jit(lambda a, b: torch.sin(a) * b, executor="eager")
    a, b = torch.randn(5), torch.randn(5)
    torch.testing.assert_close(jfn(a, b), torch.sin(a) * b)
    assert trace_lab.last_traces(jfn)[0].kind == "inference"
    assert trace_lab.last_backward_traces(jfn) == []


def test_graph_break_records_each_graph_with_reason():
    def fn(x):
        y = torch.relu(x) + 1
        torch._dynamo.graph_break()
        return torch.cos(y) * 2

    jfn = trace_lab.jit(fn, executor="eager")
    x = torch.randn(6)
    torch.testing.assert_close(jfn(x), fn(x))
    assert len(jfn.programs) == 2
    assert jfn.programs[1].reason.startswith("graph break")
    ops = [str(n.target) for p in jfn.programs for n in p.forward.traces[0].ops]
    assert "aten.relu.default" in ops and "aten.cos.default" in ops


def test_activation_checkpointing_shows_recomputed_ops_in_backward():
    model, (x,) = get("llama2_ckpt").make("cpu", "small")
    jfn = trace_lab.jit(model, executor="eager")
    jfn(x).sum().backward()
    text = str(trace_lab.last_backward_traces(jfn)[-1])
    assert "(recomputed)" in text
    plain, (x2,) = get("llama2").make("cpu", "small")
    jplain = trace_lab.jit(plain, executor="eager")
    jplain(x2).sum().backward()
    assert "(recomputed)" not in str(trace_lab.last_backward_traces(jplain)[-1])
    # recomputation trades memory: the checkpointed forward keeps less
    assert trace_lab.last_traces(jfn)[-1].liveness().exit_bytes < trace_lab.last_traces(jplain)[-1].liveness().exit_bytes


def test_optimizer_step_keeps_inplace_updates_as_trailing_copies():
    n = 3
    step, _ = get("adam_step").make("cpu", "small", n_params=n, numel=16)
    jfn = trace_lab.jit(step, executor="eager")
    jfn()
    ops = trace_lab.last_traces(jfn)[-1].ops
    copies = [op for op in ops if op.target is torch.ops.aten.copy_.default]
    # each parameter, its exp_avg, exp_avg_sq and step counter are updated in place
    assert len(copies) == 4 * n
    # the copies are the program's last lines
    assert all(op.target is torch.ops.aten.copy_.default for op in ops[-len(copies):])


def test_shape_change_records_a_new_program():
    jfn = trace_lab.jit(lambda x: (x * 2).sum(0), executor="eager")
    jfn(torch.randn(4, 3))
    jfn(torch.randn(7, 3))
    assert len(jfn.programs) == 2
    assert "recompiled" in jfn.programs[1].reason
    first, second = (p.forward.traces[0] for p in jfn.programs)
    assert "f32[4, 3]" in str(first) and "f32[7, 3]" in str(second)
    assert "f32[7, 3]" not in str(first)
    assert trace_lab.last_traces(jfn)[0] is second


def test_attention_gradients_match_eager_on_cpu():
    """F.scaled_dot_product_attention on CPU: torch 2.13's core-aten decomposition of its CPU
    flash kernel gives wrong q/k/v gradients under AOTAutograd; capture keeps the op whole
    (trace_lab.capture.KEEP_WHOLE). Gradients here are compared with eager autograd."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 4, 10, 8) for _ in range(3))
    w = torch.randn(3, 4, 10, 8)  # a weighted loss: every gradient entry matters

    def loss(fn):
        ins = [t.clone().requires_grad_() for t in (q, k, v)]
        (fn(*ins) * w).sum().backward()
        return [t.grad for t in ins]

    def attention(a, b, c):
        return torch.nn.functional.scaled_dot_product_attention(a, b, c)

    jfn = trace_lab.jit(attention, executor="eager")
    for got, expected in zip(loss(jfn), loss(attention)):
        torch.testing.assert_close(got, expected)
    ops = {str(n.target) for n in trace_lab.last_traces(jfn)[0].ops}
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" in ops, ops


def test_dynamo_notes_about_profiler_ranges_in_the_captured_code_are_dropped(caplog):
    """Issue 26 item 3 (notebook 03): capturing ``torch.optim``'s step (which wraps itself in
    ``record_function``) logged "Profiler record function ... will be ignored" to the cell's stderr. The note
    is dropped; the step still compiles and matches eager, and other Dynamo warnings still pass."""
    import logging

    import trace_lab

    def step(x):
        with torch.autograd.profiler.record_function("my-range"):
            return torch.sin(x) * 2

    x = torch.randn(8)
    with caplog.at_level(logging.WARNING, logger="torch._dynamo"):
        out = trace_lab.jit(step, fusion="none", executor="eager")(x)
        logging.getLogger("torch._dynamo.variables.ctx_manager").warning("another note %s", 1)
    torch.testing.assert_close(out, torch.sin(x) * 2)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "will be ignored" in m], messages
    assert "another note 1" in messages
