"""The options schema: every option of trace_lab, declared once.

Each :class:`Option` says its name, type, allowed values, default, help, the stage
that reads it and the surfaces that offer it (``jit``, ``inspect``, ``magic``,
``widget``, ``cell`` = the notebook's RunOptions). Everything else is derived:
:class:`Options` (the typed value ``trace_lab.run.jit`` builds and the passes and
executors read), its one validation (:func:`check_option`, :func:`check_names`),
``inspect``'s keywords, the magic's flags and help, the widgets' controls and the
options table in docs/notebook.md (:func:`docs_table`). Adding an option is one
entry in :data:`SCHEMA` plus the code that reads it. This module imports nothing
of trace_lab but its errors, so every layer may import it.
"""
from __future__ import annotations

import difflib
import numbers
from dataclasses import asdict, dataclass, field, make_dataclass

from .errors import TraceLabError

__all__ = ["Option", "SCHEMA", "OPTIONS", "Options", "OptionError", "UnknownOptionError", "names", "check_option",
           "check_names", "options_class", "with_signature", "docs_table", "FUSION_STRATEGIES", "EXECUTOR_CHOICES"]

UNSET = type("Unset", (), {"__repr__": lambda self: "UNSET"})()  # an Option field left as the schema's rule
_COMPILE = frozenset({"jit", "inspect", "magic", "cell"})  # a compile option, offered everywhere


class OptionError(TraceLabError, ValueError):
    """An option's value is not one it takes."""


class UnknownOptionError(TraceLabError, TypeError):
    """A keyword that is not an option here."""


@dataclass(frozen=True)
class Option:
    name: str
    type: type  # str, bool or int
    default: object
    help: str
    stage: str  # what reads it: capture, passes, executor, runtime, run, check, report, notebook
    surfaces: frozenset = _COMPILE
    choices: tuple | None = None
    minimum: int | None = None
    none_ok: bool = False  # None is a value (besides the default, which is always accepted)
    rule: str | None = None  # what a bad value is told (default: from the type, choices, minimum)
    flag: tuple = ()  # the magic's spelling; default --name-with-dashes (--no-name for a bool that is on)
    metavar: str | None = None
    flag_default: object = UNSET  # the magic's default, where it differs from ``default``
    flag_none: object = UNSET  # the flag value that stands for None (a flag cannot spell None)
    label: str | None = None  # the widget's description
    word: str | None = None  # how a run's label names a bool switch ("cache off")

    @property
    def flags(self) -> tuple:
        if self.flag:
            return self.flag
        dashed = self.name.replace("_", "-")
        return (f"--no-{dashed}",) if self.type is bool and self.default is True else (f"--{dashed}",)

    @property
    def dest(self) -> str:
        """The attribute argparse stores the flag's value under."""
        return self.flags[-1].lstrip("-").replace("-", "_")

    @property
    def flag_default_value(self):
        """The value a cell run has when its flag is absent (``flag_default`` None: decided when read)."""
        return self.default if self.flag_default is UNSET or self.flag_default is None else self.flag_default

    @property
    def annotation(self) -> str:
        text = self.type.__name__ + (" | None" if self.none_ok or self.default is None else "")
        return text + (f" | {self.default!r}" if isinstance(self.default, str) and self.type is not str else "")


