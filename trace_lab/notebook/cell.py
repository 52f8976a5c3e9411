"""Cell programs: a notebook cell turned into a function that trace_lab can jit.

Design. A cell body is parsed (after IPython's own transforms, so ``%magics`` in it
still work) and rebuilt as ``def __thunder_trace_cell__(<inputs>): <body>; return
{<assigned names>}``. The names the cell *reads* at top level and that hold data in
the notebook (tensors, modules, optimizers, lists; not modules, classes or
functions) become parameters, so ``torch.compile`` sees them as graph inputs with
readable names and the eager reference can deep-copy them together. Every other
free name is looked up in the notebook namespace at run time (the function's
``__globals__`` *is* the notebook namespace, so functions defined in the cell
behave as if defined at top level). Names the cell binds (assignment, ``for``,
``with``, ``import``, ``def``, ``class``, walrus, ``del``) are returned in a dict.

Nothing touches the notebook namespace while the cell runs: :meth:`CellProgram.write_back`
applies the returned dict only after the whole run succeeded, exactly as a normal
run would have left it (a ``del`` removes the name, a binding that did not run
leaves the old value). A name assigned in the cell that already exists in the
notebook is passed in as its start value, so ``x = x + 1`` reads the old ``x``.

Differences from a plain run that remain (documented for users): the cell runs
several times (eager reference on copies, compiled run, memory and timing runs),
so side effects repeat; names assigned in the cell and used by functions defined
in the same cell are captured as closure cells rather than looked up as globals.

Parts: this module builds and applies the cell function; what the cell reads and binds is
:mod:`.cell_analysis`, ``%time`` inside the cell :mod:`.cell_line_magics`, and the helper
names and the :data:`UNBOUND` marker :mod:`.cell_markers` (re-exported here).
"""
from __future__ import annotations

import ast
import copy
import symtable
import types
from dataclasses import dataclass, field

from .cell_analysis import _ReadsBeforeBinding, _TopScope, _as_list, _first_appearance, _reject_unsupported
from .cell_line_magics import _explicit_magic_scope, _line_magic_outside_dynamo, _magic_statements, _MagicRewriter
from .cell_line_magics import run_line_magic  # noqa: F401 - re-exported: the runner the cell function calls
from .cell_markers import _MAGIC_NAME, _UNBOUND_NAME, CELL_FUNCTION_NAME, UNBOUND

__all__ = ["CellProgram", "UNBOUND", "CELL_FUNCTION_NAME", "is_data_value"]

_TYPE_PARAMS = {"type_params": []} if "type_params" in ast.FunctionDef._fields else {}  # Python >= 3.12


def is_data_value(value) -> bool:
    """True for values the cell should receive as inputs (not modules/classes/functions)."""
    return not isinstance(value, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
                                  types.MethodType, types.BuiltinMethodType))


class _TopLevelRewriter(_TopScope):
    """At cell top level: ``del name`` -> ``name = UNBOUND``; ``global``/``nonlocal`` dropped.

    A top-level ``global`` is a no-op in a normal run; inside the cell function it
    would make writes bypass the write-back, so it is removed. Nested scopes are
    left alone.
    """

    def __init__(self):
        self.deleted: set[str] = set()

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _TopScope._skip

    def visit_Global(self, node):
        return None

    def visit_Delete(self, node):
        out = []
        keep = []
        for t in node.targets:
            if isinstance(t, ast.Name):
                self.deleted.add(t.id)
                out.append(ast.copy_location(
                    ast.Assign(targets=[ast.Name(t.id, ast.Store())], value=ast.Name(_UNBOUND_NAME, ast.Load())), node))
            else:
                keep.append(t)
        if keep:
            out.insert(0, ast.copy_location(ast.Delete(targets=keep), node))
        return out or None


