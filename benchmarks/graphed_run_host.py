"""Issue 27 (CUDA-graph replay): the host time GraphedRun itself adds to a call, with many inputs.

    PYTHONPATH=$PWD python3 benchmarks/graphed_run_host.py [--inputs 1000]      # any machine

A bench step is timed from before the call to the end of the replay, so the host time before ``replay()`` adds
to it. Adam.step's program has about 1,000 inputs (200 parameters, their gradients and three states), all
recorded in place, and every call checks that each is still where, and as, it was (``GraphedRun._matches``).
Here a GraphedRun with a recorder whose replay does nothing is called on N CPU tensors: its own cost per call
(median of 7 rounds of 200 calls), checking each input's address, strides, shape and dtype, and checking the
address alone (``metadata_guarded``, as jit's programs do: Dynamo guards the rest)."""
import argparse
import statistics
import time

import torch

from trace_lab.executors.cuda_graphs import GraphedRun

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--inputs", type=int, default=1000)
args = ap.parse_args()


def recorder(run, static):
    return (lambda: None), [], 0


tensors = [torch.randn(16) for _ in range(args.inputs)]
for guarded in (False, True):
    g = GraphedRun(lambda a: (), written=set(range(0, args.inputs, 5)), recorder=recorder, metadata_guarded=guarded)
    for _ in range(5):
        g(tensors)
    assert g.replays >= 2 and not g.notes, (g.replays, g.notes)
    rounds = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(200):
            g(tensors)
        rounds.append((time.perf_counter() - t0) / 200 * 1e6)
    print(f"GraphedRun host time a call, {args.inputs} inputs recorded in place, "
          f"{'addresses only' if guarded else 'addresses, strides, shapes, dtypes'}: "
          f"{statistics.median(rounds):.0f} us (range {min(rounds):.0f}-{max(rounds):.0f})")
