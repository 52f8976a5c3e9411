"""The ``layers`` strategy: regional compilation, one region per repeated layer, matmuls included.

PyTorch's regional-compilation recipe compiles a model's repeated block once instead of the whole
model. Here the blocks are found in the captured program itself and each becomes one fused region,
so identical layers get structurally identical regions and the fusion cache compiles each kind once;
inside a region the executor (Inductor) plans buffers across the whole layer (a kernel may write over
an input that dies in it) and calls its matmuls itself, where the other strategies leave matmuls
between regions as library calls.

* **Which layer an op belongs to**: its nn.Module path (Dynamo's ``nn_module_stack``; a backward op's
  ``fwd_nn_module_stack``, the forward op it differentiates) up to the first numbered child
  (``layers.3``, ``blocks[3]``: an element of a ModuleList or Sequential). An op with no path (the
  backward's gradient sums across a residual; not an op of a module outside the layers) joins a layer when it reads from that layer and feeds it,
  else when it reads from that layer alone (the sum of the gradients a layer's input got).
* **Values the layers share** (:func:`shared_by_layers`): an op computed from no input at all (a factory such as
  ``full`` or ``arange``, and what is computed from such values alone) whose value another layer reads belongs to
  no layer. The capture's common-subexpression elimination leaves such a value (a causal mask's ``ones`` and
  ``arange``) in the first layer that computes it, so that layer's region would differ from its repeats by those
  ops and outputs and compile once more; outside every layer, it runs once, op by op (no region to compile for a
  few tiny ops), and the first layer's region is its repeats'.
* **Regions**: within a layer every op the executor can compile (``can_compile``: its fusible ops and
  the library ops it calls itself) joins the layer's region. Runs of such ops adjacent in program order
  merge first (no cycle is possible inside an interval of a topological order); the runs of one layer
  then merge in order unless the merge would close a cycle through another unit (an op that cannot be
  compiled, a random op kept in program order), in which case the layer has a second region.
* **Outside layers** ops are grouped as ``dataflow`` groups them (``can_fuse``: no matmuls).
"""
from __future__ import annotations

import re

import torch.fx as fx

from .partition import OpGraph, Unit, _Groups, dataflow_merge, draws_random, producer, topological_order

__all__ = ["layer_of", "layer_keys", "layer_units", "shared_by_layers", "computed_from_nothing"]

# the first numbered child in a module path: "L['self'].layers.3.attn" -> "L['self'].layers.3"
_NUMBERED = re.compile(r"(?:\.\d+|\[\d+\])(?=$|[.\[])")


def _module_path(node: fx.Node) -> str | None:
    for key in ("nn_module_stack", "fwd_nn_module_stack"):
        stack = node.meta.get(key)
        if stack:
            last = list(stack.values())[-1]
            return str(last[0] if isinstance(last, tuple) else last)
    return None


def layer_of(node: fx.Node) -> str | None:
    """The repeated layer ``node`` was traced in (module path up to its first numbered child), or None."""
    path = _module_path(node)
    if not path:
        return None
    m = _NUMBERED.search(path)
    return path[:m.end()] if m else None


def layer_keys(graph: OpGraph) -> dict[fx.Node, str | None]:
    """Each op's layer (see the module docstring): its own, or for an op with none the one layer it reads from
    and feeds; None for the values the layers share."""
    return _keys_and_shared(graph)[0]


def _keys_and_shared(graph: OpGraph) -> tuple[dict[fx.Node, str | None], set[fx.Node]]:
    keys = {n: layer_of(n) for n in graph.ops}
    pathless = {n for n in graph.ops if _module_path(n) is None}  # only these join a layer by their neighbours

    def adopt(rule) -> None:
        changed = True
        while changed:  # chains of ops without a layer (a sum of sums) settle from both ends
            changed = False
            for n in graph.ops:
                if keys[n] is None and n in pathless:
                    key = rule(n)
                    if key is not None:
                        keys[n], changed = key, True

    def fed_and_read(n):  # between two ops of one layer: inside it
        common = ({keys[p] for p in graph.preds[n]} & {keys[s] for s in graph.succs[n]}) - {None}
        return common.pop() if len(common) == 1 else None

    def after_one(n):  # reads one layer only (a backward's sum of the gradients its inputs got): that layer's
        read = {keys[p] for p in graph.preds[n]} - {None}
        return read.pop() if len(read) == 1 else None

    adopt(fed_and_read)
    adopt(after_one)
    shared = shared_by_layers(graph, keys)
    for n in shared:
        keys[n] = None
    return keys, shared


