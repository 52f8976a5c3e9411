"""Issue 17's features on a GPU, run once: the paths the CPU suite cannot take.

* ``profile_lines``: the device lane (kernels inside each trace line's range) of a
  Llama block compiled with the nvFuser executor; the lines' device time summed against
  the CUDA-event time of the same call;
* ``region_code``: nvFuser's FusionDefinition of a region;
* ``saved_for_backward`` and ``region_ends`` of that program (their text);
* ``export_repro`` of a region on CUDA, the file run in a fresh interpreter;
* ``predict`` (meta device, CUDA allocator) against the measured peak of ``inspect`` at two sizes;
* ``timeline``: ``inspect(profile=True)`` with and without CUDA graphs, the host and device lanes'
  busy fractions (a host-bound call leaves the device idle between kernels);
* ``peers``: trace_lab's run beside the ``--baseline`` peers (eager, torch.compile, reduce-overhead),
  first call, steady state and the peak of the whole call, measured the same way.

Each section records its result or its error; the JSON goes to
benchmarks/results/<date>-<device>-depth-gpu-<commit>.json.

    python3 benchmarks/depth_gpu_check.py [--executor nvfuser] [--sections profile,code,saved,repro,predict]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks._results import git_commit, write_results  # noqa: E402

SECTIONS = ("profile", "code", "saved", "repro", "predict", "timeline", "peers")


def _llama(size: str, executor: str):
    import trace_lab
    from examples.workloads import get

    model, (x,) = get("llama2").make("cuda", size)
    jfn = trace_lab.jit(model, fusion="dataflow", executor=executor)
    out = jfn(x)
    out.float().sum().backward()
    torch.cuda.synchronize()
    return jfn, x


def profile(jfn, x) -> dict:
    import trace_lab

    prof = trace_lab.profile_lines(jfn, x)
    timed = [ln for ln in prof.lines if ln.device_us > 0]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    out = jfn(x)
    out.float().sum().backward()
    end.record()
    torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "lines.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        chrome = f.read()
    kernels_us = sum(e.self_device_time_total for e in prof._profiler.key_averages()
                     if e.device_type == torch.autograd.DeviceType.CUDA)
    return {"all_kernels_us": kernels_us, "device": prof.device, "lines": len(prof.lines), "lines_with_device_time": len(timed),
            "device_us_sum": sum(ln.device_us for ln in prof.lines), "host_us_sum": sum(ln.host_us for ln in prof.lines),
            "call_cuda_event_us": start.elapsed_time(end) * 1e3,
            "chrome_trace_bytes": len(chrome), "chrome_trace_names_lines": sum(1 for ln in prof.lines[:50] if ln.label in chrome),
            "text": str(prof)}


def code(jfn) -> dict:
    import trace_lab

    regions = [str(n.target) for n in trace_lab.last_traces(jfn)[-1].ops if n.op == "call_module"]
    text = trace_lab.region_code(jfn, regions[0])
    return {"region": regions[0], "regions": len(regions), "chars": len(text), "head": text[:3000]}


def saved(jfn) -> dict:
    import trace_lab

    return {"saved_for_backward": str(trace_lab.saved_for_backward(jfn))[:4000],
            "region_ends": trace_lab.region_ends(jfn)[:3000]}


def repro(jfn) -> dict:
    import trace_lab

    regions = [str(n.target) for n in trace_lab.last_traces(jfn)[-1].ops if n.op == "call_module"]
    out = {}
    for executor in ("inductor", "nvfuser"):
        refused = []
        for region in regions:  # nvFuser: the first region it compiled as one segment
            path = os.path.join(tempfile.mkdtemp(), f"repro_{executor}.py")
            try:
                trace_lab.export_repro(jfn, path, region=region, executor=executor)
            except trace_lab.TraceLabError as e:
                refused.append(f"{region}: {str(e)[:160]}")
                continue
            r = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=300)
            out[executor] = {"region": region, "rc": r.returncode, "tail": (r.stdout + r.stderr)[-1500:],
                             "refused_before": refused[:5]}
            break
        else:
            out[executor] = {"error": "no region could be written", "refused": refused[:5]}
    return out


def predict_vs_measured(executor: str) -> list[dict]:
    import trace_lab
    from examples.workloads import get

    rows = []
    for size in ("small", "full"):
        model, (x,) = get("llama2").make("cuda", size)
        pred = trace_lab.predict(model, x, strategies=["dataflow", "memory"], device="cuda")
        for strategy in ("dataflow", "memory"):
            model, (x,) = get("llama2").make("cuda", size)
            rep = trace_lab.inspect(model, x, fusion=strategy, executor=executor, runs=1)
            for kind in ("forward", "backward"):
                rows.append({"size": size, "strategy": strategy, "kind": kind,
                             "predicted_on_meta": pred.peak(strategy, kind),
                             "predicted_by_inspect": rep.predicted_peak(kind),
                             "measured": rep.measured_peak(kind), "eager_check_ok": rep.ok})
            del rep
            torch.cuda.empty_cache()
    return rows


def _busy(spans: list, lane: str) -> float | None:
    """The fraction of the call's span during which ``lane`` is busy (kernels may overlap: union)."""
    xs = sorted((s[2], s[2] + s[3]) for s in spans if s[0] == lane)
    if not xs:
        return None
    end = max(s[2] + s[3] for s in spans)
    busy, cur_s, cur_e = 0.0, xs[0][0], xs[0][1]
    for a, b in xs[1:]:
        if a > cur_e:
            busy, cur_s, cur_e = busy + cur_e - cur_s, a, b
        else:
            cur_e = max(cur_e, b)
    return (busy + cur_e - cur_s) / end if end else None


