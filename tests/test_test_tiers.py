"""The two test tiers (docs/testing.md): what left `dev.py test` for time is listed where the tiers are described,
and the GPU check, which runs it, selects it."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]


def _full() -> dict:
    """tests/conftest.py's FULL (``import conftest`` may find tests/notebook/conftest.py): the file, loaded apart."""
    return load_script("tests/conftest.py", "_tiers_conftest").FULL


def test_docs_list_exactly_the_tests_that_left_the_ci_tier():
    text = (ROOT / "docs" / "testing.md").read_text()
    listed = text.split("<!-- full tier: tests/conftest.py FULL -->")[1].split("<!-- end of the full tier -->")[0]
    docs = {}
    for line in listed.strip().splitlines():
        module, tests = re.fullmatch(r"- `([^`]+)`: (.*)", line.strip()).groups()
        docs[module] = tuple(re.findall(r"`([^`]+)`", tests))
    assert docs == {m: tuple(t) for m, t in _full().items()}, "docs/testing.md's list and tests/conftest.py's FULL differ"


def test_the_gpu_check_runs_the_full_tier():
    sys.path.insert(0, str(ROOT))
    import dev

    args = dev.gpu_check_args(["--budget", "420"])
    assert args[:3] == ["--budget", "420", "--"]
    assert args[3:5] == ["--full", "-m"] and args[5].endswith(" or (full and not browser)"), args
    assert "gpu or teaching" in args[5]
    # pytest arguments the caller gives after `--` come last, so that their own -m wins
    assert dev.gpu_check_args(["--", "-m", "gpu"])[-2:] == ["-m", "gpu"]


def test_a_gpu_check_with_skips_for_a_missing_dependency_does_not_pass():
    """The session that found the device recipe's setup.sh broken (2026-11-27): nvFuser and the notebook stack were
    absent and 21 workload items skipped 'nvFuser not usable'; such a run must not read as a pass."""
    module = load_script("benchmarks/gpu_check.py")
    run = {"timed_out": False, "budget_s": 540.0, "returncode": 0}
    passed = {"item": "tests/a.py::t", "status": "passed", "reason": ""}
    absent = {"item": "tests/b.py::t", "status": "skipped", "reason": "nvFuser not usable: nvfuser_direct is not installed"}
    two_gpus = {"item": "tests/c.py::t", "status": "skipped", "reason": "needs 2 GPUs"}
    assert module.verdict([passed, two_gpus], run) == (True, [])
    ok, why = module.verdict([passed, absent, two_gpus], run)
    assert not ok and "1 item(s) skipped for a missing dependency (nvFuser not usable" in why[0]


def test_a_run_whose_shutdown_ran_past_the_budget_after_every_item_finished_passes(tmp_path):
    """The recheck at 3676c00 (2026-11-27): all 3 selected items passed, yet the verdict said the budget stopped the
    run, because pytest's own shutdown ran over. The plugin records how many items were selected, under xdist too."""
    import subprocess
    import sys

    module = load_script("benchmarks/gpu_check.py")
    (tmp_path / "test_two.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n\ndef test_c():\n    pass\n")
    log = tmp_path / "log.jsonl"
    env = dict(os.environ, TRACE_LAB_GPU_CHECK_LOG=str(log), PYTHONPATH=str(ROOT / "benchmarks"))
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "_gpu_check_plugin", "-p", "no:cacheprovider",
                           "-n", "2", "-k", "not test_c", str(tmp_path / "test_two.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert module.collected_count(log) == 2  # -k deselected one of the three
    items = module.collect(log)
    assert [i["status"] for i in items] == ["passed", "passed"] and all(i["finished"] for i in items)
    over = {"timed_out": True, "budget_s": 100.0, "returncode": -15, "collected": 2}
    assert module.verdict(items, over) == (True, [])
    ok, why = module.verdict(items[:1], over)  # one of the two never finished: the budget did stop it
    assert not ok and "stopped by the time budget" in why[0]
    ok, why = module.verdict(items, dict(over, collected=None))  # no count: cannot tell, so not a pass
    assert not ok


def test_the_gpu_check_starts_the_longest_work_first(tmp_path):
    """2026-11-27 (91de505): the full check's items summed to 4,488 s on 10 workers (449 s each), yet the run took
    545 s and its budget cut the last item's teardown: pytest-xdist's loadgroup had ordered the groups by their item
    counts, so a 222 s item could start late. The plugin now orders scopes by the last checks' seconds, longest
    first, a group's items together; an item no check ran counts as long."""
    import json
    import subprocess

    module = load_script("benchmarks/gpu_check.py")
    old = {"items": [{"item": "test_o.py::test_long@x", "status": "passed", "seconds": 5.0},
                     {"item": "test_o.py::test_short", "status": "passed", "seconds": 99.0}]}
    new = {"items": [{"item": "test_o.py::test_short", "status": "passed", "seconds": 1.0},
                     {"item": "test_o.py::test_long", "status": "passed", "seconds": 50.0},
                     {"item": "test_o.py::test_g1@g", "status": "passed", "seconds": 20.0},
                     {"item": "test_o.py::test_g2@g", "status": "passed", "seconds": 20.0},
                     {"item": "test_o.py::test_skipped", "status": "skipped", "seconds": 0.1}]}
    (tmp_path / "2026-01-01-h100-aaaaaaa-gpu-check.json").write_text(json.dumps(old))
    (tmp_path / "2026-01-02-h100-bbbbbbb-gpu-check.json").write_text(json.dumps(new))
    seconds = module.known_durations(tmp_path)  # the newer file wins; xdist's @group suffix dropped; skips ignored
    assert seconds == {"test_o.py::test_short": 1.0, "test_o.py::test_long": 50.0, "test_o.py::test_g1": 20.0,
                       "test_o.py::test_g2": 20.0}
    (tmp_path / "durations.json").write_text(json.dumps(seconds))
    (tmp_path / "test_o.py").write_text(
        "import pytest\n\n"
        "def test_short():\n    pass\n\n"
        "@pytest.mark.xdist_group('g')\ndef test_g1():\n    pass\n\n"
        "def test_long():\n    pass\n\n"
        "@pytest.mark.xdist_group('g')\ndef test_g2():\n    pass\n\n"
        "def test_new():\n    pass\n")
    log = tmp_path / "log.jsonl"
    env = dict(os.environ, TRACE_LAB_GPU_CHECK_LOG=str(log), PYTHONPATH=str(ROOT / "benchmarks"),
               TRACE_LAB_GPU_CHECK_DURATIONS=str(tmp_path / "durations.json"))
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "_gpu_check_plugin", "-p", "no:cacheprovider",
                           "-p", "no:randomly", str(tmp_path / "test_o.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    ran = [r["nodeid"].split("::")[1] for r in map(json.loads, log.read_text().splitlines())
           if r.get("when") == "call"]
    # test_new: no earlier seconds (counted as 60 s); test_long 50; the group g 20 + 20 together; test_short 1
    assert ran == ["test_new", "test_long", "test_g1", "test_g2", "test_short"], ran