def shared_by_layers(graph: OpGraph, keys: dict[fx.Node, str | None]) -> set[fx.Node]:
    """The ops of a layer computed from no input (see the module docstring) that another layer, or an op outside
    every layer, reads, with the ops of the same kind they are computed from: the values the layers share.
    ``keys``: each op's layer before this rule (:func:`layer_keys` applies it; a random op is never moved)."""
    from_nothing = computed_from_nothing(
        [n for n in graph.ops if not draws_random(n, graph.trace.gm)],
        lambda n: [producer(a) for a in n.all_input_nodes] + graph.preds[n])
    shared: set[fx.Node] = set()
    for n in from_nothing:
        if keys[n] is not None and any(keys[s] != keys[n] for s in graph.succs[n]):
            stack = [n]
            while stack:
                m = stack.pop()
                if m not in shared:
                    shared.add(m)
                    stack += [p for p in graph.preds[m] if p in from_nothing]
    return shared


def computed_from_nothing(nodes, inputs_of=lambda n: n.all_input_nodes) -> set[fx.Node]:
    """Of ``nodes`` (in program order), the calls whose every input is one of them computed from nothing: factories
    (``full``, ``arange``) and what is computed from them alone. A placeholder or constant input is not."""
    found: set[fx.Node] = set()
    for n in nodes:
        if n.op == "call_function" and all(i in found for i in inputs_of(n)):
            found.add(n)
    return found


def layer_units(graph: OpGraph, can_compile) -> tuple[list[Unit], dict[fx.Node, str | None]]:
    """(the ordered units of the ``layers`` strategy, each op's layer). ``graph.fusible`` is the executor's
    ``can_fuse`` (used outside layers); ``can_compile(node)``: may the op join its layer's region."""
    keys, shared = _keys_and_shared(graph)  # shared values: outside every layer, run op by op (no region)
    compilable = {n: bool(keys[n] is not None and can_compile(n)) for n in graph.ops}
    groups = _Groups(graph)  # group ids start as op positions
    layer = {i: keys[n] for i, n in enumerate(graph.ops)}
    # 1. runs of compilable ops of one layer, adjacent in program order
    run = None
    for i, n in enumerate(graph.ops):
        if compilable[n] and run is not None and layer[run] == keys[n]:
            groups.merge(run, i)
        else:
            run = i if compilable[n] else None
    # 2. one layer's runs into one region where no cycle closes
    by_layer: dict[str, list[int]] = {}
    for g in groups.sorted_ids(list(groups.members)):
        if compilable[groups.members[g][0]]:
            by_layer.setdefault(layer[g], []).append(g)
    for runs in by_layer.values():
        open_: list[int] = []
        for g in runs:
            for cur in open_:
                if not groups.creates_cycle(cur, g) and not groups.creates_cycle(g, cur):  # no path either way
                    groups.merge(cur, g)
                    break
            else:
                open_.append(g)
    # 3. outside layers: the dataflow merge among ops the executor fuses (with no layers, the dataflow strategy)
    outside = {g for g in groups.members if (layer[g] is None or not compilable[groups.members[g][0]])
               and groups.members[g][0] not in shared}
    dataflow_merge(groups, among=outside)
    for g, members in groups.members.items():
        if members[0] in shared:
            groups.fusible[g] = False
        elif g not in outside:  # a layer's region; a lone op is a region only where the executor would fuse it
            groups.fusible[g] = len(members) > 1 or graph.fusible[members[0]]
    return topological_order(groups), keys
