"""A region that is part of another runs the other's compiled code instead of compiling (issue 27, first call).

In a layer stack whose first layer's input needs no gradient, that layer's backward region is its repeats' minus
the input's gradient (and minus the ops and the input only that gradient reads): the same computation restricted,
yet another signature, so it compiled once more (on an H200, cold, llama 8 layers: the backward's executor took
3.19 s with that compile and 2.34 s without). :func:`covers` finds such pairs among one program's regions:
region R is *covered* by region C when C's signature restricted to some of C's outputs (at most
:data:`MAX_DROPPED` dropped, order kept: :func:`trace_lab.passes.signature.restricted_signature`) equals R's
signature, input descriptors included. C needs no more ops than R: with nvFuser a layer's backward is two regions,
and the first layer's larger one has its repeats' ops but returns one partial gradient fewer (the one its repeats
hand to the next region).
:func:`covered_call` then runs C's compiled code for R: R's arguments go to the inputs they are, the inputs only
the dropped outputs read get placeholders of their recorded layout (made once, kept with the call), and the dropped
outputs are freed as the call returns. The executor measures the call as it measures any region, so those
outputs count as the region's workspace in the liveness model. Both compiling executors plan covers here
(:func:`plan_covers`, against the program's predicted peak: :func:`headroom`) and say what they did with
:func:`cover_details`, :func:`refusal_details` and :func:`cover_notes`: Inductor runs the covering region's compiled code, nvFuser its
region program (definitions and torch steps; its segments may write over the inputs ``donate_inplace`` gave it).

A cover is taken only where what the call adds (the dropped outputs, the copies below) fits under the program's
predicted peak on the covered region's line: it saves compile time and never raises the peak.
Where C's code may write an output over one of its inputs (in-place donation) and R's caller still reads that
argument afterwards (the first layer's input is the program's), the call hands C's code a copy of it. A cover is
refused where C's code may write over a placeholder, and where placeholders would hold more than
:data:`MAX_PLACEHOLDER_BYTES` or the copies take more than :data:`MAX_COPY_BYTES` a call. The cost is the dropped
outputs' work and the copies on every call (for a Llama stack's first layer backward: a norm's input gradient, a
residual add and a copy of the layer's input).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
import torch.fx as fx

from ..analysis.storage import tensor_bytes
from ..ir.printer import format_bytes, plural
from ..passes.signature import is_view_of_computed, restricted_signature
from ..runtime.call_memory import example_tensor

__all__ = ["Cover", "MAX_DROPPED", "MAX_UNVIEWED", "MAX_PLACEHOLDER_BYTES", "MAX_COPY_BYTES", "covers", "find_cover",
           "covered_call", "headroom", "plan_covers", "cover_details", "refusal_details", "cover_notes"]

MAX_DROPPED = 2  # outputs a covering region may compute beyond the covered one's
MAX_UNVIEWED = 3  # viewed outputs of a covering region tried as their bases
MAX_PLACEHOLDER_BYTES = 8 << 20  # placeholder inputs a cover may keep alive, in all
MAX_COPY_BYTES = 64 << 20  # arguments a cover may copy on each call, in all


@dataclass(frozen=True)
class Cover:
    """How region R runs region C's code: ``inputs[j]`` is C's input position of R's argument j,
    ``placeholders`` C's inputs only the dropped outputs read, ``kept[i]`` C's output position of R's output i,
    ``copies`` C's inputs that get a copy of R's argument (C's code may write over them; R's caller reads them on),
    ``unviewed`` ``(i, shape)`` for R's outputs that C returns as a view (``aten.view``) of them: R's output i is
    that view reshaped back to R's recorded shape (the same storage where C's result has its recorded layout, as
    compiled code keeps it; a last layer's norm, which its repeats return flattened for the next matmul)."""
    inputs: tuple
    placeholders: tuple
    kept: tuple
    dropped: tuple
    copies: tuple = ()
    unviewed: tuple = ()


def _outputs(sub: fx.GraphModule):
    out = next(n for n in reversed(sub.graph.nodes) if n.op == "output").args[0]
    return out if isinstance(out, (tuple, list)) else None


