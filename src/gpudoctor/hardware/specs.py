"""Datasheet peaks per GPU: the ceilings used when nothing was measured on the card.

Dense peaks only (sparse "2:4" figures are never ceilings): where a datasheet prints only the
sparsity figure (NVIDIA marks those with an asterisk; the Blackwell datasheet says "all Tensor Core
numbers except FP64 with sparsity") the row holds half of it. Units: FLOP/s and bytes/s.

``matrix_flops`` keys: ``fp64`` (tensor-core / matrix FP64 where the part has it, else the FP64 FMA
rate the datasheet lists), ``fp32`` (non-tensor FMA), ``tf32``, ``bf16``, ``fp16``, ``fp8``,
``int8`` (OP/s). On GeForce cards the 16-bit and FP8 figures are the *FP32-accumulate* rates, which
is what PyTorch's matmuls use; those cards run FP16-accumulate at twice that, which we never use.
A dtype the source did not let us confirm is left out of the row (``Ceilings.matrix`` then falls
back to fp32), and the row's ``source`` says so.

Each row's ``source`` (shown in reports as "datasheet: ...") names the document in a few words;
``notes`` keeps the printed figures, what was halved and what could not be confirmed. Memory sizes
the vendor gives as "N GB" are stored as N GiB, as the driver reports them, except the H200 row.
Datasheet peaks are 10-25% above what a card reaches:
``gpudoctor bench`` replaces them with measured ceilings.

Lookup (`find_spec`) tries the row keys and names first, then each row's alias regexes in table
order: more specific rows (A100 80GB PCIe, H100 NVL, GB200...) come before the generic ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

T = 1e12
P = 1e15


@dataclass(frozen=True)
class GpuSpec:
    """One datasheet row."""

    key: str
    name: str
    aliases: tuple[str, ...]  # regexes matched against torch / NVML device names (lower-cased)
    matrix_flops: dict[str, float]  # dtype -> dense tensor-core (or FMA for fp32) FLOP/s
    vector_flops: float  # fp32 non-tensor FLOP/s (elementwise work)
    hbm_bytes_per_s: float  # device memory bandwidth (HBM or GDDR)
    memory_bytes: int
    l2_bytes: int  # L2 proper (0: not published / not confirmed); AMD's Infinity Cache is separate
    sm_count: int  # NVIDIA SMs, AMD compute units (0: not confirmed)
    source: str
    # Added fields (defaults keep older constructions valid).
    nvlink_bytes_per_s: float = 0.0  # GPU-to-GPU link total, both directions, as vendors quote it
    #                                 (NVLink; Infinity Fabric for AMD); 0: none / not confirmed
    pcie: str = ""  # host link generation, e.g. "Gen4 x16"; "" when not confirmed
    infinity_cache_bytes: int = 0  # AMD Infinity Cache (memory-side last-level cache), if any
    notes: str = ""  # provenance detail: printed figures, what was halved, what is unconfirmed


GIB = 1024**3
MIB = 1024**2

_GEFORCE_NOTE = ("16-bit and FP8 tensor figures are the FP32-accumulate rates (what PyTorch uses), "
                 "half the FP16-accumulate ones the same table also prints")


def _v100(key: str, name: str, aliases: tuple[str, ...], gib: int, sxm: bool) -> GpuSpec:
    if sxm:
        flops = {"fp16": 125 * T, "fp32": 15.7 * T, "fp64": 7.8 * T}
        source = "NVIDIA Tesla V100 datasheet (SXM2, dense)"
        notes = ("V100 SXM2: tensor 125 TF (FP16 inputs, FP16 or FP32 accumulate), FP32 15.7, FP64 "
                 "7.8, HBM2 900 GB/s, NVLink 300 GB/s, PCIe Gen3; cross-checked against NVIDIA's "
                 "'Ampere Architecture In-Depth' Table 3 (V100 SXM2: 80 SMs, L2 6144 KB, 900 GB/s). "
                 "No BF16/TF32/FP8 on Volta; INT8 is DP4A, not tensor, and not listed: left out")
    else:
        flops = {"fp16": 112 * T, "fp32": 14 * T, "fp64": 7 * T}
        source = "NVIDIA Tesla V100 datasheet (PCIe, dense)"
        notes = ("V100 PCIe: tensor 112 TF, FP32 14, FP64 7, HBM2 900 GB/s, PCIe Gen3 32 GB/s, no "
                 "NVLink; 80 SMs / 6 MB L2 as GV100. No BF16/TF32/FP8 on Volta; INT8 left out. The "
                 "V100S (130 TF, 1,134 GB/s) and the 150 W FHHL card are not this row")
    return GpuSpec(
        key=key, name=name, aliases=aliases, matrix_flops=flops, vector_flops=flops["fp32"],
        hbm_bytes_per_s=900e9, memory_bytes=gib * GIB, l2_bytes=6 * MIB, sm_count=80,
        source=source, nvlink_bytes_per_s=300e9 if sxm else 0.0, pcie="Gen3 x16", notes=notes,
    )


_A100_FLOPS = {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T,
               "int8": 624 * T, "fp64": 19.5 * T}
_A100_NOTES = ("A100 datasheet: TF32 156 | 312*, BF16/FP16 312 | 624*, INT8 624 | 1,248* (* = with "
               "sparsity); FP32 19.5; FP64 tensor core 19.5 (FMA 9.7) as 'fp64'; same compute for SXM "
               "and PCIe (the PCIe card has a lower TDP, not lower peaks). {mem}. 108 SMs, 40 MB L2 "
               "(Ampere architecture whitepaper). No FP8 on Ampere")
_H100_SXM_FLOPS = {"fp32": 67 * T, "tf32": 494.7 * T, "bf16": 989.4 * T, "fp16": 989.4 * T,
                   "fp8": 1978.9 * T, "int8": 1978.9 * T, "fp64": 66.9 * T}

SPECS: tuple[GpuSpec, ...] = (
    # ---------------------------------------------------------------- Hopper
    GpuSpec(
        key="h100-nvl",
        name="NVIDIA H100 NVL 94GB",
        aliases=(r"h100.*nvl",),
        matrix_flops={"fp32": 60 * T, "bf16": 835.5 * T, "fp16": 835.5 * T, "fp8": 1670.5 * T},
        vector_flops=60 * T,
        hbm_bytes_per_s=3.9e12,
        memory_bytes=94 * GIB,
        l2_bytes=50 * MIB,
        sm_count=132,
        source=("NVIDIA H100 Tensor Core GPU datasheet (H100 NVL, per GPU, dense = half the "
                "sparsity figure; TF32, INT8, FP64 not confirmed)"),
        nvlink_bytes_per_s=600e9,
        pcie="Gen5 x16",
        notes=("Datasheet (2024 revision) NVL column: BF16/FP16 1,671*, FP8 3,341*, FP32 60, 94 GB "
               "HBM3, 3.9 TB/s, NVLink bridge 600 GB/s, PCIe Gen5. The datasheet text itself was not "
               "found in the search corpus: dense BF16 ~835 / FP8 ~1,670 and FP32 60 / FP64 30 were "
               "confirmed only against secondary tables; TF32, INT8 and FP64 tensor core left out. "
               "132 SMs and 50 MB L2 as GH100 SXM5, not confirmed"),
    ),
    GpuSpec(
        key="h100-sxm",
        name="NVIDIA H100 SXM5 80GB",
        # a bare "h100" on the command line means the SXM part, the one clusters are built from
        aliases=(r"h100.*(sxm|hbm3)", r"^nvidia h100$", r"^h100$"),
        matrix_flops=dict(_H100_SXM_FLOPS),
        vector_flops=67 * T,
        hbm_bytes_per_s=3.35e12,
        memory_bytes=80 * GIB,
        l2_bytes=50 * MIB,
        sm_count=132,
        source="NVIDIA H100 Tensor Core GPU datasheet (SXM5, dense)",
        nvlink_bytes_per_s=900e9,
        pcie="Gen5 x16",
        notes=("H100 datasheet (2023) SXM5 column, confirmed against a copy of it and the H100 "
               "architecture whitepaper Table 1: TF32 989*, BF16/FP16 1,979*, FP8/INT8 3,958* (* = "
               "with sparsity; rows hold half), FP32 67, FP64 tensor core 67 (FMA 34) as 'fp64'; "
               "3,350 GB/s, 50 MB L2, 132 SMs, NVLink 900 GB/s, PCIe Gen5 128 GB/s"),
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
        l2_bytes=50 * MIB,
        sm_count=114,
        source="NVIDIA H100 Tensor Core GPU datasheet (PCIe, dense)",
        nvlink_bytes_per_s=600e9,
        pcie="Gen5 x16",
        notes=("H100 datasheet (2023) PCIe column and whitepaper Table 1: TF32 756*, BF16/FP16 "
               "1,513*, FP8/INT8 3,026* (rows hold half), FP32 51, FP64 tensor core 51 (FMA 26); "
               "2,000 GB/s HBM2e, 50 MB L2, 114 SMs, NVLink bridge 600 GB/s, PCIe Gen5 128 GB/s"),
    ),
    GpuSpec(
        key="h200",
        name="NVIDIA H200 SXM 141GB",
        aliases=(r"h200",),
        matrix_flops=dict(_H100_SXM_FLOPS),
        vector_flops=67 * T,
        hbm_bytes_per_s=4.8e12,
        memory_bytes=141 * 10**9,
        l2_bytes=50 * MIB,
        sm_count=132,
        source="NVIDIA H200 Tensor Core GPU datasheet (SXM, dense)",
        nvlink_bytes_per_s=900e9,
        pcie="Gen5 x16",
        notes=("H200 SXM: same GH100 compute as H100 SXM5 (FP8 3,958* etc., rows hold half); 141 GB "
               "HBM3e, 4.8 TB/s, NVLink 900 GB/s, PCIe Gen5 128 GB/s. The 'h200' alias also catches "
               "'NVIDIA H200 NVL' (a 600 W PCIe card rated lower) and 'GH200' parts, which get these "
               "SXM figures (unchanged behaviour; no confirmed H200 NVL figures to give them a row)"),
    ),
    # ---------------------------------------------------------------- Blackwell
    GpuSpec(
        key="gb200",
        name="NVIDIA GB200 (per Blackwell GPU)",
        aliases=(r"\bgb200\b",),
        matrix_flops={"fp32": 80 * T, "tf32": 1.25 * P, "bf16": 2.5 * P, "fp16": 2.5 * P,
                      "fp8": 5 * P, "int8": 5 * P, "fp64": 40 * T},
        vector_flops=80 * T,
        hbm_bytes_per_s=8e12,
        memory_bytes=186 * GIB,
        l2_bytes=0,
        sm_count=0,
        source=("NVIDIA Blackwell datasheet, 2025 (GB200 NVL72 per-GPU column; dense = half the "
                "sparsity figure)"),
        nvlink_bytes_per_s=1.8e12,
        pcie="",
        notes=("'Individual Blackwell GPU Specifications', GB200 NVL72 column (one GPU of a GB200 "
               "superchip, configurable up to 1,200 W). Footnote: 'all Tensor Core numbers except "
               "FP64 with sparsity' - printed TF32 2.5, FP16/BF16 5, FP8/INT8 10 P(FL)OPS, rows hold "
               "half; FP32 80 TF, FP64/FP64 tensor 40 TF; 186 GB HBM3e, 8 TB/s; NVLink 5 1.8 TB/s; "
               "host CPU over NVLink-C2C (900 GB/s). SM count, L2 size and PCIe generation not "
               "confirmed for this form factor (0 / empty). Early 2024 figures (192 GB, FP64 45, "
               "FP32 90) superseded"),
    ),
    GpuSpec(
        key="b200",
        name="NVIDIA B200 (HGX) 180GB",
        aliases=(r"(?<![a-z])b200",),
        matrix_flops={"fp32": 75 * T, "tf32": 1.1 * P, "bf16": 2.25 * P, "fp16": 2.25 * P,
                      "fp8": 4.5 * P, "int8": 4.5 * P, "fp64": 37 * T},
        vector_flops=75 * T,
        hbm_bytes_per_s=7.7e12,
        memory_bytes=180 * GIB,
        l2_bytes=0,
        sm_count=148,
        source=("NVIDIA Blackwell datasheet, 2025 (HGX B200 column; dense = half the sparsity "
                "figure)"),
        nvlink_bytes_per_s=1.8e12,
        pcie="Gen5 x16",
        notes=("'Individual Blackwell GPU Specifications', HGX B200 column (up to 1,000 W). Footnote "
               "'all Tensor Core numbers except FP64 with sparsity': printed TF32 2.2, FP16/BF16 "
               "4.5, FP8/INT8 9 P(FL)OPS, rows hold half; FP32 75 TF, FP64 37 TF; 180 GB HBM3e, "
               "7.7 TB/s; NVLink 5 1.8 TB/s; PCIe Gen5 128 GB/s. 148 SMs (74 per die) as measured by "
               "Chips and Cheese, 'Nvidia's B200'. L2 size not published (0). Early 2024 figures "
               "(192 GB, 8 TB/s) superseded"),
    ),
    # ---------------------------------------------------------------- Ampere data center
    GpuSpec(
        key="a100-pcie-80gb",
        name="NVIDIA A100 PCIe 80GB",
        aliases=(r"a100[- ]80gb[- ]pcie", r"a100-pcie-80gb"),
        matrix_flops=dict(_A100_FLOPS),
        vector_flops=19.5 * T,
        hbm_bytes_per_s=1.935e12,
        memory_bytes=80 * GIB,
        l2_bytes=40 * MIB,
        sm_count=108,
        source="NVIDIA A100 Tensor Core GPU datasheet (80GB PCIe, dense)",
        nvlink_bytes_per_s=600e9,
        pcie="Gen4 x16",
        notes=_A100_NOTES.format(mem="80 GB HBM2e, 1,935 GB/s, NVLink bridge for 2 GPUs 600 GB/s, "
                                 "PCIe Gen4"),
    ),
    GpuSpec(
        key="a100-pcie-40gb",
        name="NVIDIA A100 PCIe 40GB",
        aliases=(r"a100-pcie-40gb", r"a100.*pcie"),
        matrix_flops=dict(_A100_FLOPS),
        vector_flops=19.5 * T,
        hbm_bytes_per_s=1.555e12,
        memory_bytes=40 * GIB,
        l2_bytes=40 * MIB,
        sm_count=108,
        source="NVIDIA A100 Tensor Core GPU datasheet (40GB PCIe, dense)",
        nvlink_bytes_per_s=600e9,
        pcie="Gen4 x16",
        notes=_A100_NOTES.format(mem="40 GB HBM2, 1,555 GB/s, NVLink bridge for 2 GPUs 600 GB/s, "
                                 "PCIe Gen4"),
    ),
    GpuSpec(
        key="a100-sxm-80gb",
        name="NVIDIA A100 SXM4 80GB",
        aliases=(r"a100-sxm\d?-80gb", r"a100.*80"),
        matrix_flops=dict(_A100_FLOPS),
        vector_flops=19.5 * T,
        hbm_bytes_per_s=2.039e12,
        memory_bytes=80 * GIB,
        l2_bytes=40 * MIB,
        sm_count=108,
        source="NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB, dense)",
        nvlink_bytes_per_s=600e9,
        pcie="Gen4 x16",
        notes=_A100_NOTES.format(mem="80 GB HBM2e, 2,039 GB/s, NVLink 600 GB/s, PCIe Gen4"),
    ),
    GpuSpec(
        key="a100-40gb",
        name="NVIDIA A100 SXM4 40GB",
        aliases=(r"a100-sxm\d?-40gb", r"a100"),
        matrix_flops=dict(_A100_FLOPS),
        vector_flops=19.5 * T,
        hbm_bytes_per_s=1.555e12,
        memory_bytes=40 * GIB,
        l2_bytes=40 * MIB,
        sm_count=108,
        source="NVIDIA A100 Tensor Core GPU datasheet (SXM4 40GB, dense)",
        nvlink_bytes_per_s=600e9,
        pcie="Gen4 x16",
        notes=_A100_NOTES.format(mem="40 GB HBM2, 1,555 GB/s, NVLink 600 GB/s, PCIe Gen4. Also the "
                                 "fallback row for any other 'A100' device name"),
    ),
    GpuSpec(
        key="a10g",
        name="NVIDIA A10G (AWS)",
        aliases=(r"\ba10g\b",),
        matrix_flops={},
        vector_flops=31.2 * T,
        hbm_bytes_per_s=600e9,
        memory_bytes=24 * GIB,
        l2_bytes=0,
        sm_count=0,
        source=("no NVIDIA A10G datasheet; Baseten 'A10 vs A10G' (memory); no tensor figure "
                "confirmed, left out; vector = A10 FP32 floor"),
        pcie="",
        notes=("The A10G is an AWS-only GA102 part (EC2 G5) with no public NVIDIA datasheet. Baseten, "
               "'NVIDIA A10 vs A10G for ML model inference': same 24 GB GDDR6 at 600 GB/s as the A10, "
               "lower tensor throughput and higher CUDA-core throughput than the A10. No tensor "
               "figure could be confirmed, so matrix_flops is empty and the ceilings fall back to "
               "vector_flops, set to the A10's datasheet FP32 (31.2 TF) as a floor: bf16 MFU against "
               "it is overstated. SM count, L2 and PCIe generation not confirmed"),
    ),
    GpuSpec(
        key="a10",
        name="NVIDIA A10",
        aliases=(r"\ba10\b",),
        matrix_flops={"fp32": 31.2 * T, "bf16": 125 * T, "fp16": 125 * T, "int8": 250 * T},
        vector_flops=31.2 * T,
        hbm_bytes_per_s=600e9,
        memory_bytes=24 * GIB,
        l2_bytes=6 * MIB,
        sm_count=72,
        source=("NVIDIA A10 Tensor Core GPU datasheet (dense = half the sparsity figure; TF32 not "
                "confirmed)"),
        pcie="Gen4 x16",
        notes=("A10 datasheet: BF16/FP16 125 | 250*, INT8 250 | 500* (* = with sparsity), FP32 31.2; "
               "24 GB GDDR6, 600 GB/s; PCIe Gen4 x16, no NVLink; 72 SMs, 6 MB L2 (GA102). TF32 "
               "(62.5 dense as recalled) could not be confirmed: left out. FP64 not listed"),
    ),
    # ---------------------------------------------------------------- Volta
    _v100("v100-sxm2-32gb", "NVIDIA Tesla V100 SXM2 32GB", (r"v100-sxm2-32gb",), 32, sxm=True),
    _v100("v100-sxm2-16gb", "NVIDIA Tesla V100 SXM2 16GB", (r"v100-sxm2",), 16, sxm=True),
    _v100("v100-pcie-32gb", "NVIDIA Tesla V100 PCIe 32GB", (r"v100-pcie-32gb",), 32, sxm=False),
    _v100("v100-pcie-16gb", "NVIDIA Tesla V100 PCIe 16GB", (r"v100-pcie",), 16, sxm=False),
    # ---------------------------------------------------------------- Ada data center
    GpuSpec(
        key="l40s",
        name="NVIDIA L40S",
        aliases=(r"\bl40s\b",),
        matrix_flops={"fp32": 91.6 * T, "tf32": 183 * T, "bf16": 362.05 * T, "fp16": 362.05 * T,
                      "fp8": 733 * T},
        vector_flops=91.6 * T,
        hbm_bytes_per_s=864e9,
        memory_bytes=48 * GIB,
        l2_bytes=96 * MIB,
        sm_count=142,
        source="NVIDIA L40S datasheet (dense, unstarred column; INT8 not confirmed)",
        pcie="Gen4 x16",
        notes=("L40S datasheet: TF32 183 | 366*, BF16/FP16 362.05 | 733*, FP8 733 | 1,466* (* = with "
               "sparsity), FP32 91.6; 48 GB GDDR6, 864 GB/s; PCIe Gen4 x16, no NVLink; 142 SMs (568 "
               "tensor cores). INT8 could not be confirmed: left out; FP64 not listed. 96 MB L2 is "
               "the full-AD102 figure from the Ada whitepaper, not confirmed for the L40S"),
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
        l2_bytes=48 * MIB,
        sm_count=58,
        source="NVIDIA L4 Tensor Core GPU datasheet (dense)",
        pcie="Gen4 x16",
        notes=("L4 datasheet prints only sparsity figures: TF32 120*, FP16/BF16 242*, FP8/INT8 485* - "
               "rows hold half; FP32 30.3; 24 GB GDDR6, 300 GB/s; 48 MB L2, 58 SMs (7,424 CUDA "
               "cores); PCIe Gen4 x16, no NVLink; FP64 not listed"),
    ),
    # ---------------------------------------------------------------- GeForce
    GpuSpec(
        key="rtx-4090",
        name="NVIDIA GeForce RTX 4090",
        aliases=(r"rtx 4090$",),
        matrix_flops={"fp32": 82.6 * T, "tf32": 82.6 * T, "bf16": 165.2 * T, "fp16": 165.2 * T,
                      "fp8": 330.3 * T, "int8": 660.6 * T},
        vector_flops=82.6 * T,
        hbm_bytes_per_s=1008e9,
        memory_bytes=24 * GIB,
        l2_bytes=72 * MIB,
        sm_count=128,
        source="NVIDIA Ada GPU architecture whitepaper (GeForce RTX 4090, dense, FP32-accumulate)",
        pcie="Gen4 x16",
        notes=(f"Ada whitepaper appendix, RTX 4090: {_GEFORCE_NOTE} - BF16/FP16 165.2 (FP16-acc "
               "330.3), FP8 330.3 (FP16-acc 660.6); TF32 82.6, INT8 660.6, FP32 82.6; 24 GB GDDR6X, "
               "1,008 GB/s, 72 MB L2, 128 SMs; PCIe Gen4, no NVLink. 'RTX 4090 D' and laptop 4090s "
               "are different chips and do not match"),
    ),
    GpuSpec(
        key="rtx-3090",
        name="NVIDIA GeForce RTX 3090",
        aliases=(r"rtx 3090$",),
        matrix_flops={"fp32": 35.6 * T, "tf32": 35.6 * T, "bf16": 71 * T, "fp16": 71 * T},
        vector_flops=35.6 * T,
        hbm_bytes_per_s=936e9,
        memory_bytes=24 * GIB,
        l2_bytes=6 * MIB,
        sm_count=82,
        source=("NVIDIA Ampere GA102 GPU architecture whitepaper (GeForce RTX 3090, dense, "
                "FP32-accumulate; INT8 not confirmed)"),
        nvlink_bytes_per_s=112.5e9,
        pcie="Gen4 x16",
        notes=(f"GA102 whitepaper appendix A, RTX 3090: {_GEFORCE_NOTE} - BF16/FP16 71 (FP16-acc "
               "142); TF32 35.6, FP32 35.6; 24 GB GDDR6X, 936 GB/s, 6 MB L2, 82 SMs; PCIe Gen4; "
               "NVLink bridge 112.5 GB/s total (GA102 third-gen NVLink, four x4 links). INT8 could "
               "not be confirmed: left out; no FP8 on Ampere. 'RTX 3090 Ti' does not match"),
    ),
    # ---------------------------------------------------------------- AMD
    GpuSpec(
        key="mi300x",
        name="AMD Instinct MI300X",
        aliases=(r"mi300x",),
        matrix_flops={"fp32": 163.4 * T, "tf32": 653.7 * T, "bf16": 1307.4 * T,
                      "fp16": 1307.4 * T, "fp8": 2614.9 * T, "int8": 2614.9 * T,
                      "fp64": 163.4 * T},
        vector_flops=163.4 * T,
        hbm_bytes_per_s=5.3e12,
        memory_bytes=192 * GIB,
        l2_bytes=32 * MIB,
        sm_count=304,
        source=("AMD ROCm docs, MI300 series microarchitecture peak table (MI300X, dense); "
                "L2 32 MB, 256 MB Infinity Cache kept separate"),
        nvlink_bytes_per_s=896e9,
        pcie="Gen5 x16",
        infinity_cache_bytes=256 * MIB,
        notes=("ROCm 'AMD Instinct MI300 series microarchitecture', MI300X table (per-CU FLOPS/clock "
               "x 304 CUs at 2.1 GHz, i.e. dense; AMD's datasheet 'with sparsity' figures are twice "
               "these): FP64 matrix 163.4 (vector 81.7), FP32 163.4, TF32 653.7, FP16/BF16 1,307.4, "
               "FP8/INT8 2,614.9; 5.3 TB/s HBM3, 192 GB. ROCm 'GPU hardware specifications': 304 "
               "CUs, L2 32 MB (4 MB per XCD), Infinity Cache ('L3') 256 MB - in "
               "infinity_cache_bytes, not l2_bytes. 7 Infinity Fabric links x 128 GB/s = 896 GB/s "
               "(the 'nvlink' field); PCIe Gen5 x16 to the host"),
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


def require_spec(name: str) -> GpuSpec:
    """``find_spec`` for a ``--gpu`` option: the row, or a one-line error listing the known ones."""
    spec = find_spec(name)
    if spec is None:
        from gpudoctor.errors import UnknownGpuError

        raise UnknownGpuError(f"unknown --gpu {name!r}; known: {', '.join(known_names())}")
    return spec


def known_names() -> list[str]:
    return [spec.key for spec in SPECS]