SCHEMA: tuple[Option, ...] = (
    Option("fusion", str, "auto", stage="passes", surfaces=_COMPILE | {"widget"},
           choices=("auto", "none", "dataflow", "horizontal", "memory", "layers"),
           help="fusion strategy: none (one kernel per op), dataflow (producer/consumer chains), horizontal "
                "(Thunder's greedy grouping; raises peak memory), memory (fuse only where the predicted peak does "
                "not rise), layers (regional compilation: each repeated layer one region, its matmuls included, "
                "compiled once; Inductor, eager or nvFuser; auto picks Inductor), auto (dataflow on CUDA, or horizontal "
                "where nvFuser batches the whole program's updates: an optimizer step; none on CPU: the choice that "
                "is not slower than eager PyTorch). Default: auto."),
    Option("executor", str, "auto", stage="executor", surfaces=_COMPILE | {"widget"},
           choices=("auto", "eager", "inductor", "nvfuser"), flag_default=None,
           help="how fused regions run: auto (nvFuser on CUDA when importable, else Inductor), nvfuser, inductor, "
                "eager (op by op, fast to compile). Default: auto (in the notebook: $TRACE_LAB_EXECUTOR if set)."),
    Option("fusion_cache", bool, True, stage="executor", surfaces=_COMPILE | {"widget"}, label="fusion cache",
           word="cache",
           help="reuse the kernels of structurally identical regions (the fusion-definition cache); off: compile "
                "every fused region on its own."),
    Option("donate_inputs", bool, True, stage="executor", surfaces=_COMPILE | {"widget"}, label="donate inputs",
           word="donation",
           help="compiled regions free the inputs that die in them inside their call, each at its last use "
                "(in Inductor's code; after the last step that reads it in an nvFuser region), as torch.compile's one "
                "program frees its intermediates; off: such inputs are freed after the region returns, which can "
                "raise the peak."),
    Option("donate_inplace", bool, True, stage="executor", surfaces=_COMPILE | {"widget"}, label="write in place",
           word="in-place donation",
           help="with donate_inputs: a region's output may also be written over an input that dies in it "
                "(Inductor's DonatedBuffer reuse; with nvFuser, alias_input, where the segment is elementwise, and "
                "each batched update's result over its own stack), as "
                "torch.compile does with a graph's own intermediates; a signature whose "
                "regions donate different inputs compiles for the ones all of them donate (and once more, plainly, "
                "for a region that donates none, except with fusion='layers'). Off: outputs are fresh buffers."),
    Option("align_layer_saves", bool, True, stage="capture", word="aligned saves",
           help="with fusion layers, dataflow or memory (auto too, where it picks dataflow): where AOTAutograd's "
                "partitioner saves other activations for one layer than for its repeats (a tie it breaks otherwise "
                "for the first layer), partition again with the repeats' choice marked on it, so that a layer's "
                "regions are its repeats' and compile once; kept only when no layer then saves more bytes. "
                "Off: the partition as AOTAutograd makes it."),
    Option("cover_regions", bool, True, stage="executor", word="covering regions",
           help="with the fusion cache (Inductor or nvFuser): a region that another region of the program contains (the same "
                "ops and inputs, minus outputs it does not return: the first layer's backward, whose input needs no "
                "gradient) runs that region's compiled code and drops the extra outputs, one compile fewer, where "
                "those outputs (and the results its own code would have written over a dying input) fit under the "
                "program's predicted peak on its line (they count as its workspace). "
                "Off: it compiles its own code."),
    Option("batch_updates", bool, True, stage="executor", surfaces=_COMPILE | {"widget"}, label="batch updates",
           word="batched updates",
           help="with nvFuser: a fused segment of identical independent elementwise updates that only write its "
                "inputs (an optimizer's step over many parameters) runs as one definition over the updates' "
                "inputs stacked along a new dim, and one torch._foreach_copy_ puts the results in place; nvFuser "
                "runs independent updates as a kernel each. Costs the stacks as the region's workspace (a segment "
                "whose stacks would pass 1 GiB runs unbatched). With fusion auto, a program that is only such updates gets "
                "horizontal regions. Off: one kernel per update."),
    Option("sort_waits", bool, True, stage="passes", surfaces=_COMPILE | {"widget"}, label="sort waits",
           word="wait sorting",
           help="move each collective's wait next to its first consumer; off: keep it right after the collective."),
    Option("cuda_graphs", bool, False, stage="runtime", surfaces=_COMPILE | {"widget"}, label="CUDA graphs",
           word="CUDA graphs",
           help="on a GPU, record each compiled program into a CUDA graph after its first call and replay it "
                "(removes the per-kernel host cost; outputs are overwritten by the next call). Ignored, with a "
                "note, on the CPU and with fsdp."),
    Option("runs", int, 5, stage="run", surfaces=frozenset({"inspect", "magic", "cell", "widget"}), minimum=0,
           flag_default=3, metavar="N", rule="the number of timed runs cannot be negative",
           help="timed runs after the first call, for the steady-state time (default 5; 3 in the notebook); one "
                "more run measures peak memory. The cell's side effects (optimizer steps, appends, prints) REPEAT "
                "on every run. 0 = run the compiled cell once (no timing, no measured peak). The eager reference "
                "always runs once more, on deep copies of the cell's inputs."),
    Option("compare", bool, False, stage="notebook", surfaces=frozenset({"magic"}),
           help="keep this cell's runs (and its reruns) in the kernel-wide comparison, whose Compare tab shows the "
                "runs of every --compare cell; trace_lab.notebook.kernel_session().to_dataframe() exports it."),
    Option("name", str, None, stage="report", surfaces=frozenset({"inspect", "magic"}), metavar="LABEL",
           help="label of this run in the report and the Compare table."),
    Option("output", str, None, stage="notebook", surfaces=frozenset({"magic"}), flag=("-o", "--output"),
           metavar="VAR", help="store the Report in the notebook variable VAR."),
    Option("nproc", int, None, stage="run", surfaces=frozenset({"magic", "cell"}), minimum=1, metavar="N",
           rule="needs at least one process",
           help="run the cell in N CPU processes (torch.distributed, gloo; the cell and its inputs sent by value) and show rank 0's "
                "report plus every rank's timings and the compute/communication timeline. Every rank runs the whole "
                "cell on the same inputs: without --fsdp that is N replicas (no data parallelism). Names the cell "
                "assigns are NOT written back from the workers (numbers and one-element tensors they bound are "
                "listed per rank). Inputs on CUDA are refused (use run_distributed in a script)."),
    Option("fsdp", str, None, stage="capture", choices=("zero2", "zero3"),
           help="shard the module's parameters across the process group's ranks (in the notebook: every nn.Module "
                "the cell reads, across the --nproc ranks; one process without --nproc) and insert "
                "all-gathers/reduce-scatters into the traces: zero2 keeps gathered parameters for the backward, "
                "zero3 frees them and gathers again."),
    Option("max_inflight_gathers", int, "auto", stage="passes", minimum=1, none_ok=True, flag=("--max-inflight",),
           metavar="K", flag_none=0,
           rule="use a positive integer, None (unlimited) or 'auto' (one layer's gathers for zero3, unlimited "
                "for zero2)",
           help="with fsdp and wait sorting: at most K all-gathers issued and not yet waited for (auto: for zero3 "
                "the most gathers one numbered layer reads, at least 2, so the next layer's weights travel while "
                "this one computes; unlimited for zero2; None, or 0 for the flag: unlimited). Bounds the memory "
                "held by prefetched parameters."),
    Option("max_region_ops", int, None, stage="passes", minimum=1, metavar="N", rule="give a number of ops >= 1",
           help="with fusion horizontal: at most N ops per fused region (a ready group that would exceed it starts "
                "the next region). Default: unbounded, as Thunder."),
    Option("seed", int, None, stage="check", surfaces=_COMPILE | {"widget"}, minimum=0, metavar="S",
           help="seed torch's random generators (torch.manual_seed) before the eager reference and again before the "
                "compiled run, so both draw the same random stream, the same on every run; unset: the generators "
                "as they are (the compiled run still draws what the eager reference drew)."),
    Option("check", bool, True, stage="check", surfaces=frozenset({"inspect"}),
           help="run the eager reference on deep copies and compare the compiled run's outputs, grads and values "
                "with it."),
    Option("backward", bool, None, stage="run", surfaces=frozenset({"inspect"}),
           help="run the backward of loss(out): None does when an output requires grad."),
    Option("measure_memory", bool, True, stage="run", surfaces=frozenset({"inspect"}),
           help="one more call measures each program's peak memory."),
    Option("measure_comm", bool, None, stage="run", surfaces=frozenset({"inspect"}),
           help="measure exposed communication (wait stalls, collective calibration); None: in a multi-process run "
                "whose programs hold collectives, when runs > 0."),
    Option("profile", bool, False, stage="run", surfaces=frozenset({"inspect", "magic", "cell", "widget"}),
           label="time lines", word="lines timed",
           help="one more call under torch.profiler, after an untimed one that warms it up, times every trace "
                "line (host time; on CUDA also its kernels' device time): the Trace tab's time column and the "
                "Timeline tab (trace_lab.profile_lines). With "
                "cuda_graphs the replayed graph has no lines: the Timeline shows the call and its kernels."),
    Option("profile_calls", int, 1, stage="run", surfaces=frozenset({"inspect", "magic", "cell", "widget"}), minimum=1,
           metavar="N", rule="give a whole number of calls, 1 or more", label="profiled calls",
           help="with profile: profile N calls and give each line its median over them (trace_lab.profile_lines' "
                "repeat=N), so one slow call does not set a line's figure; the Timeline draws the call whose total "
                "is the median. Each call runs under its own profiler, after an untimed one."),
    Option("measure_step", bool, False, stage="run", surfaces=frozenset({"inspect"}),
           help="one more call measures the peak of the whole call (forward and backward together): the figure "
                "a --baseline peer has, so the two are read side by side."),
    Option("baseline", str, None, stage="notebook", surfaces=frozenset({"magic", "cell"}), metavar="PEERS",
           rule="give a comma-separated list of eager, torch.compile, reduce-overhead",
           help="also run the cell as PEERS would, e.g. eager,torch.compile (reduce-overhead: torch.compile's CUDA "
                "graphs, GPU only), on deep copies of its inputs, measured as trace_lab's runs are (first call, "
                "steady state, peak of the whole call), one Compare row each. Not with --nproc."),
    Option("peer_trace", bool, False, stage="notebook", surfaces=frozenset({"magic", "cell"}), word="peer trace",
           help="also show the program torch.compile runs for the cell as a trace (trace_lab.from_compile: "
                "AOTAutograd's forward and backward after Inductor's post-grad passes, each Inductor kernel a "
                "region, live memory per line, measured and checked against eager), on copies of its inputs: one "
                "more run in the tabs and a Compare row. Not with --nproc."),
    Option("meta", bool, False, stage="notebook", surfaces=frozenset({"magic"}),
           help="predict instead of run: capture the cell on the meta device (tensors, and the modules and "
                "optimizers it reads, replaced by meta twins) and show the predicted peak of each program part per "
                "fusion strategy, allocating nothing (trace_lab.predict). With --fsdp and --nproc N: each of N FSDP ranks' peaks, "
                "no process started. Nothing runs, nothing is written back."),
)
OPTIONS: dict[str, Option] = {o.name: o for o in SCHEMA}
FUSION_STRATEGIES = OPTIONS["fusion"].choices
EXECUTOR_CHOICES = OPTIONS["executor"].choices