def _ops(sub: fx.GraphModule) -> int:
    return sum(1 for n in sub.graph.nodes if n.op not in ("placeholder", "output"))


def find_cover(signature: str, sub: fx.GraphModule, input_vals, candidates, writable=frozenset(),
               room: int | None = None, rounding: int = 1, own_over=()):
    """``(key, Cover)`` of the candidate whose code computes region ``sub`` (signature ``signature``) with the fewest
    extra outputs and adds at most ``room`` bytes (None: no limit), or None; :func:`covers` lists them all."""
    for key, cover, added in covers(signature, sub, input_vals, candidates, writable, rounding, own_over):
        if room is None or added <= room:
            return key, cover
    return None


def covers(signature: str, sub: fx.GraphModule, input_vals, candidates, writable=frozenset(), rounding: int = 1,
           own_over=()):
    """``[(key, Cover, bytes the call adds)]`` of the candidates whose code computes region ``sub`` (signature
    ``signature``), fewest extra outputs first. ``candidates``: ``(key, sub, input_vals, overwrites)`` of other
    regions, where ``overwrites`` are the input positions that candidate's code may write over; ``writable``: the
    positions of ``sub``'s inputs its callers give up to it (their last use); ``own_over``: the positions ``sub``'s
    own code would write over (``donate_inplace``). The bytes added are the dropped outputs, the copies, and the
    inputs of ``own_over`` the candidate's code does not write over (``sub``'s own code would have put an output
    there; the candidate's allocates it afresh: a stack's last norm run by a layer's norm code, 2026-12-07, raised
    llama2's forward peak by one activation), rounded as the allocator rounds (``rounding``)."""
    mine = _outputs(sub)
    if mine is None:
        return []
    n_in, n_out, n_ops = len(input_vals), len(mine), _ops(sub)
    found_all = []
    for key, big, big_vals, overwrites in candidates:
        theirs = _outputs(big)
        if theirs is None or not n_out <= len(theirs) <= n_out + MAX_DROPPED or len(big_vals) < n_in \
                or _ops(big) < n_ops:
            continue
        extra = len(theirs) - n_out
        found = None
        for dropped in itertools.combinations(range(len(theirs)), extra):
            kept = tuple(i for i in range(len(theirs)) if i not in dropped)
            found = _restricted_match(signature, big, big_vals, theirs, kept, extra)
            if found is not None:
                break  # another choice of dropped outputs computes the same
        if found is None:
            continue
        used, unviewed = found
        holders = tuple(p for p in range(len(big_vals)) if p not in used)
        copies = _copies(used, holders, big_vals, overwrites, writable)
        recorded = [mine[j].meta.get("val") for j in unviewed]
        if copies is not None and all(isinstance(v, torch.Tensor) for v in recorded):
            shapes = tuple((j, tuple(v.shape)) for j, v in zip(unviewed, recorded))
            unwritten = [input_vals[p] for p in own_over if used[p] not in overwrites]
            found_all.append((key, Cover(inputs=used, placeholders=holders, kept=kept, dropped=dropped,
                                         copies=copies, unviewed=shapes),
                              _added_bytes(theirs, dropped, copies, big_vals, rounding, unwritten)))
    return sorted(found_all, key=lambda f: (len(f[1].dropped), len(f[1].unviewed), f[2]))


def _restricted_match(signature: str, big: fx.GraphModule, big_vals, theirs, kept: tuple, extra: int):
    """``(input positions used, unviewed positions)`` where ``big`` (outputs ``theirs``) restricted to its outputs
    ``kept`` has ``signature``, with as few of its viewed outputs returned as their bases (``unviewed``) as that
    takes; None where no choice does. Nothing dropped and nothing unviewed is ``big`` itself (its own signature: a
    cache hit, not a cover)."""
    viewed = [j for j, i in enumerate(kept) if is_view_of_computed(theirs[i])][:MAX_UNVIEWED]
    for r in range(len(viewed) + 1):
        for unviewed in itertools.combinations(viewed, r):
            if not extra and not unviewed:
                continue
            found = restricted_signature(big, big_vals, kept, unviewed)
            if found is not None and found[0] == signature:
                return found[1], unviewed
    return None


