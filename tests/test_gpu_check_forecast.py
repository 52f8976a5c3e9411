"""The GPU check says at its start how long it should take, and shows its progress as it runs.

2026-11-28: a full check took 531.5 s of a 545 s budget on one H100 host and 415.6 s on another, and nothing
said so until it ended. The plugin (benchmarks/_gpu_check_plugin.py) now forecasts the run from the last
checks' seconds, scope by scope on the workers as loadgroup hands them out (``expected_wall``), prints it with
the budget and keeps it in the result file; gpu_check.py echoes pytest's lines as they come."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _gpu_check_plugin as plugin  # noqa: E402


def _gpu_check():
    return load_script("benchmarks/gpu_check.py")


def test_the_forecast_hands_scopes_longest_first_to_the_least_loaded_worker():
    seconds = {"t.py::a": 50.0, "t.py::b": 40.0, "t.py::g1": 20.0, "t.py::g2": 20.0, "t.py::c": 1.0}
    ids = ["t.py::c", "t.py::a", "t.py::g1@g", "t.py::b", "t.py::g2@g", "t.py::new"]
    # scopes: new 60 (unknown), a 50, b 40, g 40 (20 + 20), c 1; on 2 workers: 60 | 50, then b -> 50+40 = 90,
    # g -> 60+40 = 100, c -> 90+1 = 91: the longer worker ends at 100 s
    f = plugin.expected_wall(ids, seconds, workers=2)
    assert f == {"expected_wall_s": 100.0, "test_seconds": 191.0, "items": 6, "unknown_items": 1, "workers": 2}
    assert plugin.expected_wall(ids, seconds, workers=1)["expected_wall_s"] == 191.0
    assert plugin.expected_wall(ids, seconds, workers=10)["expected_wall_s"] == 60.0  # the longest scope


def _run_on_two_workers(tmp_path, budget: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRACE_LAB_GPU_CHECK_LOG=str(tmp_path / "log.jsonl"), PYTHONPATH=str(ROOT / "benchmarks"),
               TRACE_LAB_GPU_CHECK_DURATIONS=str(tmp_path / "durations.json"), TRACE_LAB_GPU_CHECK_WORKERS="2",
               TRACE_LAB_GPU_CHECK_BUDGET=budget)
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "_gpu_check_plugin", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "-n", "2", "test_f.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_a_run_on_workers_prints_and_keeps_its_forecast_against_the_budget(tmp_path):
    (tmp_path / "test_f.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    (tmp_path / "durations.json").write_text(json.dumps({"test_f.py::test_a": 300.0, "test_f.py::test_b": 200.0}))
    done = _run_on_two_workers(tmp_path, budget="250")
    said = [ln for ln in done.stdout.splitlines() if ln.startswith("[gpu-check] 2 items")]
    assert len(said) == 1, done.stdout  # once, not once per worker
    assert "about 300 s on 2 workers" in said[0] and "MORE than the budget (250 s)" in said[0], said[0]
    log = tmp_path / "log.jsonl"
    assert _gpu_check().forecast_of(log) == {"expected_wall_s": 300.0, "test_seconds": 500.0, "items": 2,
                                             "unknown_items": 0, "workers": 2, "from_skipped_modules": 0}
    assert {i["item"] for i in _gpu_check().collect(log)} == {"test_f.py::test_a", "test_f.py::test_b"}
    # 300 s fits 330 s, but not with the overrun checks have shown (OVERRUN); 400 s is room enough
    assert "CLOSE to the budget (330 s)" in _run_on_two_workers(tmp_path, budget="330").stdout
    roomy = _run_on_two_workers(tmp_path, budget="400").stdout
    assert "(budget 400 s)" in roomy and "CLOSE" not in roomy and "MORE" not in roomy, roomy


def test_the_check_echoes_output_as_it_comes_and_stops_at_the_budget():
    module = _gpu_check()
    script = "import sys, time\nprint('first', flush=True)\ntime.sleep(60)\nprint('never')\n"
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines, timed_out = module.stream(proc, budget=3)
    assert timed_out and lines == ["first"] and proc.returncode is not None
    proc = subprocess.Popen([sys.executable, "-c", "print('a'); print('b')"], start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert module.stream(proc, budget=30) == (["a", "b"], False)


def test_a_forecast_on_a_machine_that_skips_a_module_counts_its_items_as_the_last_whole_check_ran_them(tmp_path):
    """``gpu_check.py --forecast`` on a CPU: tests/test_nvfuser_gpu.py skips whole ("needs a CUDA device"), so its
    items are not collected; the forecast adds them from the newest whole check (not from older files, whose items
    may have been renamed since)."""
    results = tmp_path / "results"
    results.mkdir()
    item = {"status": "passed"}
    (results / "2026-01-01-h100-aaaaaaa-gpu-check.json").write_text(json.dumps({"items": [
        dict(item, item="test_gpu.py::test_renamed_since", seconds=100.0)]}))
    (results / "2026-01-02-h100-bbbbbbb-gpu-check.json").write_text(json.dumps({"items": [
        dict(item, item="test_gpu.py::test_g", seconds=40.0), dict(item, item="test_cpu.py::test_c", seconds=10.0)]}))
    (results / "2026-01-03-h100-ccccccc-gpu-check-subset.json").write_text(json.dumps({"items": [
        dict(item, item="test_cpu.py::test_c", seconds=12.0)]}))  # a part of a check: not the whole one
    module = _gpu_check()
    assert module.latest_full_check_items(results) == ["test_gpu.py::test_g", "test_cpu.py::test_c"]
    (tmp_path / "test_gpu.py").write_text("import pytest\npytest.skip('needs a CUDA device', allow_module_level=True)\n"
                                          "def test_g():\n    pass\n")
    (tmp_path / "test_cpu.py").write_text("def test_c():\n    pass\n")
    (tmp_path / "durations.json").write_text(json.dumps(module.known_durations(results)))
    (tmp_path / "latest.json").write_text(json.dumps(module.latest_full_check_items(results)))
    env = dict(os.environ, TRACE_LAB_GPU_CHECK_LOG=str(tmp_path / "log.jsonl"), PYTHONPATH=str(ROOT / "benchmarks"),
               TRACE_LAB_GPU_CHECK_DURATIONS=str(tmp_path / "durations.json"), TRACE_LAB_GPU_CHECK_WORKERS="1",
               TRACE_LAB_GPU_CHECK_BUDGET="45", TRACE_LAB_GPU_CHECK_FORECAST_ONLY="1",
               TRACE_LAB_GPU_CHECK_LATEST_ITEMS=str(tmp_path / "latest.json"))
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "_gpu_check_plugin",
                           "-p", "no:cacheprovider", "test_gpu.py", "test_cpu.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    # test_c 12 s (the newest file that timed it) + test_g 40 s from the skipped module; not test_renamed_since
    forecast = module.forecast_of(tmp_path / "log.jsonl")
    assert forecast["expected_wall_s"] == 52.0 and forecast["from_skipped_modules"] == 1, done.stdout + done.stderr
    assert "1 items of 1 module(s) skipped here" in done.stdout and "MORE than the budget (45 s)" in done.stdout


def test_same_day_checks_are_ordered_by_when_they_ran_not_by_their_names(tmp_path):
    """2026-11-28: c1cd96d's check (run first) sorted after 2dcfa3a's (run later) by name, so its seconds and its
    item list were taken for the newest. Files record when they ran (``measured_at``); that orders a day's files."""
    import json

    module = load_script("benchmarks/gpu_check.py")

    def check(name, when, seconds):
        env = {"commit": name.split("-")[4], "date": name[:10]}
        if when:
            env["measured_at"] = when
        (tmp_path / name).write_text(json.dumps({"environment": env, "items": [
            {"item": f"test_x.py::test_{seconds:.0f}", "status": "passed", "seconds": seconds},
            {"item": "test_x.py::test_both@g", "status": "passed", "seconds": seconds}]}))

    check("2026-11-28-h100-fff0001-gpu-check.json", "2026-11-28T01:00:00+00:00", 1.0)  # ran first
    check("2026-11-28-h100-0000002-gpu-check.json", "2026-11-28T05:00:00+00:00", 2.0)  # ran later, sorts first
    check("2026-11-27-h100-fff0003-gpu-check.json", None, 3.0)  # the day before: its date decides
    assert [f.name[16:23] for f, _ in module.checks_in_order(tmp_path, "*-gpu-check*.json*")] == [
        "fff0003", "fff0001", "0000002"]
    assert module.known_durations(tmp_path)["test_x.py::test_both"] == 2.0
    assert module.latest_full_check_items(tmp_path) == ["test_x.py::test_2", "test_x.py::test_both"]
    # a file from before measured_at whose commit git does not know sorts first in its day, then by name
    assert module._commit_time("fff0003") is None