def names(surface: str) -> list[str]:
    """The options a surface offers, in schema order."""
    return [o.name for o in SCHEMA if surface in o.surfaces]


def _valid(opt: Option, value) -> bool:
    if value is None:
        return opt.none_ok or opt.default is None
    if isinstance(opt.default, str) and value == opt.default:
        return True
    if opt.choices is not None:
        return isinstance(value, str) and value in opt.choices
    if opt.type is bool:
        return isinstance(value, bool)
    if opt.type is int:
        return (isinstance(value, numbers.Integral) and not isinstance(value, bool)
                and (opt.minimum is None or value >= opt.minimum))
    return isinstance(value, opt.type)


def check_option(name: str, value, as_flag: bool = False):
    """``value`` if option ``name`` takes it, else an OptionError (a ValueError) naming what it takes."""
    opt = OPTIONS[name]
    if _valid(opt, value):
        return value
    shown = f"{opt.flags[-1]} {value}" if as_flag else f"{name}={value!r}"
    if opt.rule:
        why = opt.rule
    elif opt.choices is not None:
        why = f"choose one of {', '.join(opt.choices)}" + (" or leave it unset" if opt.default is None else "")
    else:
        why = {bool: "give True or False", int: "give an integer", str: "give a string"}[opt.type]
        why += (f" >= {opt.minimum}" if opt.minimum is not None else "") + (", or None" if _valid(opt, None) else "")
    raise OptionError(f"{shown}: {why}")