def _added_bytes(outs, dropped, copies, big_vals, rounding: int, unwritten=()) -> int:
    """What a covered call allocates beyond the region's own code: the dropped outputs, the copies, and a fresh
    result for each of ``unwritten`` (the covered region's inputs its own code would have written over)."""
    vals = [outs[i].meta.get("val") for i in dropped] + [big_vals[p] for p in copies] + list(unwritten)
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return 1 << 62  # unknown: too much
    return sum(tensor_bytes(v, rounding) for v in vals)


def _copies(used, holders, big_vals, overwrites, writable) -> tuple | None:
    """The covering code's input positions that get a copy of the argument (ones it may write over that the
    covered region's caller still reads), or None where the cover is refused (a placeholder it may write over,
    one that is not a tensor, or placeholders and copies above their limits)."""
    if any(not isinstance(big_vals[p], torch.Tensor) for p in holders) or set(holders) & set(overwrites):
        return None
    mine = {p: j for j, p in enumerate(used)}
    copies = tuple(sorted(p for p in overwrites if mine[p] not in writable))
    if sum(tensor_bytes(big_vals[p]) for p in holders) > MAX_PLACEHOLDER_BYTES \
            or sum(tensor_bytes(big_vals[p]) for p in copies) > MAX_COPY_BYTES:
        return None
    return copies


def covered_call(fn, cover: Cover, big_vals, by: str):
    """``fn(*inputs) -> tuple`` for the covered region, running the covering region's compiled ``fn`` (which takes
    ``big_vals``' layouts); with ``fn.boxed`` it offers ``boxed(list)`` too (the list is handed over and cleared).
    ``by`` is the covering region's cache key (the executor names the region from it, in the program at hand); the
    call carries it as ``covered_by``, and ``cover``, for the Report."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():  # the executor runs inside the capture's fake mode
        holders = {p: example_tensor(big_vals[p]) for p in cover.placeholders}
    width, inputs, kept, copies = len(big_vals), cover.inputs, cover.kept, cover.copies
    bases = dict(cover.unviewed)  # R's output position -> its recorded shape (C returns a view of it)

    def picked(outs) -> tuple:
        if not bases:
            return tuple(outs[i] for i in kept)
        # reshape: a view wherever the layout allows (it does where the covering code keeps the recorded strides);
        # nvFuser may hand a result out in another layout than recorded, where a view would raise
        return tuple(outs[i].reshape(bases[j]) if j in bases else outs[i] for j, i in enumerate(kept))

    def widen(args):
        full = [None] * width
        for j, p in enumerate(inputs):
            full[p] = args[j]
        for p, t in holders.items():
            full[p] = t
        for p in copies:  # a buffer of the same layout that the compiled code may write over
            a = full[p]
            full[p] = torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=a.device).copy_(a)
        return full

    def region(*args):
        return picked(fn(*widen(args)))

    calls = [region]
    if hasattr(fn, "boxed"):
        inner = fn.boxed

        def boxed(args: list):
            full = widen(args)
            args.clear()  # only ``full`` holds them now: the compiled code frees each at its last use
            return picked(inner(full))

        region.boxed = boxed
        calls.append(boxed)
    for call in calls:
        for attr in ("compiled_graph", "aot_fn"):
            if hasattr(fn, attr):
                setattr(call, attr, getattr(fn, attr))
        call.covered_by, call.cover = by, cover
    return region


def headroom(live) -> dict:
    """Region node -> the bytes its line may add without raising the program's predicted peak."""
    if live is None:
        return {}
    return {ln.node: live.peak_bytes - ln.high_water - max(0, ln.workspace) for ln in live.lines
            if ln.node.op == "call_module"}


