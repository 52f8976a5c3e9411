"""Thunder's traces as the lab's Traces: a lightning-thunder ``TraceCtx`` rebuilt as an fx program.

Thunder already has traces (``thunder.last_traces(jfn)``, ``thunder.last_backward_traces(jfn)``);
this module turns each into a :class:`~trace_lab.ir.trace.Trace` so the lab's liveness model,
printer, graph and memory plot read it unchanged:

* every bound symbol that computes a tensor becomes one fx node, named as Thunder names its
  outputs (``t72``); its target prints as Thunder prints the symbol (``torch.matmul``,
  ``prims.mul``); constants and non-tensor proxies stay in the arguments as Thunder prints them;
* a fusion (``nvFusion0``, ``TorchCompile0``: ``sym.is_fusion``) becomes a fused region, a
  ``call_module`` whose submodule holds its subsymbols - the regions as Thunder formed them;
* unpacked tensors are the program's inputs. A backward's saved tensors arrive in a collection
  that it clears (``clear_mutable_collection``): those it owns and frees at their last use,
  except the forward's own inputs, which their caller still holds;
* layouts and views: where the executor's callable is known (an execution trace's
  ``torch.reshape``, ``Tensor.to``, ...), it runs once on fake tensors (no memory), so each
  output has its real strides and shares an argument's buffer exactly when the op returns a
  view of it (``reshape`` of a transposed tensor copies); elsewhere (earlier traces' symbols) a
  symbol returning a view of its first tensor argument (Thunder's view tables, its own memory
  estimator's alias list, or a "may return a view" symbol whose output has the argument's dtype
  and size) shares that argument's buffer. Either way the liveness model reads the aliasing
  from a schema, as it does for aten ops;
* ``del`` statements are Thunder's own release points. The model frees a value after its last
  read; :func:`del_agreement` lists every ``del`` that releases a value elsewhere (none, for
  the traces of Thunder's "Delete Last Used" pass).

Nothing here imports thunder at module level: the caller passes the traces
(``trace_lab.from_thunder`` in :mod:`trace_lab.lab.thunder_view` imports it).
"""
from __future__ import annotations

import operator
import re

import torch
import torch.fx as fx

from ..ir.trace import Trace

__all__ = ["ThunderTrace", "from_thunder_trace", "thunder_stage_name", "del_agreement"]

# symbols Thunder's own memory estimator (thunder.examine.memory_calculation) treats as aliases
_ALIAS_NAMES = {"unsqueeze", "squeeze", "transpose", "expand", "reshape", "torch_prims_reshape_impl", "permute",
                "contiguous", "split", "torch_wait_prim_impl", "shallow_copy", "view", "view_as", "flatten",
                "unflatten", "broadcast_in_dim", "slice_prim", "select", "t", "movedim", "real", "imag",
                "unbind", "chunk", "tensor_split", "diagonal", "narrow", "as_strided", "alias", "detach"}
_MAY_ALIAS_NAMES = {"to", "reshape", "contiguous", "type_as", "float", "half", "bfloat16", "type", "clone_if_needed",
                    "convert_element_type"}
_VIEW_SCHEMA = torch._C.parse_schema("thunder::view(Tensor(a) self) -> Tensor(a)")
_SKIP = {"return", "python_return", "python_del", "clear_mutable_collection", "comment", "python_print"}


class ThunderOp:
    """An fx target standing for one Thunder symbol: prints as Thunder prints it; never called."""

    def __init__(self, printed: str, view: bool, schema=None):
        self.__trace_lab_name__ = printed
        self.__name__ = printed.rsplit(".", 1)[-1]
        self.__qualname__ = self.__name__
        self.__module__ = "thunder"
        if schema is not None or view:
            self._schema = schema if schema is not None else _VIEW_SCHEMA

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__trace_lab_name__} is a Thunder symbol seen through trace_lab; run the "
                           "Thunder-jitted function instead")

    def __repr__(self) -> str:
        return self.__trace_lab_name__


class _Name(str):
    """A non-tensor proxy in an argument list: prints as its name (``i0``), not quoted; ``value`` is
    what Thunder recorded for it."""

    def __new__(cls, name: str, value=None):
        obj = super().__new__(cls, name)
        obj.value = value
        return obj

    def __repr__(self) -> str:
        return str(self)


def _alias_schema(args, aliases):
    """A schema saying which positional argument each output shares its buffer with (as aten's do)."""
    letters = {j: chr(ord("a") + k) for k, j in enumerate(sorted({a for a in aliases if a is not None}))}
    params = ", ".join(f"Tensor({letters[j]}) a{j}" if j in letters else f"Any a{j}" for j in range(len(args)))
    rets = ", ".join(f"Tensor({letters[a]})" if a is not None else "Tensor" for a in aliases)
    return torch._C.parse_schema(f"thunder::op({params}) -> ({rets})")


