"""CPU cost per call of the norm and GLU launchers vs PyTorch's (no GPU sync inside the loop):
whether a kernel is launch-bound at small shapes is a question of these microseconds."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from gpudoctor.kernels.glu import swiglu
from gpudoctor.kernels.rms_norm import _forward, rms_norm


def per_call_us(fn, n=300) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    cpu = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return cpu


def main() -> None:
    x = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    nn_rms = torch.nn.RMSNorm(4096, device="cuda", dtype=torch.bfloat16)
    x2 = x.detach()
    rows = {
        "rms_norm fwd (no grad)": lambda: rms_norm(x2, w.detach()),
        "rms_norm raw _forward launch": lambda: _forward(x2, w.detach(), 1e-6, 0.0, True),
        "torch.nn.RMSNorm fwd (no grad)": lambda: nn_rms(x2),
        "rms_norm fwd+bwd": lambda: rms_norm(x, w).sum().backward(),
        "torch.nn.RMSNorm fwd+bwd": lambda: nn_rms(x).sum().backward(),
        "swiglu fwd (no grad)": lambda: swiglu(x2, x2),
        "F.silu(g)*u fwd (no grad)": lambda: F.silu(x2) * x2,
    }
    for name, fn in rows.items():
        print(f"{name:34s} {per_call_us(fn):8.1f} us CPU per call")


if __name__ == "__main__":
    main()