def plan_covers(jobs, pending: dict, donatable: dict, room_by_node: dict, rounding: int) -> tuple[dict, list]:
    """Which regions about to compile run another region's code instead (:mod:`.region_cover`), as a pair:

    ``jobs``: ``(node, region GraphModule, input values, plan, signature, cache key, input positions its code may
    write over)`` of every region of the program; ``pending``: the cache keys about to compile; ``donatable``: region
    node -> the argument positions its caller gives up to it; ``room_by_node``: :func:`headroom`'s figures.

    * ``{cache key: (covering key, Cover, the covering region's input values)}``, for each region another region
      of the program contains, where the outputs it would compute and drop and the arguments it would copy fit
      under the program's predicted peak on every line of that key (``room_by_node``). The covering region compiles
      or is cached, and is never covered itself; smaller regions are matched first.
    * ``[(cache key, covering region's name, bytes the cover would add, bytes below the peak)]`` for the regions
      a cover was found for that did not fit: the Report says why they compiled on their own."""
    by_key = {}
    for node, sub, input_vals, _plan, signature, key, over in jobs:
        entry = by_key.setdefault(key, {"sub": sub, "vals": input_vals, "signature": signature, "over": over,
                                        "writable": None, "room": None, "name": str(node.target)})
        mine = frozenset(donatable.get(node, ()))  # what every region of this key gives up
        entry["writable"] = mine if entry["writable"] is None else entry["writable"] & mine
        room = room_by_node.get(node, 0)
        entry["room"] = room if entry["room"] is None else min(entry["room"], room)
    chosen: dict = {}
    too_big = []  # (region, covering region, bytes it would add, bytes under the peak on its line)
    for key in sorted(pending, key=lambda k: len(by_key[k]["sub"].graph.nodes)):
        mine = by_key[key]
        candidates = [(k, e["sub"], e["vals"], e["over"]) for k, e in by_key.items() if k != key and k not in chosen]
        found = covers(mine["signature"], mine["sub"], mine["vals"], candidates, mine["writable"], rounding,
                       mine["over"])
        fits = [f for f in found if f[2] <= mine["room"]]
        if fits:
            chosen[key] = fits[0][:2]
        elif found:
            too_big.append((key, by_key[found[0][0]]["name"], found[0][2], max(0, mine["room"])))
    for key in list(chosen):  # a region another one runs the code of compiles itself
        if chosen[key][0] in chosen:
            del chosen[key]
    return {key: (by, cover, by_key[by]["vals"]) for key, (by, cover) in chosen.items()}, too_big

def cover_details(call, names_by_key: dict) -> dict:
    """A covered region's record details: whose code its ``call`` (:func:`covered_call`'s) runs, named from
    ``names_by_key`` (cache key -> region name), and what the call adds."""
    return {"runs_code_of": names_by_key.get(call.covered_by, "a region compiled for an earlier program"),
            "drops_outputs": len(call.cover.dropped), "placeholder_inputs": len(call.cover.placeholders),
            "copied_inputs": len(call.cover.copies), "unviewed_outputs": len(call.cover.unviewed)}


def refusal_details(refused: tuple) -> dict:
    """The record details of a region that compiled on its own because its cover did not fit: ``refused`` =
    (covering region's name, bytes the cover would add, bytes below the peak on its line), said as a reason."""
    by, added, room = refused
    return {"cover_refused": f"{by}, whose code would add {format_bytes(added)} on its line, "
                             + (f"only {format_bytes(room)} below the predicted peak" if room
                                else "which is at the predicted peak")}


def cover_notes(records) -> list[str]:
    """The executor's notes on covering, from its region records' details (:func:`cover_details`,
    :func:`refusal_details`)."""
    notes = []
    runs_other = [r for r in records if "runs_code_of" in r.details]
    if runs_other:
        pairs = ", ".join(f"{r.name} runs {r.details['runs_code_of']}" for r in runs_other[:4])
        dropped = sum(r.details["drops_outputs"] for r in runs_other)
        unviewed = sum(r.details.get("unviewed_outputs", 0) for r in runs_other)
        bases = f", and {plural(unviewed, 'output')} it returns viewed handed back in the covered region's shape" \
            if unviewed else ""
        notes.append(f"{plural(len(runs_other), 'region')} run{'s' if len(runs_other) == 1 else ''} the "
                     f"compiled code of a region it is part of ({pairs}{', ...' if len(runs_other) > 4 else ''}"
                     f"), computing {plural(dropped, 'output')} dropped on return{bases}: "
                     f"{plural(len(runs_other), 'compile')} fewer (cover_regions)")
    for r in records:
        if "cover_refused" in r.details:
            notes.append(f"{r.name} is part of {r.details['cover_refused']}: compiled on its own "
                         "(cover_regions never raises the predicted peak)")
    return notes
