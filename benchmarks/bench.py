#!/usr/bin/env python3
"""GPU benchmark of issue 4: eager, torch.compile, trace_lab (nvFuser) and Thunder, ratios from one run.

    python benchmarks/bench.py llama  [--quick] [--layers 2 8]   # first iteration, steady state, peak
    python benchmarks/bench.py adam   [--quick]                  # Adam.step: step time, compile time
    python benchmarks/bench.py memory [--quick]                  # memory_peak_efficient_func: peak
    python benchmarks/bench.py all    [--quick]
    python benchmarks/bench.py report benchmarks/results/*.json  # BENCHMARKS.md table from saved runs

Every configuration runs in its own process (cold caches: Inductor's on-disk cache
is disabled, nvFuser starts empty) under a timeout, so one hang or crash costs
only its row. Steady state is the median of CUDA-event-timed iterations; peak is
``max_memory_allocated`` above what was allocated before the iteration. Results go
to ``benchmarks/results/<date>-<device>-<bench>.json`` and a table with the
issue's targets (met / missed by how much) is printed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
ALL_STRATEGIES = ("none", "dataflow", "horizontal", "memory")


def strategies() -> tuple[str, ...]:
    """The fusion strategies to run: the fusion passes' when present, else 'whole' (one region per
    program, split by the nvFuser executor itself; tests/nvfuser_support.py) as a stand-in."""
    sys.path.insert(0, str(ROOT))
    from trace_lab.passes import PASSES, _load_passes

    _load_passes()
    # "none" leaves no region for nvFuser (the program runs op by op through torch: eager's row)
    return tuple(x for x in ALL_STRATEGIES if x != "none") if "fusion" in PASSES else ("whole",)
DATE = datetime.date.today().isoformat()  # results are filed under the day they were measured


# ------------------------------------------------------------------------------------------
# one configuration (child process)
# ------------------------------------------------------------------------------------------
def _cuda_time(fn, iters: int) -> list[float]:
    import torch

    out = []
    for _ in range(iters):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e))
    return out


_THUNDER_PEERS: list = []


class _ThunderPeer:
    """``thunder.jit(fn)``; where that cannot trace the function (lightning-thunder 0.2.6 fails
    on ``Adam.step``), Thunder through Dynamo (``torch.compile(backend=ThunderCompiler())``),
    the other front end it ships. ``frontend`` says which ran; the failed attempt's seconds
    are kept apart so the first-iteration time is the front end's that ran."""

    def __init__(self, fn):
        import thunder

        self.fn, self.impl, self.frontend, self.failed_seconds = fn, thunder.jit(fn), "thunder.jit", 0.0
        _THUNDER_PEERS.append(self)

    def __call__(self, *args):
        if self.frontend != "thunder.jit" or self.failed_seconds:
            return self.impl(*args)
        t0 = time.perf_counter()
        try:
            return self.impl(*args)
        except Exception as e:  # noqa: BLE001 - any tracing failure: try Thunder's other front end
            import torch
            from thunder.dynamo import ThunderCompiler

            self.failed_seconds = time.perf_counter() - t0
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            self.frontend = f"ThunderCompiler (thunder.jit failed: {type(e).__name__}: {first})"
            self.impl = torch.compile(self.fn, backend=ThunderCompiler())
            return self.impl(*args)


def _compile(system: str, fn, strategy=None, cache=True, extra=None):
    """(compiled callable, stats callable) for one system."""
    import torch

    if system == "eager":
        return fn, lambda: {}
    if system == "torch.compile":
        return torch.compile(fn), lambda: {}
    if system == "thunder":
        return _ThunderPeer(fn), lambda: {}
    if system == "trace_lab":
        import trace_lab

        if strategy == "whole":
            from tests.nvfuser_support import whole_program_region
            from trace_lab.passes import PASSES

            PASSES["fusion"], strategy = whole_program_region, "dataflow"
        jfn = trace_lab.jit(fn, fusion=strategy, executor="nvfuser", fusion_cache=cache, **(extra or {}))

        def stats():
            regions = [r for p in jfn.programs for part in p.parts if part.compiled
                       for r in part.compiled.regions]
            segs = [s for r in regions for s in r["segments"]]
            ex = jfn._executors.get("nvfuser")
            return {"regions": len(regions), "segments": len(segs),
                    "definitions_built": getattr(ex, "misses", None), "definitions_reused": getattr(ex, "hits", None),
                    "fallbacks": sum(1 for s in segs if "fallback" in s),
                    **_graph_stats(jfn),
                    "nvfuser_compile_s": round(sum(s.get("compile_seconds", 0.0) for s in segs), 3),
                    "executor_reasons": jfn.executor_reasons}

        return jfn, stats
    raise ValueError(system)


