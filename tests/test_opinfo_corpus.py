"""The OpInfo corpus's fixed CI subset (benchmarks/opinfo_corpus.py, issue 15).

One sample of ~150 ops chosen to cover every category of PyTorch's op_db (pointwise, reductions,
views, indexing, linalg, conv, normalization, creation, pooling, losses, sorts, FFTs, random ops),
f32 plus a bf16 slice, forward and backward, under every fusion strategy on the eager executor,
and a smaller slice through Inductor. Each is compared with eager PyTorch (assert_close at the
dtype's defaults widened to the OpInfo's overrides; random ops on shapes/dtypes) and its
predicted peak with the profiler's measurement (1% + 1 KiB).

Two sizes of it: the CI tier (``dev.py test``) sweeps a slice, every CI_EVERY-th entry of the eager subset with
each category and both dtypes kept (:func:`ci_slice`), eager executor only, in one worker process; ``--full`` (and the GPU
check) sweeps the whole subset. The same checks read either sweep (the ``subset_rows`` fixture's two params).

Honest by construction: a failure not in tests/opinfo_known_failures.json fails the test, and so
does a listed failure that passes now (strict xfail), a listed entry that no longer exists in
the subset, or a sample that times out or crashes its worker.

The GPU part (``--device cuda``, nvFuser configs, per-device table sections) is checked here
without a GPU where it can be: the clear error without CUDA, the configurations' names against
trace_lab's options, and the table keeping the CPU and GPU sections apart.
"""
from __future__ import annotations

import json
import os
import time

import pytest

from benchmarks import opinfo_corpus as corpus

KNOWN = os.path.join(os.path.dirname(__file__), "opinfo_known_failures.json")
JOBS = 2
TIMEOUT = 150


def _known() -> dict:
    with open(KNOWN) as f:
        data = json.load(f)
    for section in ("correctness", "memory"):
        for key, why in data[section].items():
            assert isinstance(why, str) and len(why) > 20, f"{section} entry {key!r} needs a reason"
    return data


CI_EVERY = 36  # the CI tier's slice: every 36th eager entry (+ any category or dtype it misses), no Inductor one


def tasks_of(eager: list, inductor: list) -> list:
    """corpus.subset_tasks() for the given entries (the whole subset gives exactly subset_tasks())."""
    configs = [f"{f}/eager" for f in corpus.FUSIONS]
    return ([(k, dt, list(idx), configs, False) for k, dt, idx in eager]
            + [(k, dt, list(idx), list(corpus.SUBSET_INDUCTOR_CONFIGS), False) for k, dt, idx in inductor])


def ci_slice(ops: dict) -> tuple[list, list]:
    """(eager entries, Inductor entries) of the CI tier's sweep: every CI_EVERY-th entry of SUBSET_EAGER, then the
    first entry of each category (corpus.category) and each dtype the slice misses; none of SUBSET_INDUCTOR (the
    Inductor executor's CI checks are tests/test_inductor_executor.py's)."""
    eager = corpus.SUBSET_EAGER[::CI_EVERY]
    for entry in corpus.SUBSET_EAGER:
        cats = {corpus.category(ops[k]) for k, _, _ in eager}
        if corpus.category(ops[entry[0]]) not in cats or entry[1] not in {dt for _, dt, _ in eager}:
            eager.append(entry)
    return eager, []


@pytest.fixture(scope="module", params=[
    "ci", pytest.param("full", marks=[pytest.mark.full, pytest.mark.xdist_group("full-opinfo-subset")])])
def subset_tasks(request):
    """The tasks this tier sweeps: the CI slice, or (``full``: --full and the GPU check) the whole subset."""
    ops = corpus.load_ops()
    assert {k for k, _, _ in corpus.SUBSET_EAGER + corpus.SUBSET_INDUCTOR} <= set(ops)
    return corpus.subset_tasks() if request.param == "full" else tasks_of(*ci_slice(ops))


@pytest.fixture(scope="module")
def subset_rows(subset_tasks):
    started = time.perf_counter()
    jobs = JOBS if subset_tasks == corpus.subset_tasks() else 1  # the CI slice: one worker process starts, not two
    rows = corpus.sweep(subset_tasks, jobs=jobs, timeout=TIMEOUT, progress=lambda s: None)
    return rows, time.perf_counter() - started


