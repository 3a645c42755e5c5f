"""small-gemm: many tiny matrix multiplies that leave the tensor cores idle.

Running 32 independent micro-batches of 16 rows one after another through 32 layers of width 256
issues 1024 GEMMs of 16 x 256 x 256. Each one fills only a handful of the GPU's
multiprocessors and finishes in a few microseconds, dominated by fixed costs (kernel start,
loading the weight tile, writing back), so the achieved FLOP rate is a tiny fraction of peak.
The work is replayed from a CUDA graph, so launch overhead is not what is slow: the kernels
themselves are. The fixed twin stacks the micro-batches and does the same FLOPs as 32 GEMMs of
512 x 256 x 256, also from a CUDA graph.
"""

from __future__ import annotations

import torch

from gpudoctor.lab.common import graphed, on_gpu, seed, size
from gpudoctor.lab.trap import Trap, Workload

ROWS, WIDTH = 16, 256


def _build(device: str, stacked: bool) -> Workload:
    seed(13)
    micro, depth = size(device, 32, 4), size(device, 32, 4)
    dtype = torch.bfloat16
    weights = [
        torch.randn(WIDTH, WIDTH, device=device, dtype=dtype) / WIDTH**0.5 for _ in range(depth)
    ]
    biases = [torch.randn(WIDTH, device=device, dtype=dtype) * 0.1 for _ in range(depth)]
    static_in = torch.randn(micro, ROWS, WIDTH, device=device, dtype=dtype)
    fresh = torch.randn(4, micro, ROWS, WIDTH, device=device, dtype=dtype)
    counter = [0]

    def layers(h: torch.Tensor) -> torch.Tensor:
        for w, b in zip(weights, biases):
            h = torch.addmm(b, h, w)
        return h

    def forward() -> torch.Tensor:
        if stacked:
            return layers(static_in.view(micro * ROWS, WIDTH))
        return torch.stack([layers(static_in[i]) for i in range(micro)])

    run = graphed(forward) if on_gpu(device) else forward

    def step() -> None:
        static_in.copy_(fresh[counter[0] % len(fresh)])
        counter[0] += 1
        run()

    return Workload(step, flops_per_step=2 * micro * ROWS * WIDTH * WIDTH * depth)


TRAP = Trap(
    id="small_gemm",
    title="1024 tiny bf16 GEMMs (16 x 256 x 256) per step, replayed from a CUDA graph",
    expected_finding="small-gemm",
    build_sick=lambda device: _build(device, stacked=False),
    build_fixed=lambda device: _build(device, stacked=True),
    description="32 micro-batches of 16 rows through 32 bf16 layers of width 256, one GEMM per "
    "micro-batch and layer, captured in a CUDA graph. Fixed: micro-batches stacked, 32 GEMMs.",
)
