"""``%%thunder_trace --nproc N [--fsdp zero2|zero3]``: the cell in N processes, rank 0's report back.

Design. The parent builds the cell function and reads its inputs exactly as for a
local run, then :func:`trace_lab.distributed.run_distributed` starts N CPU workers
(gloo; how the function and inputs reach them: below). :func:`run_cell_rank` runs in each rank: with
``--fsdp`` it shards every ``nn.Module`` with parameters among the cell's inputs in
place, as ``trace_lab.jit(model, fsdp=...)`` does with the module it is given
(:func:`~trace_lab.distributed.sharding.shard_for_jit`; an optimizer among the inputs is
moved onto the shards), then :func:`~trace_lab.notebook.runner.inspect_cell` compiles and
runs the cell with the run's options. Every rank runs the whole cell on the same
inputs: without ``--fsdp`` that is N replicas (no data parallelism); with it, the
parameters are sharded and gathered, so each rank computes the single-process loss.
The cell itself is a function, so jit checks after its first call that sharded
parameters reached its programs: a cell that reaches its model only through an object
that is not an input module (``wrapper.model(x)``) fails with a TraceLabError instead of
running unsharded.
Only plain data comes back: per rank its timings, its differential check and the
numbers the cell bound; rank 0 adds ``Report.to_dict()``, whose view model holds its
printed stages, graphs and timeline (:mod:`trace_lab.report.view_model`). The parent turns that into a
:class:`~trace_lab.report.distributed_report.DistributedReport`. Names the cell
binds are NOT written back (they lived in the workers); the notebook is never
touched, so a failure in any rank leaves it as it was.

In practice the function and its inputs travel by value (``cloudpickle``: classes and
functions defined in the notebook included) to workers started by a forkserver: forking
a kernel that has run compiles and threads is unsafe (forked ranks died with SIGSEGV
and SIGABRT under load), and some torch builds refuse autograd in a child forked after
the parent ran a backward ("Unable to handle autograd's threading in combination with
fork-based multiprocessing"; torch 2.11's CUDA build on a CPU machine). Only what
cloudpickle cannot carry is shared by a fork, where :func:`autograd_survives_fork`
(one throwaway fork) says a child can run autograd.

CUDA inputs are refused with an explanation: CUDA cannot be used in forked
processes, and a spawned worker cannot receive a function defined in a notebook.
"""
from __future__ import annotations

import time
import warnings

import torch

from ..errors import TraceLabError
from .runner import RunOptions, inspect_cell

__all__ = ["run_cell_distributed", "run_cell_rank", "DistributedCellError"]


class DistributedCellError(TraceLabError):
    """The cell (or trace_lab) failed in one of the worker processes."""


def _shard_inputs(args, mode: str) -> None:
    """Shard every nn.Module with parameters among ``args`` in place, as ``trace_lab.jit(model, fsdp=mode)``
    does (:func:`~trace_lab.distributed.sharding.shard_for_jit`; a submodule of another input goes with it);
    re-point optimizers at the shards."""
    from ..distributed.sharding import shard_for_jit, sharded_parameters

    modules = [a for a in args if isinstance(a, torch.nn.Module) and next(a.parameters(), None) is not None]
    # a module that is part of another input (`model` and `model.fc1`) is sharded with it
    inner = {id(s) for m in modules for s in m.modules() if s is not m}
    modules = [m for m in modules if id(m) not in inner]
    moved: dict[int, torch.nn.Parameter] = {}
    for m in modules:
        before = dict(m.named_parameters())
        shard_for_jit(m, mode)
        for name, shard in sharded_parameters(m).items():
            if name in before:
                moved[id(before[name])] = shard
    for opt in (a for a in args if isinstance(a, torch.optim.Optimizer)):
        for group in opt.param_groups:
            if any(id(p) in moved and opt.state.get(p) for p in group["params"]):
                raise TraceLabError("--fsdp: the optimizer already has state for the full parameters; create a "
                                    "fresh optimizer (no step taken yet) so that it can be moved onto the shards")
            group["params"] = [moved.get(id(p), p) for p in group["params"]]


def _scalars(bound: dict) -> dict:
    """The numbers and one-element tensors the cell bound (shown per rank; nothing else travels back)."""
    out = {}
    for name, v in bound.items():
        if isinstance(v, bool) or isinstance(v, int):
            out[name] = int(v)
        elif isinstance(v, float):
            out[name] = v
        elif isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_complex():
            out[name] = float(v.detach().float().item())
    return out