def _id(row, config) -> str:
    return f"{row['op']}|{row['dtype']}|{row['sample']}|{config}"


def _swept(known: dict, tasks: list) -> dict:
    """The entries of ``known`` about what ``tasks`` sweep: all of them for the whole subset; for the CI slice those
    of its (op, dtype)s (a wildcard 'op|*': of its ops), so that an entry about an op outside the slice is not stale."""
    if tasks == corpus.subset_tasks():
        return known
    pairs = {(t[0], t[1]) for t in tasks}
    return {k: v for k, v in known.items()
            if (k.split("|")[0] in {p[0] for p in pairs} if k.endswith("|*") else tuple(k.split("|")[:2]) in pairs)}


@pytest.mark.slow
def test_subset_covers_every_category():
    ops = corpus.load_ops()
    covered = {corpus.category(ops[k]) for k, _, _ in corpus.SUBSET_EAGER}
    every = {corpus.category(o) for o in ops.values()}
    assert every <= covered, f"categories without a subset op: {sorted(every - covered)}"
    assert {dt for _, dt, _ in corpus.SUBSET_EAGER} == {"float32", "bfloat16"}
    assert len(corpus.SUBSET_EAGER) >= 100
    # the CI tier's slice: every category and both dtypes too, a part of the subset, and the same tasks' shape
    eager, inductor = ci_slice(ops)
    assert {corpus.category(ops[k]) for k, _, _ in eager} == covered
    assert {dt for _, dt, _ in eager} == {"float32", "bfloat16"}
    assert set(eager) < set(corpus.SUBSET_EAGER) and len(eager) >= len(corpus.SUBSET_EAGER) // CI_EVERY
    assert inductor == []
    assert tasks_of(corpus.SUBSET_EAGER, corpus.SUBSET_INDUCTOR) == corpus.subset_tasks()


@pytest.mark.slow
def test_every_subset_sample_ran(subset_rows, subset_tasks):
    rows, _ = subset_rows
    wanted = {(k, dt, i) for k, dt, idx, *_ in subset_tasks for i in idx}
    got = {(r["op"], r["dtype"], r["sample"]) for r in rows}
    broken = [f"{r['op']} {r['dtype']} s{r['sample']}: " + ", ".join(
        f"{k}={r[k]}" for k in ("timeout", "crash", "worker_error", "sample_error", "eager_error") if k in r)
        for r in rows if any(k in r for k in ("timeout", "crash", "worker_error", "sample_error", "eager_error"))]
    assert not broken, "samples that did not run:\n" + "\n".join(broken)
    assert wanted <= got, f"missing: {sorted(wanted - got)[:10]}"
    # every sample ran every config it was given
    for r in rows:
        assert r["configs"], f"{r['op']} {r['dtype']} s{r['sample']} ran no configuration"


@pytest.mark.slow
def test_subset_correctness_strict_known_failures(subset_rows, subset_tasks):
    rows, _ = subset_rows
    known = _swept(_known()["correctness"], subset_tasks)
    results = {_id(r, c): res for r in rows for c, res in r["configs"].items()}
    unexpected = [f"{k}: [{res['cause']}] {res.get('first_line', '')}" for k, res in sorted(results.items())
                  if res["status"] != "pass" and k not in known]
    now_passing = [k for k in known if k in results and results[k]["status"] == "pass"]
    stale = [k for k in known if k not in results]
    assert not unexpected, f"{len(unexpected)} subset runs differ from eager or raise:\n" + "\n".join(unexpected)
    assert not now_passing, ("listed known failures pass now; remove them from tests/opinfo_known_failures.json:\n"
                             + "\n".join(now_passing))
    assert not stale, "known failures that the subset no longer runs:\n" + "\n".join(stale)


