"""Compare: the differential check of a compiled run against eager PyTorch.

The eager reference runs on a deep copy of the function and its arguments (a
module, an optimizer's bound ``step``, closures' tensors are all copied
together, so side effects land on the copy). After one call of each, we compare
(1) the outputs, (2) the gradients of every leaf tensor reachable from the
function and its arguments, and (3) the values of those tensors (in-place
updates such as an optimizer step), pairing them by their position in a
deterministic walk of the two object graphs.

Tolerance (``TOLERANCES``): the largest absolute error, relative to the largest
magnitude in the eager tensor, at most 1e-4 for f32, 1e-2 for f16, 3e-2 for
bf16 (about 4 ulps of the largest value; compiled programs reorder reductions
and keep intermediates at other precisions), plus an absolute floor
(``ABSOLUTE_FLOOR``: 1e-5 f32, 1e-3 bf16/f16) for tensors that are zero in exact
arithmetic; integers and bools exactly. Meta tensors: shapes and dtypes only.

Random ops (dropout, ``torch.randn``, ...). Both runs start from the same generator
state: the caller captures :class:`RandomState` before the reference and restores it
after (so the compiled run, and the user's code after ``inspect``, see the state one
eager call would leave), and the fusion passes keep random ops in program order
(:mod:`trace_lab.passes.partition`). Each :func:`snapshot` records the generator state
the run ended in. Equal end states mean both runs drew the same random numbers, and the
comparison is exact (``mode='exact'``). Different end states mean they could not (an op
that draws its numbers otherwise than eager's), so an exact difference would be a false
alarm: floating tensors are then compared by distribution (``mode='statistical'``: same
shape and dtype, the same count of NaNs, zeros and infinities up to sampling noise, mean
and standard deviation within :data:`STAT_SIGMAS` standard errors), integers still
exactly, and ``note`` says so.
"""
from __future__ import annotations

import copy
import functools
import types
from dataclasses import dataclass, field

import torch
import torch.utils._pytree as pytree

__all__ = ["reachable_tensors", "output_tensors", "Comparison", "compare_runs", "snapshot", "RandomState",
           "why_not_copyable"]


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


@dataclass(eq=False)
class RandomState:
    """The default generators' states: CPU, and every CUDA device once CUDA is initialised
    (capturing never initialises CUDA)."""

    cpu: torch.Tensor
    cuda: list[torch.Tensor] | None

    @classmethod
    def capture(cls) -> "RandomState":
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        return cls(torch.get_rng_state(), cuda)

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)

    def __eq__(self, other) -> bool:
        if not isinstance(other, RandomState) or not torch.equal(self.cpu, other.cpu):
            return False
        mine, theirs = self.cuda or [], other.cuda or []
        n = min(len(mine), len(theirs))  # CUDA initialised by one run only: compare what both saw
        return all(torch.equal(a, b) for a, b in zip(mine[:n], theirs[:n]))


@dataclass
class Snapshot:
    outputs: list[torch.Tensor]
    grads: list[torch.Tensor | None]
    values: list[torch.Tensor]
    random_state: RandomState | None = None  # the generators after the run (None: unknown)


def snapshot(out, fn, args) -> Snapshot:
    tensors = reachable_tensors(fn, args)
    return Snapshot(
        outputs=[t.detach().clone() for t in output_tensors(out)],
        grads=[t.grad.detach().clone() if t.grad is not None else None for t in tensors],
        values=[t.detach().clone() for t in tensors],
        random_state=RandomState.capture(),
    )


@dataclass
class Comparison:
    ok: bool
    max_abs_diff: float
    checked: dict = field(default_factory=dict)  # outputs / grads / values: count
    problems: list[str] = field(default_factory=list)
    mode: str = "exact"  # 'statistical' when the runs drew different random numbers (module docstring)
    note: str = ""  # why the comparison is not exact, when it is not

    def to_dict(self) -> dict:
        return {"ok": self.ok, "max_abs_diff": self.max_abs_diff, "checked": self.checked, "problems": self.problems,
                "mode": self.mode, "note": self.note}


TOLERANCES = {torch.float64: 1e-7, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}
# gradients that are zero in exact arithmetic (e.g. a key bias under softmax) come out as rounding noise
ABSOLUTE_FLOOR = {torch.float64: 1e-9, torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-3}


