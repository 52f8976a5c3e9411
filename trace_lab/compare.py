"""Compare: the differential check of a compiled run against eager PyTorch.

The eager reference runs on a deep copy of the function and its arguments (a
module, an optimizer's bound ``step``, closures' tensors are all copied
together, so side effects land on the copy). After one call of each, we compare
(1) the outputs, (2) the gradients of every leaf tensor reachable from the
function and its arguments, and (3) the values of those tensors (in-place
updates such as an optimizer step), pairing them by their position in a
deterministic walk of the two object graphs.

Tolerances are ``torch.testing.assert_close``'s dtype-aware defaults (f32:
rtol 1.3e-6, atol 1e-5; bf16: rtol 1.6e-2, atol 1e-5) widened by ``scale``:
compiled programs may reorder reductions.
"""
from __future__ import annotations

import copy
import functools
import types
from dataclasses import dataclass, field

import torch
import torch.utils._pytree as pytree

__all__ = ["reachable_tensors", "output_tensors", "Comparison", "compare_runs", "snapshot"]


def output_tensors(out) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def reachable_tensors(*objs, _depth: int = 0) -> list[torch.Tensor]:
    """Tensors reachable from modules, optimizers, bound methods, closures, containers."""
    seen: set[int] = set()
    out: list[torch.Tensor] = []

    def visit(o, depth):
        if depth > 6 or id(o) in seen:
            return
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            out.append(o)
        elif isinstance(o, torch.nn.Module):
            for t in list(o.parameters()) + list(o.buffers()):
                visit(t, depth + 1)
        elif isinstance(o, torch.optim.Optimizer):
            for g in o.param_groups:
                for p in g["params"]:
                    visit(p, depth + 1)
            for p in [p for g in o.param_groups for p in g["params"]]:
                for k in sorted(o.state.get(p, {})):
                    visit(o.state[p][k], depth + 1)
        elif isinstance(o, types.MethodType):
            visit(o.__self__, depth + 1)
        elif isinstance(o, functools.partial):
            visit(o.func, depth + 1)
            visit(o.args, depth + 1)
        elif isinstance(o, types.FunctionType):
            for cell in o.__closure__ or ():
                try:
                    visit(cell.cell_contents, depth + 1)
                except ValueError:
                    pass
        elif isinstance(o, (list, tuple)):
            for v in o:
                visit(v, depth + 1)
        elif isinstance(o, dict):
            for k in list(o):
                visit(o[k], depth + 1)

    for o in objs:
        visit(o, _depth)
    return out


@dataclass
class Snapshot:
    outputs: list[torch.Tensor]
    grads: list[torch.Tensor | None]
    values: list[torch.Tensor]


def snapshot(out, fn, args) -> Snapshot:
    tensors = reachable_tensors(fn, args)
    return Snapshot(
        outputs=[t.detach().clone() for t in output_tensors(out)],
        grads=[t.grad.detach().clone() if t.grad is not None else None for t in tensors],
        values=[t.detach().clone() for t in tensors],
    )


@dataclass
class Comparison:
    ok: bool
    max_abs_diff: float
    checked: dict = field(default_factory=dict)  # outputs / grads / values: count
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "max_abs_diff": self.max_abs_diff, "checked": self.checked, "problems": self.problems}


def _close(a: torch.Tensor, b: torch.Tensor, scale: float) -> str | None:
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {tuple(a.shape)}/{a.dtype} vs {tuple(b.shape)}/{b.dtype}"
    rtol, atol = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5)}.get(a.dtype, (1.3e-6, 1e-5))
    try:
        torch.testing.assert_close(a.cpu(), b.cpu(), rtol=rtol * scale, atol=atol * scale, equal_nan=True)
    except AssertionError as e:
        return str(e).strip().splitlines()[0]
    return None


def compare_runs(compiled: Snapshot, eager: Snapshot, scale: float = 100.0) -> Comparison:
    problems: list[str] = []
    max_diff = 0.0
    checked = {"outputs": 0, "grads": 0, "values": 0}

    def check(kind, i, a, b):
        nonlocal max_diff
        if a is None and b is None:
            return
        if (a is None) != (b is None):
            problems.append(f"{kind}[{i}]: present in one run only")
            return
        checked[kind] += 1
        if a.is_floating_point() and a.numel():
            max_diff = max(max_diff, float((a.double() - b.double()).abs().nan_to_num(0.0).max().cpu()))
        msg = _close(a, b, scale)
        if msg:
            problems.append(f"{kind}[{i}]: {msg}")

    if len(compiled.outputs) != len(eager.outputs):
        problems.append(f"{len(compiled.outputs)} output tensors vs {len(eager.outputs)} in eager")
    for kind in ("outputs", "grads", "values"):
        for i, (a, b) in enumerate(zip(getattr(compiled, kind), getattr(eager, kind))):
            check(kind, i, a, b)
    return Comparison(ok=not problems, max_abs_diff=max_diff, checked=checked, problems=problems)


def deepcopy_for_reference(fn, args):
    """(fn, args) copied together so that shared tensors stay shared; None if impossible."""
    try:
        ref = copy.deepcopy((fn, args))
    except Exception:  # noqa: BLE001 - any failure means 'no reference copy'
        return None
    # nn.Parameter.__deepcopy__ drops .grad; an optimizer step needs the same grads on the copy
    for orig, dup in zip(reachable_tensors(fn, args), reachable_tensors(*ref)):
        if orig.grad is not None and dup.grad is None and dup.shape == orig.shape:
            dup.grad = orig.grad.detach().clone()
    return ref