class ThunderTrace(Trace):
    """A Trace whose values keep Thunder's names (``node.meta['thunder_name']``)."""

    def _assign_names(self) -> dict:
        names = {}
        for n in self.graph.nodes:
            if "thunder_name" in n.meta:
                names[n] = n.meta["thunder_name"]
            if n.op == "call_module":  # a fusion's inner values share the program's namespace
                for m in self.gm.get_submodule(n.target).graph.nodes:
                    if "thunder_name" in m.meta:
                        names[m] = m.meta["thunder_name"]
        return names


def thunder_stage_name(trace, index: int) -> str:
    """'Delete Last Used' from Thunder's provenance line; 'trace k' when it has none."""
    prov = trace.get_provenance() if hasattr(trace, "get_provenance") else None
    text = str(getattr(prov, "pss", None) or "").strip()
    m = re.match(r"(?:# )?(?:Constructed by )?(.+?)(?: \(took .*\))?$", text)
    return m.group(1) if m and m.group(1) else f"trace {index}"


def _sym_name(bsym) -> str:
    return str(getattr(bsym.sym, "name", "") or "")


def _printed_name(bsym) -> str:
    """How Thunder's printed program calls the symbol: ``torch.matmul``, ``Tensor.expand``, ``prims.mul``."""
    try:
        text = bsym.python(indent=0, print_depth=1)
    except Exception:  # noqa: BLE001 - fall back to the symbol's module and name
        text = []
    m = re.match(r"\s*[^=#]*=\s*([\w.]+)\(", text[0]) if text else None
    if m:
        return m.group(1)
    sym = bsym.sym
    name = _sym_name(bsym)
    module = getattr(sym, "module", None)
    mod = getattr(module, "__name__", "") if module is not None else ""
    if mod.startswith("thunder.core.prims"):
        return f"prims.{name}"
    if mod.startswith("thunder.torch"):
        return f"ltorch.{name}"
    if mod in ("torch", "torch.nn.functional", "torch.Tensor") or mod.startswith("torch"):
        return f"{mod}.{name}"
    return name


def _is_tensor_proxy(x) -> bool:
    return type(x).__name__ in ("TensorProxy", "FutureTensorProxy") or (
        hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "device") and hasattr(x, "name")
        and not isinstance(x, torch.Tensor))


def _is_proxy(x) -> bool:
    return hasattr(x, "name") and type(x).__module__.startswith("thunder.")


def _returns_view(bsym, views: set, may_views: set) -> bool:
    """Whether the symbol's first output is a view of its first tensor argument (module docstring)."""
    outs = [o for o in bsym.flat_proxy_outs if _is_tensor_proxy(o)]
    args = [a for a in bsym.flat_proxy_args if _is_tensor_proxy(a)]
    if len(outs) != 1 or not args:
        return False
    chain = [bsym] + list(bsym.subsymbols[:1])
    for b in chain:
        if b.sym in views or _sym_name(b) in _ALIAS_NAMES:
            return True
    for b in chain:
        if b.sym in may_views or _sym_name(b) in _MAY_ALIAS_NAMES:
            o, a = outs[0], args[0]
            return (o.dtype == a.dtype and str(o.device) == str(a.device)
                    and tuple(o.shape) and _numel(o) == _numel(a)) or (_numel(o) == _numel(a) == 1 and o.dtype == a.dtype)
    return False


def _numel(p) -> int:
    n = 1
    for s in p.shape:
        n *= int(s)
    return n


def _torch_dtype(dtype):
    from thunder.core.dtypes import to_torch_dtype

    return to_torch_dtype(dtype)


def _torch_device(device):
    from thunder.core.devices import to_torch_device

    return to_torch_device(device)