def test_a_run_the_budget_stops_names_the_items_it_did_not_reach_and_how_to_run_just_them(tmp_path):
    """2026-11-28 (session 29): a full check stopped by its budget with 2 of 358 items not run said only "the
    items not listed did not run"; finding which meant diffing a collection by hand. The plugin now keeps the
    selected ids (once, not once per worker) and the result names the ones no result line reached, with the
    command that runs just those."""
    (tmp_path / "test_f.py").write_text("import pytest\n\ndef test_a():\n    pass\n\n"
                                        "@pytest.mark.parametrize('n', ['x-1', 'y 2'])\ndef test_b(n):\n    pass\n")
    (tmp_path / "durations.json").write_text("{}")
    _run_on_two_workers(tmp_path, budget="400")
    log = tmp_path / "log.jsonl"
    id_lines = [r for r in map(json.loads, log.read_text().splitlines()) if "ids" in r]
    assert len(id_lines) == 1 and sorted(id_lines[0]["ids"]) == [
        "test_f.py::test_a", "test_f.py::test_b[x-1]", "test_f.py::test_b[y 2]"]
    module = _gpu_check()
    items = module.collect(log)
    assert module.not_reached(log, items) == []  # every item finished
    # as if the budget had stopped the run after test_a: loadgroup's "@group" suffix (on the ids and on the
    # finished items' names) is not part of a node id
    first = [dict(i, item=i["item"] + "@g0") for i in items if i["item"] == "test_f.py::test_a"]
    (tmp_path / "grouped.jsonl").write_text(json.dumps({"collected": 3, "ids": [
        "test_f.py::test_a@g0", "test_f.py::test_b[x-1]@g", "test_f.py::test_b[y 2]@g"]}) + "\n")
    missing = module.not_reached(tmp_path / "grouped.jsonl", first)
    assert missing == ["test_f.py::test_b[x-1]", "test_f.py::test_b[y 2]"]
    command = module.rerun_command(missing)
    assert command == "python3 dev.py gpu-check --system -- 'test_f.py::test_b[x-1]' 'test_f.py::test_b[y 2]'"
    run = {"not_reached": missing, "wall_s": 1.0, "workers": 2, "budget_s": 1.0, "timed_out": True}
    env = {"date": "2026-11-28", "gpu": "NVIDIA H200", "commit": "abc1234", "torch": "2.11", "cuda": "13.0",
           "nvfuser": "0.2", "nvfuser_missing": None, "python": "3.12"}
    base = module.write(env, first, run, False, ["stopped by the time budget"], tmp_path / "out")
    text = base.with_suffix(".txt").read_text()
    assert "== not reached (the budget stopped the run first): 2" in text and command in text, text
    assert f"python3 dev.py gpu-check --system --rest benchmarks/results/{base.name}.json" in text, text


