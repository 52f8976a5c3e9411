"""Where predicted and measured memory part: live bytes line by line, and region output aliasing.

A diagnostic for the liveness model. It runs one workload through ``trace_lab.run.jit``
with the chosen strategy and executor, and for every program part that runs it records,
after each trace line, the allocator's live bytes above the program's entry
(CUDA ``memory_allocated``; on CPU nothing is recorded per line) next to the model's
``live_after`` for that line. It prints the lines where the difference changes, so the
first line that the model gets wrong stands out. For every fused region it compares the
model's aliasing of the outputs (a new buffer, an input's buffer, another output's
buffer) with what the compiled region returned in the real run: which storage each
output lives in and how large that storage is.

    python benchmarks/line_memory_probe.py --device cuda --workload transformer_encoder \
        --strategy horizontal --executor inductor --size full

It instruments the executors' interpreter (``interpret``'s ``probe`` and
``region_runner``) from the outside; trace_lab's own code is not changed by it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.fx as fx  # noqa: E402

import trace_lab  # noqa: E402
from examples.workloads import WORKLOADS  # noqa: E402
from trace_lab.analysis.liveness import alias_sources  # noqa: E402
from trace_lab.executors import eager as eager_mod  # noqa: E402
from trace_lab.ir.trace import tensor_values  # noqa: E402

_RECORDS: list[dict] = []


def _storage(t):
    try:
        return t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
    except Exception:  # noqa: BLE001 - fake or sparse tensors
        return None, None


def _describe_region_call(trace, node, args, result):
    outs = result if isinstance(result, (list, tuple)) else [result]
    in_ptrs = {}
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            in_ptrs.setdefault(_storage(a)[0], i)
    seen = {}
    real = []
    for k, t in enumerate(outs):
        if not isinstance(t, torch.Tensor):
            real.append(None)
            continue
        ptr, nbytes = _storage(t)
        if ptr in in_ptrs:
            where = f"input {in_ptrs[ptr]}"
        elif ptr in seen:
            where = f"output {seen[ptr]}"
        else:
            where = "new"
            seen[ptr] = k
        real.append({"where": where, "shape": list(t.shape), "stride": list(t.stride()),
                     "storage_bytes": nbytes, "storage_offset": t.storage_offset()})
    model = []
    for src in alias_sources(node):
        if src is None:
            model.append("new")
        elif isinstance(src, int):
            model.append(f"output {src}")
        else:
            model.append(f"input {list(node.args).index(src)}")
    return {"region": node.target, "model": model, "real": real}


def _patched(original):
    def interpret(trace, materialized_regions=True, region_runner=None, probe=None, views_as_reshape=False):
        live = trace.liveness(materialized_regions=materialized_regions)
        predicted = {ln.node: ln.live_after - live.entry_bytes for ln in live.lines}
        record = {"kind": trace.kind, "lines": [], "regions": []}
        state = {}

        def line_probe(node):
            if probe is not None:
                probe(node)
            if trace.device.type == "cuda":
                measured = torch.cuda.memory_allocated(trace.device) - state["entry"]
                record["lines"].append((trace.name(node),
                                        predicted.get(node), measured, _line_text(trace, node)))

        runner = region_runner
        if region_runner is not None:
            def runner(n, _inner=region_runner):
                fn = _inner(n)

                def call(*args):
                    result = fn(*args)
                    record["regions"].append(_describe_region_call(trace, n, args, result))
                    return result

                return call

        run = original(trace, materialized_regions, runner, line_probe, views_as_reshape)

        def measured_run(args):
            if trace.device.type == "cuda":
                torch.cuda.synchronize(trace.device)
                state["entry"] = torch.cuda.memory_allocated(trace.device)
            record["lines"].clear()
            record["regions"].clear()
            out = run(args)
            _RECORDS.append(json.loads(json.dumps(record, default=str)))
            return out

        return measured_run

    return interpret


def _line_text(trace, node) -> str:
    if node.op == "call_module":
        return f"{node.target}({', '.join(a.name for a in node.args if isinstance(a, fx.Node))})"
    return str(getattr(node.target, "__name__", node.target))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--size", default="small", choices=["small", "full"])
    p.add_argument("--workload", default="transformer_encoder")
    p.add_argument("--strategy", default="horizontal")
    p.add_argument("--executor", default="inductor")
    p.add_argument("--out", default=None)
    a = p.parse_args()

    import trace_lab.executors.inductor as inductor_mod
    import trace_lab.executors.nvfuser as nvfuser_mod

    for mod in (inductor_mod, nvfuser_mod, eager_mod):
        if hasattr(mod, "interpret"):
            setattr(mod, "interpret", _patched(eager_mod.__dict__["interpret"] if mod is not eager_mod
                                               else mod.interpret))
    fn, args = WORKLOADS[a.workload].make(a.device, a.size)
    jfn = trace_lab.jit(fn, fusion=a.strategy, executor=a.executor)
    for _ in range(2):  # the second call runs on warm regions
        _RECORDS.clear()
        out = jfn(*args)
        loss = out if isinstance(out, torch.Tensor) else out[0]
        if loss.requires_grad:
            loss.float().sum().backward()
    for rec in _RECORDS:
        print(f"\n== {rec['kind']}: lines where (measured - predicted) changes")
        last = None
        for name, pred, meas, text in rec["lines"]:
            diff = None if pred is None else meas - pred
            if diff != last:
                print(f"  {name:>12} {text[:60]:<60} predicted {pred / 2**20 if pred is not None else float('nan'):9.3f}"
                      f" MiB  measured {meas / 2**20:9.3f} MiB  diff {(diff or 0) / 2**20:+8.3f} MiB")
                last = diff
        for r in rec["regions"]:
            mismatch = [k for k, (m, real) in enumerate(zip(r["model"], r["real"]))
                        if real is not None and m.split()[0] != real["where"].split()[0]]
            if mismatch:
                print(f"  region {r['region']}: outputs whose aliasing differs from the model:")
                for k in mismatch:
                    print(f"    out {k}: model {r['model'][k]}, real {r['real'][k]}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(_RECORDS, f, indent=1)


if __name__ == "__main__":
    main()
