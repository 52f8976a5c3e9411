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
"""
from __future__ import annotations

import ast
import copy
import symtable
import types
from dataclasses import dataclass, field

__all__ = ["CellProgram", "UNBOUND", "CELL_FUNCTION_NAME", "is_data_value"]

CELL_FUNCTION_NAME = "__thunder_trace_cell__"
_UNBOUND_NAME = "__thunder_trace_unbound__"
_MAGIC_NAME = "__thunder_trace_line_magic__"


class _Unbound:
    """Marks a cell name that no statement bound during the run (or that ``del`` removed)."""

    def __repr__(self) -> str:
        return "<unbound>"

    def __reduce__(self):  # one marker in every process: a rank that unpickles the cell compares by identity
        return "UNBOUND"


UNBOUND = _Unbound()
_TYPE_PARAMS = {"type_params": []} if "type_params" in ast.FunctionDef._fields else {}  # Python >= 3.12


def is_data_value(value) -> bool:
    """True for values the cell should receive as inputs (not modules/classes/functions)."""
    return not isinstance(value, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
                                  types.MethodType, types.BuiltinMethodType))


class _TopScope(ast.NodeTransformer):
    """A transformer of the cell's own scope: nested functions, classes and lambdas are left alone."""

    def _skip(self, node):
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _skip


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


