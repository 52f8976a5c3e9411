"""Repeated layers save the same activations: a wrapper of AOTAutograd's partitioner (``align_layer_saves``, with
the strategies whose regions follow the layers: ``layers``, ``dataflow``, ``memory``; ``run/jit.py`` chooses).

The min-cut partitioner chooses, per layer, which forward values the backward reads and which it recomputes.
Where two choices cost the same it may choose differently for one layer than for its repeats: in a Llama stack
the first layer's input is a program input (saved anyway, banned from recomputation), so the partitioner
saves the attention projection's matmul output there and recomputes the residual sum ``x + attn`` from it,
while every later layer saves the sum itself (the same bytes). That one layer's forward and backward regions
then differ from its repeats' and compile once more each, ~3 s a region on an H100 (issue 27, first iteration);
under ``dataflow`` the first layer's backward made two nvFuser definitions of its own (llama 8 layers: 13 a first
call, 11 aligned; each ~1.5 s of nvFuser compiling on an H100).

:func:`aligned_partition` partitions once; when a layer's saved values differ from those most repeats of it
save, it marks the repeats' choice on that layer (``CheckpointPolicy.MUST_SAVE``, as activation checkpointing's
policies do) and partitions again. The second partition is kept only when every marked layer then saves as its
repeats do and no layer saves more bytes than before; otherwise the first stands.

A layer is an op's module path up to its first numbered child (:func:`.layers.layer_of`); the layers of one
container (``layers.0``, ``layers.1``, ...) are repeats when their forward ops run nearly the same op targets in
the same order (values computed from no input, which the capture's common-subexpression elimination leaves in the
first layer, are left out; an ``alias`` one layer has and another not is matched around). Roles are positions
in the most common layer's op list; each layer's ops are matched to them (``difflib.SequenceMatcher``).
"""
from __future__ import annotations

import difflib
import re
import time
from collections import Counter

import torch
import torch.fx as fx

from ..analysis.storage import tensor_bytes
from .layers import computed_from_nothing, layer_of

__all__ = ["ALIGNED_META", "aligned_partition", "layer_roles", "saved_roles"]


ALIGNED_META = "trace_lab_aligned_saves"  # the forward module's meta key: what aligning did (:func:`aligned_partition`)


def aligned_partition(partition):
    """``partition(joint_gm, joint_inputs, **kw) -> (fw, bw)`` wrapped as the module docstring says. Where it
    partitioned again, the forward module it returns says so in ``meta[ALIGNED_META]``: ``{"layers": [the marked
    layers], "values": n marked, "kept": bool, "seconds": the second partition's}`` (the Summary's compile row)."""

    def partition_aligned(joint_gm, joint_inputs, **kwargs):
        fw, bw = partition(joint_gm, joint_inputs, **kwargs)
        roles = layer_roles(joint_gm)
        if not roles:
            return fw, bw
        saved = saved_roles(fw, roles)
        wanted = _majority(roles, saved)
        marks = _marks(roles, saved, wanted)
        if not marks:
            return fw, bw
        from torch.utils.checkpoint import CheckpointPolicy

        before = {n: {k: n.meta.get(k, _UNSET) for k in ("recompute", "ac_graph_id")} for n in marks}
        for n in marks:
            n.meta["recompute"] = CheckpointPolicy.MUST_SAVE
            n.meta.setdefault("ac_graph_id", 0)
        started = time.perf_counter()
        try:
            fw2, bw2 = partition(joint_gm, joint_inputs, **kwargs)
        finally:
            for n, old in before.items():  # the joint graph as it came
                for k, v in old.items():
                    if v is _UNSET:
                        n.meta.pop(k, None)
                    else:
                        n.meta[k] = v
        saved2 = saved_roles(fw2, roles)
        marked = sorted({layer_of(n) for n in marks})
        aligned = all(saved2[key][0] == wanted[_container(key)][0] for key in marked)
        no_more = all(saved2[key][1] <= saved[key][1] for key in roles)
        kept = aligned and no_more
        chosen = (fw2, bw2) if kept else (fw, bw)
        chosen[0].meta[ALIGNED_META] = {"layers": marked, "values": len(marks), "kept": kept,
                                        "seconds": time.perf_counter() - started}
        return chosen

    return partition_aligned