@dataclass
class CellProgram:
    """One cell's code, analysed once; :meth:`build` makes a fresh function per run."""

    source: str  # the cell as the user wrote it
    python: str  # after IPython's transforms (plain Python)
    filename: str
    assigned: list[str] = field(default_factory=list)  # names the cell binds at top level
    # names the cell may read before it binds them (at top level, in comprehensions, or in a function
    # it defines before binding them), in order of appearance: the notebook's values it uses
    referenced: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    _module: ast.Module | None = field(default=None, repr=False)

    @classmethod
    def from_cell(cls, source: str, shell=None, filename: str | None = None) -> "CellProgram":
        python = shell.transform_cell(source) if shell is not None else source
        if filename is None:
            filename = shell.compile.cache(python, shell.execution_count, raw_code=source) if shell is not None \
                else "<thunder_trace cell>"
        tree = ast.parse(python, filename=filename)  # SyntaxError is the user's, raised as is
        _reject_unsupported(tree)
        # what the cell reads and binds, with `%time STMT` seen as STMT (it runs in the cell's scope)
        analysed = ast.Module(body=[s for stmt in tree.body for s in _magic_statements(stmt)], type_ignores=[])
        analysed_text = ast.unparse(analysed) if analysed.body != tree.body else python
        table = symtable.symtable(analysed_text, filename, "exec")
        assigned = []
        for sym in table.get_symbols():
            if sym.is_assigned() or sym.is_imported() or sym.is_namespace():
                assigned.append(sym.get_name())
        flow = _ReadsBeforeBinding()
        flow.block(analysed.body, set())
        order = _first_appearance(tree)
        if analysed_text is not python:
            order = {**_first_appearance(ast.parse(analysed_text)), **order}
        assigned.sort(key=lambda n: order.get(n, 1 << 30))
        # names whose notebook value the cell may read: before the cell binds them (top level, comprehensions)
        # or in a function/lambda/class it defines before binding them
        referenced = sorted(flow.top | (flow.nested & set(assigned)), key=lambda n: order.get(n, 1 << 30))
        rewriter = _TopLevelRewriter()
        tree.body = [s for stmt in tree.body for s in _as_list(rewriter.visit(stmt))]
        tree.body = [s for stmt in tree.body for s in _as_list(_MagicRewriter().visit(stmt))]
        for name in rewriter.deleted:
            if name not in assigned:
                assigned.append(name)
        return cls(source, python, filename, assigned, referenced, sorted(rewriter.deleted), tree)

    # -- running ---------------------------------------------------------------------
    def inputs(self, user_ns: dict) -> list[str]:
        """Names passed as parameters: names read before the cell binds them that hold data in the notebook.

        A name the cell binds before any read of it (``out = model(x)`` in a rerun) is not an input: its
        old value is never used (and may be a non-leaf tensor the eager reference cannot deep-copy). A
        name the cell re-binds after reading it (``x = x + 1``) gets its old value as start value."""
        return [n for n in self.referenced
                if n in user_ns and (n in self.assigned or is_data_value(user_ns[n]))]

    def build(self, user_ns: dict, value_name: str | None = None):
        """(function, args): the cell as a function of its inputs, and their current values."""
        params = self.inputs(user_ns)
        body = _explicit_magic_scope(copy.deepcopy(self._module.body), [*params, *self.assigned])
        pre = [ast.Assign(targets=[ast.Name(n, ast.Store())], value=ast.Name(_UNBOUND_NAME, ast.Load()))
               for n in self.assigned if n not in params]
        ret = ast.Return(ast.Dict(keys=[ast.Constant(n) for n in self.assigned],
                                  values=[ast.Name(n, ast.Load()) for n in self.assigned]))
        fn_def = ast.FunctionDef(
            name=CELL_FUNCTION_NAME,
            args=ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], vararg=None, kwonlyargs=[],
                               kw_defaults=[], kwarg=None, defaults=[]),
            body=pre + body + [ret], decorator_list=[], returns=None, **_TYPE_PARAMS)
        factory = ast.FunctionDef(
            name="__thunder_trace_factory__",
            args=ast.arguments(posonlyargs=[], args=[ast.arg(_UNBOUND_NAME), ast.arg(_MAGIC_NAME)], vararg=None,
                               kwonlyargs=[],
                               kw_defaults=[], kwarg=None, defaults=[]),
            body=[fn_def, ast.Return(ast.Name(CELL_FUNCTION_NAME, ast.Load()))], decorator_list=[], returns=None,
            **_TYPE_PARAMS)
        module = ast.Module(body=[factory], type_ignores=[])
        ast.fix_missing_locations(module)
        code = compile(module, self.filename, "exec")
        scope: dict = {}
        exec(code, user_ns, scope)  # defines the factory only; user_ns is its globals, not written
        fn = scope["__thunder_trace_factory__"](UNBOUND, _line_magic_outside_dynamo())
        fn.__qualname__ = fn.__name__ = value_name or CELL_FUNCTION_NAME
        fn.__trace_lab_cell__ = self  # lets other runners (distributed) rebuild the function
        return fn, tuple(user_ns[p] for p in params)

    def write_back(self, user_ns: dict, result: dict) -> None:
        """Apply the names a successful run left bound, as a normal run would have."""
        for name in self.assigned:
            value = result.get(name, UNBOUND)
            if value is UNBOUND:
                if name in self.deleted:
                    user_ns.pop(name, None)
                continue
            if isinstance(value, (types.FunctionType, type)) and CELL_FUNCTION_NAME in value.__qualname__:
                value.__qualname__ = value.__qualname__.rsplit("<locals>.", 1)[-1]  # as if defined at top level
            user_ns[name] = value
