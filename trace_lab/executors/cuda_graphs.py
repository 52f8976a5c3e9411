"""CUDA graphs over a compiled program: record its launches once, replay them.

trace_lab's runtime walks a program from Python: every fused region is one or
more ``FusionDefinition.execute`` calls and every op between them a torch call,
each paying host time. On a fast GPU that host time, not the kernels, sets the
iteration time (benchmarks/BENCHMARKS.md). ``cuda_graphs=True`` wraps the run of
each CUDA program in a :class:`GraphedRun`:

* call 1 runs the program as usual (warm-up: lazy initialisation, first
  launches) and notes where each tensor input lives;
* call 2 records the program into a graph. Inputs found at the same address on
  both calls (parameters, optimizer state, the saved tensors of a graphed
  forward) are recorded in place, so the program's in-place updates land on
  them; the others get a static buffer that every call copies into (and, for
  inputs the program writes, copies back out of). Then it replays. If inputs
  moved between calls 1 and 2, call 2 runs un-graphed once more and call 3 records
  (``WARM_UP_CALLS``): a backward's saved tensors move once, when its forward goes
  from its un-graphed warm-up to its graph's memory, and then stay; recorded after
  that one move they are read in place, where recording at call 2 copied every one
  of them on every replay (llama 8 layers on an H200: 130 inputs, 1.3 GB, 0.83 ms a step);
* later calls copy the moving inputs in and replay.

Outputs live in the graph's memory: each call hands out fresh tensor objects
over it and keeps weak references to them. If one of the previous call's
outputs is still held when the program is called again (two forwards before a
backward), replaying would overwrite it, so that call runs un-graphed instead.
A recorded-in-place input that moves, or a non-tensor argument that changes,
makes the program record again (at most ``MAX_RECORDINGS`` times, then it runs
un-graphed). "Moves": its address, strides, shape or dtype differ from the recording's; where the caller
guarantees the rest (``metadata_guarded``: jit's programs, whose inputs Dynamo guards with ``dynamic=False``
and whose tangents AOTAutograd lays out as traced), the address alone, as cudagraph trees check their
static inputs (a bench step's time includes this host check: ``benchmarks/graphed_run_host.py``). What a
replay copies is counted (:meth:`GraphedRun.replay_copies`: each moving input's name and bytes, in and back out) and said by :meth:`GraphedRun.summary`, so the Report shows which
inputs cost a replay device time beside the program's own kernels. A program that cannot be recorded (a host sync, a CPU op, a
collective) runs un-graphed; :attr:`GraphedRun.notes` says why.

The recorder is a parameter so the policy above is tested on the CPU with a
stand-in (tests/test_cuda_graphs.py); :func:`cuda_recorder` is the real one.
"""
from __future__ import annotations

import time
import weakref
from typing import Callable

import torch
import torch.fx as fx

__all__ = ["GraphedRun", "cuda_recorder", "written_inputs", "MAX_RECORDINGS", "WARM_UP_CALLS"]

MAX_RECORDINGS = 3
WARM_UP_CALLS = 2  # un-graphed calls at most before the first recording (a second one only if inputs moved)


def written_inputs(trace) -> set[int]:
    """Positions of the inputs that the program writes in place (``copy_`` into a parameter,
    an optimizer's state), looking inside fused regions too."""
    gm = trace.gm
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return {placeholders.index(n) for n in _written_placeholders(gm)}


def _written_placeholders(gm: fx.GraphModule) -> set[fx.Node]:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out: set[fx.Node] = set()
    for n in gm.graph.nodes:
        if n.op == "call_function":
            schema = getattr(n.target, "_schema", None)
            if schema is None:
                continue
            for arg, a in zip(n.args, schema.arguments):
                if isinstance(arg, fx.Node) and arg.op == "placeholder" and a.alias_info is not None \
                        and a.alias_info.is_write:
                    out.add(arg)
        elif n.op == "call_module":
            sub = gm.get_submodule(n.target)
            if not isinstance(sub, fx.GraphModule):
                continue
            inner = [p for p in sub.graph.nodes if p.op == "placeholder"]
            for p in _written_placeholders(sub):
                arg = n.args[inner.index(p)]
                if isinstance(arg, fx.Node) and arg.op == "placeholder":
                    out.add(arg)
    return {n for n in out if n in placeholders}


