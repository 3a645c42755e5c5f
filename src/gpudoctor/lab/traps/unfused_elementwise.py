"""unfused-elementwise: long chains of separate elementwise kernels on large activations.

A hand-written tanh-GELU, a hand-written LayerNorm (mean, subtract, pow, mean, add, rsqrt,
multiply, scale, shift), a separate bias add, a hand-made dropout mask and a residual add each
launch their own kernel, and each kernel reads and writes the whole activation tensor. These
kernels are bound by memory bandwidth and, added up, move many times the bytes that one fused
pass would, so they take longer than the matrix multiplies. The fixed twin computes the same
function with the built-in fused operators (``F.layer_norm``, ``F.linear`` with bias,
``F.gelu(approximate="tanh")``, ``F.dropout``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gpudoctor.lab.common import adamw, seed, size
from gpudoctor.lab.trap import Trap, Workload

P_DROP = 0.1


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.tanh(0.79788456 * (x + 0.044715 * x**3)))


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    mean = x.mean(dim=-1, keepdim=True)
    centered = x - mean
    var = centered.pow(2).mean(dim=-1, keepdim=True)
    return centered * torch.rsqrt(var + 1e-5) * weight + bias


def dropout(x: torch.Tensor) -> torch.Tensor:
    keep = torch.rand_like(x) > P_DROP
    return x * keep / (1 - P_DROP)


class MLPBlock(nn.Module):
    def __init__(self, d_model: int, fused: bool) -> None:
        super().__init__()
        self.fused = fused
        self.norm = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, 4 * d_model)
        self.down = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            h = F.layer_norm(x, x.shape[-1:], self.norm.weight, self.norm.bias)
            h = F.gelu(self.up(h), approximate="tanh")
            return x + F.dropout(self.down(h), P_DROP)
        h = layer_norm(x, self.norm.weight, self.norm.bias)
        h = gelu_tanh(h @ self.up.weight.t() + self.up.bias)
        h = h @ self.down.weight.t()
        h = h + self.down.bias
        return x + dropout(h)


def _build(device: str, fused: bool) -> Workload:
    seed(5)
    d = size(device, 512, 64)
    tokens = size(device, 65536, 128)
    layers = 2
    model = nn.Sequential(*[MLPBlock(d, fused) for _ in range(layers)]).to(device, torch.bfloat16)
    opt = adamw(model.parameters(), device)
    x = torch.randn(tokens, d, device=device, dtype=torch.bfloat16)

    def step() -> None:
        loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return Workload(step, flops_per_step=3 * 2 * tokens * 8 * d * d * layers)


TRAP = Trap(
    id="unfused_elementwise",
    title="Hand-written GELU, LayerNorm, bias and dropout as separate elementwise kernels",
    expected_finding="unfused-elementwise",
    build_sick=lambda device: _build(device, fused=False),
    build_fixed=lambda device: _build(device, fused=True),
    description="bf16 MLP blocks (2 x d=512, 64k tokens) with hand-written tanh-GELU, LayerNorm, "
    "bias add and dropout. Fixed: F.layer_norm, F.linear, F.gelu(approximate='tanh'), F.dropout.",
)
