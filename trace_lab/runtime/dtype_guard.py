"""A compiled region checked once against the dtypes and strides it was compiled for.

An executor compiles a fused region for the dtypes the capture recorded on its inputs. A few
ops' meta functions record another dtype than their kernels return (on CPU,
``_native_batch_norm_legit_functional`` records float32 running statistics for a bfloat16 input
and returns bfloat16 ones); a region compiled for float32 then reads bfloat16 memory as float32
and computes garbage (found by the OpInfo corpus: BatchNorm's running statistics under every
fusing strategy, Inductor and nvFuser); FFTs on CPU return other strides than their meta records,
which Inductor's generated code asserts on. :func:`dtype_guarded` wraps the region's callable: on its
first call it compares the dtypes it is handed with the recorded ones; when they differ, the region
runs op by op (:func:`.codegen.generate_region`, which follows the real dtypes) from then on and a
warning names the region and the input. After the first call the check costs one list test.
"""
from __future__ import annotations

import warnings

import torch
import torch.fx as fx

__all__ = ["dtype_guarded"]


def _layout(t: torch.Tensor) -> tuple:
    """What a compiled region assumes of an input: dtype, shape and strides (a size-1 dim's stride is free)."""
    return (t.dtype, tuple(int(s) for s in t.shape),
            tuple(int(st) if int(sz) != 1 else 0 for st, sz in zip(t.stride(), t.shape)))


def _say(layout: tuple) -> str:
    dtype, shape, strides = layout
    return f"{str(dtype).replace('torch.', '')}{list(shape)} strides {strides}"


def dtype_guarded(fn, trace, node: fx.Node, eager_region):
    """``fn`` (a compiled region's callable) behind a first-call dtype check (module docstring);
    ``eager_region()`` builds the op-by-op fallback when needed."""
    expected = [_layout(a.meta.get("val")) if isinstance(a, fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)
                else None for a in node.args]
    if all(e is None for e in expected):
        return fn
    chosen: list = []

    def choose(args) -> None:
        bad = [(i, _layout(a), e) for i, (a, e) in enumerate(zip(args, expected))
               if e is not None and isinstance(a, torch.Tensor) and _layout(a) != e]
        if bad:
            i, got, want = bad[0]
            warnings.warn(f"trace_lab: fused region {node.target} was compiled for input {i} as {_say(want)}, but "
                          f"the program hands it {_say(got)} (an op whose recorded dtype or strides differ from what "
                          "it returns); the region runs op by op from now on, with the real layouts", stacklevel=3)
            chosen.append(eager_region())
        else:
            chosen.append(fn)

    def region(*args):
        if not chosen:
            choose(args)
        return chosen[0](*args)

    if hasattr(fn, "boxed"):  # a region that frees the inputs handed over in a list (codegen's donations)
        def boxed(args: list):
            if not chosen:
                choose(args)
            if chosen[0] is fn:
                return fn.boxed(args)
            try:  # op by op: the list is emptied once the region returns
                return chosen[0](*args)
            finally:
                args.clear()

        region.boxed = boxed
    for attr in ("compiled_graph", "aot_fn"):
        if hasattr(fn, attr):
            for entry in (region, getattr(region, "boxed", None)):
                if entry is not None:
                    setattr(entry, attr, getattr(fn, attr))
    return region
