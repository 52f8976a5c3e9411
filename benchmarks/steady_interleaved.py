"""Steady state of the llama bench's configurations side by side in ONE process, their steps interleaved.

bench.py times each configuration in its own fresh process, which its first-iteration and peak figures need. On a
host-bound step those processes' medians drift with the host: on 2026-11-27 (H100, 91de505) torch.compile's llama 8L
median was 8.95, 10.10 and 11.64 ms in three runs within one hour, layers + Inductor 15.87, 12.36 and 11.95 ms, and
a 1.1x target read met or missed with no code changed. Here every configuration is compiled in one process (no
first-iteration figure: later compiles find the process's caches warm), its first and last steps are checked against
eager PyTorch (outputs, gradients, parameters), and then ``--rounds`` rounds time one step of each configuration in
turn (CUDA events and host time; the order rotates each round), so the host's drift falls on all of them alike. The
table gives each configuration's median and range, its ratio to torch.compile's and eager's medians, and one profiled
step's kernel count and device time.

    source .device/setup.sh && python3 benchmarks/steady_interleaved.py                 # GPU machine, ~3 min
    python3 benchmarks/steady_interleaved.py --device cpu --configs eager dataflow-eager --rounds 3   # a smoke run
    python3 benchmarks/steady_interleaved.py --configs torch.compile memory-nvfuser memory-nvfuser~noregionviews
    python3 benchmarks/steady_interleaved.py --configs torch.compile dataflow-nvfuser dataflow-nvfuser~nowidecopy
    python3 benchmarks/steady_interleaved.py --configs torch.compile dataflow-nvfuser dataflow-nvfuser~nocat

A name ``NAME~VARIANT`` is configuration NAME compiled with one runtime piece off (:data:`VARIANTS`), an A/B of that
piece in one process.

Writes ``benchmarks/results/<date>-<device>-<commit>-steady-interleaved-llama<L>.json`` and ``.txt``. It is a
cross-check of bench.py's steady rows, not a replacement: the targets in BENCHMARKS.md stay bench.py's.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

# NAME~VARIANT: configuration NAME compiled with one runtime piece switched off, for an A/B in one process
VARIANTS = {"noregionviews": "nvFuser region programs keep their view steps as aten calls (no folding)",
            "nowidecopy": "nvFuser region programs copy head transposes element by element (torch's clone), "
                          "not in 16- or 8-byte words (runtime/wide_copy.py)",
            "nocat": "nvFuser definitions leave aten.cat to torch (session 46's q/k/v gradient cat in nvFuser off)"}


def split_variant(name: str) -> tuple[str, str | None]:
    """``"memory-nvfuser~noregionviews"`` -> ``("memory-nvfuser", "noregionviews")``; a name without ``~`` has none."""
    base, sep, variant = name.partition("~")
    if sep and variant not in VARIANTS:
        raise SystemExit(f"unknown variant {variant!r} in {name!r}: use one of "
                         + ", ".join(f"~{k} ({v})" for k, v in VARIANTS.items()))
    return base, (variant if sep else None)


@contextlib.contextmanager
def variant_of(variant: str | None):
    """Compile (the first step) inside this: the variant's piece is off while the programs are generated."""
    from trace_lab.executors import nvfuser_region

    if variant == "noregionviews":
        nvfuser_region.RegionProgram.fold_views = False
        try:
            yield
        finally:
            nvfuser_region.RegionProgram.fold_views = True
    elif variant == "nowidecopy":
        word_for = nvfuser_region.word_for
        nvfuser_region.word_for = lambda value: None
        try:
            yield
        finally:
            nvfuser_region.word_for = word_for
    elif variant == "nocat":  # fusion decisions are made at the first call: the op is out of the table meanwhile
        import torch

        from trace_lab.executors import nvfuser_ops

        cat = torch.ops.aten.cat.default
        entry = nvfuser_ops.FUSIBLE.pop(cat)
        try:
            yield
        finally:
            nvfuser_ops.FUSIBLE[cat] = entry
    else:
        yield


DEFAULT = ["eager", "torch.compile", "layers-inductor", "dataflow-inductor", "memory-inductor", "dataflow-nvfuser",
           "default"]


