"""The GPU check: everything that must hold on CUDA, in one command and one call of a GPU machine.

    python3 dev.py gpu-check                  # in .venv (a GPU machine with the package index)
    source .device/setup.sh && python3 dev.py gpu-check --system   # the GPU machine of ../shared/device

It runs one pytest session (pytest-xdist, ``--dist loadgroup``) over

* ``tests``: every test marked ``gpu`` (the nvFuser executor, CUDA graphs, host/device time, op scratch
  on CUDA, region repros),
* ``workloads``: every example workload through every executor (eager, Inductor, nvFuser when it imports)
  and fusion strategy against eager PyTorch, predicted against measured peak (tests/test_gpu_workloads.py),
* ``notebooks``: every teaching notebook executed the project's way (nbclient, executor ``auto``) on CUDA,
  with the checks of the figures its prose quotes (tests/notebook/test_teaching_notebooks.py and
  test_notebooks_06_07.py, marked ``teaching``),

within a time budget (``--budget``, default 540 s: one call of the GPU machine is 10 minutes). At its start it
prints how long the run should take (the last checks' seconds on the workers, ``_gpu_check_plugin.expected_wall``)
against the budget, then pytest's progress as it comes; ``--forecast`` says only that, on any machine, before
a GPU machine's time is spent. It writes
``benchmarks/results/<date>-<gpu>-<commit>-gpu-check.json`` and ``.txt``: the commit, GPU, torch, CUDA and
nvFuser versions, and every item with pass / fail / skip, the reason and its time; the executed notebooks go
to ``benchmarks/results/gpu-check-notebooks/`` only with ``--keep-notebooks``. Exit status: 0 when every item
passed (an nvFuser item may skip, with its reason, where nvFuser does not import), 1 on any failure or error,
on a run stopped by the budget, or when no test ran; 2 without a CUDA device. Before any test runs it checks that
what the check needs imports (:data:`NEEDED`: nvFuser, the notebook stack, graphviz) and stops at once, exit 1,
naming what is missing: a machine set up wrong would otherwise spend minutes of GPU time on a check that cannot
pass (session 33's first call: 255 s for 26 skips and 28 import errors). ``--allow-missing`` runs it anyway.
A run the budget stopped names the items it did not reach and prints the command that runs just those (``not_reached``, ``rerun_command``).
``--rest FILE.json`` runs the items a kept check did not reach and those it failed, nothing else (:func:`rest_of`):
a command short enough for the device machine's 2,000-character command line, where 148 node ids are not (2026-12-07,
session 50). Its files are ``...-gpu-check-rest-subset``. (With ``--forecast`` on a machine without CUDA, the ids of
modules that skip there, tests/test_nvfuser_gpu.py, do not collect: forecast it on the GPU machine.)
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
MARKERS = "gpu or teaching"
# the full tier dev.py appends to every check's pytest arguments (dev.gpu_check_args; no Chromium there: its
# browser tests need CI's): a check given nothing more is whole
TIER_ARGS = ["--full", "-m", f"({MARKERS}) or (full and not browser)"]


# module -> what needs it; each must import for a complete check (``--allow-missing`` runs without)
NEEDED = {"nvfuser_direct": "the nvFuser executor's tests and workloads", "graphviz": "the graph views",
          "ipywidgets": "the magic and its widgets", "nbformat": "the teaching notebooks",
          "nbclient": "the teaching notebooks", "ipykernel": "the teaching notebooks' kernel"}


def missing_modules(needed: dict = NEEDED) -> list[str]:
    """``needed``'s modules that do not import here, each with its error and what needs it."""
    import importlib

    missing = []
    for name, what in needed.items():
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - named, with what needs it
            missing.append(f"{name} ({what}): {type(e).__name__}: {str(e)[:160]}")
    return missing


def environment() -> dict:
    """What the check ran on (benchmarks/_results.py's helpers), and why nvFuser is missing where it is."""
    import torch

    from benchmarks._results import git_commit, package_version

    why = None
    try:
        import nvfuser_direct  # noqa: F401
    except Exception as e:  # noqa: BLE001 - recorded: the check goes on with Inductor and eager
        why = f"{type(e).__name__}: {e}"
    head = git_commit(str(ROOT))
    commit = (head["commit"] or "unknown") + ("+dirty" if head["dirty"] else "")
    return {"commit": commit, "date": datetime.date.today().isoformat(),
            "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "nvfuser": None if why else package_version("nvfuser"), "nvfuser_missing": why,
            "python": platform.python_version(), "host_cores": os.cpu_count()}


