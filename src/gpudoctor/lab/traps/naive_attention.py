"""naive-attention: attention computed with an explicit seq x seq score matrix.

``q @ k.transpose(-2, -1) * scale``, a causal ``masked_fill``, ``softmax`` and ``@ v`` write and
re-read a score tensor of batch x heads x seq x seq elements several times, forward and backward;
at sequence lengths in the thousands these memory-bound passes dwarf the useful matrix work,
and the scores also cost a lot of memory. The fixed twin calls
``F.scaled_dot_product_attention(..., is_causal=True)``, which dispatches to a fused
flash-attention kernel that never materializes the scores.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from gpudoctor.lab.common import adamw, seed, size
from gpudoctor.lab.trap import Trap, Workload


class Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, seq: int, fused: bool) -> None:
        super().__init__()
        self.n_heads, self.fused = n_heads, fused
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.shape[-1]))
            scores = scores.masked_fill(self.mask[:s, :s], float("-inf"))
            y = torch.softmax(scores, dim=-1) @ v
        return x + self.proj(y.transpose(1, 2).reshape(b, s, d))


def _build(device: str, fused: bool) -> Workload:
    seed(6)
    batch, seq = size(device, 4, 2), size(device, 2048, 128)
    d, heads, layers = size(device, 1024, 64), size(device, 16, 4), 2
    model = nn.Sequential(*[Attention(d, heads, seq, fused) for _ in range(layers)])
    model = model.to(device, torch.bfloat16)
    opt = adamw(model.parameters(), device)
    x = torch.randn(batch, seq, d, device=device, dtype=torch.bfloat16)

    def step() -> None:
        loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    flops = 3 * layers * (2 * batch * seq * 4 * d * d + 4 * batch * seq * seq * d)
    return Workload(step, flops_per_step=flops)


TRAP = Trap(
    id="naive_attention",
    title="Causal attention through an explicit score matrix instead of a fused kernel",
    expected_finding="naive-attention",
    build_sick=lambda device: _build(device, fused=False),
    build_fixed=lambda device: _build(device, fused=True),
    description="2 bf16 attention layers, batch 4, 16 heads of 64, seq 2048, training; scores "
    "materialized, masked_fill, softmax, @ v. Fixed: F.scaled_dot_product_attention(is_causal).",
)
