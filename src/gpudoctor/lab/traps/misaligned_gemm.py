"""misaligned-gemm: bf16 matrix dimensions that are not multiples of 8.

Tensor-core GEMM kernels load tiles with 16-byte vector loads (and, on Hopper, the TMA copy
engine), which need every row of a bf16 operand to start on a 16-byte boundary, that is a
leading dimension divisible by 8. With a hidden size of 4095 and a vocabulary of 50257 the
library has to fall back to kernels with narrow, unaligned loads, and partial tiles waste
work, so the same matrix products run measurably slower per FLOP. The fixed twin pads the
dimensions to multiples of 64 (4096 and 50304).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from gpudoctor.lab.common import seed, size
from gpudoctor.lab.trap import Trap, Workload


def _build(device: str, hidden: int, vocab: int) -> Workload:
    seed(12)
    tokens = size(device, 4096, 64)
    if size(device, 0, 1):
        hidden, vocab = hidden // 32, vocab // 64
    model = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, vocab))
    model = model.to(device, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(tokens, hidden, device=device, dtype=torch.bfloat16)
    labels = torch.randint(0, vocab, (tokens,), device=device)

    def step() -> None:
        loss = F.cross_entropy(model(x).float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    flops = 3 * 2 * tokens * hidden * (hidden + vocab)
    return Workload(step, flops_per_step=flops, info=lambda: {"hidden": hidden, "vocab": vocab})


TRAP = Trap(
    id="misaligned_gemm",
    title="bf16 GEMMs with dimensions that are not multiples of 8 (4095, 50257)",
    expected_finding="misaligned-gemm",
    build_sick=lambda device: _build(device, 4095, 50257),
    build_fixed=lambda device: _build(device, 4096, 50304),
    description="bf16 MLP + LM head training, 4096 tokens, hidden 4095, vocab 50257. "
    "Fixed: hidden 4096, vocab 50304.",
)
