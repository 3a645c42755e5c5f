"""memory-pressure: training near the card's capacity with changing tensor sizes.

Most of the card is taken by another tenant (a ballast tensor here), and each step accumulates
gradients over two micro-batches of different lengths, so the large activation tensors change
size inside the step. The caching allocator cannot keep blocks for both sizes: when the next
size does not fit, ``cudaMalloc`` fails, the allocator synchronizes, returns its cached blocks to
the driver (``cudaFree``) and retries (``num_alloc_retries`` in ``torch.cuda.memory_stats()``),
several times per step. Peak reserved memory sits above 92% of the card. The fixed twin does
the same tokens in equal micro-batches of the smaller size, whose blocks stay cached.
"""

from __future__ import annotations

import torch
from torch import nn

from gpudoctor.lab.common import on_gpu, seed, size
from gpudoctor.lab.trap import Trap, Workload

MAX_SPLIT_MB = 128
UNLIMITED_SPLIT_MB = 1 << 44


def _micro_batches(device: str, uniform: bool) -> list[int]:
    small, large = size(device, 12288, 48), size(device, 18432, 72)
    if uniform:
        unit = small // 2
        return [unit] * ((small + large) // unit)
    return [small, large]


def _allocator_settings(settings: str) -> None:
    """The caching allocator's settings changed in process: torch's accelerator-wide call where it
    has one (torch.cuda.memory._set_allocator_settings warns that it is deprecated in its favour)."""
    set_settings = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if set_settings is None:
        set_settings = torch.cuda.memory._set_allocator_settings
    set_settings(settings)


def _build(device: str, uniform: bool) -> Workload:
    seed(14)
    gpu = on_gpu(device)
    width, depth = size(device, 4096, 64), 4
    if gpu:
        torch.cuda.empty_cache()
        _allocator_settings(f"max_split_size_mb:{MAX_SPLIT_MB}")
    model = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.GELU())])
    model = model.to(device, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    sizes = _micro_batches(device, uniform)
    data = [torch.randn(n, width, device=device, dtype=torch.bfloat16) for n in sizes]

    def micro_step(x: torch.Tensor) -> None:
        model(x).float().square().mean().backward()

    def step() -> None:
        for x in data:
            micro_step(x)
        opt.step()
        opt.zero_grad(set_to_none=True)

    facts: dict = {"micro_batches": sizes}
    ballast = None
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        micro_step(data[-1] if not uniform else data[0])
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        headroom = int(1.2 * peak) + (256 << 20)
        ballast = torch.empty(max(free - headroom, 0), dtype=torch.uint8, device=device)
        torch.cuda.reset_peak_memory_stats()
        retries0 = torch.cuda.memory_stats().get("num_alloc_retries", 0)
        facts.update(
            total_bytes=total,
            ballast_bytes=ballast.numel(),
            headroom_bytes=headroom,
            largest_micro_batch_peak_bytes=peak,
        )

    def info() -> dict:
        if not gpu:
            return facts
        stats = torch.cuda.memory_stats()
        return {
            **facts,
            "num_alloc_retries": stats.get("num_alloc_retries", 0) - retries0,
            "num_device_alloc": stats.get("num_device_alloc", 0),
            "num_device_free": stats.get("num_device_free", 0),
            "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
            "peak_reserved_fraction": torch.cuda.max_memory_reserved() / facts["total_bytes"],
        }

    def close() -> None:
        nonlocal ballast
        ballast = None
        data.clear()
        if gpu:
            torch.cuda.empty_cache()
            _allocator_settings(f"max_split_size_mb:{UNLIMITED_SPLIT_MB}")

    tokens = sum(sizes)
    return Workload(step, close, flops_per_step=3 * 2 * tokens * width * width * depth, info=info)


TRAP = Trap(
    id="memory_pressure",
    title="Training at >92% of GPU memory with micro-batches of changing size",
    expected_finding="memory-pressure",
    build_sick=lambda device: _build(device, uniform=False),
    build_fixed=lambda device: _build(device, uniform=True),
    description="A ballast tensor leaves 1.2x the largest micro-batch's peak free; a bf16 MLP "
    "(4 x 4096) accumulates gradients over micro-batches of 12288 and 18432 tokens, with "
    "max_split_size_mb=128. Fixed: 5 equal micro-batches of 6144 tokens.",
)