class _Builder:
    def __init__(self, fake_mode, views, may_views):
        from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: F401 - the caller made fake_mode

        self.fake_mode = fake_mode
        self.views, self.may_views = views, may_views

    def fake(self, proxy):
        with self.fake_mode:
            return torch.empty(tuple(int(s) for s in proxy.shape), dtype=_torch_dtype(proxy.dtype),
                               device=_torch_device(proxy.device))

    def args_of(self, bsym, env):
        def conv(x):
            if isinstance(x, (list, tuple)):
                return type(x)(conv(v) for v in x) if not hasattr(x, "_fields") else tuple(conv(v) for v in x)
            if isinstance(x, dict):
                return {k: conv(v) for k, v in x.items()}
            if _is_proxy(x):
                if getattr(x, "name", None) in env:
                    return env[x.name]
                return _Name(x.name, getattr(x, "value", None))
            return x

        return conv(tuple(bsym.args)), conv(dict(bsym.kwargs))

    def emit(self, graph: fx.Graph, bsym, env: dict, root=None) -> None:
        """One computing bound symbol -> one fx node (and its getitems), or a fused region."""
        outs = [o for o in bsym.flat_proxy_outs if _is_tensor_proxy(o)]
        if not outs:
            return
        if bsym.sym.is_fusion and root is not None:
            self.emit_region(graph, bsym, env, root)
            return
        args, kwargs = self.args_of(bsym, env)
        printed = _printed_name(bsym)
        vals, aliases = self.run_fake(bsym, printed, args, kwargs, len(outs))
        if aliases is not None:  # the op ran on fake tensors: its real layout and aliasing
            target = ThunderOp(printed, False, _alias_schema(args, aliases) if any(a is not None for a in aliases) else None)
        else:  # the rule (module docstring)
            target = ThunderOp(printed, _returns_view(bsym, self.views, self.may_views))
        node = graph.call_function(target, args, kwargs)
        self.bind(graph, node, outs, env, vals)

    def run_fake(self, bsym, printed: str, args, kwargs, n_out: int):
        """(output fake tensors, per output the index of the argument it aliases or None) from running
        the executor's callable on fake tensors; (None, None) where it cannot run (an earlier trace's
        symbols, an op without a fake implementation)."""
        try:
            imports, calls, objects = bsym.gather_ctxs()
            fn = eval(printed, {**imports, **calls, **objects})  # noqa: S307 - a name Thunder printed
        except Exception:  # noqa: BLE001
            return None, None
        if not callable(fn):
            return None, None

        def real(x):
            if isinstance(x, fx.Node):
                return x.meta.get("val")
            if isinstance(x, _Name):
                return x.value
            if isinstance(x, (list, tuple)):
                return type(x)(real(v) for v in x)
            if isinstance(x, dict):
                return {k: real(v) for k, v in x.items()}
            return x

        try:
            with self.fake_mode:
                result = fn(*real(args), **real(kwargs))
        except Exception:  # noqa: BLE001 - no fake implementation: the rule applies
            return None, None
        flat = [t for t in (result if isinstance(result, (list, tuple)) else [result]) if isinstance(t, torch.Tensor)]
        if len(flat) != n_out:
            return None, None
        storages = {}
        for j, a in enumerate(real(args)):
            if isinstance(a, torch.Tensor):
                storages.setdefault(a.untyped_storage()._cdata, j)
        aliases = [storages.get(t.untyped_storage()._cdata) for t in flat]
        return flat, aliases

    def bind(self, graph, node, outs, env, vals=None) -> None:
        vals = vals or [self.fake(o) for o in outs]
        if len(outs) == 1:
            node.meta["val"] = vals[0]
            node.meta["thunder_name"] = outs[0].name
            env[outs[0].name] = node
            return
        node.meta["val"] = tuple(vals)
        for i, o in enumerate(outs):
            g = graph.call_function(operator.getitem, (node, i))
            g.meta["val"] = node.meta["val"][i]
            g.meta["thunder_name"] = o.name
            env[o.name] = g

    def emit_region(self, graph, bsym, env, root) -> None:
        outs = [o for o in bsym.flat_proxy_outs if _is_tensor_proxy(o)]
        ins = []
        for a in bsym.flat_proxy_args:
            if _is_tensor_proxy(a) and a.name in env and a.name not in [i.name for i in ins]:
                ins.append(a)
        sub = fx.Graph()
        inner: dict = {}
        for a in ins:
            p = sub.placeholder(a.name)
            p.meta["val"] = env[a.name].meta["val"]
            p.meta["thunder_name"] = a.name
            inner[a.name] = p
        for sb in bsym.subsymbols:
            self.emit(sub, sb, inner)
        results = []
        for o in outs:
            if o.name not in inner:  # an output the subsymbols do not compute (passed through)
                raise ValueError(f"{_sym_name(bsym)}: output {o.name} is not computed inside the fusion")
            results.append(inner[o.name])
        sub.output(tuple(results))
        name = _sym_name(bsym)
        root.add_module(name, fx.GraphModule(torch.nn.Module(), sub))
        node = graph.call_module(name, tuple(env[a.name] for a in ins))
        ops = [_printed_name(sb) for sb in bsym.subsymbols if any(_is_tensor_proxy(o) for o in sb.flat_proxy_outs)]
        node.meta["region"] = {"name": name, "ops": ops, "signature": None, "aliases": None,
                               "nodes": [r.name for r in results]}
        node.meta["val"] = tuple(self.fake(o) for o in outs)
        for i, o in enumerate(outs):
            g = graph.call_function(operator.getitem, (node, i))
            g.meta["val"] = node.meta["val"][i]
            g.meta["thunder_name"] = o.name
            env[o.name] = g