def timeline(executor: str, size: str) -> dict:
    """inspect(profile=True) with and without CUDA graphs: the lanes' busy fractions (gaps = launch overhead)."""
    import trace_lab
    from examples.workloads import get

    out = {}
    for graphs in (False, True):
        model, (x,) = get("llama2").make("cuda", size)
        rep = trace_lab.inspect(model, x, fusion="dataflow", executor=executor, runs=3, profile=True,
                                cuda_graphs=graphs)
        lt = rep.line_times or {}
        spans = lt.get("spans") or []
        out["cuda_graphs" if graphs else "plain"] = {
            "lines_timed": len(lt.get("lines") or []), "host_spans": sum(s[0] == "host" for s in spans),
            "device_spans": sum(s[0] == "device" for s in spans), "call_us": max((s[2] + s[3] for s in spans), default=None),
            "host_busy": _busy(spans, "host"), "device_busy": _busy(spans, "device"), "note": lt.get("note"),
            "steady_ms": rep.steady_seconds * 1e3 if rep.steady_seconds else None, "eager_ok": rep.ok,
            "warnings": rep.warnings}
        del rep
        torch.cuda.empty_cache()
    return out


def peers(executor: str, size: str) -> list[dict]:
    """trace_lab's run (measure_step) beside the --baseline peers, all measured the same way."""
    import trace_lab
    from examples.workloads import get
    from trace_lab.lab.peers import run_peer

    rows = []
    model, (x,) = get("llama2").make("cuda", size)
    rep = trace_lab.inspect(model, x, fusion="dataflow", executor=executor, runs=5, measure_step=True)
    rows.append({"run": f"trace_lab dataflow/{executor}", "first_s": rep.first_run_seconds,
                 "steady_ms": rep.steady_seconds * 1e3, "step_peak": rep.step_peak, "eager_ok": rep.ok})
    for peer in ("eager", "torch.compile", "reduce-overhead"):
        model, (x,) = get("llama2").make("cuda", size)
        try:
            pr = run_peer(model, (x,), peer, runs=5, name=peer)
        except Exception as e:  # noqa: BLE001 - one peer that fails is recorded, the others still run
            rows.append({"run": peer, "error": f"{type(e).__name__}: {str(e)[:300]}"})
            continue
        rows.append({"run": peer, "first_s": pr.first_run_seconds, "steady_ms": pr.steady_seconds * 1e3,
                     "step_peak": pr.step_peak})
        torch.cuda.empty_cache()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--executor", default="nvfuser")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--size", default="full", choices=("small", "full"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("depth_gpu_check: needs a CUDA device")
    result: dict = {"executor": args.executor}
    wanted = args.sections.split(",")
    jfn = x = None
    if set(wanted) & {"profile", "code", "saved", "repro"}:
        t0 = time.perf_counter()
        try:
            jfn, x = _llama(args.size, args.executor)
            result["compile_and_first_call_seconds"] = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            result["llama_error"] = f"{type(e).__name__}: {e}"
    for name in wanted:
        if jfn is None and name not in ("predict", "timeline", "peers"):
            continue
        t0 = time.perf_counter()
        try:
            result[name] = {"profile": lambda: profile(jfn, x), "code": lambda: code(jfn), "saved": lambda: saved(jfn),
                            "repro": lambda: repro(jfn), "predict": lambda: predict_vs_measured(args.executor),
                            "timeline": lambda: timeline(args.executor, args.size),
                            "peers": lambda: peers(args.executor, args.size)}[name]()
        except Exception as e:  # noqa: BLE001 - a section that fails is recorded; the others still run
            traceback.print_exc()
            result[name] = {"error": f"{type(e).__name__}: {e}"}
        print(f"[{name}] {time.perf_counter() - t0:.1f} s", flush=True)
    meta = git_commit()
    gpu = torch.cuda.get_device_name()
    label = next((g.lower() for g in ("H100", "H200", "A100") if g in gpu), "cuda")
    write_results(f"depth-gpu-{meta['commit']}", label, [result], **meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
