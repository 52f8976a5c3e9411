"""Every consumer of the options is made from the one schema (trace_lab/options.py).

jit's and inspect's keywords, Options and RunOptions fields, the magic's flags and help, the
widgets' controls and the docs table are each compared with the schema, and a bad value or a
misspelt name is refused everywhere with the same message.
"""
from __future__ import annotations

import inspect as pyinspect
import re
from pathlib import Path

import pytest
import torch

import trace_lab
from trace_lab.lab.inspection import inspect as lab_inspect
from trace_lab.options import (OPTIONS, SCHEMA, UNSET, OptionError, Options, UnknownOptionError, check_option,
                               docs_table, names)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "notebook.md"
CALL_PARAMETERS = {"fn", "args", "loss", "progress", "kwargs"}  # inspect's own, not options


def _keywords(fn) -> dict:
    return {n: p.default for n, p in pyinspect.signature(fn).parameters.items() if p.kind == p.KEYWORD_ONLY}


def _bad_value(opt):
    if opt.choices is not None:
        return "bogus"
    if opt.type is bool:
        return "yes"
    if opt.type is int:
        return opt.minimum - 1 if opt.minimum is not None else "many"
    return 3


def test_every_option_is_offered_somewhere_and_reads_as_declared():
    assert len(OPTIONS) == len(SCHEMA)
    for o in SCHEMA:
        assert o.surfaces and o.help and o.stage in {"capture", "passes", "executor", "runtime", "run", "check",
                                                     "report", "notebook"}, o
        assert check_option(o.name, o.default) == o.default  # the default is a value the option takes
        if o.type is bool and "cell" in o.surfaces:
            assert o.word, o.name  # a rerun's label names the switch


def test_jit_keywords_and_options_fields_are_the_schema():
    assert _keywords(trace_lab.jit) == {n: OPTIONS[n].default for n in names("jit")}
    assert list(Options.__dataclass_fields__) == names("jit")
    assert Options().to_dict() == {n: OPTIONS[n].default for n in names("jit")}
    assert trace_lab.FUSION_STRATEGIES == OPTIONS["fusion"].choices
    from trace_lab.passes.fusion import STRATEGIES

    assert STRATEGIES == tuple(c for c in OPTIONS["fusion"].choices if c != "auto")


def test_inspect_keywords_are_the_schema():
    params = pyinspect.signature(lab_inspect).parameters
    assert set(params) - CALL_PARAMETERS == set(names("inspect"))
    assert {n: v for n, v in _keywords(lab_inspect).items() if n not in CALL_PARAMETERS} == \
        {n: OPTIONS[n].default for n in names("inspect")}
    def shape(fn):
        return [(p.name, p.kind, p.default) for p in pyinspect.signature(fn).parameters.values()]

    assert shape(trace_lab.inspect) == shape(lab_inspect)  # the package's entry point lists the same


def test_magic_flags_and_help_are_the_schema():
    from trace_lab.notebook.magics import ThunderTraceMagics

    magic = ThunderTraceMagics.thunder_trace
    flags = {s for a in magic.parser._actions for s in a.option_strings}
    assert flags == {f for o in SCHEMA if "magic" in o.surfaces for f in o.flags}
    dests = {a.dest for a in magic.parser._actions} - {"expression"}
    assert dests == {o.dest for o in SCHEMA if "magic" in o.surfaces}
    doc = " ".join(magic.__doc__.split())  # %%thunder_trace? shows this page
    for o in SCHEMA:
        if "magic" in o.surfaces:
            assert o.flags[-1] in doc and " ".join(o.help.split())[:40] in doc, o.name
            for choice in o.choices or ():
                assert choice in doc