def _close(a: torch.Tensor, b: torch.Tensor, scale: float) -> str | None:
    """None when ``a`` matches ``b``: exact for integers/bools; for floats the largest
    error relative to the reference tensor's largest magnitude is at most the
    dtype's tolerance times ``scale`` (elementwise relative error is meaningless
    for values that cancel to ~0 in bf16 gradients)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {tuple(a.shape)}/{a.dtype} vs {tuple(b.shape)}/{b.dtype}"
    if a.device.type == "meta" or b.device.type == "meta":
        return None  # no data to compare: shapes and dtypes agreed
    a, b = a.detach().cpu(), b.detach().cpu()
    if not a.is_floating_point() and not a.is_complex():
        return None if torch.equal(a, b) else "integer/bool values differ"
    if a.numel() == 0:
        return None
    a64, b64 = a.double(), b.double()
    if not torch.equal(torch.isnan(a64), torch.isnan(b64)):
        return "NaN in different places"
    a64, b64 = a64.nan_to_num(0.0, 0.0, 0.0), b64.nan_to_num(0.0, 0.0, 0.0)
    err = float((a64 - b64).abs().max())
    ref = float(b64.abs().max())
    tol = TOLERANCES.get(a.dtype, 1e-4) * scale
    atol = ABSOLUTE_FLOOR.get(a.dtype, 1e-5) * scale
    if err > atol + tol * ref:
        return f"max |diff| {err:.3g} > {atol:.0e} + {tol:.0e} x max |ref| {ref:.3g}"
    return None


# statistical comparison (random streams that differ): allowed deviation in standard errors
STAT_SIGMAS = 6.0


def _close_in_distribution(a: torch.Tensor, b: torch.Tensor, scale: float) -> str | None:
    """None when ``a`` could be another draw of ``b``'s law (see the module docstring)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {tuple(a.shape)}/{a.dtype} vs {tuple(b.shape)}/{b.dtype}"
    if not (a.is_floating_point() or a.is_complex()) or a.device.type == "meta" or a.numel() == 0:
        return _close(a, b, scale)
    a64, b64 = a.detach().cpu().double().flatten(), b.detach().cpu().double().flatten()
    if a.is_complex():
        a64, b64 = torch.view_as_real(a.detach().cpu().flatten()).double(), torch.view_as_real(
            b.detach().cpu().flatten()).double()
    n = a64.numel()
    for what, fa, fb in (("NaN", a64.isnan(), b64.isnan()), ("inf", a64.isinf(), b64.isinf()),
                         ("zero", a64 == 0, b64 == 0)):
        pa, pb = float(fa.double().mean()), float(fb.double().mean())
        p = (pa + pb) / 2
        if abs(pa - pb) > STAT_SIGMAS * (2 * p * (1 - p) / n) ** 0.5 + 1.0 / n:
            return f"{what} fraction {pa:.3g} vs {pb:.3g} (more than sampling noise)"
    fin_a, fin_b = a64[a64.isfinite()], b64[b64.isfinite()]
    if not fin_a.numel() or not fin_b.numel():
        return None
    ma, mb = float(fin_a.mean()), float(fin_b.mean())
    sa, sb = float(fin_a.std(correction=0)), float(fin_b.std(correction=0))
    ref = max(float(fin_b.abs().max()), 1e-30)
    floor = (ABSOLUTE_FLOOR.get(a.dtype, 1e-5) + TOLERANCES.get(a.dtype, 1e-4) * ref) * scale
    if abs(ma - mb) > STAT_SIGMAS * ((sa * sa + sb * sb) / n) ** 0.5 + floor:
        return f"mean {ma:.4g} vs {mb:.4g} (more than {STAT_SIGMAS:g} standard errors)"
    # standard error of a standard deviation: sigma * sqrt(kurtosis - 1) / (2 sqrt(n)); kurtosis <= 1/p for
    # a dropout-like law, so bound it generously by the sample's own fourth moment
    kurt = float(((fin_b - mb) ** 4).mean()) / max(sb ** 4, 1e-300) if sb > 0 else 1.0
    if abs(sa - sb) > STAT_SIGMAS * max(sa, sb) * (max(kurt - 1, 0.0) / (4 * n)) ** 0.5 + floor:
        return f"std {sa:.4g} vs {sb:.4g} (more than {STAT_SIGMAS:g} standard errors)"
    return None


