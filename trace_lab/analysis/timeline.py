"""Timeline analysis: compute and communication as two lanes, and how much they overlap.

The analysis only (lanes, overlap, the memory curve over time); drawing and the
Report's table live in :mod:`trace_lab.report.timeline`.

Estimated (any device, from the trace alone). The program runs in trace order
on two in-order streams: a *compute* lane and a *communication* lane. The
simple cost model (:class:`CostModel`, every constant stated there):

* a compute op costs ``overhead + max(flops / flops_per_s, bytes / mem_bytes_per_s)``;
  flops are counted for matmuls (``mm``, ``bmm``, ``addmm``, ``baddbmm``:
  ``2*M*N*K``) and attention (``4*B*H*L*S*D``); bytes are the op's tensor inputs
  plus its outputs; views, ``getitem`` and ``wait_tensor`` cost nothing;
* a collective costs ``latency + f * bytes / link_bytes_per_s`` with ``f = (W-1)/W``
  for all-gather (bytes of the gathered output) and reduce-scatter (bytes of the
  full input), ``2(W-1)/W`` for all-reduce; it starts when the comm lane is free
  *and* the compute lane has reached it (NCCL orders a collective after the
  compute stream's earlier work);
* ``wait_tensor`` stalls the compute lane until its collective ends.

Profiler lanes (CUDA): :func:`lanes_from_profiler` takes GPU kernel intervals from a
``torch.profiler`` trace (NCCL kernels form the comm lane, all others compute).
A secondary view only: an NCCL kernel launched before its peer's spins until the
peer arrives, so kernel durations count waiting as communication and understate
the overlap. The measured figures the targets use are the stalls at each wait
against calibrated collective times (:mod:`trace_lab.distributed.comm_measure`),
attached by :func:`trace_lab.report.timeline.report_timeline` when the Report carries them.

From the two lanes: *exposed communication* is the time the comm lane is busy
while the compute lane is not; the *overlap fraction* is hidden / total
communication, reported for all collectives and for all-gathers alone. The
memory curve pairs each op's end time with the liveness model's live bytes after
it, so gathered parameters (op outputs) show up there as they are issued.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.fx as fx

from ..ir.trace import is_getitem, tensor_values

__all__ = ["CostModel", "CPU_MODEL", "GPU_MODEL", "estimate_timeline", "overlap_stats", "lanes_from_profiler"]


@dataclass(frozen=True)
class CostModel:
    name: str
    flops_per_s: float
    mem_bytes_per_s: float
    link_bytes_per_s: float
    latency_s: float
    op_overhead_s: float

    def to_dict(self) -> dict:
        return asdict(self)


# Round numbers, not measurements: they make the lanes' proportions plausible.
CPU_MODEL = CostModel("cpu (estimate)", flops_per_s=50e9, mem_bytes_per_s=10e9, link_bytes_per_s=2e9,
                      latency_s=50e-6, op_overhead_s=2e-6)
GPU_MODEL = CostModel("gpu (estimate: H100/H200-class, NVLink)", flops_per_s=400e12, mem_bytes_per_s=3e12,
                      link_bytes_per_s=150e9, latency_s=20e-6, op_overhead_s=5e-6)


def _c10d():
    c = torch.ops._c10d_functional
    return {c.all_gather_into_tensor.default: ("all_gather", 1.0), c.reduce_scatter_tensor.default: ("reduce_scatter", 1.0),
            c.all_reduce.default: ("all_reduce", 2.0)}


def _nbytes(vals) -> int:
    return sum(t.numel() * t.element_size() for t in vals if isinstance(t, torch.Tensor))


def _flops(n: fx.Node) -> int:
    aten = torch.ops.aten
    val = n.meta.get("val")
    args = [a.meta.get("val") if isinstance(a, fx.Node) else a for a in n.args]
    t = n.target
    try:
        if t in (aten.mm.default, aten.addmm.default):
            a, b = (args[0], args[1]) if t is aten.mm.default else (args[1], args[2])
            return 2 * a.shape[0] * a.shape[1] * b.shape[1]
        if t in (aten.bmm.default, aten.baddbmm.default):
            a, b = (args[0], args[1]) if t is aten.bmm.default else (args[1], args[2])
            return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
        name = getattr(t, "__name__", "")
        if "scaled_dot_product" in name and isinstance(args[0], torch.Tensor):
            q, k = args[0], args[1]
            mult = 2 if "backward" in name else 1
            return mult * 4 * q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] * q.shape[3]
    except (AttributeError, IndexError, TypeError):
        return 0
    del val
    return 0


def _group_size(group_name) -> int:
    import torch.distributed as dist

    try:
        from torch.distributed.distributed_c10d import _resolve_process_group

        return dist.get_world_size(_resolve_process_group(group_name))
    except Exception:  # noqa: BLE001 - no process group here: assume a pair
        return 2


def _is_free(n: fx.Node) -> bool:
    from ..ir.collectives import WAIT, is_view_op

    return is_getitem(n) or (n.op == "call_function" and (n.target is WAIT or is_view_op(n)))


def _op_cost(n: fx.Node, model: CostModel) -> float:
    if _is_free(n):
        return 0.0
    ins = [a.meta.get("val") for a in n.all_input_nodes]
    moved = _nbytes([v for x in ins for v in tensor_values(x)]) + _nbytes(tensor_values(n.meta.get("val")))
    if n.op == "call_module":  # a fused region reads its inputs and writes its outputs once
        sub = n.graph.owning_module.get_submodule(n.target)
        flops = sum(_flops(m) for m in sub.graph.nodes if m.op == "call_function")
    else:
        flops = _flops(n)
    return model.op_overhead_s + max(flops / model.flops_per_s, moved / model.mem_bytes_per_s)


def _union(intervals):
    out = []
    for s, e in sorted((s, e) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _length(u) -> float:
    return sum(e - s for s, e in u)


def _intersection(a, b) -> float:
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def overlap_stats(compute: list, comm: list, span: float | None = None) -> dict:
    """Totals from two lanes of ``{"start", "end", "kind"?}`` intervals (seconds)."""
    cu = _union([(x["start"], x["end"]) for x in compute])
    mu = _union([(x["start"], x["end"]) for x in comm])
    gu = _union([(x["start"], x["end"]) for x in comm if x.get("kind") == "all_gather"])
    comm_s, gather_s = _length(mu), _length(gu)
    hidden, gather_hidden = _intersection(mu, cu), _intersection(gu, cu)
    ends = [x["end"] for x in compute + comm]
    starts = [x["start"] for x in compute + comm]
    return {
        "span_seconds": span if span is not None else ((max(ends) - min(starts)) if ends else 0.0),
        "compute_seconds": _length(cu),
        "comm_seconds": comm_s,
        "all_gather_seconds": gather_s,
        "exposed_comm_seconds": comm_s - hidden,
        "overlap_fraction": hidden / comm_s if comm_s > 0 else None,
        "all_gather_hidden_fraction": gather_hidden / gather_s if gather_s > 0 else None,
    }


def estimate_timeline(trace, model: CostModel | None = None, materialized_regions: bool = False) -> dict:
    """Two-lane schedule of ``trace`` under ``model`` (see the module docstring)."""
    model = model or (GPU_MODEL if trace.device.type == "cuda" else CPU_MODEL)
    kinds = _c10d()
    live = {ln.node: ln for ln in trace.liveness(materialized_regions).lines}
    compute_t = comm_t = 0.0
    ends: dict[fx.Node, float] = {}
    compute, comm, memory = [], [], [[0.0, trace.liveness(materialized_regions).entry_bytes]]
    from ..ir.collectives import WAIT

    for n in trace.ops:
        name = trace.name(n) if not isinstance(n.meta.get("val"), (list, tuple)) else n.name
        if n.op == "call_function" and n.target in kinds:
            kind, factor = kinds[n.target]
            size = {"all_gather": n.args[1], "reduce_scatter": n.args[2]}.get(kind) or _group_size(n.args[2])
            payload = _nbytes([n.meta.get("val")]) if kind != "reduce_scatter" else _nbytes(
                [n.args[0].meta.get("val")])
            cost = model.latency_s + factor * (size - 1) / max(size, 1) * payload / model.link_bytes_per_s
            start = max(comm_t, compute_t)
            comm_t = ends[n] = start + cost
            comm.append({"name": name, "kind": kind, "start": start, "end": comm_t, "bytes": payload})
        elif n.op == "call_function" and n.target is WAIT:
            compute_t = max(compute_t, ends.get(n.args[0], compute_t))
        else:
            cost = _op_cost(n, model)
            if cost > 0:
                compute.append({"name": name, "start": compute_t, "end": compute_t + cost})
                compute_t += cost
        if n in live:
            memory.append([compute_t, live[n].live_after])
    span = max(compute_t, comm_t)
    stats = overlap_stats(compute, comm, span)
    return {"kind": trace.kind, "stage": trace.stage, "method": "estimated", "cost_model": model.to_dict(),
            **stats, "compute": compute, "comm": comm, "memory": memory,
            "peak_bytes": trace.liveness(materialized_regions).peak_bytes}


def lanes_from_profiler(prof) -> tuple[list[dict], list[dict]]:
    """(compute, comm) GPU kernel intervals from a finished ``torch.profiler.profile``.

    NCCL kernels are communication (``all_gather`` / ``reduce_scatter`` by name),
    every other device kernel is compute. Times in seconds from the first kernel.
    """
    kernels = []
    for ev in prof.events():
        if getattr(ev, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        start = ev.time_range.start / 1e6
        end = ev.time_range.end / 1e6
        kernels.append((ev.name, start, end))
    if not kernels:
        return [], []
    t0 = min(s for _, s, _ in kernels)
    compute, comm = [], []
    for name, s, e in kernels:
        low = name.lower()
        if "nccl" in low:
            kind = "all_gather" if "allgather" in low else "reduce_scatter" if "reducescatter" in low else (
                "all_reduce" if "allreduce" in low else "other")
            comm.append({"name": name, "kind": kind, "start": s - t0, "end": e - t0})
        else:
            compute.append({"name": name, "start": s - t0, "end": e - t0})
    return compute, comm