def group_of(nodeid: str) -> str:
    if nodeid.startswith("tests/notebook/"):
        return "notebooks"
    if nodeid.startswith("tests/test_gpu_workloads.py"):
        return "workloads"
    return "tests"


def collect(log: Path) -> list[dict]:
    """One item per test from the plugin's lines: failed if any phase failed, skipped if it was skipped."""
    items: dict[str, dict] = {}
    if not log.exists():
        return []
    for line in log.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if "nodeid" not in r:  # the run's own lines: how many were selected, how long it should take
            continue
        it = items.setdefault(r["nodeid"], {"item": r["nodeid"], "group": group_of(r["nodeid"]), "status": "passed",
                                            "reason": "", "seconds": 0.0})
        it["seconds"] = round(it["seconds"] + r["seconds"], 2)
        if r["outcome"] == "failed":
            it["status"] = "failed" if r["when"] == "call" else "error"
            it["reason"] = it["reason"] or f"{r['when']}: {r['reason']}"
        elif r["outcome"] == "skipped" and it["status"] == "passed":
            it["status"], it["reason"] = "skipped", r["reason"]
        if r["when"] == "teardown" or r["when"] == "collect":
            it["finished"] = True
    return sorted(items.values(), key=lambda i: (i["group"], i["item"]))


def known_durations(results: Path = RESULTS) -> dict[str, float]:
    """Each item's seconds in the GPU checks kept in ``results`` (the newest file that ran it wins, in
    :func:`checks_in_order`; the ``@group`` suffix pytest-xdist adds is dropped): the plugin starts the longest
    work first from these, and the forecast sums them."""
    seconds: dict[str, float] = {}
    for _, data in checks_in_order(results, "*-gpu-check*.json*"):
        for item in data.get("items") or []:
            if item.get("status") in ("passed", "failed") and item.get("seconds") is not None:  # 0.0: instant
                seconds[item["item"].split("@")[0]] = float(item["seconds"])
    return seconds


def checks_in_order(results: Path, pattern: str) -> list[tuple[Path, dict]]:
    """The readable GPU check files ``pattern`` matches in ``results`` (``.json`` or ``.json.gz``), oldest first:
    by the date their name starts with, then by when they ran (``environment.measured_at``; a file from before it
    was recorded: its commit's time, from git, where the checkout has it). Name order alone put same-day checks
    in the order of their commit hashes (2026-11-28: c1cd96d's seconds were taken over 2dcfa3a's, newer)."""
    found = []
    for f in results.glob(pattern):
        if not f.name.endswith((".json", ".json.gz")):
            continue
        data = _check_data(f)
        if data is None:
            continue
        env = data.get("environment") or {}
        when = env.get("measured_at") or _commit_time(str(env.get("commit") or "").split("+")[0]) or ""
        found.append((f.name[:10], when, f.name, f, data))
    return [(f, data) for *_, f, data in sorted(found, key=lambda t: t[:3])]


@functools.lru_cache(maxsize=None)  # asked once per file by each reader of the kept checks
def _commit_time(commit: str) -> str | None:
    """``commit``'s committer time (ISO, UTC) from this checkout's git, or None (no git, unknown commit)."""
    if not commit or commit == "unknown":
        return None
    try:
        done = subprocess.run(["git", "log", "-1", "--format=%cd", "--date=iso-strict-local", commit], cwd=ROOT,
                              capture_output=True, text=True, timeout=10, env=dict(os.environ, TZ="UTC"))
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def _check_data(path: Path) -> dict | None:
    """A kept GPU check's result file (``.json`` or ``.json.gz``); None if it cannot be read."""
    import gzip

    try:
        with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def latest_full_check_items(results: Path = RESULTS) -> list[str]:
    """The items (``@group`` suffix dropped) of the newest whole GPU check kept in ``results``
    (``<date>-<gpu>-<commit>-gpu-check.json[.gz]``; not the subset or recheck files; :func:`checks_in_order`):
    what the check runs now."""
    checks = checks_in_order(results, "*-gpu-check.json*")
    return [item["item"].split("@")[0] for item in checks[-1][1].get("items") or []] if checks else []


