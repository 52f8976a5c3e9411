"""bench.py's ``--resume`` and its budget estimate: a bench that does not fit one device call goes on in the next.

2026-12-07 (H100): an Adam bench under a 420 s budget started torch.compile's run 168 s in (about 300 s a run in
the earlier files), the call's 480 s limit killed it, and the file held one run of four configurations and none of
torch.compile: no Adam target could be judged, for the third session running. Now a run whose earlier wall does not
fit the budget is not started, and ``--resume FILE`` continues the file on the same machine (its GPUs' UUIDs) and
commit, so its rows stay side by side as its own rounds were. Runs here are stand-ins (``_spawn`` patched): what
is checked is which runs start, which rows the file keeps, and what is refused."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench  # noqa: E402

GIT = {"commit": "abc1234", "dirty": False}


def _row(name, rep=0, **kw):
    return dict(bench="adam", layers=None, name=name, repeat=rep, **kw)


def test_an_earlier_file_continues_only_on_its_machine_commit_device_and_benches():
    meta = {**GIT, "machine": "GPU-1"}
    result = {"schema": bench.SCHEMA, "kind": "bench", "benches": ["adam"], "device": "H100", "meta": meta, "rows": []}
    assert bench.resumable(result, ["adam"], GIT, "H100", "GPU-1") is None
    assert "machine was 'GPU-1', here it is 'GPU-2'" in bench.resumable(result, ["adam"], GIT, "H100", "GPU-2")
    assert "commit was 'abc1234'" in bench.resumable(result, ["adam"], {**GIT, "commit": "def5678"}, "H100", "GPU-1")
    assert "dirty flag" in bench.resumable(result, ["adam"], {**GIT, "dirty": True}, "H100", "GPU-1")
    assert "device was 'H100'" in bench.resumable(result, ["adam"], GIT, "H200", "GPU-1")
    assert "benches was ['adam']" in bench.resumable(result, ["llama"], GIT, "H100", "GPU-1")
    older = dict(result, meta=dict(GIT))  # written before machines were recorded: nothing says it is this one
    assert "machine was None" in bench.resumable(older, ["adam"], GIT, "H100", "GPU-1")


def test_the_runs_left_are_those_a_file_lacks_toward_the_repeats_in_round_order():
    todo = [_row("eager"), _row("torch.compile"), _row("default")]
    rows = [_row("eager", 0, ok=True), _row("eager", 1, ok=True),
            _row("torch.compile", 0, ok=False, error="timed out after 300 s"),  # a run: it counts
            _row("default", 0, ok=False, skipped="time budget (420 s)")]  # not a run
    left = [(rep, cfg["name"]) for rep, cfg in bench.remaining_tasks(todo, rows, 3)]
    assert left == [(0, "default"), (1, "torch.compile"), (1, "default"),
                    (2, "eager"), (2, "torch.compile"), (2, "default")]


def test_a_run_is_expected_to_take_its_wall_in_this_call_else_in_the_earlier_files():
    key = ("adam", None, "torch.compile")
    assert bench.run_estimate(key, {key: 250.0}, {key: 306.0}) == 250.0
    assert bench.run_estimate(key, {}, {key: 306.0}) == 306.0
    assert bench.run_estimate(key, {}, {}) == 0.0


@pytest.fixture
def stand_in_runs(monkeypatch, tmp_path):
    """bench.main with stand-in runs (each ``wall`` seconds of a fake clock) on a fake machine; returns the list
    of runs started and a setter for the machine's id."""
    started, clock, machine = [], [0.0], ["GPU-1"]
    walls = {"eager": 10.0, "torch.compile": 300.0, "default": 20.0}

    def spawn(cfg, timeout, slot, n_gpus, jobs):
        started.append((cfg["repeat"], cfg["name"]))
        clock[0] += walls[cfg["name"]]
        return dict(cfg, ok=True, wall_s=walls[cfg["name"]], first_iter_s=1.0, steady_ms=2.0, host_ms=2.0,
                    device_ms=None, peak_mib=None, matches_eager=True)

    monkeypatch.setattr(bench, "_spawn", spawn)
    monkeypatch.setattr(bench, "_gpus", lambda: [])
    monkeypatch.setattr(bench, "machine_id", lambda: machine[0])
    monkeypatch.setattr(bench.time, "monotonic", lambda: clock[0])
    monkeypatch.setenv("TRACE_LAB_COMMIT", GIT["commit"])
    monkeypatch.setenv("TRACE_LAB_DIRTY", "0")
    # an earlier file of this device kind: torch.compile's run took 300 s
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "2026-12-01-cpu-0000000-adam.json").write_text(json.dumps(
        {"schema": 2, "kind": "bench", "benches": ["adam"], "device": "cpu", "measured_at": "2026-12-01T00:00:00",
         "rows": [_row("torch.compile", ok=True, wall_s=300.0)]}))
    monkeypatch.setattr(bench, "RESULTS", earlier)
    return started, machine.__setitem__