def test_run_options_fields_and_flags_round_trip():
    from IPython.core.magic_arguments import parse_argstring

    from trace_lab.notebook.magics import ThunderTraceMagics
    from trace_lab.notebook.runner import RunOptions, from_flags

    assert list(RunOptions.__dataclass_fields__) == names("cell")
    assert RunOptions().to_dict() == {n: OPTIONS[n].flag_default_value for n in names("cell")}

    def parsed(line):
        return from_flags(parse_argstring(ThunderTraceMagics.thunder_trace, line))

    assert parsed("") == RunOptions()
    opts = parsed("--fusion memory --executor eager --no-fusion-cache --no-sort-waits --cuda-graphs --runs 0 "
                  "--nproc 2 --fsdp zero3 --max-inflight 0 --max-region-ops 4")
    assert opts == RunOptions(fusion="memory", executor="eager", fusion_cache=False, sort_waits=False,
                              cuda_graphs=True, runs=0, nproc=2, fsdp="zero3", max_inflight_gathers=None,
                              max_region_ops=4)  # --max-inflight 0 is unlimited: None
    assert parsed("--fsdp zero3 --max-inflight 3").max_inflight_gathers == 3
    assert parsed("--fsdp zero3").max_inflight_gathers == "auto"
    assert opts.describe() == ("fusion=memory, executor=eager, no cache, no wait sorting, CUDA graphs, runs=0, "
                               "nproc=2, fsdp=zero3, max_inflight_gathers=None, max_region_ops=4")


def test_widget_controls_are_the_schema():
    pytest.importorskip("ipywidgets")
    from trace_lab.notebook.runner import RunOptions
    from trace_lab.notebook.session import Session
    from trace_lab.notebook.widgets import LabView

    start = RunOptions(fusion="dataflow", runs=1)
    view = LabView(runner=None, options=start, runs=Session())
    assert list(view.controls) == names("widget")
    for name, control in view.controls.items():
        assert control.description == (OPTIONS[name].label or name)
        if hasattr(control.style, "description_width") and OPTIONS[name].type is int:  # a number box's label is
            assert control.style.description_width == "initial", name  # never cut at ipywidgets' 80 px
    assert view.options_from_controls() == start  # each control shows its option's value
    view.controls["fusion"].value = "memory"
    view.controls["fusion_cache"].value = False
    view.controls["runs"].value = 0
    changed = view.options_from_controls()
    assert changed == RunOptions(fusion="memory", fusion_cache=False, runs=0)
    assert view._changes(changed) == "fusion=memory, cache off, runs=0"
    view.controls["profile"].value = True
    view.controls["profile_calls"].value = 3  # how many calls each line's median is over (notes of session 29)
    profiled = view.options_from_controls()
    assert (profiled.profile, profiled.profile_calls) == (True, 3)
    assert view._changes(profiled) == "fusion=memory, cache off, runs=0, lines timed on, profile_calls=3"


def test_docs_table_is_generated_from_the_schema():
    text = DOCS.read_text(encoding="utf-8")
    m = re.search(r"<!-- options table: generated by trace_lab\.options\.docs_table\(\) -->\n(.*?)"
                  r"<!-- end of options table -->", text, re.S)
    assert m, "docs/notebook.md lost its options table markers"
    assert m.group(1) == docs_table()
    rows = [line.split("|")[1].strip(" `") for line in docs_table().splitlines()[2:]]
    assert rows == [o.name for o in SCHEMA]


@pytest.mark.parametrize("opt", SCHEMA, ids=[o.name for o in SCHEMA])
def test_a_bad_value_is_refused_by_every_surface_with_one_message(opt):
    bad = _bad_value(opt)
    with pytest.raises(OptionError) as e:
        check_option(opt.name, bad)
    message = str(e.value)
    assert message.startswith(f"{opt.name}={bad!r}: ")
    assert isinstance(e.value, ValueError) and isinstance(e.value, trace_lab.TraceLabError)
    for choice in opt.choices or ():
        assert choice in message
    if "jit" in opt.surfaces:
        with pytest.raises(ValueError, match=re.escape(message)):
            trace_lab.jit(lambda x: x, **{opt.name: bad})
    if "inspect" in opt.surfaces:
        with pytest.raises(ValueError, match=re.escape(message)):
            trace_lab.inspect(lambda x: x, 1.0, **{opt.name: bad})
    if "cell" in opt.surfaces:
        from trace_lab.notebook.runner import RunOptions

        with pytest.raises(OptionError, match=re.escape(f"{opt.flags[-1]} {bad}: ")):
            RunOptions(**{opt.name: bad})


def test_misspelt_and_misplaced_names_are_type_errors_that_say_which():
    with pytest.raises(UnknownOptionError, match=r"'fusoin' \(did you mean 'fusion'\?\)"):
        trace_lab.jit(lambda x: x, fusoin="memory")
    with pytest.raises(TypeError, match=r"'runs' \(an option of inspect, magic only\)"):
        trace_lab.jit(lambda x: x, runs=3)
    with pytest.raises(TypeError, match=r"'fusoin'.*'fusion'"):
        trace_lab.inspect(lambda x: x, 1.0, fusoin="memory")


