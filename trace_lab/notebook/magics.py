"""The IPython extension: ``%load_ext trace_lab`` registers ``%%thunder_trace``.

``%%thunder_trace [options]`` runs the cell compiled by trace_lab and shows what
the compiler did (see :mod:`trace_lab.notebook.widgets`); ``%thunder_trace
[options] EXPR`` does the same for one expression and returns its value.
The cell is the program (:mod:`trace_lab.notebook.cell`): names it reads come
from the notebook, names it binds are written back, only when everything
succeeded. Errors: a syntax error or an exception raised by the cell's own code
is shown as IPython shows any cell error (traceback starting at the cell; a syntax
error in a ``%%thunder_trace`` cell is found by an input transformer before the cell
runs, :func:`cell_syntax_check`, so it reads as a plain cell's: the line, a caret, the
message, and no frame of IPython or trace_lab); a
failure of the compiler stack, a bad option or a missing dependency is shown as
one clear line (``UsageError``). Either way the notebook's variables and every
earlier run stay as they were.
"""
from __future__ import annotations

import ast
import keyword
import re

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from ..errors import TraceLabError
from ..options import SCHEMA
from ..report.html import error_html
from .cell import CellProgram
from .cell_runner import CellRunner
from .runner import VALUE_NAME, from_flags
from .session import Session, kernel_session

__all__ = ["ThunderTraceMagics", "load_ipython_extension"]

MAGIC_OPTIONS = [o for o in SCHEMA if "magic" in o.surfaces]
# options that take a value, and those that do not (for splitting the line form into options and expression)
_VALUED = {f for o in MAGIC_OPTIONS if o.type is not bool for f in o.flags}
_FLAGS = {f for o in MAGIC_OPTIONS if o.type is bool for f in o.flags}
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


def schema_arguments(func):
    """Decorator: one argparse argument per option the schema offers to the magic, in schema order
    (argument decorators are collected innermost first, so they are applied in reverse)."""
    for o in reversed(MAGIC_OPTIONS):
        if o.type is bool:
            kw = {"action": "store_true"}
        else:
            default = o.flag_default_value if o.flag_default is not None else None
            kw = {"type": o.type if o.type is not str else None, "choices": o.choices, "metavar": o.metavar,
                  # a default the flag cannot spell ('auto' of a number) is None here; runner.from_flags reads it
                  "default": default if isinstance(default, o.type) else None}
            kw = {k: v for k, v in kw.items() if v is not None or k == "default"}
        func = argument(*o.flags, help=o.help, **kw)(func)
    return func


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
    @schema_arguments
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
            options = from_flags(args)
        except TraceLabError as e:
            raise UsageError(str(e)) from None
        name = _unquote(args.name) or (f"cell {self.shell.execution_count}" if cell is not None else expr.strip()[:40])
        _output_name(args.output)  # a bad -o is refused before anything runs
        program = CellProgram.from_cell(source, self.shell)  # SyntaxError: the user's, shown as usual
        runner = CellRunner(program, self.shell.user_ns, function_name=_function_name(name))
        if args.meta:
            return self._predict(runner, options)
        return self._first_run(runner, options, name, args)

    def _predict(self, runner, options=None):
        """``--meta``: the predicted peaks of the cell per strategy, nothing allocated, nothing written back
        (with ``--fsdp`` and ``--nproc N``: each of N FSDP ranks' peaks)."""
        __tracebackhide__ = True  # noqa: F841
        try:
            prediction = runner.predict(options)
        except TraceLabError as e:
            raise UsageError(f"--meta: {type(e).__name__}: {e}") from None
        _display(prediction, display_id=False)
        return None

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
        peers = []
        if options.baseline:
            try:
                peers = runner.run_peers(options, label, progress=step)
            except TraceLabError as e:  # the run itself stands: say why the peers are missing
                report.warnings.append(f"--baseline: {e}")
        if options.peer_trace:
            try:
                peers.append((f"{label} · torch.compile trace",
                              runner.compile_trace(f"{label} · torch.compile trace", progress=step)))
            except TraceLabError as e:  # the run itself stands: say why the trace is missing
                report.warnings.append(f"--peer-trace: {e}")
        view = LabView(runner, options, runs, compare, base_label=name, shell=self.shell)
        for peer_label, peer_report in peers:
            view.add_run(peer_label, peer_report)
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


def cell_syntax_check(shell):
    """An input transformer (IPython's cleanup stage) for ``%%thunder_trace`` cells: a body that is not valid
    Python raises its SyntaxError while IPython prepares the cell, which IPython shows as it shows a plain
    cell's (the cell's line, a caret, the message; no frames) and counts as the cell's error. Raised from the
    magic, the same error came with five frames of IPython, the magic and ``ast`` (25 lines)."""
    def check(lines: list[str]) -> list[str]:
        if not lines or lines[0].split()[:1] != ["%%thunder_trace"]:
            return lines
        raw = "".join(lines)
        try:
            ast.parse(shell.transform_cell("".join(lines[1:])))
        except SyntaxError as e:
            # the line numbers of the whole cell (the magic line is line 1), as IPython caches a cell it runs
            e.filename = shell.compile.cache(raw, shell.execution_count, raw_code=raw)
            e.lineno = e.lineno + 1 if e.lineno else e.lineno
            if getattr(e, "end_lineno", None):
                e.end_lineno += 1
            raise e.with_traceback(None) from None
        except Exception:  # noqa: BLE001 - anything else is the magic's to report, with its own message
            return lines
        return lines

    check.has_side_effects = True  # IPython's "is this input complete?" (a terminal) does not run it
    check.trace_lab_syntax_check = True
    return check


def load_ipython_extension(ipython) -> None:
    """``%load_ext trace_lab``: register %%thunder_trace / %thunder_trace, and the syntax check of its cells."""
    ipython.register_magics(ThunderTraceMagics)
    cleanup = ipython.input_transformers_cleanup
    if not any(getattr(t, "trace_lab_syntax_check", False) for t in cleanup):  # once, also after a reload
        cleanup.append(cell_syntax_check(ipython))