def _profile_step(torch, step, device: str) -> dict:
    """Kernels and their device time in one step (CUDA); host events only on the CPU."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as prof:
        step()
        if device == "cuda":
            torch.cuda.synchronize()
    events = prof.events()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    return {"kernels": len(kernels) if device == "cuda" else None,
            "kernel_ms": round(sum(e.device_time for e in kernels) / 1e3, 3) if device == "cuda" else None,
            "host_events": sum(1 for e in events if e.device_type != torch.autograd.DeviceType.CUDA)}


def measure(configs: list[str], device: str, size: str, layers: int, rounds: int, warmup: int = 3,
            log=print) -> dict:
    """One process: build, check and warm every configuration, then time ``rounds`` interleaved rounds."""
    import torch

    import bench
    from examples import workloads
    from trace_lab.run import compare

    make = workloads.make_llama(layers)
    model, (x,) = make(device, size)
    ref, (xr,) = make(device, size)  # same seed: eager's step on its own copy
    out = ref(xr)
    out.float().sum().backward()
    eager = compare.snapshot(out, ref, (xr,))
    del ref, xr, out
    dev = bench._Device(device)

    rows, steps = {}, {}
    for name in configs:
        base, variant = split_variant(name)
        cfg = bench.parse_config(base)
        row = {"config": name, "label": bench.label(base) + (f" ~{variant}" if variant else "")}
        t0 = time.perf_counter()
        try:
            compiled, stats = bench._compile(cfg, model, "llama")

            def step(compiled=compiled, keep=False):
                out = compiled(x)
                out.float().sum().backward()
                snap = compare.snapshot(out, model, (x,)) if keep else None
                model.zero_grad(set_to_none=True)
                return snap

            with variant_of(variant):
                first = step(keep=True)
            bench._check(row, first, eager, "first")
            for _ in range(warmup):
                step()
            dev.sync()
        except Exception as e:  # noqa: BLE001 - a configuration that fails is a row that says why
            row["error"] = f"{type(e).__name__}: {e}"[:300]
            rows[name] = row
            log(f"  {name:28s} FAILED: {row['error']}")
            continue
        row["build_and_first_s"] = round(time.perf_counter() - t0, 2)
        row["device_ms"], row["host_ms"] = [], []
        rows[name], steps[name] = row, step
        log(f"  {name:28s} built and checked in {row['build_and_first_s']:.1f} s "
            f"(matches eager: {'yes' if row['matches_eager'] else 'NO'})")

    names = list(steps)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)] if names else []
        for name in order:
            host, device_ms = dev.time(steps[name], 1)
            rows[name]["host_ms"].append(round(host[0], 4))
            if device_ms is not None:
                rows[name]["device_ms"].append(round(device_ms[0], 4))
    for name in names:
        row = rows[name]
        bench._check(row, steps[name](keep=True), eager, "last")
        times = row["device_ms"] or row["host_ms"]
        row["steady_ms"] = round(statistics.median(times), 4)
        row["min_ms"], row["max_ms"] = round(min(times), 4), round(max(times), 4)
        row["host_median_ms"] = round(statistics.median(row["host_ms"]), 4)
        row["profile"] = _profile_step(torch, steps[name], device)
    for base in ("torch.compile", "eager"):
        if base in names:
            for name in names:
                rows[name][f"vs_{base}"] = round(rows[name]["steady_ms"] / rows[base]["steady_ms"], 3)
    return {"rows": [rows[n] for n in configs]}


def table(result: dict) -> str:
    head = ("| config | steady ms median (min-max) | host ms | vs torch.compile | vs eager | kernels | kernel ms "
            "| matches eager |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['config']} | failed: {r['error']} | | | | | | |")
            continue
        p = r["profile"]
        lines.append(f"| {r['config']} | {r['steady_ms']:.3f} ({r['min_ms']:.3f}-{r['max_ms']:.3f}) | "
                     f"{r['host_median_ms']:.3f} | {r.get('vs_torch.compile', '')}{'x' if 'vs_torch.compile' in r else ''} | "
                     f"{r.get('vs_eager', '')}{'x' if 'vs_eager' in r else ''} | {p['kernels'] if p['kernels'] is not None else ''} | "
                     f"{p['kernel_ms'] if p['kernel_ms'] is not None else ''} | {'yes' if r['matches_eager'] else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", nargs="+", default=None,
                    help=f"bench.py configuration names, each optionally ~VARIANT ({', '.join(VARIANTS)}) (default: "
                         f"{' '.join(DEFAULT)})")
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    ap.add_argument("--size", choices=["full", "small"], default=None, help="default: full on CUDA, small on the CPU")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=40, help="interleaved rounds, one timed step per configuration each")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    import torch

    from _results import environment, git_commit

    device = "cuda" if args.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and device != "cuda":
        raise SystemExit("--device cuda: no GPU visible")
    size = args.size or ("full" if device == "cuda" else "small")
    configs = args.configs or [c for c in DEFAULT if device == "cuda" or "nvfuser" not in c]
    git = git_commit(str(ROOT))
    print(f"steady_interleaved: {len(configs)} configurations in one process on {device} ({size}, {args.layers} "
          f"layers, {args.rounds} rounds), commit {git['commit']}{' (dirty)' if git['dirty'] else ''}", flush=True)
    result = measure(configs, device, size, args.layers, args.rounds, log=lambda m: print(m, flush=True))
    import bench

    gpu = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    slug = bench._slug(gpu)  # the device part of bench.py's result names
    result.update({"kind": "steady-interleaved", "device": gpu, "size": size, "layers": args.layers,
                   "rounds": args.rounds, "measured_at": datetime.datetime.now().isoformat(timespec="seconds"),
                   **git, "env": environment(with_gpu=device == "cuda")})
    args.out.mkdir(parents=True, exist_ok=True)
    stem = (f"{datetime.date.today().isoformat()}-{slug}-{git['commit'] or 'nogit'}{'-dirty' if git['dirty'] else ''}"
            f"-steady-interleaved-llama{args.layers}")
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    text = (f"steady state, interleaved in one process: {gpu}, commit {git['commit']}, llama {args.layers}L {size}, "
            f"{args.rounds} rounds\n\n{table(result)}\n")
    (args.out / f"{stem}.txt").write_text(text, encoding="utf-8")
    print(text, flush=True)
    print(f"wrote {args.out / stem}.json / .txt", flush=True)
    bad = [r["config"] for r in result["rows"] if "error" in r or not r.get("matches_eager")]
    if bad:
        print(f"not a clean run: {', '.join(bad)} failed or did not match eager", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
