#!/usr/bin/env python3
"""CPU guard (issue 14, item 6): trace_lab's runtime overhead as a ratio to eager PyTorch, same programs, one run.

    python benchmarks/overhead_guard.py                     # measure, print, write --out (JSON)
    python benchmarks/overhead_guard.py --check             # ... and fail (exit 1) on a gross regression
    python benchmarks/overhead_guard.py --save-baseline     # ... and save benchmarks/overhead_baseline.json

Programs (small CPU sizes): the small llama stack's forward + backward, an elementwise chain of
``--chain-ops`` ops (3,000) on a small tensor, and ``Adam.step`` over ``--adam-params`` (24) parameters.
Each runs as eager PyTorch and as ``trace_lab.run.jit`` with the default options and with
``fusion='none', executor='eager'``; after warm-up (compilation), the three are called in turn (rotating
order) ``--calls`` times, each sample the fastest of ``--inner`` (3) calls in a row (a call that the
scheduler preempted says nothing about the runtime); the ratio is the median over rounds of the
jitted call's time over the eager call's of the same round. Threads are pinned (``--threads``, default 1) so that a 2-core machine measures the
programs, not thread contention.

``--check`` fails a ratio only when it exceeds ``--factor`` (1.5) times the saved baseline's ratio for the
same program and variant, or the absolute ``--ceiling`` (50x eager); the threshold is relative, so a faster
runtime passes and its baseline should then be re-saved. A failing program is measured again
(``--retries``) before it counts, since one noisy stretch on a shared machine should not fail CI.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "benchmarks" / "overhead_baseline.json"
VARIANTS = {"default": {}, "none-eager": {"fusion": "none", "executor": "eager"}}


def chain_fn(n_ops: int):
    """An elementwise chain of ``n_ops`` ops (mul, add, sin in turn): per-op runtime cost, nothing else."""
    import torch

    def chain(x):
        for i in range(n_ops):
            k = i % 3
            x = x * 1.0001 if k == 0 else (x + 0.0001 if k == 1 else torch.sin(x))
        return x

    return chain


def programs(args) -> dict:
    """name -> (make() -> step callable, description); every make() builds a fresh, identically seeded instance."""
    import torch

    from examples import workloads

    def llama():
        model, (x,) = workloads.make_llama(args.layers)("cpu", "small")

        def wrap(compile_):
            f = compile_(model)

            def step():
                out = f(x)
                out.float().sum().backward()
                model.zero_grad(set_to_none=True)
            return step
        return wrap

    def chain():
        fn, x = chain_fn(args.chain_ops), torch.randn(args.chain_numel)
        return lambda compile_: (lambda f: (lambda: f(x)))(compile_(fn))

    def adam():
        step, _ = workloads.make_adam_step("cpu", "small", n_params=args.adam_params, numel=args.adam_numel)
        return lambda compile_: compile_(step)

    return {
        "llama": (llama, f"llama {args.layers} layers small (d=64, T=16, B=2), forward + backward"),
        "chain": (chain, f"elementwise chain of {args.chain_ops} ops on f32[{args.chain_numel}]"),
        "adam": (adam, f"Adam.step over {args.adam_params} x {args.adam_numel} f32 (foreach=False)"),
    }


def measure(make, args, say) -> dict:
    """Per-call medians (ms) of eager and each jitted variant, calls interleaved; ratios to eager."""
    import trace_lab

    calls = {"eager": make()(lambda f: f)}
    compile_s = {}
    for v, opts in VARIANTS.items():
        t0 = time.perf_counter()
        calls[v] = make()(lambda f, o=opts: trace_lab.jit(f, **o))
        calls[v]()  # the first call compiles
        compile_s[v] = round(time.perf_counter() - t0, 2)
    for c in calls.values():  # warm-up
        for _ in range(args.warmup):
            c()
    times = {k: [] for k in calls}
    names = list(calls)
    for i in range(args.calls):
        for k in names[i % len(names):] + names[:i % len(names)]:  # rotate: no variant always runs first
            best = float("inf")
            for _ in range(args.inner):  # a sample is the fastest of a few calls: a preempted call is noise
                t0 = time.perf_counter()
                calls[k]()
                best = min(best, time.perf_counter() - t0)
            times[k].append(best * 1e3)
    med = {k: statistics.median(v) for k, v in times.items()}
    # the ratio is the median of each round's ratio: calls of one round share the machine's load of the moment
    ratios = {v: statistics.median(a / b for a, b in zip(times[v], times["eager"])) for v in VARIANTS}
    out = {"ms": {k: round(v, 4) for k, v in med.items()},
           "ratios": {v: round(r, 3) for v, r in ratios.items()},
           "spread_ms": {k: [round(min(v), 4), round(max(v), 4)] for k, v in times.items()},
           "compile_s": compile_s}
    say("  " + "  ".join(f"{k} {med[k]:.3f} ms" for k in names) + "  ->  "
        + "  ".join(f"{v} {r:.2f}x" for v, r in out["ratios"].items()))
    return out


def config(args) -> dict:
    return {"layers": args.layers, "chain_ops": args.chain_ops, "chain_numel": args.chain_numel,
            "adam_params": args.adam_params, "adam_numel": args.adam_numel, "threads": args.threads}


def check(result: dict, baseline: dict | None, args) -> list[str]:
    """Failures: ratio > factor x baseline ratio (same config only), or > the absolute ceiling."""
    fails = []
    for prog, r in result["programs"].items():
        for v, ratio in r["ratios"].items():
            base = (baseline or {}).get("programs", {}).get(prog, {}).get("ratios", {}).get(v)
            limit = min(args.ceiling, args.factor * base) if base else args.ceiling
            r.setdefault("limits", {})[v] = round(limit, 3)
            if ratio > limit:
                fails.append(f"{prog} {v}: {ratio:.2f}x eager > limit {limit:.2f}x"
                             + (f" ({args.factor}x baseline {base:.2f}x)" if base else " (absolute ceiling)"))
    return fails


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", nargs="+", default=["llama", "chain", "adam"])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--chain-ops", type=int, default=3000)
    ap.add_argument("--chain-numel", type=int, default=64)
    ap.add_argument("--adam-params", type=int, default=24)
    ap.add_argument("--adam-numel", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=15, help="timed calls per variant (interleaved)")
    ap.add_argument("--inner", type=int, default=3, help="calls per sample; the sample is their fastest")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--out", type=Path, default=None, help="JSON with the ratios (default: print only)")
    ap.add_argument("--baseline", type=Path, default=BASELINE)
    ap.add_argument("--save-baseline", action="store_true", help="write the result as the baseline")
    ap.add_argument("--check", action="store_true", help="exit 1 on a gross regression against the baseline")
    ap.add_argument("--factor", type=float, default=1.5, help="fail above this many times the baseline ratio")
    ap.add_argument("--ceiling", type=float, default=50.0, help="fail above this ratio whatever the baseline")
    ap.add_argument("--retries", type=int, default=1, help="re-measure a failing program this many times")
    args = ap.parse_args(argv)

    os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch

    from _results import environment, git_commit

    torch.set_num_threads(args.threads)

    def say(msg):
        print(msg, flush=True)

    started = time.perf_counter()
    progs = programs(args)
    result = {"kind": "overhead_guard", "config": config(args), **git_commit(str(ROOT)), "env": environment(False),
              "programs": {}}
    for name in args.programs:
        make, desc = progs[name]
        say(f"{name}: {desc}")
        result["programs"][name] = {"description": desc, **measure(make, args, say)}
    saved = json.loads(args.baseline.read_text()).get("baselines", []) if args.baseline.exists() else []
    # one baseline per configuration (sizes): the CI test runs smaller sizes than the script's defaults
    baseline = next((b for b in saved if b.get("config") == result["config"]), None)
    fails = check(result, baseline, args)
    for attempt in range(args.retries):
        if not fails:
            break
        again = sorted({f.split()[0] for f in fails})
        say(f"re-measuring {', '.join(again)} (attempt {attempt + 2}): a noisy stretch should not fail the guard")
        for name in again:
            make, desc = progs[name]
            new = measure(make, args, say)
            old = result["programs"][name]
            if max(new["ratios"].values()) < max(old["ratios"].values()):
                result["programs"][name] = {"description": desc, **new, "remeasured": True}
        fails = check(result, baseline, args)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["baseline"] = None if baseline is None else {
        "file": str(args.baseline.relative_to(ROOT) if args.baseline.is_relative_to(ROOT) else args.baseline),
        "commit": baseline.get("commit"), "dirty": baseline.get("dirty")}
    result["failures"] = fails
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        say(f"wrote {args.out}")
    if args.save_baseline:
        keep = {k: v for k, v in result.items() if k not in ("baseline", "failures")}
        saved = [b for b in saved if b.get("config") != result["config"]] + [keep]
        args.baseline.write_text(json.dumps({
            "about": "benchmarks/overhead_guard.py --save-baseline: ratios to eager per configuration (sizes); "
                     "--check fails a ratio above --factor x the baseline's for the same configuration",
            "baselines": saved}, indent=1) + "\n")
        say(f"saved the baseline {args.baseline} ({len(saved)} configurations)")
    if baseline is None:
        say("no baseline for these sizes: only the absolute ceiling was checked")
    say(f"{result['seconds']:.0f} s; " + ("FAILED: " + "; ".join(fails) if fails else "no gross regression"))
    return 1 if (fails and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
