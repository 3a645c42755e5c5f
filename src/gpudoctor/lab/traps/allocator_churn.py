"""allocator-churn: ``torch.cuda.empty_cache()`` and changing sizes force cudaMalloc every step.

PyTorch's caching allocator normally serves tensors from memory it already holds. Calling
``torch.cuda.empty_cache()`` hands all cached blocks back to the driver, so the next step's large
tensors go through ``cudaMalloc`` again, and ``cudaFree`` waits for the device to finish. Sizes
that change from step to step defeat the cache even without it. The driver calls are slow and
synchronizing, so the GPU idles while the host manages memory. The fixed twin allocates one
workspace of the largest size once and works in views of it, with no ``empty_cache``.
"""

from __future__ import annotations

import torch

from gpudoctor.lab.common import on_gpu, seed, size
from gpudoctor.lab.trap import Trap, Workload


def _build(device: str, churn: bool) -> Workload:
    seed(8)
    width = 4096
    row_cycle = [size(device, n, n // 256) for n in (16384, 20480, 24576, 28672)]
    weight = torch.randn(width, width, device=device, dtype=torch.bfloat16) / width**0.5
    workspace = None
    if not churn:
        workspace = torch.empty(3, max(row_cycle), width, device=device, dtype=torch.bfloat16)
    counter = [0]

    def step() -> None:
        rows = row_cycle[counter[0] % len(row_cycle)]
        counter[0] += 1
        if churn:
            a = torch.empty(rows, width, device=device, dtype=torch.bfloat16)
            b = torch.empty(rows, width, device=device, dtype=torch.bfloat16)
            c = torch.empty(rows, width, device=device, dtype=torch.bfloat16)
        else:
            a, b, c = (workspace[i, :rows] for i in range(3))
        a.normal_()
        torch.matmul(a, weight, out=b)
        torch.tanh(b, out=c)
        c.mul_(a).sum()
        del a, b, c
        if churn and on_gpu(device):
            torch.cuda.empty_cache()

    mean_rows = sum(row_cycle) / len(row_cycle)
    return Workload(step, flops_per_step=2 * mean_rows * width * width)


TRAP = Trap(
    id="allocator_churn",
    title="empty_cache() and varying tensor sizes force cudaMalloc/cudaFree every step",
    expected_finding="allocator-churn",
    build_sick=lambda device: _build(device, churn=True),
    build_fixed=lambda device: _build(device, churn=False),
    description="Each step allocates three 128-224 MB bf16 tensors of a size that cycles, does a "
    "matmul, a tanh and a product, and calls torch.cuda.empty_cache(). Fixed: one preallocated "
    "workspace.",
)