def forecast_of(log: Path) -> dict | None:
    """The plugin's forecast of the run's length (``_gpu_check_plugin.expected_wall``), None if it wrote none."""
    if not log.exists():
        return None
    lines = [json.loads(ln) for ln in log.read_text(encoding="utf-8").splitlines()]
    return next((r["forecast"] for r in lines if "forecast" in r), None)


def stream(proc: subprocess.Popen, budget: float) -> tuple[list[str], bool]:
    """pytest's output lines, each echoed as it comes (a long check shows its progress), and whether the budget
    stopped it (its process group is then terminated, killed 20 s later if still alive)."""
    import threading

    lines: list[str] = []

    def read():
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            print(line, end="", flush=True)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=budget)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(timeout=10)
    return lines, timed_out


def forecast_only(budget: float, workers: int, extra: list[str]) -> int:
    """Collect what the check would run (no test runs, no GPU needed) and print the plugin's forecast for
    ``workers`` against ``budget``; 1 when it would not fit the budget, 0 when it would."""
    import shutil

    work = Path(tempfile.mkdtemp(prefix="gpu-check-forecast-"))
    try:
        return _forecast_in(work, budget, workers, extra)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _plugin_env(work: Path, budget: float, workers: int, **more: str) -> dict:
    """The environment of the check's pytest and its plugin (``_gpu_check_plugin``): its log in ``work``, the
    workers and budget its forecast uses, benchmarks/ and the checkout first on the path; ``more`` besides."""
    return dict(os.environ, TRACE_LAB_GPU_CHECK_LOG=str(work / "results.jsonl"),
                TRACE_LAB_GPU_CHECK_WORKERS=str(workers), TRACE_LAB_GPU_CHECK_BUDGET=str(budget),
                PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), str(ROOT),
                                                          os.environ.get("PYTHONPATH")])), **more)


# the check's pytest, with its markers and plugin (then each caller's own arguments)
PYTEST = [sys.executable, "-m", "pytest", "-m", MARKERS, "-p", "_gpu_check_plugin", "-p", "no:cacheprovider"]


