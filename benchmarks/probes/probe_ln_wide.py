"""LayerNorm on wide rows (16384 and wider, bf16 and fp32): the kernel with the split backward against
PyTorch's op and Liger's, forward + backward GPU time and the largest error against F.layer_norm in
fp32. ``python benchmarks/probes/probe_ln_wide.py`` on a GPU (Liger-Kernel optional)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # benchmarks/: the helpers imported below
from bench_kernels import fwd_bwd, gpu_us

import gpudoctor.kernels._layer_norm as ln_mod


def main() -> None:
    ln_mod.NATIVE_BELOW = ()  # the kernel at every size: what this probe measures
    try:
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    except ImportError:
        LigerLayerNormFunction = None
    for dtype, h, m in (
        (torch.bfloat16, 16384, 128),
        (torch.bfloat16, 16384, 512),
        (torch.bfloat16, 16384, 2048),
        (torch.float32, 16384, 512),
        (torch.bfloat16, 32768, 512),
        (torch.bfloat16, 40000, 256),
    ):
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(m, h, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
        w = (1 + 0.1 * torch.randn(h, device="cuda", dtype=dtype, generator=g)).requires_grad_(True)
        b = (0.1 * torch.randn(h, device="cuda", dtype=dtype, generator=g)).requires_grad_(True)
        cands = {
            "ours": lambda x, w, b: ln_mod.layer_norm(x, w, b, 1e-5),
            "torch": lambda x, w, b, h=h: F.layer_norm(x, (h,), w, b, 1e-5),
        }
        if LigerLayerNormFunction is not None and h <= 65536:
            cands["liger"] = lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-5)
        times = {}
        for name, f in cands.items():
            try:
                times[name] = round(gpu_us(fwd_bwd(f, x, w, b)), 1)
            except Exception as exc:  # noqa: BLE001 - Liger refuses some widths
                times[name] = type(exc).__name__
        outs = []
        for f in (
            cands["ours"],
            lambda x, w, b, h=h: F.layer_norm(x.float(), (h,), w.float(), b.float(), 1e-5),
        ):
            xs, ws, bs = (t.detach().requires_grad_(True) for t in (x, w, b))
            y = f(xs, ws, bs)
            y.float().pow(2).sum().backward()
            outs.append([y.float(), xs.grad.float(), ws.grad.float(), bs.grad.float()])
        err = max(float((a - r).abs().max() / r.abs().max()) for a, r in zip(*outs))
        print(
            f"{dtype!s:15s} {m:5d} x {h:6d}  GPU us {times}  max relative error vs fp32 {err:.2e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
