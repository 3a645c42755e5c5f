"""The list of traps and baselines of the lab, loaded on demand (importing them imports torch)."""

from __future__ import annotations

import importlib

from gpudoctor.lab.trap import Baseline, Trap

TRAP_IDS = (
    "input_pipeline",
    "host_sync",
    "launch_bound",
    "fp32_matmul",
    "tf32_matmul",
    "fp32_attention",
    "unfused_elementwise",
    "naive_attention",
    "pageable_copy",
    "allocator_churn",
    "per_sample_loop",
    "optimizer_loop",
    "host_blocking_work",
    "misaligned_gemm",
    "small_gemm",
    "memory_pressure",
    "dynamic_shapes",
)

BASELINE_IDS = ("healthy_train", "healthy_infer", "healthy_closure")


def load_trap(trap_id: str) -> Trap:
    if trap_id not in TRAP_IDS:
        raise KeyError(f"unknown trap {trap_id!r}; known: {', '.join(TRAP_IDS)}")
    return importlib.import_module(f"gpudoctor.lab.traps.{trap_id}").TRAP


def load_traps() -> list[Trap]:
    return [load_trap(trap_id) for trap_id in TRAP_IDS]


def load_baselines() -> list[Baseline]:
    from gpudoctor.lab import healthy

    return [healthy.HEALTHY_TRAIN, healthy.HEALTHY_INFER, healthy.HEALTHY_CLOSURE]
