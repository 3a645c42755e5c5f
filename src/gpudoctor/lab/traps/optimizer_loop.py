"""optimizer-loop: a per-parameter Python loop in the optimizer step.

``torch.optim.AdamW(..., foreach=False)`` updates each parameter tensor separately: for every one
of the model's parameter tensors the host runs a handful of tiny elementwise kernels (moment
updates, square root, division, weight decay, the update itself), each with its Python and
launch overhead. A multi-task model with dozens of small per-task heads has many parameter
tensors but a cheap forward pass, so the optimizer's loop takes most of the step. The fixed
twin uses ``fused=True``, which updates all parameters in a few multi-tensor kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gpudoctor.lab.common import autocast, seed, size
from gpudoctor.lab.trap import Trap, Workload


class MultiTaskModel(nn.Module):
    """A shared trunk and many small task heads, evaluated as one concatenated projection."""

    def __init__(self, width: int, n_heads: int, head_width: int) -> None:
        super().__init__()
        self.trunk = nn.Linear(width, width)
        self.heads = nn.ModuleList(nn.Linear(width, head_width) for _ in range(n_heads))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.trunk(x))
        weight = torch.cat([head.weight for head in self.heads])
        bias = torch.cat([head.bias for head in self.heads])
        return F.linear(h, weight, bias)


def _build(device: str, fused: bool) -> Workload:
    seed(10)
    width, n_heads, head_width = size(device, 1024, 64), size(device, 32, 4), 64
    model = MultiTaskModel(width, n_heads, head_width).to(device)
    if fused:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    batch = size(device, 4096, 16)
    x = torch.randn(batch, width, device=device)
    target = torch.randn(batch, n_heads * head_width, device=device)

    def step() -> None:
        with autocast(device):
            loss = F.mse_loss(model(x).float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    flops = 3 * 2 * batch * width * (width + n_heads * head_width)
    return Workload(step, flops_per_step=flops)


TRAP = Trap(
    id="optimizer_loop",
    title="Per-parameter AdamW loop (foreach=False) over 66 parameter tensors",
    expected_finding="optimizer-loop",
    build_sick=lambda device: _build(device, fused=False),
    build_fixed=lambda device: _build(device, fused=True),
    description="Multi-task model: a 1024-wide trunk and 32 task heads of 64 outputs (66 "
    "parameter tensors), bf16 autocast, batch 4096, AdamW(foreach=False). Fixed: "
    "AdamW(fused=True).",
)
