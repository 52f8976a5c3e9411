"""Probe (session 28): what the profiler's own costs do to ``profile_lines``' figures for notebook 06's tiny_chain.

    python3 benchmarks/profile_warmup_probe.py [--profiles 3] [--repeat 5]

Three ways of warming the profiler up before each timed call, side by side in one process, alternating:

* ``op``: session 27's warm-up (one op and, on CUDA, one kernel per device);
* ``call``: today's, the call itself once, untimed, in the same profiler session, then the op and kernel;
* ``call+pad``: today's with ``repeat=N``: call i also records i x PAD_RANGES empty ranges first;
* ``+after``: ``call+pad``, then, after its synchronize, PAD_RANGES empty ranges and one host op (on a GPU the
  first line after the synchronize read ~2x the median, session 29).

Each profile is the median of ``--repeat`` calls per line. Printed per profile: the median line, the slowest line
(its index and host time) and how many of the 120 lines lie within 3x of the median. No figure here is asserted on;
the result file keeps them (benchmarks/results/<date>-<device>-<commit>-profile-warmup-probe.txt).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.getcwd())

import torch  # noqa: E402

import trace_lab  # noqa: E402
from trace_lab.run import line_profile as lp  # noqa: E402


def tiny_chain(x):
    for _ in range(40):
        x = torch.sin(x) * 1.01 + 0.1
    return x


def _op_only(cuda_devices, call, pad=0):
    """Session 27's warm-up: one op and one kernel per CUDA device, not the call."""
    with torch.profiler.record_function(lp.WARMUP_LABEL):
        torch.zeros(1).add_(1)
        for device in cuda_devices:
            torch.zeros(1, device=device).add_(1)
            torch.cuda.synchronize(device)


def _no_pad(real):
    return lambda cuda_devices, call, pad=0: real(cuda_devices, call, 0)


def _after_sync(real, extra: int):
    """``real`` (today's warm-up), then (after its synchronize) ``extra`` empty ranges and one host op: does the timed call's
    first line still pay for following a synchronize (the CUDA case)?"""
    def warm(cuda_devices, call, pad=0):
        real(cuda_devices, call, pad)
        with torch.profiler.record_function(lp.WARMUP_LABEL):
            for _ in range(extra):
                with torch.profiler.record_function(lp.WARMUP_LABEL):
                    pass
            torch.zeros(1).add_(1)
    return warm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(64, device=device)
    jfn = trace_lab.jit(tiny_chain, fusion="none")
    jfn(x)
    real = lp._warm_up
    ways = {"op": _op_only, "call": _no_pad(real), "call+pad": real, "+after": _after_sync(real, lp.PAD_RANGES)}
    print(f"tiny_chain on {device}, fusion none, 120 lines; each profile the median of {args.repeat} calls")
    print(f"{'warm-up':<9} {'profile':>7} {'median us':>10} {'slowest line':>13} {'its us':>8} {'within 3x':>10}")
    try:
        for k in range(args.profiles):
            for name, warm in ways.items():
                lp._warm_up = warm
                prof = trace_lab.profile_lines(jfn, x, repeat=args.repeat)
                hosts = [ln.host_us for ln in sorted(prof.lines, key=lambda ln: ln.index)]
                med = statistics.median(hosts)
                slow = max(range(len(hosts)), key=hosts.__getitem__)
                near = sum(h <= 3 * med for h in hosts)
                print(f"{name:<9} {k + 1:>7} {med:>10.1f} {'L' + str(slow):>13} {hosts[slow]:>8.1f} "
                      f"{near:>6} of {len(hosts)}", flush=True)
    finally:
        lp._warm_up = real


if __name__ == "__main__":
    main()