def _view_tables():
    try:
        import thunder.torch as ltorch

        return set(getattr(ltorch, "_syms_returning_views", ())), set(getattr(ltorch, "_syms_that_may_return_views", ()))
    except Exception:  # noqa: BLE001 - an older/newer thunder without the tables: the name lists still apply
        return set(), set()


def from_thunder_trace(trace, kind: str, stage: str, caller_held: set[str] = frozenset(),
                       storage_groups: dict[str, str] | None = None) -> ThunderTrace:
    """One Thunder ``TraceCtx`` as a :class:`ThunderTrace` (module docstring). ``caller_held``: names of
    tensors the caller keeps alive although the program receives them in a collection it clears (a
    backward's saved forward inputs and outputs, and views of them); ``storage_groups``: name -> the
    storage it lives in, for handed-over tensors that share one (a saved view and its saved base)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    views, may_views = _view_tables()
    b = _Builder(FakeTensorMode(allow_non_fake_inputs=True), views, may_views)
    graph = fx.Graph()
    root = torch.nn.Module()
    env: dict = {}
    inputs: list[str] = []
    cleared: set[str] = set()
    collections: dict[str, list[str]] = {}
    ret = None
    for bsym in trace.bound_symbols:
        name = _sym_name(bsym)
        if name.startswith("unpack"):
            outs = [o for o in bsym.flat_proxy_outs if _is_tensor_proxy(o)]
            coll = next((a.name for a in bsym.flat_proxy_args if _is_proxy(a)), None)
            for o in outs:
                if o.name in env:
                    continue
                p = graph.placeholder(re.sub(r"\W", "_", o.name))
                p.meta["val"] = b.fake(o)
                p.meta["thunder_name"] = o.name
                env[o.name] = p
                inputs.append(o.name)
                if coll is not None:
                    collections.setdefault(coll, []).append(o.name)
            continue
        if name == "clear_mutable_collection":
            for a in bsym.flat_proxy_args:
                cleared.add(a.name)
            continue
        if name in ("return", "python_return"):
            ret = bsym
            continue
        if name in _SKIP:
            continue
        b.emit(graph, bsym, env, root=root)
    returned = []
    if ret is not None:
        for p in ret.flat_proxy_args:
            if _is_tensor_proxy(p) and p.name in env and env[p.name] not in returned:
                returned.append(env[p.name])
    graph.output(tuple(returned))
    gm = fx.GraphModule(root, graph)
    owned_names = {n for c in cleared for n in collections.get(c, [])} - set(caller_held)
    groups = storage_groups or {}
    owned = {i: groups.get(n, n) for i, n in enumerate(inputs) if n in owned_names}
    return ThunderTrace(gm, kind, stage, input_names=inputs, owned_inputs=owned,
                        info={"source": "lightning-thunder", "thunder_dels": _dels(trace)})


def _dels(trace) -> list[tuple[str, list[str]]]:
    """Thunder's ``del`` lines: (the value computed just before, the names deleted)."""
    out, last = [], None
    for bsym in trace.bound_symbols:
        name = _sym_name(bsym)
        if name == "python_del":
            out.append((last, [a.name for a in bsym.flat_proxy_args if _is_proxy(a)]))
        elif name not in _SKIP and not name.startswith("unpack"):
            outs = [o.name for o in bsym.flat_proxy_outs if _is_proxy(o)]
            if outs:
                last = outs[0]
    return out


def del_agreement(trace: ThunderTrace) -> list[str]:
    """Every tensor Thunder's ``del`` lines release where the liveness model does not (empty when they agree):
    'del t5 after t9, model frees it after t7'."""
    model_frees = {}
    for ln in trace.liveness().lines:
        for v in ln.dead_values:
            model_frees[v] = ln.name
    tensors = {trace.name(n) for n in trace.graph.nodes if n.op != "output"}
    held = {trace.name(n) for i, n in enumerate(trace.inputs) if i not in trace.owned_inputs}
    problems = []
    for after, names in trace.info.get("thunder_dels", []):
        for v in names:
            if v not in tensors or v in held:
                continue
            where = model_frees.get(v)
            if where is None:
                problems.append(f"del {v} after {after}: the model keeps it to the end")
            elif after is not None and where.split(", ")[0] != after and after not in where.split(", "):
                problems.append(f"del {v} after {after}, the model frees it after {where}")
    return problems
