"""View lines of a generated program run as one stride reinterpretation, checked once against the real layouts.

Design. A compiled program keeps many view ops outside its fused regions (a Llama layer's backward holds ~20
``permute``\\s feeding its matmuls). Each costs a dispatcher round trip (~3-5 us of host time) although its result
is known before the program runs: the capture recorded every value's size, strides and storage offset. A
*foldable* view line (a view op from :data:`VIEW_OPS`, static sizes, same dtype as its input, not a program
output) can instead build its result with ``_reinterpret_tensor(input, size, stride, offset increment)`` (what Inductor's
generated code calls ``reinterpret_tensor``), and a view that lands on its chain's root layout (``permute`` of
a ``permute``) is the root itself.

That is only right when the real layouts are the recorded ones (a region may return another strides than its
capture recorded). So :func:`plan` says what each foldable line expects; the program's first call runs the
ordinary aten view ops with a check after each (``_g_seen``); only when every check agreed do later calls run
the folded lines (:class:`FirstCallChecked`). A disagreement keeps the aten lines for good and says which line
differed (``FirstCallChecked.mismatch``). Liveness is unchanged: a folded view still aliases its base's storage.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx as fx

__all__ = ["VIEW_OPS", "ViewPlan", "plan", "unread", "FirstCallChecked", "reinterpret"]

_aten = torch.ops.aten


def _ops(*names: str) -> frozenset:
    found = []
    for name in names:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(_aten, packet, None), overload or "default", None)
        if op is not None:
            found.append(op)
    return frozenset(found)


# ops whose result always shares its input's storage (never a copy): reshape is not one of them
VIEW_OPS = _ops("permute", "t", "transpose.int", "view", "_unsafe_view", "unsqueeze", "squeeze.dim", "squeeze.dims",
                "squeeze", "expand", "slice.Tensor", "select.int", "alias", "as_strided", "diagonal", "unfold",
                "narrow")

try:  # Inductor's reinterpret_tensor(t, size, stride, offset increment): t's storage, new geometry, no dispatcher
    from torch._C._dynamo.guards import _reinterpret_tensor as reinterpret
except ImportError:  # pragma: no cover - older torch
    def reinterpret(t, size, stride, offset_increment):
        return t.as_strided(size, stride, t.storage_offset() + offset_increment)


def _static_layout(val) -> tuple | None:
    """(size, stride, storage offset, dtype) when every figure is a plain int, else None."""
    if not isinstance(val, torch.Tensor):
        return None
    try:
        size, stride, offset = tuple(val.shape), tuple(val.stride()), val.storage_offset()
    except (RuntimeError, NotImplementedError):
        return None
    if not all(type(x) is int for x in (*size, *stride, offset)):
        return None
    return size, stride, offset, val.dtype


@dataclass(frozen=True)
class ViewPlan:
    """What a foldable view line expects: its input (``source``), its chain's root (``root``), its geometry,
    its storage offset relative to its input's (``delta``), and whether it is the root itself (``identity``)."""

    source: fx.Node
    root: fx.Node
    size: tuple
    stride: tuple
    delta: int
    identity: bool


def plan(ops, outputs, dead: dict, fold_returned: bool = False) -> tuple[dict[fx.Node, ViewPlan], dict]:
    """The foldable view lines among ``ops`` (in program order) and the frees the checked and folded programs
    follow. ``outputs``: the values the program returns; ``dead``: node -> the values deleted after its line.
    A returned view folds only with ``fold_returned``: a fused region's program, whose results go to the lab's
    own program, and a backward, whose results are gradients autograd accumulates; a forward's results go to
    AOTAutograd as a caller's outputs (it replays the user-visible views) and saved values.

    A view that lands on its root's layout is the root; where the root was already deleted (a weight's
    ``permute`` of a ``permute``: the weight dies at the first), its ``del`` moves to the view's line. That
    costs no memory: the view's input shares the root's storage and is alive until that line."""
    returned = set() if fold_returned else {a for a in outputs if isinstance(a, fx.Node)}
    plans: dict[fx.Node, ViewPlan] = {}
    frees = {n: list(v) for n, v in dead.items()}
    deleted_at: dict = {}  # value -> the line whose frees delete it
    for n in ops:
        if n.op == "call_function" and n.target in VIEW_OPS and n not in returned and n.args \
                and isinstance(n.args[0], fx.Node) and n.args[0].op != "get_attr":
            src = n.args[0]
            mine, theirs = _static_layout(n.meta.get("val")), _static_layout(src.meta.get("val"))
            if mine is not None and theirs is not None and mine[3] == theirs[3]:
                root = plans[src].root if src in plans else src
                identity = root.op != "get_attr" and _static_layout(root.meta.get("val")) == mine
                if identity and root in deleted_at:  # keep the root object until this line (module docstring)
                    frees[deleted_at[root]].remove(root)
                    frees.setdefault(n, []).append(root)
                    deleted_at[root] = n
                plans[n] = ViewPlan(src, root, mine[0], mine[1], mine[2] - theirs[2], identity)
        for d in frees.get(n, ()):
            deleted_at[d] = n
    return plans, frees


def unread(plans: dict[fx.Node, ViewPlan]) -> set:
    """Folded view lines nothing reads in the fast program: every reader is a view that is its root."""
    skip: set = set()
    for n in reversed(list(plans)):
        if n.users and all(u in plans and plans[u].identity or u in skip for u in n.users):
            skip.add(n)
    return skip


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class FirstCallChecked:
    """``run(args)``: the first call runs ``checked`` (aten view lines, each followed by a layout check); later
    calls run ``fast`` (folded lines) when every check agreed, else ``plain`` (aten lines, no checks).

    ``seen(i, value, source, root)`` is the check the checked program calls after foldable line ``i``."""

    def __init__(self, plans: dict[fx.Node, ViewPlan], names: list[str], make_plain):
        self.expected = {i: (p.size, p.stride, p.delta, p.identity) for i, p in enumerate(plans.values())}
        self.names = names
        self.mismatch: str | None = None
        self.fast_chosen: bool | None = None  # None until the first call
        self._seen: dict[int, bool] = {}
        self.checked = self.fast = None
        self.make_plain = make_plain  # built only when a check disagrees
        self.run = self._first

    def seen(self, i: int, value, source, root) -> None:
        size, stride, delta, identity = self.expected[i]
        ok = (tuple(value.shape) == size and tuple(value.stride()) == stride
              and value.storage_offset() - source.storage_offset() == delta and _storage(value) == _storage(source))
        if ok and identity:
            ok = (tuple(root.shape), tuple(root.stride()), root.storage_offset(), _storage(root)) == \
                 (size, stride, value.storage_offset(), _storage(value))
        self._seen[i] = ok
        if not ok and self.mismatch is None:
            self.mismatch = (f"{self.names[i]}: recorded {list(size)} strides {list(stride)}, runs as "
                             f"{list(value.shape)} strides {list(value.stride())}")

    def _first(self, args):
        out = self.checked(args)
        self.fast_chosen = self.mismatch is None and len(self._seen) == len(self.expected)
        self.run = self.fast if self.fast_chosen else self.make_plain()
        return out

    def __call__(self, args):
        return self.run(args)