def test_the_pass_pipeline_follows_the_typed_options():
    from trace_lab.passes import pipeline_for

    assert pipeline_for(Options()) == ["sort_waits", "fusion"]
    assert pipeline_for(Options(sort_waits=False)) == ["fusion"]
    assert pipeline_for(Options(fsdp="zero3")) == ["fsdp", "sort_waits", "fusion"]


def test_flag_defaults_differ_only_where_declared():
    for o in SCHEMA:
        if o.flag_default is UNSET:
            assert o.flag_default_value == o.default


# -- seed: the option added after the schema (issue 16's "adding an option is one edit") -------------
def test_seed_is_offered_by_every_surface():
    from IPython.core.magic_arguments import parse_argstring

    from trace_lab.notebook.magics import ThunderTraceMagics
    from trace_lab.notebook.runner import RunOptions, from_flags
    from trace_lab.notebook.session import Session
    from trace_lab.notebook.widgets import LabView

    assert _keywords(trace_lab.jit)["seed"] is None and Options(seed=3).seed == 3
    with pytest.raises(ValueError, match=r"seed=-1: give an integer >= 0, or None"):
        trace_lab.jit(lambda x: x, seed=-1)
    with pytest.raises(TypeError, match=r"'sed' \(did you mean 'seed'\?\)"):
        trace_lab.jit(lambda x: x, sed=1)
    assert _keywords(lab_inspect)["seed"] is None
    magic = ThunderTraceMagics.thunder_trace
    assert from_flags(parse_argstring(magic, "--seed 7")).seed == 7 and "--seed S" in magic.__doc__
    view = LabView(runner=None, options=RunOptions(seed=5), runs=Session())
    assert view.controls["seed"].value == "5"
    view.controls["seed"].value = ""
    assert view.options_from_controls().seed is None
    view.controls["seed"].value = "11"
    assert view.options_from_controls() == RunOptions(seed=11)
    assert "| `seed` | `--seed` | int >= 0 / `None` | `None` | check |" in DOCS.read_text(encoding="utf-8")


def _noisy(x):
    return x * 2 + torch.randn(x.shape)


def _inspect_outputs(**options) -> tuple[list, object]:
    """(outputs of the eager reference and of the compiled first call, Report)."""
    seen = []

    def keep(out):  # inspect's loss hook sees each run's output; None: no backward
        seen.append(out.detach().clone())
        return None

    report = trace_lab.inspect(_noisy, torch.ones(4, 4), executor="eager", runs=0, measure_memory=False,
                               loss=keep, **options)
    return seen, report


def test_seed_makes_eager_and_compiled_runs_draw_the_seeded_stream():
    torch.manual_seed(123)
    expected = _noisy(torch.ones(4, 4))  # plain eager PyTorch from the seed
    torch.randn(5)  # the generators are elsewhere now
    (eager, compiled), report = _inspect_outputs(seed=123)
    assert torch.equal(eager, expected) and torch.equal(compiled, expected)
    assert report.comparison["ok"] and report.comparison["mode"] == "exact"
    assert report.options["seed"] == 123
    # without the seed both runs still agree, but draw from wherever the generators were
    (eager, compiled), report = _inspect_outputs()
    assert torch.equal(eager, compiled) and report.comparison["ok"]
    assert not torch.equal(compiled, expected)


def test_seed_flag_reaches_the_cell_run():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.display_pub.publish = lambda *a, **k: None
    shell.run_line_magic("load_ext", "trace_lab")
    shell.user_ns.update(torch=torch, xs=torch.ones(3))
    torch.manual_seed(4)
    expected = torch.ones(3) + torch.randn(3)
    torch.randn(5)
    result = shell.run_cell("%%thunder_trace --seed 4 --executor eager --runs 0 -o rep_seed\nys = xs + torch.randn(3)")
    assert result.success, result.error_in_exec
    assert torch.equal(shell.user_ns["ys"], expected)  # the compiled cell drew the seeded stream
    assert shell.user_ns["rep_seed"].options["seed"] == 4 and shell.user_ns["rep_seed"].ok
