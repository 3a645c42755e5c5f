"""allocator-churn: ``torch.cuda.empty_cache()`` and changing sizes force cudaMalloc every step.

PyTorch's caching allocator normally serves tensors from memory it already holds. Calling
``torch.cuda.empty_cache()`` hands all cached blocks back to the driver, so the next step's large
tensors go through ``cudaMalloc`` again, and ``cudaFree`` waits for the device to finish. Sizes
that change from step to step defeat the cache even without it. The driver calls are slow and
synchronizing, so the GPU idles while the host manages memory. The fixed twin allocates one
workspace of the largest sizes once and works in views of it, with no ``empty_cache``.
"""

from __future__ import annotations

import torch

from gpudoctor.lab.common import on_gpu, seed, size
from gpudoctor.lab.trap import Trap, Workload

TENSORS = 16
MIB = 1 << 20


def _numels(device: str, step: int) -> list[int]:
    unit = size(device, MIB, 1024)
    return [(8 + 8 * ((step + j) % 4)) * unit for j in range(TENSORS)]


def _build(device: str, churn: bool) -> Workload:
    seed(8)
    workspace = None
    if not churn:
        numel = 32 * size(device, MIB, 1024)
        workspace = torch.empty(TENSORS, numel, device=device, dtype=torch.bfloat16)
    counter = [0]

    def step() -> None:
        numels = _numels(device, counter[0])
        counter[0] += 1
        tensors = []
        for j, n in enumerate(numels):
            if churn:
                t = torch.empty(n, device=device, dtype=torch.bfloat16)
            else:
                t = workspace[j, :n]
            tensors.append(t.normal_())
        torch.stack([t.sum(dtype=torch.float32) for t in tensors]).sum()
        tensors.clear()
        if churn and on_gpu(device):
            torch.cuda.empty_cache()

    return Workload(step)


TRAP = Trap(
    id="allocator_churn",
    title="empty_cache() and varying tensor sizes force cudaMalloc/cudaFree every step",
    expected_finding="allocator-churn",
    build_sick=lambda device: _build(device, churn=True),
    build_fixed=lambda device: _build(device, churn=False),
    description="Each step allocates sixteen bf16 tensors of 16-64 MB whose sizes cycle, fills "
    "each with random numbers and reduces it, then calls torch.cuda.empty_cache(). Fixed: one "
    "preallocated workspace, no empty_cache.",
)
