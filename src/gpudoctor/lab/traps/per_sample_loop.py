"""per-sample-loop: a Python loop over the samples of a batch, one matrix-vector product each.

Code written sample by sample (or node by node) computes ``W @ x_i`` for every sample ``i`` and
every layer. Each product is a separate small kernel that reads the whole weight matrix to do the
work of one row, so the same weights are read once per sample, the tensor cores see vectors
instead of matrices, and the host pays one launch per sample and layer. The fixed twin computes
the whole batch at once with one matrix multiply per layer, ``X @ W.T``.
"""

from __future__ import annotations

import torch

from gpudoctor.lab.common import seed, size
from gpudoctor.lab.trap import Trap, Workload


def _build(device: str, batched: bool) -> Workload:
    seed(9)
    batch, width, depth = size(device, 32, 4), size(device, 2048, 64), 3
    weights = [
        torch.randn(width, width, device=device, dtype=torch.bfloat16) / width**0.5
        for _ in range(depth)
    ]
    biases = [torch.randn(width, device=device, dtype=torch.bfloat16) for _ in range(depth)]
    x = torch.randn(batch, width, device=device, dtype=torch.bfloat16)

    def forward_sample(sample: torch.Tensor) -> torch.Tensor:
        h = sample
        for w, b in zip(weights, biases):
            h = torch.relu(w @ h + b)
        return h

    def forward_batch(samples: torch.Tensor) -> torch.Tensor:
        h = samples
        for w, b in zip(weights, biases):
            h = torch.relu(torch.addmm(b, h, w.t()))
        return h

    def step() -> None:
        with torch.no_grad():
            if batched:
                out = forward_batch(x)
            else:
                out = torch.stack([forward_sample(x[i]) for i in range(batch)])
            out.sum()

    return Workload(step, flops_per_step=2 * batch * width * width * depth)


TRAP = Trap(
    id="per_sample_loop",
    title="Per-sample Python loop of matrix-vector products",
    expected_finding="per-sample-loop",
    build_sick=lambda device: _build(device, batched=False),
    build_fixed=lambda device: _build(device, batched=True),
    with_stack=True,
    description="3 bf16 layers of width 2048 applied sample by sample to a batch of 32 "
    "(W @ x_i + b, relu). Fixed: one addmm per layer over the whole batch.",
)