def run_cell_rank(fn, args, options: dict, label: str) -> dict:
    """One rank's run of the cell (module level: the launcher's target). Plain data out."""
    from ..distributed import current
    from ..distributed.launcher import report_timings
    from .cell import UNBOUND

    ctx = current()
    # the eager path of fsdp_unshard uses torch.distributed's older names; each rank would repeat the notice
    warnings.filterwarnings("ignore", message=r".*is deprecated\. Please use `torch\.distributed", category=FutureWarning)
    opts = RunOptions(**options)
    started = time.perf_counter()
    if opts.fsdp:
        _shard_inputs(args, opts.fsdp)
    report, bound = inspect_cell(fn, args, opts, label)
    summary = {"rank": ctx.rank, "wall_seconds": time.perf_counter() - started, **report_timings(report),
               "ok": None if report.comparison is None else report.ok,
               "max_abs_diff": (report.comparison or {}).get("max_abs_diff"),
               "scalars": _scalars({k: v for k, v in bound.items() if v is not UNBOUND})}
    out = {"rank_summary": summary}
    if ctx.rank == 0:
        out["report"] = report.to_dict()
    return out


def run_pickled_cell_rank(payload: bytes, options: dict, label: str) -> dict:
    """:func:`run_cell_rank` for a forkserver worker: the cell function and its inputs by value."""
    import pickle

    fn, args = pickle.loads(payload)
    return run_cell_rank(fn, args, options, label)


def autograd_survives_fork() -> bool:
    """Whether a child forked from this process now can run a backward (one throwaway fork, ~0.1 s)."""
    import os

    if not hasattr(os, "fork"):
        return False
    pid = os.fork()
    if pid == 0:  # the child: never returns into the kernel's code
        code = 1
        try:
            x = torch.ones(2, requires_grad=True)
            (x * 2).sum().backward()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _launch(fn, args, options: dict, label: str, nproc: int):
    """Send the cell function and its inputs by value (cloudpickle) to forkserver workers; only what cannot be
    pickled is shared by forking this kernel, and only where a throwaway fork shows that a child can run
    autograd. Forking a kernel that has run compiles and threads is unsafe (forked ranks were seen to die with
    SIGSEGV and SIGABRT under load), so fork is the fallback, not the default."""
    import cloudpickle

    from ..distributed import run_distributed

    try:
        payload = cloudpickle.dumps((fn, args))
    except Exception as e:  # noqa: BLE001 - only a fork can hand it over
        why = f"{type(e).__name__}: {e}"
    else:
        return run_distributed(run_pickled_cell_rank, nproc, args=(payload, options, label), device="cpu",
                               backend="gloo", start_method="forkserver")
    if autograd_survives_fork():
        return run_distributed(run_cell_rank, nproc, args=(fn, args, options, label), device="cpu",
                               backend="gloo", start_method="fork")
    raise TraceLabError(
        f"--nproc {nproc}: the cell or its inputs cannot be sent to fresh workers ({why}), and this kernel cannot "
        "be forked after a backward with this torch build. Restart the kernel and run the --nproc cell before any "
        "backward, or run trace_lab.distributed.run_distributed from a script.")


def _headline(tb: str) -> str:
    """The exception line at the end of a formatted traceback."""
    lines = [ln for ln in tb.strip().splitlines() if ln and not ln.startswith(" ")]
    return lines[-1] if lines else "unknown error"


def run_cell_distributed(fn, args, options: RunOptions, label: str, progress=None):
    """Run the cell function on ``options.nproc`` ranks (1 with only ``--fsdp``) -> DistributedReport."""
    from ..run.compare import reachable_tensors
    from ..report.distributed_report import DistributedReport

    nproc = options.nproc or 1
    if any(t.device.type == "cuda" for t in reachable_tensors(fn, args)):
        raise TraceLabError(
            f"--nproc {nproc}: the cell's inputs are on CUDA, but --nproc runs its workers on the CPU "
            "(gloo). Run trace_lab.distributed.run_distributed "
            "from a script for NCCL runs (benchmarks/ has examples), or move the inputs to the CPU.")
    if options.fsdp and not any(isinstance(a, torch.nn.Module) for a in args):
        raise TraceLabError(f"--fsdp {options.fsdp}: the cell reads no nn.Module from the notebook, so there is "
                            "nothing to shard; use the model by its notebook name (e.g. `loss = model(x).sum()`)")
    say = progress or (lambda msg: None)
    say(f"running the cell in {nproc} process{'es' if nproc > 1 else ''} (gloo on CPU)")
    try:
        run = _launch(fn, args, options.to_dict(), label, nproc)
    except TraceLabError as e:
        text = str(e)
        rank = text.split("rank ", 1)[1].split(" ", 1)[0] if "rank " in text else "?"
        tb = text.split("failed:\n", 1)[1] if "failed:\n" in text else ""
        head = f"rank {rank} of {nproc} failed: {_headline(tb)}" if tb else text
        raise DistributedCellError(f"{head}\nNothing was written back.\n{tb}".rstrip()) from None
    say("collecting the ranks' results")
    for note in run.notes:
        say(note)
    return DistributedReport.from_ranks(run.values, {"nproc": nproc, "backend": run.backend, "device": run.device,
                                                     "fsdp": options.fsdp, "sort_waits": options.sort_waits,
                                                     "notes": list(run.notes)})