def test_rest_runs_what_a_kept_check_did_not_reach_or_did_not_pass(tmp_path, capsys):
    """2026-12-07 (session 50): a check its budget stopped left 148 items; their node ids (about 15,000 characters)
    did not fit the device machine's 2,000-character command line. ``--rest FILE`` reads them, with the failed
    ones, from the kept result file; its own files are a ``-rest-subset``, never taken for a whole check."""
    module = _gpu_check()
    env = {"date": "2026-12-07", "gpu": "NVIDIA H200", "commit": "abc1234", "torch": "2.11", "cuda": "13.0",
           "nvfuser": "0.2", "nvfuser_missing": None, "python": "3.12"}
    items = [{"item": "t.py::test_ok@g", "group": "tests", "status": "passed", "reason": "", "seconds": 1.0},
             {"item": "t.py::test_bad[x]@g", "group": "tests", "status": "failed", "reason": "assert", "seconds": 1.0},
             {"item": "t.py::test_skip", "group": "tests", "status": "skipped", "reason": "no nvFuser", "seconds": 0}]
    run = {"not_reached": ["t.py::test_late[a b]", "t.py::test_bad[x]"], "wall_s": 1.0, "workers": 2,
           "budget_s": 1.0, "timed_out": True}
    base = module.write(env, items, run, False, ["stopped"], tmp_path)
    assert module.rest_of(base.with_suffix(".json")) == ["t.py::test_bad[x]", "t.py::test_late[a b]"]
    rest = module.write(env, items, run, False, ["stopped"], tmp_path, subset=True, rest=True)
    assert rest.name == "2026-12-07-h200-abc1234-gpu-check-rest-subset"
    assert [f.name for f, _ in module.checks_in_order(tmp_path, "*-gpu-check.json*")] == [base.name + ".json"]
    # a file that is not a check, and a check that left nothing: a message each, and no pytest run
    (tmp_path / "other.json").write_text('{"rows": []}')
    assert module.main(["--rest", str(tmp_path / "other.json")]) == 2
    assert "not a GPU check's result file" in capsys.readouterr().err
    done = module.write(env, items[:1], dict(run, not_reached=[], timed_out=False), True, [], tmp_path / "done")
    assert module.main(["--rest", str(done.with_suffix(".json"))]) == 1
    assert "left nothing to run" in capsys.readouterr().err


def test_a_machine_missing_what_the_check_needs_stops_before_any_test(monkeypatch, capsys):
    """Session 33's first GPU call ran 255 s on a machine whose set-up had failed (no nvFuser, graphviz,
    ipywidgets, nbformat): the check now names what does not import and stops before pytest starts."""
    gc = _gpu_check()
    found = gc.missing_modules({"json": "the reports", "trace_lab_no_such_module": "the thing under test"})
    assert len(found) == 1 and found[0].startswith("trace_lab_no_such_module (the thing under test): "
                                                   "ModuleNotFoundError"), found
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gc, "NEEDED", {"trace_lab_no_such_module": "the nvFuser executor's tests"})

    def no_pytest(*a, **k):
        raise AssertionError("pytest started on a machine that cannot pass the check")

    monkeypatch.setattr(gc, "run_pytest", no_pytest)
    assert gc.main(["--budget", "10"]) == 1
    err = capsys.readouterr().err
    assert "stopped before any test" in err and "trace_lab_no_such_module (the nvFuser executor's tests)" in err, err