def cuda_recorder(run: Callable, static_inputs: list):
    """Record ``run(static_inputs)`` into a ``torch.cuda.CUDAGraph`` (own memory pool, side
    stream as torch requires); returns (replay, static outputs, bytes the pool reserved)."""
    host = [i for i, a in enumerate(static_inputs) if isinstance(a, torch.Tensor) and a.device.type != "cuda"]
    if host:
        raise ValueError(f"input {host[0]} is a {static_inputs[host[0]].device.type} tensor; a graph would freeze "
                         "the value it had while recording")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        # entering empties the allocator's cache; from here on new segments are the graph's pool
        reserved = torch.cuda.memory_reserved()
        outs = run(static_inputs)
    torch.cuda.synchronize()
    return graph.replay, outs, torch.cuda.memory_reserved() - reserved


def _address(x):
    return (x.data_ptr(), tuple(x.shape), tuple(x.stride()), x.dtype) if isinstance(x, torch.Tensor) else None


class GraphedRun:
    """``run(args) -> outputs`` of a program, replayed from a recorded graph after a warm-up call."""

    def __init__(self, run: Callable, written: set[int], recorder: Callable = cuda_recorder,
                 names: list[str] | None = None, metadata_guarded: bool = False):
        self.run = run
        self.metadata_guarded = metadata_guarded  # inputs keep their strides, shape, dtype: compare addresses only
        self.written = set(written)
        self.names = list(names or [])  # the program's input names (the trace's), for what a replay copies
        self.recorder = recorder
        self.calls = 0
        self.replays = 0
        self.recordings = 0
        self.ungraphed = 0
        self.pool_bytes = 0
        self.notes: list[str] = []
        self._warm_ups = 0  # un-graphed warm-up calls made
        self._stable: dict[int, tuple] = {}  # input -> address it had on the warm-up call
        self._moving: set[int] = set()  # inputs copied into static buffers
        self._recorded = None  # (replay, static inputs, static outputs, in-place addresses, constants)
        self._in_place_order: list[int] = []  # the inputs recorded in place, and their (address, strides, shape,
        self._in_place_keys: list[tuple] = []  # dtype) then: what _matches compares
        self._copy_in: list[int] = []  # inputs copied into their static buffers before a replay
        self._copy_out: list[int] = []  # ... and back out after it (the program writes them)
        self._handed_out: list = []  # weak references to the previous call's outputs
        self._gave_up: str | None = None
        self._last_copies: tuple[list, list] = ([], [])  # (copied in, copied back out): [(input, bytes)]
        self.copied_bytes = 0  # every replay's copies, in and out
        self.record_seconds = 0.0  # time spent recording (the compile-time share of the graphs)

    # -- calling ---------------------------------------------------------------------------
    def __call__(self, args):
        self.calls += 1
        if self._gave_up is not None:
            return self._ungraphed(args)
        if self._warm_ups < WARM_UP_CALLS and (not self._warm_ups or self._moved(args)):
            # warm-up; once more if inputs moved since: they may settle (a graphed forward's outputs)
            self._warm_ups += 1
            self._stable = {i: _address(a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
            return self._ungraphed(args)
        if any(ref() is not None for ref in self._handed_out):
            # replaying would overwrite an output the caller still holds
            self.ungraphed += 1
            return self.run(args)
        if self._recorded is None or not self._matches(args):
            if self.recordings >= MAX_RECORDINGS:
                self._give_up(f"its in-place inputs or constant arguments changed after {MAX_RECORDINGS} "
                              "recordings")
                return self._ungraphed(args)
            try:
                self._record(args)
            except Exception as e:  # noqa: BLE001 - not recordable: run un-graphed and say why
                first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                self._give_up(f"recording failed ({type(e).__name__}: {first})")
                return self._ungraphed(args)
        return self._replay(args)

    # -- internals ---------------------------------------------------------------------------
    def _ungraphed(self, args):
        self.ungraphed += 1
        return self.run(args)

    def _give_up(self, why: str) -> None:
        self._gave_up = why
        self._recorded = None
        self.notes.append(f"cuda_graphs: this program runs without a CUDA graph: {why}")

    def _moved(self, args) -> bool:
        """Has a tensor input moved since the last warm-up call (before the first recording)?"""
        return self._recorded is None and self.recordings == 0 and any(
            isinstance(a, torch.Tensor) and _address(a) != self._stable.get(i) for i, a in enumerate(args))

    def _matches(self, args) -> bool:
        """Whether every input recorded in place is where, and as, it was (address, strides, shape, dtype), and
        every constant argument equal: one list comparison (addresses alone where ``metadata_guarded``). A bench
        step's time includes this host time before the replay: with 1,000 inputs (Adam.step) GraphedRun costs
        0.09 ms a call on the CI machine's CPU comparing addresses, 0.42 ms with the layouts, against 0.58 ms for
        the loop of :func:`_address` tuples it replaced (``benchmarks/graphed_run_host.py``)."""
        at = args.__getitem__
        if self._in_place_key(map(at, self._in_place_order)) != self._in_place_keys:
            return False  # one moved: the next recording gives it a static buffer
        constants = self._recorded[4]
        return all(at(i) == c for i, c in constants.items())

    def _in_place_key(self, tensors) -> list:
        """What _matches compares for the inputs recorded in place: addresses, with strides, shapes and dtypes
        unless the caller guards those (``metadata_guarded``; 0.1 us an input here instead of 0.4)."""
        if self.metadata_guarded:
            return [a.data_ptr() for a in tensors]
        return [(a.data_ptr(), a.stride(), a.shape, a.dtype) for a in tensors]

    def _record(self, args) -> None:
        static, in_place, constants = [], {}, {}
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                static.append(a)
                constants[i] = a
            elif i not in self._moving and _address(a) == self._stable.get(i):
                static.append(a.detach())  # recorded in place (a new object: the caller's may die)
                in_place[i] = _address(a)
            else:
                self._moving.add(i)
                buf = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
                buf.copy_(a)
                static.append(buf)
        self._stable = dict(in_place)
        self.recordings += 1
        started = time.perf_counter()
        replay, outs, pool = self.recorder(self.run, list(static))  # a program may clear its list
        self.record_seconds += time.perf_counter() - started
        self.pool_bytes = max(self.pool_bytes, pool)
        self._recorded = (replay, static, tuple(outs), in_place, constants)
        self._in_place_order = sorted(in_place)  # what _matches compares, in one list
        self._in_place_keys = self._in_place_key(map(args.__getitem__, self._in_place_order))
        self._copy_in = sorted(self._moving)
        self._copy_out = sorted(self.written & self._moving)

    def _replay(self, args):
        replay, static, outs, in_place, _ = self._recorded
        copied_in, copied_out = [], []
        for i in self._copy_in:
            if static[i].data_ptr() != args[i].data_ptr():
                static[i].copy_(args[i])
                copied_in.append((i, _nbytes(args[i])))
        replay()
        for i in self._copy_out:
            if static[i].data_ptr() != args[i].data_ptr():
                args[i].copy_(static[i])
                copied_out.append((i, _nbytes(args[i])))
        self._last_copies = (copied_in, copied_out)
        self.copied_bytes += sum(b for _, b in copied_in + copied_out)
        self.replays += 1
        handed = tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in outs)
        self._handed_out = [weakref.ref(o) for o in handed if isinstance(o, torch.Tensor)]
        return handed

    def input_name(self, i: int) -> str:
        return self.names[i] if i < len(self.names) else f"input {i}"

    def replay_copies(self) -> dict:
        """What the last replay copied: ``{"in": [(input name, bytes)], "out": [...]}`` (inputs found at a new
        address copied into the graph's static buffers; those the program writes copied back out)."""
        copied_in, copied_out = self._last_copies
        return {"in": [(self.input_name(i), b) for i, b in copied_in],
                "out": [(self.input_name(i), b) for i, b in copied_out]}

    def summary(self) -> str:
        text = (f"cuda_graphs: {self.recordings} recording{'s' if self.recordings != 1 else ''}, "
                f"{self.replays} replays, {self.ungraphed} un-graphed calls, "
                f"graph pool {self.pool_bytes / 2 ** 20:.1f} MiB")
        if not self.replays:
            return text
        copies = self.replay_copies()
        if not copies["in"] and not copies["out"]:
            return text + "; a replay copies nothing (every input is recorded in place)"
        parts = [f"{len(copies[k])} input{'s' if len(copies[k]) != 1 else ''} {where} "
                 f"({_mib(sum(b for _, b in copies[k]))}: {', '.join(n for n, _ in copies[k][:6])}"
                 f"{', ...' if len(copies[k]) > 6 else ''})"
                 for k, where in (("in", "copied in"), ("out", "copied back out")) if copies[k]]
        return text + "; the last replay copied " + " and ".join(parts)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:.2f} MiB" if n >= 2 ** 20 else f"{n / 2 ** 10:.1f} KiB"
