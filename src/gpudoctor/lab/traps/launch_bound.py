"""launch-bound: hundreds of tiny kernels per step, each shorter than its launch.

A deep stack of 64-wide layers at batch 8 issues several small kernels per layer (matmul, norm,
activation, residual add). Each kernel finishes in a few microseconds, less than the host needs to
go through Python, the dispatcher and ``cudaLaunchKernel`` for the next one, so the GPU sits idle
between kernels and the step time is the host's launch time. The fixed twin captures the same
forward pass once in a CUDA graph and replays it with a single launch per step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gpudoctor.lab.common import graphed, on_gpu, seed, size
from gpudoctor.lab.trap import Trap, Workload


class TinyStack(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer, norm in zip(self.layers, self.norms):
            x = x + F.silu(layer(norm(x)))
        return x


def _build(device: str, use_graph: bool) -> Workload:
    seed(3)
    model = TinyStack(64, size(device, 96, 8)).to(device).eval()
    static_in = torch.randn(8, 64, device=device)
    fresh = torch.randn(16, 8, 64, device=device)
    counter = [0]

    def forward() -> torch.Tensor:
        with torch.no_grad():
            return model(static_in)

    run = graphed(forward) if use_graph and on_gpu(device) else forward

    def step() -> None:
        static_in.copy_(fresh[counter[0] % len(fresh)])
        counter[0] += 1
        run()

    return Workload(step, flops_per_step=2 * 8 * 64 * 64 * len(model.layers))


TRAP = Trap(
    id="launch_bound",
    title="Hundreds of tiny kernels per step, bound by launch overhead",
    expected_finding="launch-bound",
    build_sick=lambda device: _build(device, use_graph=False),
    build_fixed=lambda device: _build(device, use_graph=True),
    description="Inference through 96 layers of width 64 at batch 8 (LayerNorm, Linear, SiLU, "
    "add per layer), eager. Fixed: the same forward captured in a CUDA graph.",
)