def _graph_stats(jfn) -> dict:
    """cuda_graphs rows: recordings, replays, un-graphed calls and the graphs' memory pools."""
    graphs = jfn.graphed_runs()
    if not graphs:
        return {}
    return {"graph_recordings": sum(g.recordings for g in graphs), "graph_replays": sum(g.replays for g in graphs),
            "graph_ungraphed_calls": sum(g.ungraphed for g in graphs),
            "graph_pool_mib": round(sum(g.pool_bytes for g in graphs) / 2 ** 20, 2),
            "graph_notes": [n for g in graphs for n in g.notes][:3]}


def _check(res: dict, got, eager, which: str = "first") -> None:
    """Record whether a step matched eager PyTorch (outputs, gradients, updated values): the first step
    (compilation's), then the last timed one (a replay, with cuda_graphs); ``matches_eager`` needs both."""
    from trace_lab import compare

    cmp = compare.compare_runs(got, eager)
    res["matches_eager"] = cmp.ok and res.get("matches_eager", True)
    res[f"matches_eager_{which}_step"] = cmp.ok
    if not cmp.ok:
        res[f"mismatch_{which}_step"] = cmp.problems[:3]


def run_one(cfg: dict) -> dict:
    import torch

    from trace_lab import compare

    os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
    sys.path.insert(0, str(ROOT))
    from examples import workloads

    dev = "cuda"
    res = dict(cfg)
    if cfg["bench"] == "llama":
        model, (x,) = workloads.make_llama(cfg["layers"])(dev, "full")
        compiled, stats = _compile(cfg["system"], model, cfg.get("strategy"), cfg.get("cache", True), cfg.get("extra"))

        def step(keep=False):
            out = compiled(x)
            out.float().sum().backward()
            snap = compare.snapshot(out, model, (x,)) if keep else None
            model.zero_grad(set_to_none=True)
            return snap

        torch.cuda.synchronize()
        t0 = time.perf_counter()
        got = step(keep=True)
        torch.cuda.synchronize()
        res["first_iter_s"] = time.perf_counter() - t0
        ref, (xr,) = workloads.make_llama(cfg["layers"])(dev, "full")  # same seed: eager's step
        out = ref(xr)
        out.float().sum().backward()
        eager = compare.snapshot(out, ref, (xr,))
        _check(res, got, eager)
        del ref, out, got
        for _ in range(2):
            step()
        times = _cuda_time(step, cfg["iters"])
        _check(res, step(keep=True), eager, "last")  # no optimizer: every step computes the same
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        res["peak_mib"] = (torch.cuda.max_memory_allocated() - before) / 2 ** 20
    elif cfg["bench"] == "adam":
        fn, args = workloads.make_adam_step(dev, "full")
        compiled, stats = _compile(cfg["system"], fn, cfg.get("strategy"), cfg.get("cache", True), cfg.get("extra"))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        compiled(*args)
        torch.cuda.synchronize()
        res["first_iter_s"] = time.perf_counter() - t0
        ref_fn, ref_args = workloads.make_adam_step(dev, "full")
        ref_fn(*ref_args)
        _check(res, compare.snapshot(None, fn, args), compare.snapshot(None, ref_fn, ref_args))
        compiled = (lambda c, a: (lambda: c(*a)))(compiled, args)
        compiled()
        times = _cuda_time(compiled, cfg["iters"])
        for _ in range(cfg["iters"] + 1):  # eager takes as many steps as the compiled step did
            ref_fn(*ref_args)
        _check(res, compare.snapshot(None, fn, args), compare.snapshot(None, ref_fn, ref_args), "last")
        res["peak_mib"] = None
    elif cfg["bench"] == "memory":
        fn, (t0s, a) = workloads.make_memory_peak(dev, "full")
        compiled, stats = _compile(cfg["system"], fn, cfg.get("strategy"), cfg.get("cache", True), cfg.get("extra"))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        got = compiled(t0s, a)
        torch.cuda.synchronize()
        res["first_iter_s"] = time.perf_counter() - t0
        _check(res, compare.snapshot(got, fn, (t0s, a)), compare.snapshot(fn(t0s, a), fn, (t0s, a)))
        del got
        times = _cuda_time(lambda: compiled(t0s, a), cfg["iters"])
        _check(res, compare.snapshot(compiled(t0s, a), fn, (t0s, a)), compare.snapshot(fn(t0s, a), fn, (t0s, a)), "last")
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = compiled(t0s, a)
        torch.cuda.synchronize()
        res["peak_mib"] = (torch.cuda.max_memory_allocated() - before) / 2 ** 20
        del out
    else:
        raise ValueError(cfg["bench"])
    res["steady_ms"] = statistics.median(times)
    res["iter_ms"] = [round(t, 4) for t in times]
    if "first_iter_s" in res:
        res["compile_s"] = max(0.0, res["first_iter_s"] - res["steady_ms"] / 1e3)
    res["stats"] = stats()
    if res["stats"].get("graph_pool_mib") is not None and res.get("peak_mib") is not None:
        # a replay allocates nothing: the graphs' pools, reserved when they were recorded, are the memory
        res["peak_mib"] += res["stats"]["graph_pool_mib"]
    if cfg["system"] == "thunder":
        peer = _THUNDER_PEERS[-1]
        res["frontend"] = peer.frontend
        if peer.failed_seconds and "first_iter_s" in res:
            res["first_iter_s"] -= peer.failed_seconds
            res["compile_s"] = max(0.0, res["first_iter_s"] - res["steady_ms"] / 1e3)
    res["ok"] = True
    return res


