"""Datasheet peaks per GPU: the ceilings used when nothing was measured on the card.

Dense peaks only (sparse "2:4" figures are never ceilings). Units: FLOP/s and bytes/s.
Each row names its source document; figures are NVIDIA's published dense numbers for the SXM
(or named) form factor. Datasheet peaks are 10-25% above what a card reaches: ``gpudoctor bench``
(a later release) replaces them with measured ceilings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

T = 1e12


@dataclass(frozen=True)
class GpuSpec:
    """One datasheet row."""

    key: str
    name: str
    aliases: tuple[str, ...]  # regexes matched against torch / NVML device names
    matrix_flops: dict[str, float]  # dtype -> dense tensor-core (or FMA for fp32) FLOP/s
    vector_flops: float  # fp32 non-tensor FLOP/s (elementwise work)
    hbm_bytes_per_s: float
    memory_bytes: int
    l2_bytes: int
    sm_count: int
    source: str


GIB = 1024**3

SPECS: tuple[GpuSpec, ...] = (
    GpuSpec(
        key="h100-sxm",
        name="NVIDIA H100 SXM5 80GB",
        aliases=(r"h100.*(sxm|hbm3)", r"^nvidia h100$"),
        matrix_flops={"fp32": 67 * T, "tf32": 494.7 * T, "bf16": 989.4 * T, "fp16": 989.4 * T,
                      "fp8": 1978.9 * T, "int8": 1978.9 * T, "fp64": 66.9 * T},
        vector_flops=67 * T,
        hbm_bytes_per_s=3.35e12,
        memory_bytes=80 * GIB,
        l2_bytes=50 * 1024**2,
        sm_count=132,
        source="NVIDIA H100 Tensor Core GPU datasheet (SXM5, dense)",
    ),
    GpuSpec(
        key="h100-pcie",
        name="NVIDIA H100 PCIe 80GB",
        aliases=(r"h100.*pcie",),
        matrix_flops={"fp32": 51 * T, "tf32": 378 * T, "bf16": 756 * T, "fp16": 756 * T,
                      "fp8": 1513 * T, "int8": 1513 * T, "fp64": 51 * T},
        vector_flops=51 * T,
        hbm_bytes_per_s=2.0e12,
        memory_bytes=80 * GIB,
        l2_bytes=50 * 1024**2,
        sm_count=114,
        source="NVIDIA H100 Tensor Core GPU datasheet (PCIe, dense)",
    ),
    GpuSpec(
        key="h200",
        name="NVIDIA H200 SXM 141GB",
        aliases=(r"h200",),
        matrix_flops={"fp32": 67 * T, "tf32": 494.7 * T, "bf16": 989.4 * T, "fp16": 989.4 * T,
                      "fp8": 1978.9 * T, "int8": 1978.9 * T, "fp64": 66.9 * T},
        vector_flops=67 * T,
        hbm_bytes_per_s=4.8e12,
        memory_bytes=141 * 10**9,
        l2_bytes=50 * 1024**2,
        sm_count=132,
        source="NVIDIA H200 Tensor Core GPU datasheet (SXM, dense)",
    ),
    GpuSpec(
        key="a100-sxm-80gb",
        name="NVIDIA A100 SXM4 80GB",
        aliases=(r"a100.*80", r"a100-sxm4-80gb"),
        matrix_flops={"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T,
                      "int8": 624 * T, "fp64": 19.5 * T},
        vector_flops=19.5 * T,
        hbm_bytes_per_s=2.039e12,
        memory_bytes=80 * GIB,
        l2_bytes=40 * 1024**2,
        sm_count=108,
        source="NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB, dense)",
    ),
    GpuSpec(
        key="a100-40gb",
        name="NVIDIA A100 40GB",
        aliases=(r"a100",),
        matrix_flops={"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T,
                      "int8": 624 * T, "fp64": 19.5 * T},
        vector_flops=19.5 * T,
        hbm_bytes_per_s=1.555e12,
        memory_bytes=40 * GIB,
        l2_bytes=40 * 1024**2,
        sm_count=108,
        source="NVIDIA A100 Tensor Core GPU datasheet (40GB, dense)",
    ),
    GpuSpec(
        key="l4",
        name="NVIDIA L4",
        aliases=(r"\bl4\b",),
        matrix_flops={"fp32": 30.3 * T, "tf32": 60 * T, "bf16": 121 * T, "fp16": 121 * T,
                      "fp8": 242.5 * T, "int8": 242.5 * T},
        vector_flops=30.3 * T,
        hbm_bytes_per_s=300e9,
        memory_bytes=24 * GIB,
        l2_bytes=48 * 1024**2,
        sm_count=58,
        source="NVIDIA L4 Tensor Core GPU datasheet (dense)",
    ),
)


def find_spec(name: str) -> GpuSpec | None:
    """The datasheet row for a device name as torch or NVML report it ("NVIDIA H100 80GB HBM3")."""
    low = name.strip().lower()
    for spec in SPECS:
        if low == spec.key or low == spec.name.lower():
            return spec
    for spec in SPECS:
        if any(re.search(alias, low) for alias in spec.aliases):
            return spec
    return None


def known_names() -> list[str]:
    return [spec.key for spec in SPECS]
