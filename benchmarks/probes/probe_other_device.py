"""The fused ops on tensors of a GPU other than the current one (a model spread over GPUs with
device_map="auto"): forward and backward against the native math. ``python
benchmarks/probes/probe_other_device.py`` on a machine with 2+ GPUs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gpudoctor.kernels._layer_norm import layer_norm
from gpudoctor.kernels._rms_norm import _rms_norm_native, rms_norm
from gpudoctor.kernels.cross_entropy import linear_cross_entropy
from gpudoctor.kernels.glu import swiglu


def grads(fn, *inputs):
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    out = fn(*leaves)
    out.float().sum().backward()
    return [out.detach().float()] + [t.grad.float() for t in leaves if t.grad is not None]


def main() -> None:
    assert torch.cuda.device_count() >= 2, "needs 2 GPUs"
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 1)
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16, generator=g)
    w = torch.randn(4096, device=dev, dtype=torch.bfloat16, generator=g)
    u = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16, generator=g)
    head = torch.randn(32000, 4096, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
    t = torch.randint(0, 32000, (4096,), device=dev, generator=g)
    cases = {
        "rms_norm": (
            lambda a, b: rms_norm(a, b),
            lambda a, b: _rms_norm_native(a, b, 1e-6, 0.0, True),
            (x, w),
        ),
        "layer_norm": (
            lambda a, b: layer_norm(a, b, b),
            lambda a, b: F.layer_norm(a, (4096,), b, b),
            (x, w),
        ),
        "swiglu": (lambda a, b: swiglu(a, b), lambda a, b: F.silu(a) * b, (x, u)),
        "linear_cross_entropy": (
            lambda a, b: linear_cross_entropy(a, b, t),
            lambda a, b: F.cross_entropy((a @ b.T).float(), t),
            (x, head),
        ),
    }
    for name, (ours, ref, inputs) in cases.items():
        got, want = grads(ours, *inputs), grads(ref, *inputs)
        worst = max(float((a - b).abs().max() / (b.abs().max() + 1e-12)) for a, b in zip(got, want))
        print(
            f"{name:22s} on {inputs[0].device} (current cuda:{torch.cuda.current_device()}): "
            f"max relative error {worst:.2e}"
        )
    torch.cuda.synchronize(dev)


if __name__ == "__main__":
    main()