# ------------------------------------------------------------------------------------------
# the driver (parent process)
# ------------------------------------------------------------------------------------------
# Adam's horizontal region is capped: uncapped, the 200 parameters' 7,000 ops form one region
# whose nvFuser compile ran past 70 s; 350 ops = 10 parameters per region, one signature.
ADAM_HORIZONTAL = {"max_region_ops": 350}


def configs(bench: str, quick: bool, layers: list[int], skip=(), strats=None, cache_off=None,
            graphs=()) -> list[dict]:
    iters = 10 if quick else 30
    systems = [{"system": s} for s in ("eager", "torch.compile", "thunder") if s not in skip]
    tl = []
    strats = tuple(strats or strategies())
    cache_off = strats if cache_off is None else tuple(cache_off)
    for s in strats:
        c = {"system": "trace_lab", "strategy": s, "cache": True}
        if bench == "adam" and s == "horizontal":
            c["extra"] = dict(ADAM_HORIZONTAL)
        tl.append(c)
        if s in graphs:
            tl.append({**c, "extra": {**c.get("extra", {}), "cuda_graphs": True}})
        if s in cache_off and bench != "memory":
            tl.append({**c, "cache": False})
    out = []
    if bench == "llama":
        for n in layers:
            for c in systems + tl:
                if c.get("cache") is False and n != layers[-1]:
                    continue  # the cache-off run where it matters: most layers
                out.append({"bench": "llama", "layers": n, "iters": iters, **c})
    elif bench == "adam":
        out = [{"bench": "adam", "iters": iters * 2, **c} for c in systems + tl if c.get("cache", True)]
    elif bench == "memory":
        out = [{"bench": "memory", "iters": iters, **c} for c in systems + tl if c.get("cache", True)]
    return out


def label(r: dict) -> str:
    if r["system"] == "thunder" and str(r.get("frontend", "thunder.jit")).startswith("ThunderCompiler"):
        return "thunder (ThunderCompiler)"
    if r["system"] != "trace_lab":
        return r["system"]
    return f"trace_lab nvfuser {_variant(r)} cache={'on' if r.get('cache', True) else 'off'}"


def _error_summary(text: str) -> str:
    """The exception line of a child's traceback (the last ``SomethingError: ...`` line), else its last lines."""
    import re

    lines = text.strip().splitlines()
    exc = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b", ln)]
    return (exc[-1] if exc else " | ".join(lines[-3:]))[-400:]