def _main(out, *extra):
    return bench.main(["adam", "--device", "cpu", "--configs", "eager", "torch.compile", "default",
                       "--repeat", "2", "--jobs", "1", "--out", str(out), *extra])


def test_a_budget_skips_a_run_its_earlier_wall_cannot_fit_and_resume_adds_the_missing_runs(stand_in_runs, tmp_path):
    started, _ = stand_in_runs
    first = tmp_path / "first"
    _main(first, "--budget", "200")
    # torch.compile's 300 s does not fit a 200 s budget: never started; eager and default ran twice
    assert started == [(0, "eager"), (0, "default"), (1, "eager"), (1, "default")]
    (path,) = first.glob("*-adam.json")
    rows = json.loads(path.read_text())["rows"]
    skips = [(r["name"], r["skipped"]) for r in rows if r.get("skipped")]
    assert [n for n, _ in skips] == ["torch.compile"] * 2
    assert all(why.startswith("time budget (200 s; a run takes about 300 s") for _, why in skips), skips

    started.clear()
    second = tmp_path / "second"
    _main(second, "--budget", "700", "--resume", str(path))
    assert started == [(0, "torch.compile"), (1, "torch.compile")]  # only what the file lacked
    resumed = json.loads((second / path.name).read_text())
    ran = sorted((r["name"], r["repeat"]) for r in resumed["rows"] if not r.get("skipped"))
    assert ran == [("default", 0), ("default", 1), ("eager", 0), ("eager", 1),
                   ("torch.compile", 0), ("torch.compile", 1)]
    assert not any(r.get("skipped") for r in resumed["rows"])  # the budget skips are gone with the runs they lacked
    assert resumed["complete"] and len(resumed["meta"]["resumed"]) == 1
    log = (second / f"{path.stem}-log.txt").read_text()
    assert log.index("200 s") < log.index("resuming")  # the first call's log is carried on, then the second's


def test_resume_refuses_a_file_from_another_machine_and_writes_nothing(stand_in_runs, tmp_path):
    started, set_machine = stand_in_runs
    first = tmp_path / "first"
    _main(first, "--budget", "200")
    (path,) = first.glob("*-adam.json")
    started.clear()
    set_machine(0, "GPU-9")  # a fresh machine of the same kind
    second = tmp_path / "second"
    with pytest.raises(SystemExit, match="machine was 'GPU-1', here it is 'GPU-9'.*start a new file"):
        _main(second, "--resume", str(path))
    assert started == [] and not list(second.glob("*.json"))


def test_resume_in_its_own_folder_appends_to_its_own_file_and_log(stand_in_runs, tmp_path):
    started, _ = stand_in_runs
    folder = tmp_path / "bench"  # the device machine's /tmp/bench across two calls
    _main(folder, "--budget", "200")
    (path,) = folder.glob("*-adam.json")
    _main(folder, "--budget", "700", "--resume", str(path))
    assert list(folder.glob("*.json")) == [path]
    assert sum(1 for r in json.loads(path.read_text())["rows"] if not r.get("skipped")) == 6
    log = (folder / f"{path.stem}-log.txt").read_text()
    assert log.count("bench.py: 3 configurations") == 2 and "resuming" in log
