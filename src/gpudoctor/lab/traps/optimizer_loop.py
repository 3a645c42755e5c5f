"""optimizer-loop: a per-parameter Python loop in the optimizer step.

``torch.optim.AdamW(..., foreach=False)`` updates each parameter tensor separately: for every one
of the model's many small tensors the host runs a handful of tiny elementwise kernels (moment
updates, square root, division, weight decay, the update itself). With dozens of tensors the
optimizer step launches hundreds of kernels that each do almost nothing, and it takes longer
than forward and backward together. The fixed twin uses ``fused=True``, which updates all
parameters in a few multi-tensor kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gpudoctor.lab.common import autocast, seed, size
from gpudoctor.lab.trap import Trap, Workload


def _build(device: str, fused: bool) -> Workload:
    seed(10)
    width, depth = size(device, 1024, 64), size(device, 12, 4)
    blocks = [(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU()) for _ in range(depth)]
    model = nn.Sequential(*[m for block in blocks for m in block]).to(device)
    if fused:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    batch = size(device, 2048, 16)
    x = torch.randn(batch, width, device=device)
    target = torch.randn(batch, width, device=device)

    def step() -> None:
        with autocast(device):
            loss = F.mse_loss(model(x).float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Workload(step, flops_per_step=3 * 2 * batch * width * width * depth)


TRAP = Trap(
    id="optimizer_loop",
    title="Per-parameter AdamW loop (foreach=False) over 48 parameter tensors",
    expected_finding="optimizer-loop",
    build_sick=lambda device: _build(device, fused=False),
    build_fixed=lambda device: _build(device, fused=True),
    description="12 x (LayerNorm, Linear 1024, GELU) trained in bf16 autocast with "
    "AdamW(foreach=False). Fixed: AdamW(fused=True).",
)
