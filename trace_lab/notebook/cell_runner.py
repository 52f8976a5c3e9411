"""CellRunner: one run of a cell program under given options -> (Report, value).

:meth:`CellRunner.run` builds a fresh function from the cell, then runs it in this
process (:func:`.runner.inspect_cell`, writing the cell's names back on success) or,
with ``--nproc`` / ``--fsdp``, in worker processes (:func:`.distributed.run_cell_distributed`,
nothing written back). It sits above both, so neither imports the other's caller.
"""
from __future__ import annotations

from .cell import CellProgram
from .distributed import run_cell_distributed
from .runner import VALUE_NAME, RunOptions, inspect_cell

__all__ = ["CellRunner"]


def _tensors(args) -> list:
    import torch

    from ..run.compare import reachable_tensors

    return [t for t in reachable_tensors(None, args) if isinstance(t, torch.Tensor)]


class CellRunner:
    """Runs one cell program against one notebook namespace."""

    def __init__(self, program: CellProgram, user_ns: dict, function_name: str = "cell"):
        self.program = program
        self.user_ns = user_ns
        self.function_name = function_name

    def run(self, options: RunOptions, label: str, progress=None):
        """(Report, value of the line form's expression or None); writes back on success only."""
        __tracebackhide__ = True  # noqa: F841 - IPython hides this frame in tracebacks
        options.validate()
        fn, args = self.program.build(self.user_ns, self.function_name)
        if options.nproc is not None or options.fsdp is not None:
            return run_cell_distributed(fn, args, options, label, progress), None
        report, result = inspect_cell(fn, args, options, label, progress)
        value = result.pop(VALUE_NAME, None)
        self.program.write_back(self.user_ns, result)
        return report, value

    def run_peers(self, options: RunOptions, label: str, progress=None) -> list:
        """[(label, Report)] of the cell run as each ``--baseline`` peer runs it (:mod:`trace_lab.lab.peers`),
        on copies of its inputs; nothing is written back."""
        from ..lab.peers import parse_peers, run_peer

        out = []
        for peer in parse_peers(options.baseline):
            if progress is not None:
                progress(f"baseline: running the cell as {peer}")
            fn, args = self.program.build(self.user_ns, self.function_name)
            name = f"{label} · {peer}"
            out.append((name, run_peer(fn, args, peer, runs=options.runs, name=name, loss=lambda out: None)))
        return out

    def compile_trace(self, label: str, progress=None):
        """``trace_lab.from_compile`` of the cell (``--peer-trace``): the program torch.compile runs for it, on copies
        of its inputs (the cell's own ``.backward()`` as it is); nothing is written back."""
        from ..lab.compile_view import from_compile

        if progress is not None:
            progress("peer trace: compiling the cell with torch.compile")
        fn, args = self.program.build(self.user_ns, self.function_name)
        return from_compile(fn, *args, name=label, loss=lambda out: None)

    def explain_peak(self, options: RunOptions, kind: str | None = None, program: int = -1, progress=None):
        """``trace_lab.explain_peak`` of the cell under ``options`` (the Peak tab's **price remedies**): run in this
        process, the cell's own ``.backward()`` as it is; nothing is written back."""
        from ..errors import TraceLabError
        from ..lab.peak import explain_peak
        from ..options import names

        if options.nproc is not None or options.fsdp is not None:
            raise TraceLabError("price remedies: the explainer runs the cell in this process; not for --nproc/--fsdp")
        fn, args = self.program.build(self.user_ns, self.function_name)
        given = {n: getattr(options, n) for n in names("cell") if n in names("inspect") and n != "runs"}
        return explain_peak(fn, *args, kind=kind, program=program, loss=lambda out: None, progress=progress, **given)

    def predict(self, options=None):
        """``trace_lab.predict`` of the cell (``--meta``): its inputs and the modules and optimizers it reads as meta
        twins, planned with ``--executor``'s rules; with ``--fsdp`` and ``--nproc N``, each of N FSDP ranks' (the
        modules it reads sharded, nothing started)."""
        from ..errors import TraceLabError
        from ..run.predict import predict

        fsdp, nproc = getattr(options, "fsdp", None), getattr(options, "nproc", None)
        if fsdp and nproc is None:
            raise TraceLabError(f"--fsdp {fsdp} predicts each rank of N: give --nproc N, the number of ranks (no "
                                "process is started with --meta)")
        if nproc is not None and not fsdp:
            raise TraceLabError(f"--nproc {nproc} without --fsdp: every rank would hold the whole model, as this "
                                "process does; drop --nproc, or add --fsdp zero2|zero3 to predict sharded ranks")
        sharded = dict(fsdp=fsdp, world_size=nproc, sort_waits=options.sort_waits,
                       max_inflight_gathers=options.max_inflight_gathers) if fsdp else {}
        fn, args = self.program.build(self.user_ns, self.function_name)
        device = "cuda" if any(getattr(t, "is_cuda", False) for t in _tensors(args)) else "cpu"
        # planned with the executor the run would use (--executor; auto: the modelled device's, nvFuser on a GPU
        # where it imports), whose rules decide what fuses and whether a region's inner values touch memory
        executor = getattr(options, "executor", None) or "auto"
        return predict(fn, *args, device=device, executor=executor, loss=lambda out: None, **sharded)
