"""The IPython extension: ``%load_ext trace_lab`` registers ``%%thunder_trace``.

``%%thunder_trace [options]`` runs the cell compiled by trace_lab and shows what
the compiler did (see :mod:`trace_lab.notebook.widgets`); ``%thunder_trace
[options] EXPR`` does the same for one expression and returns its value.
The cell is the program (:mod:`trace_lab.notebook.cell`): names it reads come
from the notebook, names it binds are written back, only when everything
succeeded. Errors: a syntax error or an exception raised by the cell's own code
is shown as IPython shows any cell error (traceback starting at the cell); a
failure of the compiler stack, a bad option or a missing dependency is shown as
one clear line (``UsageError``). Either way the notebook's variables and every
earlier run stay as they were.
"""
from __future__ import annotations

import keyword
import re

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..errors import TraceLabError
from ..jit import EXECUTOR_CHOICES, FUSION_STRATEGIES
from ..report.html import error_html
from .cell import CellProgram
from .cell_runner import CellRunner
from .runner import VALUE_NAME, RunOptions, default_executor
from .session import Session, kernel_session

__all__ = ["ThunderTraceMagics", "load_ipython_extension"]

# options that take a value (for splitting the line form into options and expression)
_VALUED = {"--fusion", "--executor", "--runs", "--name", "-o", "--output", "--nproc", "--fsdp", "--max-inflight",
           "--max-region-ops"}
_FLAGS = {"--no-fusion-cache", "--no-sort-waits", "--cuda-graphs", "--compare"}
_TOKEN = re.compile(r"""\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\S+)""")


def split_line(line: str) -> tuple[str, str]:
    """(options, expression) of the line form: options are the leading known flags."""
    pos = 0
    expect_value = False
    while True:
        m = _TOKEN.match(line, pos)
        if not m:
            return line, ""
        tok = m.group(1)
        if expect_value:
            expect_value = False
        elif tok in _FLAGS or tok.split("=", 1)[0] in _VALUED:
            expect_value = tok in _VALUED
        else:
            return line[:m.start(1)], line[m.start(1):].strip()
        pos = m.end()


def _display(obj, display_id=None):
    from IPython.display import display

    return display(obj, display_id=True) if display_id is None else display(obj, display_id=display_id)


class _ErrorBox:
    """A failed run's message as HTML (escaped) and text."""

    def __init__(self, title: str, message: str):
        self.title, self.message = title, message

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"text/html": error_html(self.title, self.message), "text/plain": f"{self.title}: {self.message}"}


