"""Does AOTAutograd hold a backward's incoming gradient while the compiled backward runs?

A compiled backward (a custom aot_autograd backend here, no trace_lab) prints each input's refcount: on
torch 2.13 a fresh gradient is referenced only by the argument list the callee may clear (3), so the
backward frees it at its last use, as trace_lab's liveness model assumes; on torch 2.11 its backward frame
keeps more references (8), so the gradient stays live through the backward unless AOTAutograd copied it
into the compiled layout. Run with each torch: ``python benchmarks/backward_gradient_refcount_probe.py``.
"""
import sys, torch
from torch._dynamo.backends.common import aot_autograd
from functorch.compile import make_boxed_func
def bw_compiler(gm, ex):
    def run(args):
        print(torch.__version__, "bw inputs:", [(tuple(a.shape), a.dtype, a.stride(), a.is_conj(), sys.getrefcount(a)) for a in args if isinstance(a, torch.Tensor)])
        return gm(*args)
    run._boxed_call = True
    return run
be = aot_autograd(fw_compiler=lambda gm, ex: make_boxed_func(gm), bw_compiler=bw_compiler)
for label, fn, shape, dt in [("fft2 s", lambda x: torch.fft.fft2(x, s=(3, 10), dim=(1, 2), norm="ortho"), (5,6,7), torch.float32),
                             ("sin", lambda x: (x.exp()*3).sin(), (4,4), torch.float32)]:
    x = torch.randn(*shape, dtype=dt, requires_grad=True)
    f = torch.compile(fn, backend=be)
    y = f(x)
    print(label, "forward out strides", y.stride())
    torch.autograd.grad([y * 1], [x], [torch.randn_like(y)])
