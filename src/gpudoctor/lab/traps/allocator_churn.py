"""allocator-churn: ``torch.cuda.empty_cache()`` inside the step forces cudaMalloc / cudaFree per
tensor.

PyTorch's caching allocator normally serves tensors from memory it already holds. Calling
``torch.cuda.empty_cache()`` hands every cached block back to the driver: the next tensor goes
through ``cudaMalloc`` again, and ``cudaFree`` waits for the device to finish. Called after each
tensor (a "free memory as soon as possible" habit), every tensor of the step pays a driver
allocation and the GPU drains between them, while the host manages memory. The fixed twin
allocates a workspace of the largest sizes once and works in views of it, with no ``empty_cache``.

Why after each tensor, not once a step: one ``empty_cache()`` at the end of a step cost 2x in a
fresh process but nothing once the lab had run the fixed twin in the same process (the driver then
served the step's ``cudaMalloc`` calls at once); after each tensor the trap holds in every round of
the lab's own timing (``benchmarks/probes/probe_alloc_churn.py --lab``; benchmarks/BENCHMARKS-lab.md
"Evidence moved from the source: lab, diff and report").
"""

from __future__ import annotations

import torch

from gpudoctor.lab.common import on_gpu, seed, size
from gpudoctor.lab.trap import Trap, Workload

TENSORS = 8
MIB = 1 << 20


def _numels(device: str, step: int) -> list[int]:
    unit = size(device, MIB, 1024)
    return [(8 + 8 * ((step + j) % 4)) * unit for j in range(TENSORS)]


def _build(device: str, churn: bool) -> Workload:
    seed(8)
    largest = 32 * size(device, MIB, 1024)
    workspace = None if churn else torch.empty(TENSORS, largest, device=device,
                                               dtype=torch.bfloat16)
    gpu = on_gpu(device)
    counter = [0]

    def step() -> None:
        sums = []
        for j, n in enumerate(_numels(device, counter[0])):
            t = torch.empty(n, device=device, dtype=torch.bfloat16) if churn else workspace[j, :n]
            sums.append(t.normal_().sum(dtype=torch.float32))
            del t
            if churn and gpu:
                torch.cuda.empty_cache()
        torch.stack(sums).sum()
        counter[0] += 1

    return Workload(step)


TRAP = Trap(
    id="allocator_churn",
    title="empty_cache() after each tensor forces cudaMalloc/cudaFree for every allocation",
    expected_finding="allocator-churn",
    build_sick=lambda device: _build(device, churn=True),
    build_fixed=lambda device: _build(device, churn=False),
    description="Each step allocates eight bf16 tensors of 16-64 MB whose sizes cycle, fills each "
    "with random numbers and reduces it, and calls torch.cuda.empty_cache() after each. Fixed: one "
    "preallocated workspace, no empty_cache.",
)