@pytest.mark.slow
def test_subset_predicted_memory_equals_measured(subset_rows, subset_tasks):
    rows, _ = subset_rows
    known = _swept(_known()["memory"], subset_tasks)
    bad, now_ok = [], []
    for r in rows:
        for c, res in r["configs"].items():
            if res["status"] != "pass":
                continue  # a failed run's memory is not judged (its failure is reported above)
            for m in res.get("memory", []):
                assert m["measured"] is not None, f"{_id(r, c)}: memory not measured"
            mem_ok = res.get("memory_ok")
            key = _id(r, c)
            listed = key in known or f"{r['op']}|*" in known
            if mem_ok is False and not listed:
                worst = [f"{m['kind']} predicted {m['predicted']} measured {m['measured']}"
                         for m in res["memory"] if not m["ok"]]
                bad.append(f"{key}: {'; '.join(worst)}")
            if mem_ok and key in known:
                now_ok.append(key)
    # a wildcard entry ('op|*') must still disagree somewhere in the subset, or it is stale
    disagreeing_ops = {r["op"] for r in rows for res in r["configs"].values() if res.get("memory_ok") is False}
    now_ok += [k for k in known if k.endswith("|*") and k[:-2] not in disagreeing_ops]
    assert not bad, (f"predicted != measured (beyond {corpus.MEMORY_REL:.0%} + {corpus.MEMORY_ABS} B) on "
                     f"{len(bad)} runs:\n" + "\n".join(bad))
    assert not now_ok, "listed memory disagreements agree now; remove them:\n" + "\n".join(now_ok)


@pytest.mark.slow
def test_subset_time(subset_rows):
    rows, seconds = subset_rows
    print(f"OpInfo subset sweep ({len(rows)} samples): {seconds:.0f} s")


