"""GPU check of the 2026-11-26 op-scratch changes: matrix_exp (value-dependent scratch, measured at large
values: equal for a large-norm input, an upper bound for a small one) and ifft's backward (a conjugated
gradient into cuFFT), each compared with eager (outputs, gradients) and predicted vs measured peak.

Run on a CUDA machine: ``python benchmarks/scratch_gpu_check.py``."""
from __future__ import annotations

import torch

import trace_lab


def main(dev: str = "cuda") -> None:
    print(torch.__version__, torch.cuda.get_device_name() if dev == "cuda" else dev)
    cases = [
        ("matrix_exp large", torch.linalg.matrix_exp, torch.randn(64, 64, device=dev) * 100, False, None),
        ("matrix_exp small", torch.linalg.matrix_exp, torch.randn(64, 64, device=dev) * 1e-3, False, None),
        ("ifft fwd+bwd", lambda x: torch.fft.ifft(x, n=100, dim=1, norm="ortho"),
         torch.randn(50, 60, 70, device=dev, requires_grad=True), True, lambda out: out.abs().sum()),
    ]
    for label, fn, x, backward, loss in cases:
        torch.manual_seed(0)
        kw = {"loss": loss} if loss else {}
        rep = trace_lab.inspect(fn, x, fusion="none", executor="eager", runs=0, backward=backward, **kw)
        print(label, "eager check:", rep.comparison["ok"], rep.comparison.get("mode"))
        for m in rep.memory:
            p, q = m["predicted_peak_above_inputs_bytes"], m["measured_peak_above_inputs_bytes"]
            print(f"  {m['kind']}: predicted {p} measured {q} within 1%+1KiB: {abs(p - q) <= 0.01 * q + 1024}")
    jfn = trace_lab.jit(torch.linalg.matrix_exp, fusion="none", executor="eager")
    jfn(torch.randn(64, 64, device=dev))
    line = next(ln for ln in str(trace_lab.last_traces(jfn)[-1]).splitlines() if "matrix_exp.default(" in ln)
    print("matrix_exp line:", line.strip())


if __name__ == "__main__":
    import sys

    main(*sys.argv[1:])
