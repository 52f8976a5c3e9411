"""predict of programs that update their inputs (run/predict.py): an optimizer step and nvFuser's batched updates.

* ``predict(opt.step)`` stepped the real optimizer: only arguments were replaced by meta twins, and the
  optimizer (the method's object) was not one, so the "meta" run updated the user's parameters and made its
  state, while the result said nothing was run. The optimizer (as a bound method's object, an argument, or a
  notebook cell's variable under ``--meta``) now gets a meta twin, and nothing of the real one changes.
* nvFuser runs a horizontal region's identical updates as batched definitions over stacked inputs
  (executors/nvfuser_batch.py); the stacks are the region's workspace, measured on a device, so on meta they
  counted zero. ``predict`` now prices them before anything compiles (``stack_workspace``).

Expected figures are worked out by hand from the shapes, never taken from the code under test.
"""
from __future__ import annotations

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell

import trace_lab
from examples import workloads
from trace_lab.errors import TraceLabError
from tests.nvfuser_cpu import cpu_nvfuser


def _adam(n=8, numel=1024):
    step, _ = workloads.get("adam_step").make("cpu", n_params=n, numel=numel)
    return step.__self__


def _untouched(opt, params_before, grads_before) -> None:
    params = [p for g in opt.param_groups for p in g["params"]]
    assert all(torch.equal(p, b) for p, b in zip(params, params_before, strict=True))
    assert all(torch.equal(p.grad, b) for p, b in zip(params, grads_before, strict=True))
    assert not opt.state and all(p.device.type == "cpu" for p in params)


def test_predicting_an_optimizer_step_takes_no_step():
    opt = _adam()
    params = [p for g in opt.param_groups for p in g["params"]]
    before, grads = [p.detach().clone() for p in params], [p.grad.clone() for p in params]
    pred = trace_lab.predict(opt.step, strategies=["none"], executor="eager", device="cpu")
    _untouched(opt, before, grads)
    # the same step measured for real (on a deep copy): op by op, the peak is the new exp_avg_sq's value beside the
    # temporaries of one parameter's update; predicted within the suite's tolerance (1% + 1 KiB: the step counts,
    # CPU scalars beside meta tensors, are not counted on meta), and marked a lower bound (fma's scratch on meta)
    import copy

    real = copy.deepcopy(opt)
    for p, q in zip(params, [p for g in real.param_groups for p in g["params"]]):
        q.grad = p.grad.clone()
    report = trace_lab.inspect(real.step, fusion="none", executor="eager", runs=0)
    (measured,) = [m["measured_peak_above_inputs_bytes"] for m in report.memory]
    predicted = pred.peak("none", "inference")
    assert predicted <= measured <= predicted + 0.01 * measured + 1024, (predicted, measured)
    assert "prims.fma" in pred.part("none", "inference").lower_bound


def test_an_optimizer_step_wrapped_by_an_lr_scheduler_takes_no_step_either():
    """An LR scheduler replaces ``opt.step`` by a plain function holding a weak reference to the optimizer
    (torch/optim/lr_scheduler.py), so ``opt.step`` is no bound method any more; predict finds the optimizer
    behind it and steps its twin. The prediction is the plain optimizer's, figure for figure."""
    opt, plain = _adam(n=2, numel=16), _adam(n=2, numel=16)
    torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    params = [p for g in opt.param_groups for p in g["params"]]
    before, grads = [p.detach().clone() for p in params], [p.grad.clone() for p in params]
    pred = trace_lab.predict(opt.step, strategies=["none"], executor="eager", device="cpu")
    _untouched(opt, before, grads)
    want = trace_lab.predict(plain.step, strategies=["none"], executor="eager", device="cpu")
    assert pred.peak("none", "inference") == want.peak("none", "inference") > 0


def test_a_function_that_steps_an_optimizer_it_does_not_take_is_refused_before_it_runs():
    """``predict(lambda: opt.step())`` reads the optimizer from outside its arguments, where predict cannot put a
    twin; with nothing else to mix, it ran for real. It is refused first, naming the optimizer and what to pass."""
    opt = _adam(n=2, numel=16)
    params = [p for g in opt.param_groups for p in g["params"]]
    before, grads = [p.detach().clone() for p in params], [p.grad.clone() for p in params]
    with pytest.raises(TraceLabError, match=r"reads opt \(Adam, in the closure, on cpu\).*Pass it as an argument"):
        trace_lab.predict(lambda: opt.step(), strategies=["none"], executor="eager", device="cpu")
    _untouched(opt, before, grads)
    # passed as an argument, the same step is predicted on its twin
    assert trace_lab.predict(lambda o: o.step(), opt, strategies=["none"], executor="eager",
                             device="cpu").peak("none", "inference") > 0
    _untouched(opt, before, grads)


