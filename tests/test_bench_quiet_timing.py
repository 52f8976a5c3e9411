"""bench.py with --jobs on one GPU: the run in its timed phase stops the other runs (their whole process
groups) and resumes them after, so a host-bound step is not timed while others compile on the same CPUs."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def wait_state(pid: int, wanted: set, timeout: float = 5.0) -> str:
    end = time.monotonic() + timeout
    while (s := state(pid)) not in wanted and time.monotonic() < end:
        time.sleep(0.02)
    return s


@pytest.fixture
def other_run(tmp_path, monkeypatch):
    """A stand-in for another bench run: a busy process group (a parent and a child, like a compile worker)
    listed in the BENCH_PIDS folder."""
    code = "import subprocess, sys\np = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\nprint(p.pid, flush=True)\nwhile True: pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    worker = int(proc.stdout.readline())
    pids = tmp_path / "pids"
    pids.mkdir()
    (pids / str(proc.pid)).touch()
    monkeypatch.setenv("BENCH_PIDS", str(pids))
    monkeypatch.setenv("BENCH_LOCK", str(tmp_path / "lock"))
    yield proc.pid, worker
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_timed_phase_stops_and_resumes_the_other_runs(other_run):
    leader, worker = other_run
    assert wait_state(leader, {"R"}) == "R" and wait_state(worker, {"R"}) == "R"
    with bench._gpu_lock():
        assert wait_state(leader, {"T"}) == "T"
        assert wait_state(worker, {"T"}) == "T"  # the whole group: compile workers too
    assert wait_state(leader, {"R"}) == "R"
    assert wait_state(worker, {"R"}) == "R"


def test_parent_resumes_runs_a_dead_holder_left_stopped(other_run, tmp_path):
    leader, worker = other_run
    holder = subprocess.run([sys.executable, "-c", (
        "import os, sys; sys.path.insert(0, %r); import bench\n"
        "lock = bench._gpu_lock().__enter__()\n"
        "os._exit(3)  # dies inside its timed phase, never resuming the others") % str(ROOT / "benchmarks")],
        env=dict(os.environ))
    assert holder.returncode == 3
    assert wait_state(worker, {"T"}) == "T"
    bench._resume_if_unlocked(os.environ["BENCH_LOCK"])  # the kernel released the dead holder's lock
    assert wait_state(leader, {"R"}) == "R" and wait_state(worker, {"R"}) == "R"


def test_parent_does_not_resume_during_a_live_timed_phase(other_run):
    leader, _ = other_run
    with bench._gpu_lock():
        assert wait_state(leader, {"T"}) == "T"
        bench._resume_if_unlocked(os.environ["BENCH_LOCK"])
        time.sleep(0.2)
        assert state(leader) == "T"
    assert wait_state(leader, {"R"}) == "R"


def test_first_iteration_excludes_the_time_other_runs_kept_it_stopped(tmp_path, monkeypatch):
    """A run stopped during its first iteration (another run's timed phase) does not count the pause:
    the holder logs each stop interval with the groups it stopped, and the stopped run subtracts the
    overlap with its own interval."""
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.setenv("BENCH_PIDS", str(pids))
    own = os.getpgid(0)
    bench._log_pause(10.0, 14.0, [own, 99999])  # stopped us for 4 s
    bench._log_pause(20.0, 23.0, [99999])  # another run only
    bench._log_pause(30.0, 31.0, [own])  # after our interval
    assert bench.paused_seconds(12.0, 25.0) == 2.0  # 12..14 of the first pause
    assert bench.paused_seconds(5.0, 40.0) == 5.0
    assert bench.paused_seconds(15.0, 29.0) == 0.0
