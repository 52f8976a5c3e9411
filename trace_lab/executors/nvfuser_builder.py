"""The nvFuser translator's builder: a FusionDefinition under construction, with fx node -> nv value bookkeeping.

Design. :class:`Builder` holds the open ``fd`` and the nv value of every fx node already
translated (always in the node's recorded dtype); its helpers are what every op's lowering
(:mod:`.nvfuser_lowerings`) is written with: torch -> nvFuser dtypes, inputs and Python
scalars, casts, numpy-style broadcasting made explicit (squeeze, ``broadcast_in_dim``), and
:meth:`Builder.finish`, the cast back from the computation dtype (f32 for bf16/f16) to the
dtype eager produces. Imports without nvFuser (``nvf`` is passed in).
"""
from __future__ import annotations

import torch
import torch.fx as fx

_LOW = (torch.float16, torch.bfloat16)


def _val(x):
    return x.meta.get("val") if isinstance(x, fx.Node) else x


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in _LOW else dtype


class Builder:
    """Translates one fused segment's nodes into ops on ``fd`` (an open FusionDefinition)."""

    def __init__(self, fd, nvf, ones_broadcast: bool = False):
        self.fd = fd
        self.nvf = nvf
        self.ones_broadcast = ones_broadcast  # every size-1 dim is a broadcast dim already (Segment.ones_broadcast)
        self.values: dict[fx.Node, object] = {}  # node -> nv value, always of the node's meta dtype
        self.inputs: set[int] = set()
        self.aliases: list[tuple] = []  # (value, input it is written into, value before its set) from copy_
        self.lifted: set[int] = set()  # 0-d values held as [1] * rank with broadcast dims (nvfuser_region.lifted_inputs)

    # -- types --------------------------------------------------------------------------
    def nvdtype(self, dtype):
        DT = self.nvf.DataType
        return {torch.float32: DT.Float, torch.float16: DT.Half, torch.bfloat16: DT.BFloat16,
                torch.float64: DT.Double, torch.int64: DT.Int, torch.int32: DT.Int32, torch.bool: DT.Bool,
                float: DT.Double, int: DT.Int, bool: DT.Bool}[dtype]

    def define_input(self, node: fx.Node, strides=None, sizes=None):
        t = node.meta["val"]
        is_cpu = t.device.type == "cpu"
        v = self.fd.define_tensor(sizes=list(sizes if sizes is not None else t.shape),
                                  strides=list(strides if strides is not None else t.stride()),
                                  dtype=self.nvdtype(t.dtype), static_sizes=True, is_cpu=is_cpu)
        self.values[node] = v
        self.inputs.add(id(v))
        return v

    def scalar(self, value, dtype: torch.dtype):
        if dtype.is_floating_point:
            value = float(value)
        elif dtype == torch.bool:
            value = bool(value)
        else:
            value = int(value)
        return self.fd.define_scalar(value, self.nvdtype(dtype))

    def cast(self, v, src: torch.dtype, dst: torch.dtype):
        if src == dst:
            return v
        out = self.fd.ops.cast(v, self.nvdtype(dst))
        return self.lift(out) if id(v) in self.lifted else out

    def arg(self, x, dtype: torch.dtype, shape=None):
        """nv value of an fx arg or Python scalar, in ``dtype``, broadcast to ``shape`` if given."""
        if isinstance(x, fx.Node):
            t = x.meta["val"]
            v = self.cast(self.values[x], t.dtype, dtype)
            return self.broadcast(v, tuple(t.shape), tuple(shape)) if shape is not None else v
        return self.scalar(x, dtype)

    def lift(self, v):
        """Mark ``v`` a lifted 0-d value: its broadcast dims meet the segment's tensors without a broadcast op."""
        self.lifted.add(id(v))
        return v

    def broadcast(self, v, in_shape: tuple, out_shape: tuple, expand: bool = False):
        """Make numpy-style broadcasting explicit: squeeze size-1 dims, broadcast_in_dim."""
        if in_shape == out_shape:
            return v
        if id(v) in self.lifted and in_shape == ():  # already at the segment's rank, every dim a broadcast one
            return self.fd.ops.expand(v, list(out_shape)) if expand else v
        k = len(out_shape) - len(in_shape)
        if k == 0 and self.ones_broadcast:  # (a broadcast op would make nvFuser split a result written in place)
            return self.fd.ops.expand(v, list(out_shape)) if expand else v
        aligned = [None] * k + list(in_shape)
        squeeze = [i for i, s in enumerate(in_shape) if s == 1 and out_shape[k + i] != 1]
        if squeeze:
            v = self.fd.ops.squeeze(v, squeeze)
        kept = [k + i for i, s in enumerate(in_shape) if i not in squeeze]
        if not squeeze and k == 0:
            return v
        shape = [out_shape[d] if expand or (aligned[d] is not None and d in kept) else 1
                 for d in range(len(out_shape))]
        return self.fd.ops.broadcast_in_dim(v, shape, kept)

    def finish(self, v, node_or_val, computed: torch.dtype):
        """Cast a result computed in ``computed`` to the dtype eager produces."""
        t = node_or_val.meta["val"] if isinstance(node_or_val, fx.Node) else node_or_val
        return self.cast(v, computed, t.dtype)


def _out(node):
    return node.meta["val"]


def _ndim_dims(dims, ndim):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % ndim if ndim else 0 for d in dims})

