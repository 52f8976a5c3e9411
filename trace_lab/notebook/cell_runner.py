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
