"""Diagnostic: where Adam.step's time goes under trace_lab (issue 27: the default options are slower than eager).

    python3 benchmarks/adam_step_profile.py [--executors nvfuser inductor] [--params 200] [--numel 65536]

For each executor (fusion dataflow): compile (first call, wall), steady host and synchronized time per step
against eager's (interleaved, medians of 5 rounds), the program's first lines (how each parameter's update is
split into regions and torch ops), the first region's generated code (nvFuser: the plan of torch steps and
FusionDefinitions), and a cProfile of 3 steps (host time by function)."""
import argparse, cProfile, io, os, pstats, statistics, sys, time
sys.path.insert(0, os.getcwd())
import torch
import trace_lab
from examples import workloads

ap = argparse.ArgumentParser()
ap.add_argument("--executors", nargs="+", default=["nvfuser", "inductor"])
ap.add_argument("--params", type=int, default=200)
ap.add_argument("--numel", type=int, default=65536)
ap.add_argument("--lines", type=int, default=70)
args = ap.parse_args()
dev = "cuda" if torch.cuda.is_available() else "cpu"


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


def timed(step, n=10):
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    host = (time.perf_counter() - t0) / n
    sync()
    return host, (time.perf_counter() - t0) / n


eager_step, _ = workloads.make_adam_step(dev, "full", n_params=args.params, numel=args.numel)
for executor in args.executors:
    step, _ = workloads.make_adam_step(dev, "full", n_params=args.params, numel=args.numel)
    jfn = trace_lab.jit(step, fusion="dataflow", executor=executor)
    t0 = time.perf_counter()
    jfn()
    sync()
    print(f"== {executor}: first call {time.perf_counter() - t0:.2f} s")
    for _ in range(3):
        jfn()
    rounds = [(timed(eager_step), timed(jfn)) for _ in range(5)]
    e_host, e_sync = (statistics.median(r[0][i] for r in rounds) for i in (0, 1))
    t_host, t_sync = (statistics.median(r[1][i] for r in rounds) for i in (0, 1))
    print(f"steady per step: eager host {e_host * 1e3:.2f} ms, synced {e_sync * 1e3:.2f} ms; trace_lab host "
          f"{t_host * 1e3:.2f} ms, synced {t_sync * 1e3:.2f} ms ({t_sync / e_sync:.2f}x eager)")
    part = jfn.programs[-1].parts[0]
    compiled = part.compiled
    print(f"regions: {len(compiled.regions)}; program lines: {len(compiled.source.splitlines())}")
    print("\n".join(compiled.source.splitlines()[:args.lines]))
    first = next(iter(compiled.region_code), None)
    if first is not None:
        print(f"-- code of {first}:")
        print("\n".join(compiled.code_of(first).splitlines()[:120]))
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(3):
        jfn()
    sync()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
    print(s.getvalue()[-6000:])
