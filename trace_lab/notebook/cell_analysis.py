"""What a cell reads and binds: the syntax-tree analysis behind :class:`.cell.CellProgram`.

Design. Everything here reads a parsed cell and changes nothing: :class:`_ReadsBeforeBinding`
walks the top-level statements forward and records the names read before the cell has
(definitely) bound them, the notebook values the cell uses; :func:`_first_appearance`
orders names as the user wrote them; :func:`_reject_unsupported` refuses what a function
body cannot hold (top-level ``await``, ``yield``, ``return``). :class:`_TopScope` and
:func:`_as_list` are the transformer base and list helper the rewriters share. Plain
``ast``; imports nothing of trace_lab.
"""
from __future__ import annotations

import ast


class _TopScope(ast.NodeTransformer):
    """A transformer of the cell's own scope: nested functions, classes and lambdas are left alone."""

    def _skip(self, node):
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _skip


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
