"""memory-pressure: the card is nearly full (the VRAM wall, seed 002).

Near the limit the caching allocator frees its cache and retries (cudaFree + cudaMalloc inside the
step), batch size cannot grow, and the next longer sequence is an OOM. The saving counts the
GPU idle behind those allocator calls; the severity reflects the headroom left.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.rules.allocator_churn import PRESSURE_FRACTION
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import sources_of_host
from gpudoctor.rules.finding import (
    ALL_IDLE,
    Evidence,
    Finding,
    Fix,
    make_finding,
)

ID = "memory-pressure"


def check(a: Analysis) -> Finding | None:
    mem = a.memory
    if not mem.applicable or mem.capacity_bytes == 0 or mem.peak_reserved_fraction < PRESSURE_FRACTION:
        return None
    idle = a.idle.ms("allocator")
    saving = idle  # host time inside the allocator calls is already part of this idle
    culprits = a.idle.culprits.get("allocator", np.empty(0, np.int64))
    finding = make_finding(
        ID,
        "GPU memory is nearly full",
        a.step_ms,
        saving,
        f"Peak reserved memory is {mem.peak_reserved_bytes / 1e9:.1f} GB of {mem.capacity_bytes / 1e9:.1f} GB "
        f"({100 * mem.peak_reserved_fraction:.1f}%); the allocator runs {mem.malloc_calls_per_step:.0f} "
        "cudaMalloc/cudaFree calls per step to stay under the limit.",
        Evidence(
            numbers={
                "peak_reserved_GB": round(mem.peak_reserved_bytes / 1e9, 2),
                "peak_allocated_GB": round(mem.peak_allocated_bytes / 1e9, 2),
                "capacity_GB": round(mem.capacity_bytes / 1e9, 2),
                "peak_reserved_pct": round(100 * mem.peak_reserved_fraction, 1),
                "fragmentation_pct": round(100 * mem.fragmentation, 1),
                "allocator_calls_per_step": round(mem.malloc_calls_per_step, 1),
                "gpu_idle_behind_allocator_ms_per_step": round(idle, 3),
            },
            sources=sources_of_host(a.trace, culprits) if culprits.size else (),
        ),
        (
            Fix("Recompute activations in backward instead of keeping them",
                "model.gradient_checkpointing_enable()   # HF; or torch.utils.checkpoint.checkpoint(block, x)"),
            Fix("Halve activation and weight bytes with bf16", "with torch.autocast('cuda', dtype=torch.bfloat16): ..."),
            Fix("Smaller micro-batch with gradient accumulation (same effective batch)",
                "loss = model(x_micro) / accum; loss.backward()\nif (i + 1) % accum == 0: opt.step(); opt.zero_grad()"),
            Fix("Cut fragmentation", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
            Fix("Shard or shrink optimizer states (8-bit Adam, FSDP / ZeRO)", ""),
        ),
        wrong_fix="torch.cuda.empty_cache() in the loop does not free memory that tensors hold; it only adds allocator calls.",
        idle_ms=ALL_IDLE,
        min_severity="major",  # the wall itself is a major problem even when its time cost is small
    )
    return finding


RULE = Rule(ID, "GPU memory pressure", check, __doc__ or "")