def run_all(bench: str, quick: bool, layers: list[int], timeout: float, out_dir: Path, skip=(), strats=None,
            cache_off=None, graphs=()) -> dict:
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no-gpu"
    rows = []
    for cfg in configs(bench, quick, layers, skip, strats, cache_off, graphs):
        started = time.perf_counter()
        env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1", PYTHONUNBUFFERED="1")
        try:
            p = subprocess.run([sys.executable, __file__, "_one", json.dumps(cfg)], capture_output=True, text=True,
                               timeout=timeout, env=env, cwd=ROOT)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            if line:
                r = json.loads(line[-1][7:])
            else:
                r = dict(cfg, ok=False, error=_error_summary(p.stderr or p.stdout))
        except subprocess.TimeoutExpired:
            r = dict(cfg, ok=False, error=f"timed out after {timeout:.0f} s")
        r["wall_s"] = round(time.perf_counter() - started, 1)
        rows.append(r)
        _save(bench, device, quick, rows, out_dir, final=False)
        print(f"  {bench:6s} {label(r):42s} {r.get('layers', ''):>2} "
              + (f"first {r['first_iter_s']:.2f} s  steady {r['steady_ms']:.3f} ms  peak {r.get('peak_mib') or 0:.2f} MiB"
                 if r.get("ok") else f"FAILED: {r.get('error')}"), flush=True)
    return _save(bench, device, quick, rows, out_dir, final=True)


def _save(bench, device, quick, rows, out_dir: Path, final: bool) -> dict:
    """Write the JSON after every row (a killed run keeps what it measured); print the table at the end."""
    import torch

    result = {"bench": bench, "date": DATE, "measured_at": datetime.datetime.now().isoformat(timespec="seconds"),
              "device": device, "torch": torch.__version__, "quick": quick, "complete": final, "rows": rows}
    result["targets"] = targets(bench, rows)
    slug = device.lower().replace("nvidia ", "").split()[0] if device != "no-gpu" else "cpu"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{DATE}-{slug}-{bench}.json"
    path.write_text(json.dumps(result, indent=1))
    if final:
        print(format_table(result))
        print(f"saved {path}")
    return result


def _find(rows, variant=None, **kw):
    for r in rows:
        if r.get("ok") and all(r.get(k) == v for k, v in kw.items()) and (variant is None or _variant(r) == variant):
            return r
    return None


def _variant(r: dict) -> str:
    """A trace_lab row's strategy plus its extra options, e.g. 'dataflow cuda graphs'."""
    extra = "".join(" cuda graphs" if k == "cuda_graphs" else f" {k}={v}" for k, v in (r.get("extra") or {}).items())
    return f"{r['strategy']}{extra}"


def _target(name, value, limit, unit, better="lower", note=""):
    if value is None or limit is None:
        return {"target": name, "met": None, "detail": "not measured" + (f" ({note})" if note else "")}
    met = value <= limit if better == "lower" else value >= limit
    return {"target": name, "met": met, "value": value, "limit": limit,
            "detail": f"{value:.3g}{unit} vs limit {limit:.3g}{unit}"
            + ("" if met else f" (missed by {value / limit:.2f}x)")}


