import sys, json, torch
sys.path.insert(0, "benchmarks")
from bench_kernels import gpu_us
import gpudoctor.kernels.rms_norm as rms_mod
import gpudoctor.kernels.layer_norm as ln_mod
DT = torch.bfloat16
out = []
real = rms_mod._num_warps
for h, m in ((16384, 512), (16384, 2048), (8192, 1024), (8192, 4096), (4096, 2048)):
    x = torch.randn(m, h, device="cuda", dtype=DT, requires_grad=True)
    w = torch.randn(h, device="cuda", dtype=DT, requires_grad=True)
    b = torch.randn(h, device="cuda", dtype=DT, requires_grad=True)
    dy = torch.randn(m, h, device="cuda", dtype=DT)
    for name, fn in (("rms", lambda: rms_mod.rms_norm(x, w)), ("ln", lambda: ln_mod._LayerNormFunction.apply(x, w, b, 1e-5))):
        for warps in (None, 4, 8, 16, 32):
            f = (lambda blk, w_=warps: w_) if warps else real
            rms_mod._num_warps = f; ln_mod._num_warps = f
            def run():
                x.grad = w.grad = b.grad = None
                torch.autograd.backward(fn(), dy)
            out.append((name, h, m, warps, round(gpu_us(run), 1)))
            print(out[-1], flush=True)
    rms_mod._num_warps = ln_mod._num_warps = real