def test_meta_cell_that_steps_an_optimizer_leaves_it_as_it_was():
    ip = InteractiveShell.instance()
    ip.display_pub.publish = lambda *a, **k: None
    ip.run_line_magic("load_ext", "trace_lab")
    opt = _adam(n=3, numel=64)
    params = [p for g in opt.param_groups for p in g["params"]]
    before, grads = [p.detach().clone() for p in params], [p.grad.clone() for p in params]
    ip.user_ns["opt"] = opt
    result = ip.run_cell("%%thunder_trace --meta\nopt.step()\n")
    assert result.error_in_exec is None, result.error_in_exec
    _untouched(opt, before, grads)


def _updates(ps, gs):
    for p, g in zip(ps, gs):
        p.mul_(0.9).add_(g, alpha=0.1)


@pytest.mark.parametrize("device, stack", [("cpu", 6 * 1000 * 4), ("cuda", 24064)])  # 24,000 B rounded up to 512
def test_predict_prices_the_stacks_of_batched_updates(device, stack, monkeypatch):
    """Six identical updates of 1,000 floats: nvFuser's horizontal region stacks each update's two inputs, two
    stacks of six members (one allocation each) that the region holds at once, and writes the new values over
    the stack of the values they update (``donate_inplace``, on by default), so no third stack; dataflow keeps
    each update a region of its own, which has nothing to batch."""
    cpu_nvfuser(monkeypatch)
    g = torch.Generator().manual_seed(0)
    ps = [torch.randn(1000, generator=g) for _ in range(6)]
    gs = [torch.randn(1000, generator=g) for _ in range(6)]
    before = [p.clone() for p in ps]
    pred = trace_lab.predict(_updates, ps, gs, strategies=["horizontal", "dataflow"], executor="nvfuser",
                             device=device)
    assert all(torch.equal(p, b) for p, b in zip(ps, before))
    assert pred.peak("horizontal", "inference") == 2 * stack, str(pred)
    assert pred.peak("dataflow", "inference") == 0, str(pred)
    with_batching = pred.peak("horizontal", "inference")
    monkeypatch.setattr("trace_lab.executors.nvfuser.NvFuserExecutor.planned_workspace",
                        lambda self, trace, rounding=1: {})
    without = trace_lab.predict(_updates, ps, gs, strategies=["horizontal"], executor="nvfuser", device=device)
    assert without.peak("horizontal", "inference") == 0 < with_batching


def test_an_optimizer_passed_beside_its_model_steps_the_models_twin():
    """A training step with its model and optimizer as arguments: the backward's gradients land on the model's
    twin parameters, and the optimizer's twin must step those (one memo for all arguments), or it sees no
    gradient and its program disappears. SGD over a 64 x 64 Linear: op by op the new weight (16 KiB) and bias
    (256 B) are both alive before the copies write them back."""
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 64)
    weight = model.weight.detach().clone()

    def train(m, o, x):
        m(x).sum().backward()
        o.step()

    pred = trace_lab.predict(train, model, opt, x, strategies=["none"], device="cpu", loss=lambda out: None)
    assert [(p.kind, p.program) for p in pred.parts] == [("forward", 0), ("backward", 0), ("inference", 1)]
    assert pred.peak("none", "inference", 1) == 64 * 64 * 4 + 64 * 4
    assert torch.equal(model.weight, weight) and model.weight.grad is None and not opt.state


def test_a_compiled_regions_fma_does_not_make_the_figure_a_lower_bound(monkeypatch):
    """Adam's lerp decomposes to ``prims.fma``, whose scratch op by op is its product's temporary (unknown on meta,
    so a line holding it is a lower bound). Inside a compiled region (Inductor's, nvFuser's) nothing makes that
    temporary, so the row is exact; op by op (strategy ``none``, or the eager executor's regions) it stays marked."""
    cpu_nvfuser(monkeypatch)
    opt = _adam(n=3, numel=64)
    opt.step()  # the moments exist: the step reads and writes them

    def bounds(strategy, executor):
        pred = trace_lab.predict(opt.step, strategies=[strategy], executor=executor, device="cpu")
        (part,) = pred.parts
        return part.lower_bound

    assert bounds("horizontal", "inductor") == "" and bounds("dataflow", "nvfuser") == ""
    assert "prims.fma.default" in bounds("horizontal", "eager")
    assert "prims.fma.default" in bounds("none", "inductor")


def test_fused_away_is_the_composite_kernels_only():
    import torch.fx as fx

    from trace_lab.analysis.op_scratch import fused_away

    g = fx.Graph()
    x = g.placeholder("x")
    nodes = {name: g.call_function(op, args) for name, op, args in [
        ("fma", torch.ops.prims.fma.default, (x, x, x)), ("isinf", torch.ops.aten.isinf.default, (x,)),
        ("conv", torch.ops.aten.convolution.default, (x, x, None, [1], [0], [1], False, [0], 1)),
        ("add", torch.ops.aten.add.Tensor, (x, x))]}
    assert {name for name, n in nodes.items() if fused_away(n)} == {"fma", "isinf"}