# ---- the GPU part, without a GPU -----------------------------------------------------------------
def test_device_cuda_without_cuda_is_one_clear_error(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(corpus, "load_ops", lambda: pytest.fail("op_db loaded before the device check"))
    with pytest.raises(SystemExit) as exc:
        corpus.main(["--device", "cuda", "--ops", "add", "--no-table"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "--device cuda: torch.cuda.is_available() is False" in err and "--device cpu" in err


def test_nvfuser_configs_name_real_options(capsys):
    import trace_lab
    from trace_lab.executors.base import EXECUTORS, UNAVAILABLE, _load_executors
    from trace_lab.options import EXECUTOR_CHOICES, FUSION_STRATEGIES

    assert corpus.DEFAULT_CONFIGS["cuda"] == corpus.NVFUSER_CONFIGS
    assert [c.split("/") for c in corpus.NVFUSER_CONFIGS] == [
        ["none", "nvfuser"], ["dataflow", "nvfuser"], ["horizontal", "nvfuser"], ["memory", "nvfuser"]]
    assert not any(c.endswith("/nvfuser") for c in corpus.DEFAULT_CONFIGS["cpu"])
    _load_executors()
    for config in corpus.ALL_CONFIGS:
        fusion, executor = config.split("/")
        assert fusion in FUSION_STRATEGIES and executor in EXECUTOR_CHOICES, config
        assert executor in EXECUTORS or executor in UNAVAILABLE, config  # an executor module exists
        trace_lab.jit(lambda x: x, fusion=fusion, executor=executor)  # accepted by trace_lab's own validation
    for argv, msg in ((["--configs", "none/nvfuser"], "runs on CUDA only"),
                      (["--device", "cuda", "--configs", "none/nvfusr"], "unknown configs none/nvfusr")):
        with pytest.raises(SystemExit):
            corpus.main(argv + ["--no-table"])
        assert msg in capsys.readouterr().err


def _row(device, op, config, status, first_line=""):
    res = {"config": config, "status": status, "memory": [], "memory_ok": None}
    if status != "pass":
        res.update(cause="error: RuntimeError", first_line=first_line)
    return {"op": op, "device": device, "dtype": "float32", "sample": 0, "category": "pointwise unary",
            "configs": {config: res}, "aot_eager": "ok"}


def _meta(device, **extra):
    return {"command": f"python -m benchmarks.opinfo_corpus --device {device}", "date": "2026-11-24",
            "commit": "abc1234", "torch": "2.11.0", "jobs": 2, "seconds": 10.0, "coverage": f"{device} runs",
            "json": f"{device}.json", **extra}


def _section(text, device):
    begin, end = corpus._section_marks(device)
    return text[text.index(begin):text.index(end)]


def test_table_keeps_cpu_and_gpu_sections_apart(tmp_path):
    table = str(tmp_path / "CORPUS.md")
    cpu_rows = [_row("cpu", "abs", "none/eager", "pass"),
                _row("cpu", "exp", "none/eager", "fail", "KeyError: cpu-only failure")]
    gpu_rows = [_row("cuda", "abs", "dataflow/nvfuser", "pass"), _row("cuda", "exp", "dataflow/nvfuser", "pass"),
                _row("cuda", "sin", "dataflow/nvfuser", "fail", "RuntimeError: nvFuser rejected the region")]
    corpus.write_table({"cpu": (cpu_rows, corpus.summarize(cpu_rows), _meta("cpu"))}, table)
    cpu_before = _section(open(table).read(), "cpu")
    corpus.write_table({"cuda": (gpu_rows, corpus.summarize(gpu_rows),
                                 _meta("cuda", device_name="NVIDIA H100 80GB HBM3"))}, table)
    text = open(table).read()
    cpu, gpu = _section(text, "cpu"), _section(text, "cuda")
    assert cpu == cpu_before  # the GPU run did not touch the CPU section
    assert text.index(cpu) < text.index(gpu)
    assert "## GPU: NVIDIA H100 80GB HBM3 (`cuda`)" in gpu and "## CPU" in cpu
    assert "| dataflow/nvfuser | 66.7% (2/3) | 66.7% (2/3) |" in gpu
    assert "| none/eager | 50.0% (1/2) | 50.0% (1/2) |" in cpu
    assert "`sin` float32 s0 `dataflow/nvfuser` [error: RuntimeError]: RuntimeError: nvFuser rejected" in gpu
    assert "nvfuser" not in cpu and "cpu-only failure" not in gpu and "cpu-only failure" in cpu
    # a CPU re-render leaves the GPU section as it was
    corpus.write_table({"cpu": (cpu_rows[:1], corpus.summarize(cpu_rows[:1]), _meta("cpu"))}, table)
    again = open(table).read()
    assert _section(again, "cuda") == gpu and "cpu-only failure" not in _section(again, "cpu")


def test_merge_gives_each_device_its_section(tmp_path):
    paths = []
    for device, rows in (("cpu", [_row(None, "abs", "none/eager", "pass")]),
                         ("cuda", [_row(None, "abs", "none/nvfuser", "fail", "RuntimeError: boom")])):
        for r in rows:
            del r["device"]  # older files carry the device only at the top
        paths.append(str(tmp_path / f"{device}.json"))
        with open(paths[-1], "w") as f:
            json.dump({**_meta(device), "device": device, "rows": rows}, f)
    table = str(tmp_path / "CORPUS.md")
    assert corpus.main(["--merge", *paths, "--table", table]) == 0
    text = open(table).read()
    assert "| none/eager | 100.0% (1/1) |" in _section(text, "cpu")
    assert "| none/nvfuser | 0.0% (0/1) |" in _section(text, "cuda")
    with pytest.raises(SystemExit, match="several devices"):
        corpus.main(["--merge", *paths, "--out", str(tmp_path / "both.json"), "--no-table"])


def test_merge_keeps_a_timeout_that_another_runs_configurations_do_not_cover(tmp_path):
    """An eager-configs run passed the sample; an Inductor-configs run timed out on it (a row without results):
    merged, the op fails with the timeout. A later re-run of the Inductor configs that passed clears it."""
    eager = [_row("cpu", "gather", "none/eager", "pass")]
    timed_out = [{"op": "gather", "device": "cpu", "dtype": "float32", "sample": 0, "timeout": 120.0, "category": None}]
    rerun = [_row("cpu", "gather", "none/inductor", "pass")]
    paths = {}
    for name, rows, configs in (("eager", eager, "none/eager"), ("inductor", timed_out, "none/inductor"),
                                ("rerun", rerun, "none/inductor")):
        paths[name] = str(tmp_path / f"{name}.json")
        meta = _meta("cpu", command=f"python -m benchmarks.opinfo_corpus --device cpu --configs {configs} --jobs 2")
        with open(paths[name], "w") as f:
            json.dump({**meta, "device": "cpu", "rows": rows}, f)
    out = str(tmp_path / "merged.json")
    assert corpus.main(["--merge", paths["eager"], paths["inductor"], "--out", out, "--no-table"]) == 0
    summary = json.load(open(out))["summary"]
    assert summary["ops_pass_everywhere"] == 0 and summary["failure_causes"] == {"timeout": ["gather"]}, summary
    assert corpus.main(["--merge", paths["eager"], paths["inductor"], paths["rerun"], "--out", out, "--no-table"]) == 0
    summary = json.load(open(out))["summary"]
    assert summary["ops_pass_everywhere"] == 1 and summary["failure_causes"] == {}, summary
