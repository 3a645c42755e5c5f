"""pageable-copy: large host-to-device copies from pageable memory.

``tensor.to("cuda")`` on an ordinary (pageable) CPU tensor makes the driver stage the data
through a pinned bounce buffer chunk by chunk; the copy runs well below the link's bandwidth and
the host thread is blocked until it is done, so nothing else is queued meanwhile. The fixed twin
keeps the source in page-locked memory (``pin_memory()``) and copies with ``non_blocking=True``,
a direct DMA at full speed that does not stall the host.
"""

from __future__ import annotations

import torch

from gpudoctor.lab.common import on_gpu, seed, size
from gpudoctor.lab.trap import Trap, Workload


def _build(device: str, pinned: bool) -> Workload:
    seed(7)
    rows, cols = size(device, 8192, 64), 4096
    host = torch.randn(rows, cols)
    if pinned and on_gpu(device):
        host = host.pin_memory()
    weight = torch.randn(cols, 1024, device=device, dtype=torch.bfloat16) / cols**0.5

    def step() -> None:
        batch = host.to(device, non_blocking=pinned)
        h = batch.to(torch.bfloat16) @ weight
        for _ in range(3):
            h = torch.tanh(h) @ weight[:1024]
        h.float().mean()

    return Workload(step, flops_per_step=2 * rows * 1024 * (cols + 3 * 1024))


TRAP = Trap(
    id="pageable_copy",
    title="128 MB host-to-device copy from pageable memory every step",
    expected_finding="pageable-copy",
    build_sick=lambda device: _build(device, pinned=False),
    build_fixed=lambda device: _build(device, pinned=True),
    description="Each step copies a 128 MB float32 pageable CPU tensor to the GPU, then a few "
    "bf16 matmuls. Fixed: the source is pinned and copied with non_blocking=True.",
)
