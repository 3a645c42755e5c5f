"""Forward + backward GPU time of the fused norms at each num_warps, for the wide tiles (8192 and
16384 elements) where the tutorial's rule stops: ``python benchmarks/probes/probe_warps.py`` on a GPU.
Prints one line per (op, H, M, warps); "None" is the launcher's own choice."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # benchmarks/: the helpers imported below
from bench_kernels import gpu_us

import gpudoctor.kernels._layer_norm as ln_mod
import gpudoctor.kernels._rms_norm as rms_mod

DT = torch.bfloat16


def fwd_bwd(op: str, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dy: torch.Tensor):
    def run() -> None:
        x.grad = w.grad = b.grad = None
        y = (
            rms_mod.rms_norm(x, w)
            if op == "rms"
            else ln_mod._LayerNormFunction.apply(x, w, b, 1e-5)
        )
        torch.autograd.backward(y, dy)

    return run


def main() -> None:
    choose = rms_mod.warps_for
    for h, m in ((16384, 512), (16384, 2048), (8192, 1024), (8192, 4096), (4096, 2048)):
        x = torch.randn(m, h, device="cuda", dtype=DT, requires_grad=True)
        w = torch.randn(h, device="cuda", dtype=DT, requires_grad=True)
        b = torch.randn(h, device="cuda", dtype=DT, requires_grad=True)
        dy = torch.randn(m, h, device="cuda", dtype=DT)
        for op in ("rms", "ln"):
            for warps in (None, 4, 8, 16, 32):
                rms_mod.warps_for = ln_mod.warps_for = (
                    choose if warps is None else (lambda _b, n=warps: n)
                )
                print((op, h, m, warps, round(gpu_us(fwd_bwd(op, x, w, b, dy)), 1)), flush=True)
        rms_mod.warps_for = ln_mod.warps_for = choose


if __name__ == "__main__":
    main()