def targets(bench: str, rows: list[dict]) -> list[dict]:
    out = []
    STRATEGIES = list(dict.fromkeys(r["strategy"] for r in rows if r["system"] == "trace_lab"))
    VARIANTS = list(dict.fromkeys(_variant(r) for r in rows if r["system"] == "trace_lab"))
    if bench == "llama":
        ls = sorted({r["layers"] for r in rows})
        lo, hi = (ls[0], ls[-1]) if ls else (2, 8)
        tc_hi = _find(rows, system="torch.compile", layers=hi)
        eager_hi = _find(rows, system="eager", layers=hi)
        for s in VARIANTS:
            a, b = _find(rows, s, system="trace_lab", cache=True, layers=lo), \
                _find(rows, s, system="trace_lab", cache=True, layers=hi)
            out.append(_target(f"{s}: first iter {hi}L <= 1.3x {lo}L", b and b["first_iter_s"],
                               a and 1.3 * a["first_iter_s"], " s"))
            out.append(_target(f"{s}: first iter {hi}L < torch.compile's", b and b["first_iter_s"],
                               tc_hi and tc_hi["first_iter_s"], " s"))
            out.append(_target(f"{s}: steady {hi}L <= 1.1x torch.compile", b and b["steady_ms"],
                               tc_hi and 1.1 * tc_hi["steady_ms"], " ms"))
            out.append(_target(f"{s}: steady {hi}L < eager", b and b["steady_ms"], eager_hi and eager_hi["steady_ms"],
                               " ms"))
    elif bench == "adam":
        tc = _find(rows, system="torch.compile")
        for s in VARIANTS:
            r = _find(rows, s, system="trace_lab", cache=True)
            out.append(_target(f"{s}: step <= torch.compile's", r and r["steady_ms"], tc and tc["steady_ms"], " ms"))
            out.append(_target(f"{s}: compile <= 0.1x torch.compile's", r and r["compile_s"],
                               tc and 0.1 * tc["compile_s"], " s"))
    elif bench == "memory":
        eager = _find(rows, system="eager")
        best = "memory" if "memory" in STRATEGIES else (STRATEGIES or ["memory"])[0]
        r = _find(rows, best, system="trace_lab", cache=True)
        out.append(_target(f"{best} strategy peak == eager's", r and r["peak_mib"], eager and eager["peak_mib"], " MiB"))
    return out


def format_table(result: dict) -> str:
    rows = result["rows"]
    bench = result["bench"]
    lines = [f"## {bench} - {result['device']}, torch {result['torch']}, measured {result['measured_at']}"
             + (" (quick)" if result.get("quick") else ""), ""]
    ref = {}
    for r in rows:
        if r.get("ok") and r["system"] == "eager":
            ref[r.get("layers")] = r
    lines.append("| config | layers | first iter (s) | steady (ms) | vs eager | peak (MiB) | definitions built/reused "
                 "| matches eager |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for r in rows:
        st = r.get("stats") or {}
        defs = f"{st.get('definitions_built')}/{st.get('definitions_reused')}" if st.get("definitions_built") is not None else ""
        if not r.get("ok"):
            lines.append(f"| {label(r)} | {r.get('layers', '')} | failed: {' '.join(r.get('error', '').replace('|', '/').split())[:90]} | | | | | |")
            continue
        e = ref.get(r.get("layers"))
        ratio = f"{r['steady_ms'] / e['steady_ms']:.2f}x" if e else ""
        peak = f"{r['peak_mib']:.2f}" if r.get("peak_mib") is not None else ""
        match = {True: "yes", False: "**NO**", None: "not checked"}[r.get("matches_eager")]
        lines.append(f"| {label(r)} | {r.get('layers', '')} | {r['first_iter_s']:.2f} | {r['steady_ms']:.3f} | {ratio} "
                     f"| {peak} | {defs} | {match} |")
    lines.append("")
    lines.append("| target | met | detail |")
    lines.append("|---|---|---|")
    for t in result["targets"]:
        met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
        lines.append(f"| {t['target']} | {met} | {t['detail']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bench", choices=["llama", "adam", "memory", "all", "report", "_one"])
    ap.add_argument("rest", nargs="*")
    ap.add_argument("--quick", action="store_true", help="fewer iterations; cache-off runs only where they matter")
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per configuration")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--skip", nargs="*", default=[], help="systems to leave out (e.g. thunder)")
    ap.add_argument("--strategies", nargs="*", default=None, help="trace_lab fusion strategies (default: all that fuse)")
    ap.add_argument("--cuda-graphs", nargs="*", default=[], metavar="STRATEGY",
                    help="strategies also run with cuda_graphs=True (cache on); their peak adds the graphs' pools")
    ap.add_argument("--cache-off", nargs="*", default=None,
                    help="strategies also run with the fusion cache off (default: all; llama: at the most layers)")
    args = ap.parse_args(argv)
    if args.bench == "_one":
        r = run_one(json.loads(args.rest[0]))
        print("RESULT " + json.dumps(r), flush=True)
        return 0
    if args.bench == "report":
        for p in args.rest:
            print(format_table(json.loads(Path(p).read_text())))
            print()
        return 0
    for b in (["memory", "adam", "llama"] if args.bench == "all" else [args.bench]):
        run_all(b, args.quick, args.layers, args.timeout, args.out, args.skip, args.strategies, args.cache_off,
                args.cuda_graphs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