def compare_runs(compiled: Snapshot, eager: Snapshot, scale: float = 1.0) -> Comparison:
    """Exact comparison when both runs drew the same random numbers (or their generator states
    are unknown), else statistical (module docstring)."""
    statistical = (compiled.random_state is not None and eager.random_state is not None
                   and compiled.random_state != eager.random_state)
    close = _close_in_distribution if statistical else _close
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
        if a.is_floating_point() and a.numel() and a.device.type != "meta" and a.shape == b.shape:
            max_diff = max(max_diff, float((a.double() - b.double()).abs().nan_to_num(0.0).max().cpu()))
        msg = close(a, b, scale)
        if msg:
            problems.append(f"{kind}[{i}]: {msg}")

    if len(compiled.outputs) != len(eager.outputs):
        problems.append(f"{len(compiled.outputs)} output tensors vs {len(eager.outputs)} in eager")
    for kind in ("outputs", "grads", "values"):
        for i, (a, b) in enumerate(zip(getattr(compiled, kind), getattr(eager, kind))):
            check(kind, i, a, b)
    if not statistical:
        return Comparison(ok=not problems, max_abs_diff=max_diff, checked=checked, problems=problems)
    note = ("compared statistically: the random generator ended in another state than after the eager "
            "run, so the compiled program drew other random numbers (an op that draws them otherwise than "
            f"eager); floating values compared by distribution (NaN/inf/zero fractions, mean, std within "
            f"{STAT_SIGMAS:g} standard errors), integers exactly")
    return Comparison(ok=not problems, max_abs_diff=max_diff, checked=checked, problems=problems,
                      mode="statistical", note=note)


def why_not_copyable(fn, args, kwargs=None) -> str:
    """Which of ``fn`` and its arguments cannot be deep-copied, where inside it and why (a sentence)."""
    import inspect as pyinspect

    kwargs = kwargs or {}
    try:
        names = [p.name for p in pyinspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    parts = [("the function", fn)]
    parts += [(f"argument {i}" + (f" ({names[i]!r})" if i < len(names) else ""), a) for i, a in enumerate(args)]
    parts += [(f"keyword argument {k!r}", v) for k, v in kwargs.items()]
    for label, obj in parts:
        found = _first_uncopyable(obj, "", 0)
        if found is not None:
            where, err = found
            reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
            text = f"{label}{f' at {where}' if where else ''} cannot be deep-copied ({type(err).__name__}: {reason})"
            if isinstance(err, RuntimeError) and "graph leaves" in reason:
                text += (": it is a tensor computed by autograd (not a leaf); pass it .detach() (or a leaf "
                         "tensor) if the function does not need its history")
            return text
    return "the function and its arguments copy one by one but not together (deepcopy of the pair failed)"


def _first_uncopyable(obj, where: str, depth: int):
    """(path inside ``obj``, exception) of the innermost part that fails to deep-copy; None if it copies."""
    try:
        copy.deepcopy(obj)
        return None
    except Exception as e:  # noqa: BLE001 - the failure is what we report
        err = e
    if depth < 4:
        for sub, child in _parts(obj):
            found = _first_uncopyable(child, where + sub, depth + 1)
            if found is not None:
                return found
    return where, err


def _parts(obj):
    if isinstance(obj, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        return [(f"[{k!r}]", v) for k, v in obj.items()]
    if isinstance(obj, torch.nn.Module):
        own = [(f".{k}", v) for d in (obj._parameters, obj._buffers, obj._modules) for k, v in d.items()]
        return own + [(f".{k}", v) for k, v in vars(obj).items() if not k.startswith("_")]
    if isinstance(obj, types.FunctionType):
        return [(f" (closure {n!r})", c.cell_contents) for n, c in zip(obj.__code__.co_freevars, obj.__closure__ or ())
                if c.cell_contents is not None]
    return [(f".{k}", v) for k, v in getattr(obj, "__dict__", {}).items()] if not isinstance(obj, torch.Tensor) else []


def deepcopy_for_reference(fn, args):
    """(fn, args) copied together so that shared tensors stay shared; None if impossible."""
    try:
        copied = copy.deepcopy((fn, args))
    except Exception:  # noqa: BLE001 - any failure means 'no reference copy'
        return None
    # nn.Parameter.__deepcopy__ drops .grad; an optimizer step needs it
    originals, copies = reachable_tensors(fn, args), reachable_tensors(*copied)
    if len(originals) == len(copies):
        for o, c in zip(originals, copies):
            if o.grad is not None and c.grad is None:
                c.grad = o.grad.detach().clone()
    return copied