def check_names(given, surface: str, who: str) -> None:
    """An UnknownOptionError (a TypeError) for names in ``given`` that ``surface`` does not offer:
    each with the closest known name, or the surfaces that do offer it."""
    known = names(surface)
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return
    hints = []
    for u in unknown:
        if u in OPTIONS:
            hints.append(f"{u!r} (an option of {', '.join(sorted(OPTIONS[u].surfaces - {'cell', 'widget'}))} only)")
        elif m := difflib.get_close_matches(u, known, 1):
            hints.append(f"{u!r} (did you mean {m[0]!r}?)")
        else:
            hints.append(repr(u))
    raise UnknownOptionError(f"{who} got unknown option{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
                             f"options: {', '.join(known)}")


def options_class(cls_name: str, surface: str, doc: str, defaults: dict | None = None, methods: dict | None = None):
    """A frozen dataclass with one field per option of ``surface`` (default: the schema's, or ``defaults``),
    each checked when an instance is made (a cell run's errors name the magic's flags)."""
    def __post_init__(self):
        for n in names(surface):
            check_option(n, getattr(self, n), as_flag=surface == "cell")

    def to_dict(self) -> dict:
        return asdict(self)

    defaults = defaults or {}
    fields = [(o.name, o.annotation, field(default=defaults.get(o.name, o.default)))
              for o in SCHEMA if surface in o.surfaces]
    help_lines = "\n".join(f"* ``{o.name}`` ({o.stage}): {o.help}" for o in SCHEMA if surface in o.surfaces)
    return make_dataclass(cls_name, fields, frozen=True, namespace={
        "__post_init__": __post_init__, "to_dict": to_dict, "__doc__": f"{doc}\n\n{help_lines}\n", **(methods or {})})


