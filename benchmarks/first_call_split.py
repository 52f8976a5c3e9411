"""Diagnostic for issue 27 item 3: where trace_lab's first call goes, by stage and region (llama, full size).

    python3 benchmarks/first_call_split.py [strategy] [executor] [layers]   # GPU machine; default dataflow inductor 8
    TRACE_LAB_SPLIT_PROFILE=0 python3 benchmarks/first_call_split.py layers inductor 8   # the same without cProfile
    python3 benchmarks/first_call_split.py auto auto adam   # Adam.step over 200 x 65,536 (the default options)
    python3 benchmarks/first_call_split.py layers inductor 8 cover_regions=False   # jit options as name=value

Runs one first call (forward + backward) and prints each compiled part's CompilationRecord.timings(): AOTAutograd's
capture, every pass stage, op-scratch measurement, the executor (each region's compile seconds and cache hit), graph
recording, and what the first call spent outside them (Dynamo's tracing, the run itself); and the executor's notes on
regions that ran another region's code (``cover_regions``) or compiled on their own because that would raise the peak. Then cProfile's top
functions by cumulative time, for the seconds no record names. cProfile slows Python-bound stages about 1.5-2x
(2026-11-27: a 38.6 s profiled first call against 18-20 s in bench.py); ``TRACE_LAB_SPLIT_PROFILE=0`` gives the
split at full speed, without the profile."""
import ast
import cProfile
import io
import os
import pstats
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import trace_lab  # noqa: E402
from examples import workloads  # noqa: E402

strategy = sys.argv[1] if len(sys.argv) > 1 else "dataflow"
executor = sys.argv[2] if len(sys.argv) > 2 else "inductor"
workload = sys.argv[3] if len(sys.argv) > 3 else "8"  # a llama layer count, or "adam"
# further arguments: jit options as name=value (e.g. cover_regions=False); values read as Python literals
options = {k: ast.literal_eval(v) for k, v in (a.split("=", 1) for a in sys.argv[4:])}
device = "cuda" if torch.cuda.is_available() else "cpu"
if workload == "adam":
    fn, fn_args = workloads.make_adam_step(device, "full")
    what = "Adam.step (200 x 65,536),"
    jfn = trace_lab.jit(fn, fusion=strategy, executor=executor, **options)
    run = (lambda: jfn(*fn_args))
else:
    what = f"{int(workload)} layers,"
    model, (x,) = workloads.make_llama(int(workload))(device, "full" if device == "cuda" else "small")
    jfn = trace_lab.jit(model, fusion=strategy, executor=executor, **options)
    run = (lambda: jfn(x).float().sum().backward())
PROFILE = os.environ.get("TRACE_LAB_SPLIT_PROFILE", "1") != "0"
prof = cProfile.Profile()
t0 = time.perf_counter()
if PROFILE:
    prof.enable()
run()
if device == "cuda":
    torch.cuda.synchronize()
prof.disable()
first = time.perf_counter() - t0
print(f"first call ({strategy}, {executor}, {what} {device}{''.join(f', {k}={v}' for k, v in options.items())}{', under cProfile' if PROFILE else ''}): {first:.2f} s")
named = 0.0
for rec in jfn.compilations():
    t = rec.timings()
    regions = t["regions"]
    compiled = [r for r in regions if not r[2]]
    passes = sum(s for _, s in t["passes"] if s)
    print(f"  {rec.kind}: capture {t['capture'] or 0:.2f} s, passes {passes:.2f} s, op scratch {t['op_scratch'] or 0:.2f} s, "
          f"executor {t['executor']:.2f} s ({len(regions)} regions, {len(compiled)} compiled, "
          f"{sum(r[1] or 0 for r in compiled):.2f} s compiling them), graph recording {t['graph_recording']:.2f} s, "
          f"wall {t['wall'] or 0:.2f} s")
    if t.get("aligned_saves"):  # part of the capture: the partition made again (align_layer_saves)
        a = t["aligned_saves"]
        print(f"      capture's second partition (align_layer_saves, {', '.join(a['layers'])}, "
              f"{'kept' if a['kept'] else 'not kept'}): {a['seconds']:.2f} s")
    for name, seconds in sorted(t["passes"], key=lambda p: -(p[1] or 0))[:3]:
        print(f"      pass {name}: {seconds or 0:.3f} s")
    for name, seconds, hit in sorted(compiled, key=lambda r: -(r[1] or 0))[:3]:
        print(f"      region {name}: {seconds or 0:.2f} s")
    for note in getattr(rec.compiled, "notes", None) or []:  # regions run by another region's code, or refused that
        if "cover_regions" in note:
            print(f"      {note}")
    named += (t["capture"] or 0) + (t["wall"] or 0)
print(f"  named by the records: {named:.2f} s; the rest ({first - named:.2f} s): Dynamo tracing, running, autograd")
if PROFILE:
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(35)
    print(s.getvalue()[-7000:])