def _target_names(node: ast.AST) -> set[str]:
    """Names an assignment target binds (``a``, ``a, *b``; not ``a[i]`` or ``a.b``)."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Starred):
        return _target_names(node.value)
    if isinstance(node, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(e) for e in node.elts))
    return set()


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


class _ReadsBeforeBinding:
    """Which names the cell may read before it has (definitely) bound them.

    A forward walk of the top-level statements keeps the set of names bound on every
    path so far: an ``if`` binds what both branches bind, a loop or a ``try`` body
    binds nothing for what follows it (it may not run to the end), a ``with`` body is
    taken to run (a context manager that swallows an exception is the exception), a
    loop body is read with the names it deletes removed (a second iteration sees
    them unbound). ``top``: names read while unbound, at top level or in a
    comprehension (evaluated there and then). ``nested``: names read anywhere inside a
    function, lambda or class defined while they were unbound (it may be called
    before the binding); over-approximated: every name loaded in its body.
    """

    def __init__(self):
        self.top: set[str] = set()
        self.nested: set[str] = set()

    # -- expressions ---------------------------------------------------------------------------
    def use(self, node: ast.AST | None, bound: set[str]) -> set[str]:
        """Record the reads of an expression evaluated now; returns ``bound`` plus its walrus targets."""
        if node is None:
            return bound
        walrus: set[str] = set()

        def visit(n, inner: frozenset):
            if isinstance(n, ast.Name):
                if isinstance(n.ctx, ast.Load) and n.id not in inner and n.id not in bound:
                    self.top.add(n.id)
            elif isinstance(n, _COMPREHENSIONS):
                local = set(inner)
                for i, gen in enumerate(n.generators):
                    visit(gen.iter, inner if i == 0 else frozenset(local))  # the first iterable: outer scope
                    local |= _target_names(gen.target)
                    for cond in gen.ifs:
                        visit(cond, frozenset(local))
                for elt in ([n.key, n.value] if isinstance(n, ast.DictComp) else [n.elt]):
                    visit(elt, frozenset(local))
            elif isinstance(n, _NESTED):
                self.define_nested(n, bound)
            else:
                if isinstance(n, ast.NamedExpr):
                    walrus.update(_target_names(n.target))
                for child in ast.iter_child_nodes(n):
                    visit(child, inner)

        visit(node, frozenset())
        return bound | walrus

    def define_nested(self, node: ast.AST, bound: set[str]) -> None:
        """A def/lambda/class: decorators, defaults, bases run now; its body may run at any later time."""
        args = getattr(node, "args", None)
        now = list(getattr(node, "decorator_list", [])) + list(getattr(node, "bases", []))
        now += [k.value for k in getattr(node, "keywords", [])]
        if args is not None:
            now += list(args.defaults) + [d for d in args.kw_defaults if d is not None]
            if not isinstance(node, ast.Lambda):
                now += [a.annotation for a in args.posonlyargs + args.args + args.kwonlyargs if a.annotation]
        for expr in now:
            self.use(expr, bound)
        body = node.body if isinstance(node.body, list) else [node.body]
        for stmt in body:
            for n in ast.walk(stmt):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in bound:
                    self.nested.add(n.id)

    def target(self, node: ast.AST, bound: set[str]) -> None:
        """Reads made by assigning to ``node`` (``a[i] = v`` reads ``a`` and ``i``)."""
        if isinstance(node, (ast.Subscript, ast.Attribute)):
            self.use(node, bound)
        elif isinstance(node, ast.Starred):
            self.target(node.value, bound)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for e in node.elts:
                self.target(e, bound)

    # -- statements ---------------------------------------------------------------------------
    def block(self, stmts: list[ast.stmt], bound: set[str]) -> set[str]:
        for stmt in stmts:
            bound = self.stmt(stmt, bound)
        return bound

    def loop_body(self, body: list[ast.stmt], bound: set[str]) -> None:
        deleted = {t.id for n in ast.walk(ast.Module(body=body, type_ignores=[])) if isinstance(n, ast.Delete)
                   for t in n.targets if isinstance(t, ast.Name)}
        self.block(body, bound - deleted)

    def stmt(self, s: ast.stmt, bound: set[str]) -> set[str]:
        if isinstance(s, ast.Assign):
            bound = self.use(s.value, bound)
            for t in s.targets:
                self.target(t, bound)
            return bound | set().union(*(_target_names(t) for t in s.targets))
        if isinstance(s, (ast.AugAssign, ast.AnnAssign)):
            if isinstance(s, ast.AnnAssign) and s.value is None:
                return bound  # `x: int` binds nothing
            bound = self.use(s.value, bound)
            self.target(s.target, bound)
            if isinstance(s.target, ast.Name) and isinstance(s, ast.AugAssign) and s.target.id not in bound:
                self.top.add(s.target.id)  # `x += 1` reads x
            return bound | _target_names(s.target)
        if isinstance(s, ast.Delete):
            for t in s.targets:
                self.target(t, bound)
            return bound - {t.id for t in s.targets if isinstance(t, ast.Name)}
        if isinstance(s, ast.If):
            bound = self.use(s.test, bound)
            return self.block(s.body, bound) & self.block(s.orelse, bound)
        if isinstance(s, (ast.For, ast.AsyncFor)):
            bound = self.use(s.iter, bound)
            self.target(s.target, bound)
            self.loop_body(s.body, bound | _target_names(s.target))
            self.block(s.orelse, bound)
            return bound
        if isinstance(s, ast.While):
            bound = self.use(s.test, bound)
            self.loop_body(s.body, bound)
            self.block(s.orelse, bound)
            return bound
        if isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                bound = self.use(item.context_expr, bound)
                if item.optional_vars is not None:
                    self.target(item.optional_vars, bound)
                    bound = bound | _target_names(item.optional_vars)
            return self.block(s.body, bound)
        if isinstance(s, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            after_body = self.block(s.body, bound)
            deleted = bound - after_body
            ends = [self.block(s.orelse, after_body)]
            for h in s.handlers:
                start = self.use(h.type, bound - deleted)
                ends.append(self.block(h.body, start | ({h.name} if h.name else set())))
            self.block(s.finalbody, bound - deleted)  # may run after any statement of the body
            return self.block(s.finalbody, set.intersection(*ends))
        if isinstance(s, ast.Match):
            bound = self.use(s.subject, bound)
            for case in s.cases:
                names = {n.name for n in ast.walk(case.pattern)
                         if isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name}
                names |= {n.rest for n in ast.walk(case.pattern) if isinstance(n, ast.MatchMapping) and n.rest}
                values = [n.value for n in ast.walk(case.pattern) if isinstance(n, ast.MatchValue)]
                for v in values:
                    self.use(v, bound)
                self.block(case.body, self.use(case.guard, bound | names))
            return bound
        if isinstance(s, _NESTED):
            self.define_nested(s, bound)
            return bound | {s.name}
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            return bound | {(a.asname or a.name).split(".")[0] for a in s.names}
        if isinstance(s, (ast.Global, ast.Nonlocal)):
            return bound
        return self.use(s, bound)  # Expr, Return, Raise, Assert, Pass, Break, Continue: reads only


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


def _as_list(x):
    if x is None:
        return []
    return x if isinstance(x, list) else [x]


def _first_appearance(tree: ast.AST) -> dict[str, int]:
    order: dict[str, int] = {}
    for node in ast.walk(tree):
        name = node.id if isinstance(node, ast.Name) else getattr(node, "name", None)
        if isinstance(name, str):
            key = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
            pos = key[0] * 10000 + key[1]
            if name not in order or pos < order[name]:
                order[name] = pos
    return order


def _reject_unsupported(tree: ast.Module) -> None:
    for node in tree.body:
        for sub in ast.walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(sub, (ast.Await, ast.AsyncFor, ast.AsyncWith)) and _at_top_scope(node, sub):
                raise SyntaxError("%%thunder_trace cannot run top-level await/async code; move it into a cell "
                                  "without the magic")
            if isinstance(sub, (ast.Yield, ast.YieldFrom, ast.Return)) and _at_top_scope(node, sub):
                raise SyntaxError(f"'{type(sub).__name__.lower()}' outside a function is not valid in a cell")


def _at_top_scope(root: ast.AST, target: ast.AST) -> bool:
    """True when ``target`` is not inside a nested function/class/lambda under ``root``."""
    stack = [(root, False)]
    while stack:
        node, nested = stack.pop()
        if node is target:
            return not nested
        inner = nested or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))
    return False