def _cell_traceback(e: BaseException, filename: str):
    """The traceback from the first frame in the cell on, or None if the cell is not in it."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    return tb


@magics_class
class ThunderTraceMagics(Magics):
    """Holds the kernel's views so a rerun of any output keeps working."""

    def __init__(self, shell):
        super().__init__(shell)
        self.views: list = []
        self.session = kernel_session()

    @magic_arguments()
    @argument("--fusion", choices=FUSION_STRATEGIES, default="auto",
              help="fusion strategy: none (one kernel per op), dataflow (producer/consumer chains), "
                   "horizontal (Thunder's greedy grouping; raises peak memory), memory (fuse only where the "
                   "predicted peak does not rise), auto (dataflow on CUDA, none on CPU: the choice that is "
                   "not slower than eager PyTorch). Default: auto.")
    @argument("--executor", choices=EXECUTOR_CHOICES, default=None,
              help="how fused regions run: auto (nvFuser on CUDA when importable, else Inductor), nvfuser, "
                   "inductor, eager (op by op, fast to compile). Default: auto, or $TRACE_LAB_EXECUTOR if set.")
    @argument("--no-fusion-cache", action="store_true",
              help="compile every fused region on its own instead of reusing kernels of structurally identical "
                   "regions (the fusion-definition cache).")
    @argument("--no-sort-waits", action="store_true",
              help="keep each collective's wait right after it instead of moving it next to its first consumer.")
    @argument("--cuda-graphs", action="store_true",
              help="on a GPU, record each compiled program into a CUDA graph after its first call and replay it "
                   "(removes the per-kernel host cost; outputs are overwritten by the next call). Ignored, with a "
                   "note, on the CPU and with --fsdp.")
    @argument("--runs", type=int, default=3, metavar="N",
              help="timed runs after the first call, for the steady-state time (default 3); one more run "
                   "measures peak memory. The cell's side effects (optimizer steps, appends, prints) REPEAT on "
                   "every run. 0 = run the compiled cell once (no timing, no measured peak). The eager reference "
                   "always runs once more, on deep copies of the cell's inputs.")
    @argument("--compare", action="store_true",
              help="keep this cell's runs (and its reruns) in the kernel-wide comparison, whose Compare tab shows "
                   "the runs of every --compare cell; trace_lab.notebook.kernel_session().to_dataframe() exports it.")
    @argument("--name", metavar="LABEL", help="label of this run in the report and the Compare table.")
    @argument("-o", "--output", metavar="VAR", help="store the Report in the notebook variable VAR.")
    @argument("--nproc", type=int, default=None, metavar="N",
              help="run the cell in N CPU processes (torch.distributed, gloo; forks of this kernel) and show rank "
                   "0's report plus every rank's timings and the compute/communication timeline. Every rank runs "
                   "the whole cell on the same inputs: without --fsdp that is N replicas (no data parallelism). "
                   "Names the cell assigns are NOT written back from the workers (numbers and one-element tensors "
                   "they bound are listed per rank). Inputs on CUDA are refused (use run_distributed in a script).")
    @argument("--fsdp", choices=["zero2", "zero3"], default=None,
              help="shard the parameters of every nn.Module the cell reads across the --nproc ranks (one process "
                   "without --nproc) and insert all-gathers/reduce-scatters into the traces: zero2 keeps gathered "
                   "parameters for the backward, zero3 frees them and gathers again.")
    @argument("--max-inflight", type=int, default=None, metavar="K", dest="max_inflight",
              help="with --fsdp and wait sorting: at most K all-gathers issued and not yet waited for (default 2 "
                   "for zero3, unlimited for zero2; 0 = unlimited). Bounds the memory held by prefetched parameters.")
    @argument("--max-region-ops", type=int, default=None, metavar="N", dest="max_region_ops",
              help="with --fusion horizontal: at most N ops per fused region (a ready group that would exceed it "
                   "starts the next region). Default: unbounded, as Thunder.")
    @argument("expression", nargs="*", help="line form only (%%thunder_trace EXPR): the expression to run; its "
                                            "value is returned.")
    @line_cell_magic
    def thunder_trace(self, line: str, cell: str | None = None):
        """Compile the cell (or EXPR) with trace_lab, run it, and show what the compiler did.

        The cell is the program: names it reads come from the notebook, names it
        binds are written back exactly as a normal run would leave them, but only
        when the whole run succeeded; on any error the notebook's variables and
        earlier runs stay as they were. Every program compiled while it runs
        (forward, backward, each graph of a graph break) is recorded. The output
        has tabs Summary, Trace, Graph, Memory, Compare, and controls to rerun
        the same cell with another fusion strategy, executor, cache or wait
        sorting setting (each rerun adds a row to Compare).

        With --nproc N (and --fsdp) the cell runs in N worker processes: the
        output shows rank 0's programs, every rank's timings and the timeline of
        compute and communication; names assigned by the cell are NOT written
        back from the workers, and the notebook is left as it was.

        Examples::

            %%thunder_trace --fusion horizontal --compare
            loss = model(x).sum()
            loss.backward()

            y = %thunder_trace --fusion memory f(a, b)

            %%thunder_trace --nproc 2 --fsdp zero3 --no-sort-waits
            loss = model(x).sum()
            loss.backward()
        """
        __tracebackhide__ = True  # noqa: F841 - IPython hides this frame in tracebacks
        if cell is None:
            opt_text, expr = split_line(line)
            if not expr:
                raise UsageError("%thunder_trace needs an expression, e.g. `%thunder_trace model(x)`; "
                                 "use %%thunder_trace for a whole cell")
            source = f"{VALUE_NAME} = (\n{expr}\n)\n"
        else:
            opt_text, source = line, cell
        args = parse_argstring(self.thunder_trace, opt_text)
        if cell is not None and args.expression:
            raise UsageError(f"%%thunder_trace: unexpected arguments {' '.join(args.expression)!r}; the code goes "
                             "in the cell body")
        if not source.strip():
            raise UsageError("%%thunder_trace: the cell is empty; write the code to trace below the magic line")
        try:
            options = RunOptions(fusion=args.fusion, executor=args.executor or default_executor(),
                                 fusion_cache=not args.no_fusion_cache, sort_waits=not args.no_sort_waits,
                                 cuda_graphs=args.cuda_graphs, runs=args.runs, nproc=args.nproc, fsdp=args.fsdp,
                                 max_inflight=args.max_inflight, max_region_ops=args.max_region_ops).validate()
        except TraceLabError as e:
            raise UsageError(str(e)) from None
        name = _unquote(args.name) or (f"cell {self.shell.execution_count}" if cell is not None else expr.strip()[:40])
        _output_name(args.output)  # a bad -o is refused before anything runs
        program = CellProgram.from_cell(source, self.shell)  # SyntaxError: the user's, shown as usual
        runner = CellRunner(program, self.shell.user_ns, function_name=_function_name(name))
        return self._first_run(runner, options, name, args)

    def _first_run(self, runner, options, name, args):
        __tracebackhide__ = True  # noqa: F841
        from .widgets import LabView, progress_widget

        box, step = progress_widget(f"compiling {name}")
        handle = _display(box)
        runs = Session()
        compare = self.session if args.compare else None
        label = (compare or runs).unique_label(name)
        try:
            report, value = runner.run(options, label=label, progress=step)
        except KeyboardInterrupt:
            _update(handle, _ErrorBox("thunder_trace interrupted", "notebook variables are unchanged"))
            raise
        except TraceLabError as e:
            _update(handle, _ErrorBox(f"thunder_trace failed ({type(e).__name__})",
                                      f"{e}\nNotebook variables are unchanged; earlier runs are kept."))
            raise UsageError(f"{type(e).__name__}: {e}") from None
        except Exception as e:
            _update(handle, _ErrorBox(f"thunder_trace: the cell raised {type(e).__name__}",
                                      "notebook variables are unchanged; earlier runs are kept (traceback below)"))
            tb = _cell_traceback(e, runner.program.filename)
            if tb is not None:
                raise e.with_traceback(tb) from None
            raise
        view = LabView(runner, options, runs, compare, base_label=name, shell=self.shell)
        view.add_run(label, report)
        view.display_handle = handle
        self.views.append(view)
        if args.output:
            self.shell.user_ns[_output_name(args.output)] = report
        _update(handle, view)
        return value


def _update(handle, obj) -> None:
    if handle is not None:
        handle.update(obj)
    else:  # no display system (plain Python): print the text form
        _display(obj, display_id=False)


def _unquote(s: str | None) -> str | None:
    """IPython's argument splitter keeps quotes: '"2 layers"' -> '2 layers'."""
    if s and len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    return s


def _output_name(text: str | None) -> str | None:
    """The variable ``-o`` names, or a UsageError: it must be a name Python code can read back."""
    name = _unquote(text)
    if name is None:
        return None
    if not name.isidentifier() or keyword.iskeyword(name):
        why = "a Python keyword" if keyword.iskeyword(name) else "not a Python identifier"
        raise UsageError(f"-o {text}: {name!r} is {why}, so the Report stored there could not be used; give a "
                         "Python variable name to store the Report in, e.g. -o rep")
    return name


def _function_name(label: str) -> str:
    ident = re.sub(r"\W+", "_", label).strip("_")
    return ident if ident and not ident[0].isdigit() else f"cell_{ident}"


def load_ipython_extension(ipython) -> None:
    """``%load_ext trace_lab``: register %%thunder_trace / %thunder_trace."""
    ipython.register_magics(ThunderTraceMagics)