def _forecast_in(work: Path, budget: float, workers: int, extra: list[str]) -> int:
    (work / "durations.json").write_text(json.dumps(known_durations()), encoding="utf-8")
    (work / "latest.json").write_text(json.dumps(latest_full_check_items()), encoding="utf-8")
    env = _plugin_env(work, budget, workers, TRACE_LAB_GPU_CHECK_LATEST_ITEMS=str(work / "latest.json"),
                      TRACE_LAB_GPU_CHECK_DURATIONS=str(work / "durations.json"),
                      TRACE_LAB_GPU_CHECK_FORECAST_ONLY="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    cmd = [*PYTEST, "--collect-only", "-q", *extra]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    said = [ln for ln in done.stdout.splitlines() if ln.startswith("[gpu-check]")]
    forecast = forecast_of(work / "results.jsonl")
    if done.returncode != 0 or forecast is None:
        print("[gpu-check] the forecast could not collect the check's tests:\n" + "\n".join(
            (done.stdout + done.stderr).splitlines()[-15:]), file=sys.stderr)
        return 2
    print("\n".join(said))
    return 1 if forecast["expected_wall_s"] > budget else 0


def xdist_can_keep_order() -> bool:
    """pytest-xdist 3.6+ has ``--no-loadscope-reorder`` (without it, loadgroup orders groups by their size)."""
    try:
        import xdist

        return tuple(int(p) for p in xdist.__version__.split(".")[:2]) >= (3, 6)
    except (ImportError, ValueError, AttributeError):
        return False


def collected_count(log: Path) -> int | None:
    """How many items the run selected (the plugin's ``collected`` line; None if it wrote none)."""
    if not log.exists():
        return None
    lines = [json.loads(ln) for ln in log.read_text(encoding="utf-8").splitlines()]
    counts = [r["collected"] for r in lines if "collected" in r]
    return max(counts) if counts else None


def not_reached(log: Path, items: list[dict]) -> list[str]:
    """The selected items no result line names (a run its budget stopped), in the order pytest collected them,
    as node ids pytest accepts (without loadgroup's ``@group`` suffix)."""
    if not log.exists():
        return []
    lines = [json.loads(ln) for ln in log.read_text(encoding="utf-8").splitlines()]
    selected = next((r["ids"] for r in lines if "ids" in r), [])
    done = {i["item"].split("@")[0] for i in items}
    return [nodeid for nodeid in dict.fromkeys(n.split("@")[0] for n in selected) if nodeid not in done]


def rerun_command(nodeids: list[str]) -> str:
    """The command that runs just ``nodeids`` as a GPU check (its result files are a ``-subset``)."""
    return "python3 dev.py gpu-check --system -- " + " ".join(shlex.quote(n) for n in nodeids)


def rest_command(name: str) -> str:
    """The command that runs what the check kept as ``benchmarks/results/<name>`` left: :func:`rest_of`."""
    return f"python3 dev.py gpu-check --system --rest benchmarks/results/{name}"


def rest_of(path: Path) -> list[str]:
    """The node ids a kept check (its ``.json`` or ``.json.gz``; a bare name is looked up in benchmarks/results)
    did not reach or did not pass (failed, error), in its order; a file that is not a check is a ValueError."""
    if not path.exists() and (RESULTS / path.name).exists():
        path = RESULTS / path.name
    data = _check_data(path) if path.exists() else None
    if data is None or "items" not in data or "run" not in data:
        raise ValueError(f"{path}: not a GPU check's result file (benchmarks/results/<date>-<gpu>-<commit>-gpu-check"
                         f"*.json)")
    bad = [i["item"].split("@")[0] for i in data["items"] if i["status"] in ("failed", "error")]
    return list(dict.fromkeys(bad + list(data["run"].get("not_reached") or [])))


def run_pytest(budget: float, workers: int, keep: Path | None, extra: list[str]) -> tuple[list[dict], dict]:
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    log = work / "results.jsonl"
    env = _plugin_env(work, budget, workers, TRACE_LAB_NOTEBOOK_EXECUTOR="auto",
                      TRACE_LAB_GPU_LOG=str(work / "workloads.jsonl"), PYTHONUNBUFFERED="1")
    if keep is not None:
        env["TRACE_LAB_KEEP_NOTEBOOKS"] = str(keep)
    order = []
    if xdist_can_keep_order():  # the longest work first (the plugin orders by the last checks' seconds)
        (work / "durations.json").write_text(json.dumps(known_durations()), encoding="utf-8")
        env["TRACE_LAB_GPU_CHECK_DURATIONS"] = str(work / "durations.json")
        order = ["--no-loadscope-reorder"]
    cmd = [*PYTEST, "-n", str(workers), "--dist", "loadgroup", *order, "-q", "--durations=0", *extra]
    print("[gpu-check]", " ".join(cmd[2:]), f"(budget {budget:.0f} s)", flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines, timed_out = stream(proc, budget)
    (work / "pytest.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    tail = "\n".join(lines[-40:])
    workloads = [json.loads(ln) for ln in (work / "workloads.jsonl").read_text().splitlines()] \
        if (work / "workloads.jsonl").exists() else []
    items = collect(log)
    return items, {"returncode": proc.returncode, "timed_out": timed_out, "budget_s": budget,
                   "collected": collected_count(log), "forecast": forecast_of(log),
                   "not_reached": not_reached(log, items) if timed_out else [],
                   "wall_s": round(time.monotonic() - start, 1), "workers": workers, "pytest_tail": tail,
                   "workload_figures": workloads}


# a skip that says a package is absent (nvFuser, the notebook stack): the machine, not the test, decided it
MISSING_DEPENDENCY = re.compile(r"not installed|No module named|not importable|nvFuser not usable", re.I)


def verdict(items: list[dict], run: dict) -> tuple[bool, list[str]]:
    why = []
    bad = [i for i in items if i["status"] in ("failed", "error")]
    if bad:
        why.append(f"{len(bad)} item(s) failed")
    finished = sum(1 for i in items if i.get("finished"))
    if run["timed_out"] and not (run.get("collected") and finished >= run["collected"]):
        # (every selected item finished: only pytest's own shutdown ran past the budget, which checks nothing)
        why.append(f"stopped by the time budget ({run['budget_s']:.0f} s): the items not listed did not run")
    missing = [i for i in items if i["status"] == "skipped" and MISSING_DEPENDENCY.search(i.get("reason") or "")]
    if missing:  # a GPU machine set up without nvFuser or the notebook stack checks less than it says
        why.append(f"{len(missing)} item(s) skipped for a missing dependency ({(missing[0].get('reason') or '').strip()[:120]}): "
                   "the check is incomplete (on the device machine, `source .device/setup.sh` first)")
    if not any(i["status"] == "passed" for i in items):
        why.append("no test passed (none collected?)")
    if run["returncode"] not in (0, 1) and not run["timed_out"] and not bad:
        why.append(f"pytest exited {run['returncode']}")
    return not why, why


def slug(gpu: str | None) -> str:
    """The device part of the check's result names (``benchmarks/_results.device_slug``)."""
    from benchmarks._results import device_slug

    return device_slug(gpu)


def is_subset(pytest_args: list[str]) -> bool:
    """Whether pytest arguments choose a part of the check (``-k``, a path, another ``-m``) beyond dev.py's tier."""
    args = list(pytest_args)
    for i in range(len(args) - len(TIER_ARGS) + 1):
        if args[i:i + len(TIER_ARGS)] == TIER_ARGS:
            del args[i:i + len(TIER_ARGS)]
            break
    return bool(args)


def write(env: dict, items: list[dict], run: dict, ok: bool, why: list[str], out_dir: Path,
          subset: bool = False, rest: bool = False) -> Path:
    """The result files; a subset's are named ``...-gpu-check-subset`` (``--rest``: ``-rest-subset``), so that
    :func:`latest_full_check_items` (and the forecasts built on it) never take a part for the whole check."""
    out_dir.mkdir(parents=True, exist_ok=True)
    base = out_dir / (f"{env['date']}-{slug(env['gpu'])}-{env['commit'].replace('+', '-')}-gpu-check"
                      + ("-rest" if rest else "") + ("-subset" if subset or rest else ""))
    counts = {s: sum(1 for i in items if i["status"] == s) for s in ("passed", "failed", "error", "skipped")}
    data = {"ok": ok, "why": why, "environment": env, "counts": counts, "run": run, "items": items}
    base.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    lines = [f"GPU check: {'PASSED' if ok else 'FAILED'}" + (f" ({'; '.join(why)})" if why else ""),
             f"commit {env['commit']}  date {env['date']}  GPU {env['gpu']}  torch {env['torch']} (CUDA {env['cuda']})  "
             f"nvFuser {env['nvfuser'] or 'not importable: ' + str(env['nvfuser_missing'])}  python {env['python']}",
             f"{counts['passed']} passed, {counts['failed']} failed, {counts['error']} errors, {counts['skipped']} skipped "
             f"in {run['wall_s']} s ({run['workers']} pytest workers, budget {run['budget_s']:.0f} s)"
             + (f"; all {run['collected']} selected items finished, pytest's shutdown ran past the budget"
                if run.get("timed_out") and ok else "")
             + (f"; expected about {run['forecast']['expected_wall_s']:.0f} s from the last checks' seconds"
                if run.get("forecast") else ""), ""]
    if run.get("not_reached"):
        lines += [f"== not reached (the budget stopped the run first): {len(run['not_reached'])}",
                  *(f"  {n}" for n in run["not_reached"]),
                  f"  to run just these and the failed ones: {rest_command(base.name + '.json')}",
                  f"  or by name: {rerun_command(run['not_reached'])}", ""]
    for group in ("tests", "workloads", "notebooks"):
        mine = [i for i in items if i["group"] == group]
        lines.append(f"== {group}: {sum(i['status'] == 'passed' for i in mine)}/{len(mine)} passed, "
                     f"{sum(i['seconds'] for i in mine):.0f} s of test time")
        for i in mine:
            lines.append(f"  {i['status'].upper():7s} {i['seconds']:7.1f} s  {i['item']}"
                         + (f"\n           {i['reason']}" if i["reason"] else ""))
        lines.append("")
    base.with_suffix(".txt").write_text("\n".join(lines), encoding="utf-8")
    return base


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for the whole pytest run (default 540)")
    ap.add_argument("--workers", type=int, default=None, help="pytest-xdist workers (default: cores // 2, 2 to 10)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where the result files go (default benchmarks/results)")
    ap.add_argument("--keep-notebooks", action="store_true", help="keep the executed notebooks beside the results")
    ap.add_argument("--forecast", action="store_true",
                    help="only say how long the check would take on --workers against --budget (collects, runs "
                         "nothing; needs no GPU): plan a GPU machine's call before starting one")
    ap.add_argument("--allow-missing", action="store_true",
                    help="run even where a module the check needs does not import (NEEDED); the check then fails "
                         "as incomplete, but says what did pass")
    ap.add_argument("--rest", type=Path, default=None,
                    help="run only what the check kept in this .json did not reach or did not pass (a bare name: "
                         "in benchmarks/results)")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (e.g. -k llama to check a part), after "
                                                   "this script's own options")
    argv = list(sys.argv[1:] if argv is None else argv)
    valued = ("--budget", "--workers", "--out", "--rest")  # this script's options that take a value
    ours = 0  # this script's options come first; everything from the first other argument on is pytest's
    while ours < len(argv):
        a = argv[ours]
        if a in valued:
            ours += 2
        elif a in ("--keep-notebooks", "--forecast", "--allow-missing", "-h", "--help") or a.split("=")[0] in valued:
            ours += 1
        else:
            break
    args = ap.parse_args(argv[:ours])
    args.pytest_args = [a for a in argv[ours:] if a != "--"]  # dev.py puts its tier's arguments after a "--"
    workers = args.workers or max(2, min(10, (os.cpu_count() or 4) // 2))
    if args.rest is not None:
        try:
            rest = rest_of(args.rest)
        except ValueError as e:
            print(f"[gpu-check] --rest: {e}", file=sys.stderr)
            return 2
        if not rest:
            print(f"[gpu-check] --rest: {args.rest.name} left nothing to run (every item it selected passed or "
                  "skipped); nothing ran", file=sys.stderr)
            return 1
        print(f"[gpu-check] --rest: {len(rest)} item(s) {args.rest.name} did not reach or did not pass", flush=True)
        args.pytest_args = rest + args.pytest_args
    if args.forecast:
        return forecast_only(args.budget, workers, args.pytest_args)
    import torch

    if not torch.cuda.is_available():
        print("[gpu-check] no CUDA device here: the GPU check runs on a machine with an NVIDIA GPU "
              "(the CPU suite is `python3 dev.py test`)", file=sys.stderr)
        return 2
    missing = missing_modules(NEEDED)
    if missing and not args.allow_missing:
        print("[gpu-check] stopped before any test: what the check needs does not import here:\n  "
              + "\n  ".join(missing) + "\n(on this project's GPU machine: `source .device/setup.sh` first, and check "
              "that it made its site directory; --allow-missing runs the check anyway)", file=sys.stderr, flush=True)
        return 1
    env = environment()
    print(f"[gpu-check] {env['gpu']}, torch {env['torch']}, nvFuser {env['nvfuser'] or 'not importable'}, "
          f"commit {env['commit']}", flush=True)
    keep = args.out / "gpu-check-notebooks" if args.keep_notebooks else None
    items, run = run_pytest(args.budget, workers, keep, args.pytest_args)
    ok, why = verdict(items, run)
    base = write(env, items, run, ok, why, args.out, subset=is_subset(args.pytest_args), rest=args.rest is not None)
    print(f"[gpu-check] {'PASSED' if ok else 'FAILED: ' + '; '.join(why)} -> {base}.json / .txt", flush=True)
    if run.get("not_reached"):
        print(f"[gpu-check] {len(run['not_reached'])} item(s) not reached; with the result file kept in "
              f"benchmarks/results, to run just these and the failed ones: {rest_command(base.name + '.json')}",
              flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