_UNSET = object()
_LAST_NUMBER = re.compile(r"(?:\.\d+|\[\d+\])$")


def _container(layer: str) -> str:
    return _LAST_NUMBER.sub("", layer)


def layer_roles(joint_gm: fx.GraphModule) -> dict[str, dict[fx.Node, int]]:
    """Per layer of a container with repeats: its forward ops (values computed from no input left out), each
    mapped to its role, the position of its match in the container's most common op list; unmatched ops have
    none. A layer less than 95% of whose ops match is no repeat and left out."""
    skip = computed_from_nothing(joint_gm.graph.nodes)
    layers: dict[str, list[fx.Node]] = {}
    for n in joint_gm.graph.nodes:
        if n.op != "call_function" or n in skip or not n.meta.get("nn_module_stack") \
                or n.meta.get("partitioner_tag") == "is_backward":
            continue
        key = layer_of(n)
        if key is not None:
            layers.setdefault(key, []).append(n)
    by_container: dict[str, list[str]] = {}
    for key in layers:
        by_container.setdefault(_container(key), []).append(key)
    roles: dict[str, dict[fx.Node, int]] = {}
    for keys in by_container.values():
        if len(keys) < 2:
            continue
        patterns = {key: [str(n.target) for n in layers[key]] for key in keys}
        reference = Counter(tuple(p) for p in patterns.values()).most_common(1)[0][0]
        for key in keys:
            matcher = difflib.SequenceMatcher(None, patterns[key], list(reference), autojunk=False)
            mapped = {}
            for a, b, size in matcher.get_matching_blocks():
                for k in range(size):
                    mapped[layers[key][a + k]] = b + k
            if len(mapped) >= 0.95 * max(len(reference), len(layers[key])):
                roles[key] = mapped
    return roles


def saved_roles(fw: fx.GraphModule, roles: dict[str, dict[fx.Node, int]]) -> dict[str, tuple[frozenset, int]]:
    """Per layer: (the roles of the forward values its backward reads, their bytes). The partitioner keeps the joint graph's node names, so a forward output named as a
    layer's op is that op's value."""
    where = {n.name: (key, n, role) for key, mapped in roles.items() for n, role in mapped.items()}
    out: dict[str, tuple[set, int]] = {key: (set(), 0) for key in roles}
    output = next(n for n in fw.graph.nodes if n.op == "output")
    for value in output.args[0]:
        if isinstance(value, fx.Node) and value.name in where:
            key, node, role = where[value.name]
            got, total = out[key]
            got.add(role)
            val = node.meta.get("val")
            out[key] = (got, total + (tensor_bytes(val) if isinstance(val, torch.Tensor) else 0))
    return {key: (frozenset(got), total) for key, (got, total) in out.items()}


def _majority(roles, saved) -> dict[str, tuple[frozenset, int]]:
    """Per container: the saved roles (and bytes) most of its layers have; between equally common ones, the later
    layers' (the first layer is the odd one: its input is the program's; two layers tie one to one)."""
    counts: dict[str, Counter] = {}
    last: dict[tuple, int] = {}
    for i, key in enumerate(roles):
        counts.setdefault(_container(key), Counter())[saved[key]] += 1
        last[(_container(key), saved[key])] = i
    return {c: max(counter, key=lambda got: (counter[got], last[(c, got)])) for c, counter in counts.items()}


def _marks(roles, saved, wanted) -> list[fx.Node]:
    """The ops to mark MUST_SAVE: in each layer that saves otherwise than most of its repeats (and not fewer
    bytes than they do), its ops at the roles they save and it does not. A layer whose ops carry a checkpointing
    policy already (``recompute`` in their meta: activation checkpointing's, the user's) is left as it is."""
    marks = []
    for key, mapped in roles.items():
        want, have = wanted[_container(key)], saved[key]
        if have[0] == want[0] or want[1] > have[1]:
            continue
        at = {role: n for n, role in mapped.items()}
        missing = [at.get(role) for role in sorted(want[0] - have[0])]
        if any(n is None for n in missing):
            continue
        if any("recompute" in n.meta for n in mapped):  # a checkpointing policy of the user's: theirs stands
            continue
        marks += missing
    return marks
