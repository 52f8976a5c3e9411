"""Line magics inside a ``%%thunder_trace`` cell: ``%time STMT`` rewritten to run in the cell's scope.

Design. The analysis sees ``%time STMT`` as STMT (:func:`_magic_statements`), so the names
STMT binds are the cell's; the rewrite (:class:`_MagicRewriter`, then
:func:`_explicit_magic_scope` per build) turns each magic into a call of
:func:`run_line_magic` with the cell's current values spelled out and the names STMT binds
taken back. Dynamo never traces into it (:func:`_line_magic_outside_dynamo`): one graph
break, the magic runs eagerly between two programs.
"""
from __future__ import annotations

import ast
import copy
import symtable

from .cell_analysis import _TopScope, _as_list
from .cell_markers import _MAGIC_NAME, UNBOUND


# -- line magics inside the cell ---------------------------------------------------------------
# ``%time STMT`` runs STMT in the caller's scope and binds its names there, as a plain cell would.
# Inside the cell function IPython would hand it a copy of the function's locals (``f_locals``),
# so its bindings were lost and the cell's own names unreadable: the call is rewritten to pass the
# cell's current values explicitly and to take the names STMT binds back (``run_line_magic``).
_BINDING_MAGICS = {"time"}  # %timeit runs STMT in a function of its own: it binds nothing, as in a plain run


def _line_magic_call(node: ast.AST) -> tuple[str, str] | None:
    """(magic, line) of ``get_ipython().run_line_magic('name', 'line')`` (IPython's form of ``%name line``)."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run_line_magic"
            and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name)
            and node.func.value.func.id == "get_ipython" and len(node.args) == 2 and not node.keywords
            and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args)):
        return node.args[0].value, node.args[1].value
    return None


def _magic_body(magic: str, line: str) -> list[ast.stmt] | None:
    """The statements ``%time`` runs (its own option removed), or None when it binds nothing we can see."""
    if magic not in _BINDING_MAGICS:
        return None
    code = line.strip()
    if code.startswith("--no-raise-error"):
        code = code[len("--no-raise-error"):]
    try:
        return ast.parse(code.strip()).body
    except SyntaxError:
        return None


class _MagicStatements(_TopScope):
    """For the analysis only: ``%time STMT`` (a statement) replaced by STMT."""

    def visit_Expr(self, node):
        call = _line_magic_call(node.value)
        body = _magic_body(*call) if call else None
        return body if body is not None else node


def _magic_statements(stmt: ast.stmt) -> list[ast.stmt]:
    """``stmt`` as the analysis sees it: with every ``%time STMT`` in it replaced by STMT."""
    if not any(_line_magic_call(n) for n in ast.walk(stmt)):
        return [stmt]
    return _as_list(_MagicStatements().visit(copy.deepcopy(stmt)))


class _MagicRewriter(_TopScope):
    """``%magic line`` at the cell's top scope -> ``run_line_magic(locals(), 'magic', 'line', names)``."""

    def visit_Expr(self, node):
        call = _line_magic_call(node.value)
        body = _magic_body(*call) if call else None
        if body is None:
            return self.generic_visit(node)
        table = symtable.symtable(ast.unparse(ast.Module(body=body, type_ignores=[])), "<magic>", "exec")
        names = sorted(sym.get_name() for sym in table.get_symbols()
                       if sym.is_assigned() or sym.is_imported() or sym.is_namespace())
        value = self._call(*call, names)
        if not names:
            return ast.copy_location(ast.Expr(value), node)
        target = ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())
        return ast.copy_location(ast.Assign(targets=[target], value=value), node)

    def visit_Call(self, node):
        call = _line_magic_call(node)
        return ast.copy_location(self._call(*call, []), node) if call else self.generic_visit(node)

    @staticmethod
    def _call(magic: str, line: str, names: list[str]) -> ast.Call:
        locals_call = ast.Call(ast.Name("locals", ast.Load()), [], [])
        return ast.Call(ast.Name(_MAGIC_NAME, ast.Load()),
                        [locals_call, ast.Constant(magic), ast.Constant(line),
                         ast.Tuple([ast.Constant(n) for n in names], ast.Load())], [])


def run_line_magic(local_ns: dict, magic: str, line: str, names: tuple = ()):
    """Run ``%magic line`` from the cell function; returns its value, or the values of ``names`` after it.

    A magic that reads its caller's scope (``%time``, ``%timeit``) gets the cell's bound names (not the
    trace_lab helpers, not names still unbound) and writes into that dict, not into the notebook: what
    ``%timeit`` puts into the notebook namespace to run its statement is taken out again."""
    from IPython import get_ipython
    from IPython.core.magic import MAGIC_NO_VAR_EXPAND_ATTR

    shell = get_ipython()
    fn = shell.find_line_magic(magic) if shell is not None else None
    if fn is None or not getattr(fn, "needs_local_scope", False) or not getattr(fn, MAGIC_NO_VAR_EXPAND_ATTR, False):
        if names:  # not reached for %time; kept so that a changed IPython cannot silently drop bindings
            raise RuntimeError(f"%{magic} inside %%thunder_trace cannot bind {', '.join(names)} here; "
                               f"write `{names[0]} = ...` without %{magic}")
        return shell.run_line_magic(magic, line) if shell is not None else None
    ns = {k: v for k, v in local_ns.items() if v is not UNBOUND and not k.startswith("__thunder_trace")}
    user_ns = shell.user_ns
    before = {k: user_ns[k] for k in ns if k in user_ns}
    try:
        with shell.builtin_trap:
            result = fn(line, local_ns=ns)
    finally:
        for k, v in ns.items():  # %timeit copies the caller's names into the notebook: undo it
            if k in user_ns and user_ns[k] is v and before.get(k, _MISSING) is not v:
                if k in before:
                    user_ns[k] = before[k]
                else:
                    del user_ns[k]
    if names:
        return tuple(ns.get(n, local_ns.get(n, UNBOUND)) for n in names)
    return result


_MISSING = object()


def _explicit_magic_scope(body: list, names: list[str]) -> list:
    """``run_line_magic(locals(), ...)`` -> ``run_line_magic({'a': a, ...}, ...)`` over the cell function's
    own names (its inputs, and what it binds, pre-bound to UNBOUND). ``locals()`` in a frame that Dynamo
    traces is not the frame's locals on every torch (2.11 dropped names bound by the graph before the
    break), so the scope handed to ``%time`` is spelled out."""
    scope = ast.Dict(keys=[ast.Constant(n) for n in dict.fromkeys(names)],
                     values=[ast.Name(n, ast.Load()) for n in dict.fromkeys(names)])

    class Spell(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if (isinstance(node.func, ast.Name) and node.func.id == _MAGIC_NAME and node.args
                    and isinstance(node.args[0], ast.Call) and isinstance(node.args[0].func, ast.Name)
                    and node.args[0].func.id == "locals"):
                node.args[0] = copy.deepcopy(scope)
            return node

    return [Spell().visit(stmt) for stmt in body]


def _line_magic_outside_dynamo():
    """:func:`run_line_magic` as Dynamo sees it: one graph break, never traced into (IPython's magics
    exec code, read the clock, print), so the magic's statement runs eagerly between two programs."""
    import torch

    return torch._dynamo.disable(run_line_magic, reason="an IPython line magic (%time, %timeit) in the cell")