Options = options_class("Options", "jit", "Compiler options: every field is checked against trace_lab.options.SCHEMA "
                                       "when an Options is made, so passes and executors read typed values.")
Options.__module__ = __name__


def with_signature(fn):
    """Decorator: ``fn(..., **options)`` gets a ``__signature__`` that lists, in place of ``**options``,
    the options of the surface named like ``fn`` (``jit``, ``inspect``) with their defaults."""
    import inspect as pyinspect

    sig = pyinspect.signature(fn)
    keep = [p for p in sig.parameters.values() if p.kind != p.VAR_KEYWORD]
    options = [pyinspect.Parameter(o.name, pyinspect.Parameter.KEYWORD_ONLY, default=o.default,
                                   annotation=o.annotation) for o in SCHEMA if fn.__name__ in o.surfaces]
    fn.__signature__ = sig.replace(parameters=keep + options)
    return fn


def _values(opt: Option) -> str:
    if opt.choices is not None:
        text = " / ".join(f"`{c}`" for c in opt.choices)
    elif opt.type is int and opt.minimum is not None:
        text = f"int >= {opt.minimum}"
    else:
        text = opt.type.__name__
    if opt.none_ok or opt.default is None:
        text += " / `None`"
    return text + (f" / `{opt.default!r}`" if isinstance(opt.default, str) and opt.choices is None
                   and opt.type is not str else "")


def docs_table() -> str:
    """The options table of docs/notebook.md (a test keeps the docs equal to it)."""
    rows = ["| option | notebook flag | values | default | read by | offered by | what it does |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for o in SCHEMA:
        flag = ", ".join(f"`{f}`" for f in o.flags) if "magic" in o.surfaces else ""
        default = f"`{o.default!r}`"
        if o.flag_default not in (UNSET, None):
            default += f" (notebook: `{o.flag_default!r}`)"
        offered = ", ".join(s for s in ("jit", "inspect", "magic", "widget") if s in o.surfaces)
        rows.append(f"| `{o.name}` | {flag} | {_values(o)} | {default} | {o.stage} | {offered} | {o.help} |")
    return "\n".join(rows) + "\n"
