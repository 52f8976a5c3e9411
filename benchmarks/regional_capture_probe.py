"""Probe (issue 27 item 3): does capturing one layer at a time cut the first call, as PyTorch's regional
compilation recipe does for torch.compile?

    python3 benchmarks/regional_capture_probe.py [--layers 2 8 16] [--backend aot_eager] [--executor eager]
    python3 benchmarks/regional_capture_probe.py --layers 8 --backend inductor --executor inductor   # GPU machine

For each layer count, four modes, each in a fresh process with Inductor's and Triton's caches off, first call = forward + backward:

* ``tc-whole``: ``torch.compile(model, backend=B)``;
* ``tc-regional``: each ``Block`` of the stack ``torch.compile``d on its own (identical layers hit Dynamo's cache);
* ``lab-whole``: ``trace_lab.jit(model, fusion="layers", executor=E)`` (today's whole-program capture);
* ``lab-regional`` (a prototype, not an option of the lab): each ``Block`` compiled with one JitFunction's capture
  backend, so trace_lab captures, passes and compiles a layer's program once and the other layers reuse it;
* ``lab-regional-one`` (the same, closer to torch.compile's recipe): each ``Block`` inside a one-element ModuleList,
  so ``fusion="layers"`` makes the block's program one region each way (``lab-regional``'s dataflow splits it at
  every matmul into several regions to compile).

Every mode's output and gradients are compared with eager's, within the lab's tolerance (``run/compare.py``).
With ``aot_eager`` and the eager executor no kernel compiler runs: what is left is Dynamo, AOTAutograd and the
lab's own passes, the part regional capture shortens."""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cold_run import run_cold  # noqa: E402

MODES = ("tc-whole", "tc-regional", "lab-whole", "lab-regional", "lab-regional-one")


class _One(__import__("torch").nn.Module):
    """One block inside a one-element ModuleList: its ops' module paths are numbered (``layers.0``)."""

    def __init__(self, block):
        super().__init__()
        self.layers = __import__("torch").nn.ModuleList([block])

    def forward(self, *args, **kwargs):
        return self.layers[0](*args, **kwargs)


def one(mode: str, layers: int, backend: str, executor: str) -> dict:
    sys.path.insert(0, os.getcwd())
    import torch

    import trace_lab
    from examples import workloads

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    size = "full" if dev == "cuda" else "small"
    model, (x,) = workloads.make_llama(layers)(dev, size)
    ref, _ = workloads.make_llama(layers)(dev, size)  # same seed: the same weights
    programs = regions = None
    start = time.perf_counter()
    if mode == "tc-whole":
        f = torch.compile(model, backend=backend)
    elif mode == "tc-regional":
        for i, layer in enumerate(model.layers):
            model.layers[i] = torch.compile(layer, backend=backend)
        f = model
    elif mode == "lab-whole":
        f = trace_lab.jit(model, fusion="layers", executor=executor)
    elif mode == "lab-regional":
        jfn = trace_lab.jit(model.layers[0], fusion="dataflow", executor=executor)
        for i, layer in enumerate(model.layers):
            model.layers[i] = torch.compile(layer, backend=jfn.session.backend, dynamic=False)
        f = model
    else:  # lab-regional-one: the block's whole program one region each way, as torch.compile's regional recipe
        wrapped = [_One(layer) for layer in model.layers]  # a numbered path: fusion="layers" makes it one region
        jfn = trace_lab.jit(wrapped[0], fusion="layers", executor=executor)
        for i, w in enumerate(wrapped):
            model.layers[i] = torch.compile(w, backend=jfn.session.backend, dynamic=False)
        f = model
    out = f(x)
    out.float().sum().backward()
    if dev == "cuda":
        torch.cuda.synchronize()
    first = time.perf_counter() - start
    if mode == "lab-whole":
        programs = len(f.programs)
    elif mode.startswith("lab-regional"):
        programs = len(jfn.programs)
        regions = sum(len(getattr(part.compiled, "regions", None) or {}) for p in jfn.programs for part in p.parts)
    expected = ref(x)
    expected.float().sum().backward()
    # the lab's own tolerance (run/compare.py: the largest error relative to the largest magnitude, 3e-2 in bf16);
    # an elementwise allclose failed torch.compile's own bf16 gradients on the GPU (2026-11-28, H200)
    from trace_lab.run.compare import _close
    ok = _close(out, expected, 1.0) is None and all(
        _close(p.grad, q.grad, 1.0) is None for p, q in zip(model.parameters(), ref.parameters()))
    return {"mode": mode, "layers": layers, "device": dev, "first_call_s": round(first, 2), "matches_eager": ok,
            "programs": programs, "regions": regions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 8, 16])
    ap.add_argument("--backend", default="aot_eager", help="torch.compile's backend for the tc- modes")
    ap.add_argument("--executor", default="eager", help="trace_lab's executor for the lab- modes")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--_one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._one:
        print("RESULT " + json.dumps(one(args._one, args.layers[0], args.backend, args.executor)), flush=True)
        return
    print(f"first call (forward + backward) of llama, torch.compile backend {args.backend}, "
          f"trace_lab executor {args.executor}; each mode a fresh process")
    print(f"{'layers':>6}  {'mode':<16} {'first call s':>12}  {'programs':>8}  {'regions':>7}  matches eager")
    for layers in args.layers:
        for mode in args.modes:
            r, why = run_cold([__file__, "--_one", mode, "--layers", str(layers), "--backend", args.backend,
                               "--executor", args.executor])  # cold: Inductor's and Triton's caches empty
            if r is None:
                print(f"{layers:>6}  {mode:<16} failed: {why}")
                continue
            print(f"{layers:>6}  {mode:<16} {r['first_call_s']:>12.2f}  {r['programs'] or '':>8}  "
                  f"{r.get('regions') or '':>7}  {r['matches_eager']}", flush=True)


if __name__ == "__main__":
    main()
