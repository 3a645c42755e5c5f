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

import msgspec

T = 1e12
P = 1e15


class GpuSpec(msgspec.Struct, frozen=True):
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
                 "'Ampere Architecture In-Depth' Table 3 (V100 SXM2: 80 SMs, L2 6144 KB, "
                 "900 GB/s). No BF16/TF32/FP8 on Volta; INT8 is DP4A, not tensor, and not listed: "
                 "left out")
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
               "sparsity); FP32 19.5; FP64 tensor core 19.5 (FMA 9.7) as 'fp64'; same compute "
               "for SXM and PCIe (the PCIe card has a lower TDP, not lower peaks). {mem}. 108 SMs, "
               "40 MB L2 (Ampere architecture whitepaper). No FP8 on Ampere")
_H100_SXM_FLOPS = {"fp32": 67 * T, "tf32": 494.7 * T, "bf16": 989.4 * T, "fp16": 989.4 * T,
                   "fp8": 1978.9 * T, "int8": 1978.9 * T, "fp64": 66.9 * T}

SPECS: tuple[GpuSpec, ...] = (
    # ---------------------------------------------------------------- Hopper
    # https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
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
               "HBM3, 3.9 TB/s, NVLink bridge 600 GB/s, PCIe Gen5. The datasheet text itself "
               "was not found in the search corpus: dense BF16 ~835 / FP8 ~1,670 and FP32 60 / "
               "FP64 30 were confirmed only against secondary tables; TF32, INT8 and FP64 tensor "
               "core left out. 132 SMs and 50 MB L2 as GH100 SXM5, not confirmed"),
    ),
    # https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
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
    # https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
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
    # https://www.nvidia.com/en-us/data-center/h200/
    GpuSpec(
        key="h200",
        name="NVIDIA H200 SXM 141GB",
        # not preceded by a letter: "GH200" is the Grace Hopper rows'
        aliases=(r"(?<![a-z])h200",),
        matrix_flops=dict(_H100_SXM_FLOPS),
        vector_flops=67 * T,
        hbm_bytes_per_s=4.8e12,
        memory_bytes=141 * 10**9,
        l2_bytes=50 * MIB,
        sm_count=132,
        source="NVIDIA H200 Tensor Core GPU datasheet (SXM, dense)",
        nvlink_bytes_per_s=900e9,
        pcie="Gen5 x16",
        notes=("H200 SXM: same GH100 compute as H100 SXM5 (FP8 3,958* etc., rows hold "
               "half); 141 GB HBM3e, 4.8 TB/s, NVLink 900 GB/s, PCIe Gen5 128 GB/s. The 'h200' "
               "alias also catches 'NVIDIA H200 NVL' (a 600 W PCIe card rated lower), which gets "
               "these SXM figures (no confirmed H200 NVL figures to give it a row); GH200 parts "
               "have rows of their own"),
    ),
    # https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/ (GH200 specifications table)
    GpuSpec(
        key="gh200-144gb",
        name="NVIDIA GH200 144GB HBM3e",
        aliases=(r"\bgh200\b.*144",),
        matrix_flops=dict(_H100_SXM_FLOPS),
        vector_flops=67 * T,
        hbm_bytes_per_s=4.9e12,
        memory_bytes=144 * GIB,
        l2_bytes=50 * MIB,
        sm_count=132,
        source="NVIDIA GH200 Grace Hopper Superchip specifications (144GB HBM3e, dense)",
        nvlink_bytes_per_s=900e9,
        pcie="",
        notes=("GH200 specifications, the superchip's Hopper GPU: FP64 34, FP64 tensor 67 (as "
               "'fp64'), FP32 67, TF32 494 | 989*, BF16/FP16 990 | 1,979*, FP8/INT8 1,979 | 3,958* "
               "(* = with sparsity; the row holds the H100 SXM5 dense column, the same "
               "figures); HBM3e version: 144 GB, 4.9 TB/s. NVLink-C2C to the Grace CPU 900 GB/s "
               "(the host link: no PCIe generation). SM count and L2 as GH100 SXM5, not confirmed "
               "for the superchip"),
    ),
    # https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/ (GH200 specifications table)
    GpuSpec(
        key="gh200",
        name="NVIDIA GH200 480GB (96GB HBM3)",
        # torch prints "NVIDIA GH200 480GB": the 480 GB are the Grace CPU's LPDDR5X, the GPU has 96
        # GB
        aliases=(r"\bgh200\b",),
        matrix_flops=dict(_H100_SXM_FLOPS),
        vector_flops=67 * T,
        hbm_bytes_per_s=4.0e12,
        memory_bytes=96 * GIB,
        l2_bytes=50 * MIB,
        sm_count=132,
        source="NVIDIA GH200 Grace Hopper Superchip specifications (96GB HBM3, dense)",
        nvlink_bytes_per_s=900e9,
        pcie="",
        notes=("GH200 specifications: the compute column of the 144GB row (TF32 494, "
               "BF16/FP16 990, FP8/INT8 1,979 dense; FP32 67); HBM3 version: 96 GB, 4 TB/s, beside "
               "480 GB LPDDR5X on the Grace side (what the device name counts). SM count and L2 as "
               "GH100 SXM5, not confirmed for the superchip"),
    ),
    # https://www.nvidia.cn/data-center/h800/ (H800 datasheet, PCIe column)
    GpuSpec(
        key="h800-pcie",
        name="NVIDIA H800 PCIe 80GB",
        aliases=(r"(?<![a-z])h800.*pcie",),
        matrix_flops={"fp32": 51 * T, "tf32": 378 * T, "bf16": 756 * T, "fp16": 756 * T,
                      "fp8": 1513 * T, "int8": 1513 * T, "fp64": 0.8 * T},
        vector_flops=51 * T,
        hbm_bytes_per_s=2.0e12,
        memory_bytes=80 * GIB,
        l2_bytes=50 * MIB,
        sm_count=114,
        source="NVIDIA H800 Tensor Core GPU datasheet (PCIe, dense)",
        nvlink_bytes_per_s=400e9,
        pcie="Gen5 x16",
        notes=("H800 datasheet PCIe column: the H100 PCIe compute (TF32 756*, BF16/FP16 "
               "1,513*, FP8/INT8 3,026*, rows hold half; FP32 51) with FP64 cut to 0.8 TF and "
               "NVLink to 400 GB/s; 80 GB HBM2e, 2 TB/s. SMs and L2 as H100 PCIe, not confirmed "
               "for the H800"),
    ),
    # https://www.nvidia.cn/data-center/h800/ (H800 datasheet, SXM column)
    GpuSpec(
        key="h800",
        name="NVIDIA H800 SXM5 80GB",
        aliases=(r"(?<![a-z])h800\b",),
        matrix_flops={**_H100_SXM_FLOPS, "fp64": 1 * T},
        vector_flops=67 * T,
        hbm_bytes_per_s=3.35e12,
        memory_bytes=80 * GIB,
        l2_bytes=50 * MIB,
        sm_count=132,
        source="NVIDIA H800 Tensor Core GPU datasheet (SXM, dense)",
        nvlink_bytes_per_s=400e9,
        pcie="Gen5 x16",
        notes=("H800 datasheet SXM column: the H100 SXM5 compute (TF32 989*, BF16/FP16 1,979*, "
               "FP8/INT8 3,958*, rows hold half; FP32 67) with FP64 and FP64 tensor cut to 1 TF "
               "and NVLink to 400 GB/s; 80 GB HBM3, 3.35 TB/s. SMs and L2 as H100 SXM5, not "
               "confirmed for the H800. The H20 has no public NVIDIA datasheet, so no row (its "
               "figures circulate only in secondary tables)"),
    ),
    # ---------------------------------------------------------------- Blackwell
    # https://resources.nvidia.com/en-us-blackwell-architecture/blackwell-architecture-technical-brief
    # (and the Blackwell datasheet)
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
               "FP64 with sparsity' - printed TF32 2.5, FP16/BF16 5, FP8/INT8 10 P(FL)OPS, "
               "rows hold half; FP32 80 TF, FP64/FP64 tensor 40 TF; 186 GB HBM3e, 8 TB/s; NVLink 5 "
               "1.8 TB/s; host CPU over NVLink-C2C (900 GB/s). SM count, L2 size and PCIe "
               "generation not confirmed for this form factor (0 / empty). Early 2024 figures (192 "
               "GB, FP64 45, FP32 90) superseded"),
    ),
    # https://resources.nvidia.com/en-us-blackwell-architecture/blackwell-architecture-technical-brief
    # (and the Blackwell datasheet)
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
        notes=("'Individual Blackwell GPU Specifications', HGX B200 column (up to 1,000 W). "
               "Footnote 'all Tensor Core numbers except FP64 with sparsity': printed TF32 2.2, "
               "FP16/BF16 4.5, FP8/INT8 9 P(FL)OPS, rows hold half; FP32 75 TF, FP64 37 TF; 180 "
               "GB HBM3e, 7.7 TB/s; NVLink 5 1.8 TB/s; PCIe Gen5 128 GB/s. 148 SMs (74 per die) as "
               "measured by Chips and Cheese, 'Nvidia's B200'. L2 size not published (0). Early "
               "2024 figures (192 GB, 8 TB/s) superseded"),
    ),
    # ---------------------------------------------------------------- Ampere data center
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
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
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
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
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
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
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
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
    # no NVIDIA datasheet; https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/
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
        notes=("The A10G is an AWS-only GA102 part (EC2 G5) with no public NVIDIA datasheet. "
               "Baseten, 'NVIDIA A10 vs A10G for ML model inference': same 24 GB GDDR6 at 600 GB/s "
               "as the A10, lower tensor throughput and higher CUDA-core throughput than the A10. "
               "No tensor figure could be confirmed, so matrix_flops is empty and the ceilings "
               "fall back to vector_flops, set to the A10's datasheet FP32 (31.2 TF) as a floor: "
               "bf16 MFU against it is overstated. SM count, L2 and PCIe generation not confirmed"),
    ),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf
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
        notes=("A10 datasheet: BF16/FP16 125 | 250*, INT8 250 | 500* (* = with sparsity), "
               "FP32 31.2; 24 GB GDDR6, 600 GB/s; PCIe Gen4 x16, no NVLink; 72 SMs, 6 MB L2 "
               "(GA102). TF32 (62.5 dense as recalled) could not be confirmed: left out. FP64 "
               "not listed"),
    ),
    # https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf
    GpuSpec(
        key="a40",
        name="NVIDIA A40",
        aliases=(r"\ba40\b",),
        matrix_flops={"fp32": 37.4 * T, "tf32": 74.8 * T, "bf16": 149.7 * T, "fp16": 149.7 * T,
                      "int8": 299.3 * T},
        vector_flops=37.4 * T,
        hbm_bytes_per_s=696e9,
        memory_bytes=48 * GIB,
        l2_bytes=6 * MIB,
        sm_count=84,
        source="NVIDIA A40 datasheet (dense, unstarred column)",
        nvlink_bytes_per_s=112.5e9,
        pcie="Gen4 x16",
        notes=("A40 datasheet: FP32 37.4, TF32 74.8 | 149.6*, BF16 (FP32 accumulate) and FP16 "
               "149.7 | 299.4*, INT8 299.3 | 598.6* (* = with sparsity); 48 GB GDDR6, 696 GB/s; "
               "NVLink 112.5 GB/s (bidirectional, 2 GPUs); PCIe Gen4 x16. 84 SMs (10,752 CUDA "
               "cores) and 6 MB L2 as GA102 (GA102 whitepaper v2 A40 table). No FP8 on Ampere; "
               "FP64 not listed"),
    ),
    # https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf
    # (Appendix C)
    GpuSpec(
        key="rtx-a6000",
        name="NVIDIA RTX A6000",
        aliases=(r"rtx a6000$",),
        matrix_flops={"fp32": 38.7 * T, "tf32": 77.4 * T, "bf16": 154.8 * T, "fp16": 154.8 * T,
                      "int8": 309.7 * T},
        vector_flops=38.7 * T,
        hbm_bytes_per_s=768e9,
        memory_bytes=48 * GIB,
        l2_bytes=6 * MIB,
        sm_count=84,
        source=("NVIDIA Ampere GA102 GPU architecture whitepaper v2, Appendix C (RTX A6000, "
                "dense); RTX A6000 datasheet"),
        nvlink_bytes_per_s=112.5e9,
        pcie="Gen4 x16",
        notes=("GA102 whitepaper Appendix C, RTX A6000: FP32 38.7, TF32 77.4 | 154.8*, BF16 "
               "and FP16 (FP32 accumulate: full rate on the professional card) 154.8 | 309.7*, "
               "INT8 309.7 | 619.4* (* = with sparsity; the datasheet prints only 'Tensor "
               "performance 309.7 TFLOPS', the sparse FP16 figure); 48 GB GDDR6, 768 GB/s, 84 SMs, "
               "6 MB L2; NVLink 112.5 GB/s; PCIe Gen4 x16. 'RTX A6000 Ada' does not exist: the Ada "
               "card is 'RTX 6000 Ada Generation'"),
    ),
    # ---------------------------------------------------------------- Turing
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf
    GpuSpec(
        key="t4",
        name="NVIDIA Tesla T4",
        aliases=(r"(?<![a-z0-9])t4\b",),
        matrix_flops={"fp32": 8.1 * T, "fp16": 65 * T, "int8": 130 * T},
        vector_flops=8.1 * T,
        hbm_bytes_per_s=320e9,
        memory_bytes=16 * GIB,
        l2_bytes=4 * MIB,
        sm_count=40,
        source="NVIDIA T4 Tensor Core GPU datasheet (dense; no BF16, TF32 or FP8 on Turing)",
        pcie="Gen3 x16",
        notes=("T4 datasheet: FP32 8.1, mixed precision (FP16/FP32) 65, INT8 130, INT4 260 "
               "(Turing has no structured sparsity: all dense); 16 GB GDDR6, '320+ GB/s'; PCIe "
               "Gen3 x16; 70 W. 2,560 CUDA cores = 40 SMs; 4 MB L2 (TU104). No BF16 and no TF32 on "
               "Turing: a bf16 matmul there runs without tensor cores, so bf16 falls back to the "
               "fp32 roof"),
    ),
    # ---------------------------------------------------------------- Volta
    _v100("v100-sxm2-32gb", "NVIDIA Tesla V100 SXM2 32GB", (r"v100-sxm2-32gb",), 32, sxm=True),
    _v100("v100-sxm2-16gb", "NVIDIA Tesla V100 SXM2 16GB", (r"v100-sxm2",), 16, sxm=True),
    _v100("v100-pcie-32gb", "NVIDIA Tesla V100 PCIe 32GB", (r"v100-pcie-32gb",), 32, sxm=False),
    _v100("v100-pcie-16gb", "NVIDIA Tesla V100 PCIe 16GB", (r"v100-pcie",), 16, sxm=False),
    # ---------------------------------------------------------------- Ada data center
    # https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413
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
        notes=("L40S datasheet: TF32 183 | 366*, BF16/FP16 362.05 | 733*, FP8 733 | 1,466* "
               "(* = with sparsity), FP32 91.6; 48 GB GDDR6, 864 GB/s; PCIe Gen4 x16, no NVLink; "
               "142 SMs (568 tensor cores). INT8 could not be confirmed: left out; FP64 not "
               "listed. 96 MB L2 is the full-AD102 figure from the Ada whitepaper, not confirmed "
               "for the L40S"),
    ),
    # https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet
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
        notes=("L4 datasheet prints only sparsity figures: TF32 120*, FP16/BF16 242*, "
               "FP8/INT8 485* - rows hold half; FP32 30.3; 24 GB GDDR6, 300 GB/s; 48 MB L2, 58 SMs "
               "(7,424 CUDA cores); PCIe Gen4 x16, no NVLink; FP64 not listed"),
    ),
    # https://images.nvidia.com/content/Solutions/data-center/vgpu-L40-datasheet.pdf
    GpuSpec(
        key="l40",
        name="NVIDIA L40",
        # a word boundary after "l40": "L40S" is its own row
        aliases=(r"\bl40\b",),
        matrix_flops={"fp32": 90.5 * T, "tf32": 90.5 * T, "bf16": 181.05 * T, "fp16": 181.05 * T,
                      "fp8": 362 * T, "int8": 362 * T},
        vector_flops=90.5 * T,
        hbm_bytes_per_s=864e9,
        memory_bytes=48 * GIB,
        l2_bytes=96 * MIB,
        sm_count=142,
        source="NVIDIA L40 datasheet (dense, unstarred column)",
        pcie="Gen4 x16",
        notes=("L40 datasheet: FP32 90.5, TF32 90.5 | 181*, BF16/FP16 181.05 | 362.1*, FP8 362 "
               "| 724*, INT8 362 | 724* (* = with sparsity); 48 GB GDDR6, 864 GB/s; PCIe Gen4 x16, "
               "no NVLink; 142 RT cores / 568 tensor cores = 142 SMs. 96 MB L2 is the full-AD102 "
               "figure of the Ada whitepaper, not confirmed for the L40; FP64 not listed"),
    ),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/design-visualization/rtx-6000/proviz-print-rtx6000-datasheet-web-2504660.pdf
    GpuSpec(
        key="rtx-6000-ada",
        name="NVIDIA RTX 6000 Ada Generation",
        aliases=(r"rtx 6000 ada",),
        matrix_flops={"fp32": 91.1 * T, "fp8": 728.5 * T},
        vector_flops=91.1 * T,
        hbm_bytes_per_s=960e9,
        memory_bytes=48 * GIB,
        l2_bytes=96 * MIB,
        sm_count=142,
        source=("NVIDIA RTX 6000 Ada Generation datasheet (FP8 dense = half the sparsity figure; "
                "TF32, BF16, FP16 not printed, left out)"),
        pcie="Gen4 x16",
        notes=("RTX 6000 Ada datasheet: FP32 91.1 TF, 'Tensor performance 1,457.0 TFLOPS' "
               "(FP8 with sparsity: the row holds half); 48 GB GDDR6 ECC, 960 GB/s; 18,176 CUDA "
               "cores / 568 tensor cores = 142 SMs; PCIe Gen4 x16, no NVLink. The datasheet "
               "prints no TF32, BF16 or FP16 figure: left out (those roofs fall back to "
               "FP32, which understates them). 96 MB L2 as full AD102, not confirmed. 'Quadro "
               "RTX 6000' (Turing) does not match"),
    ),
    # ---------------------------------------------------------------- GeForce
    # https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf
    # (Appendix)
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
               "330.3), FP8 330.3 (FP16-acc 660.6); TF32 82.6, INT8 660.6, FP32 82.6; 24 GB "
               "GDDR6X, 1,008 GB/s, 72 MB L2, 128 SMs; PCIe Gen4, no NVLink. 'RTX 4090 D' and "
               "laptop 4090s are different chips and do not match"),
    ),
    # https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf
    # (Appendix A)
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
    # https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf
    # (Table 1)
    GpuSpec(
        key="rtx-3080",
        name="NVIDIA GeForce RTX 3080",
        aliases=(r"rtx 3080$",),
        matrix_flops={"fp32": 29.8 * T, "tf32": 29.8 * T, "bf16": 59.5 * T, "fp16": 59.5 * T,
                      "int8": 238 * T},
        vector_flops=29.8 * T,
        hbm_bytes_per_s=760e9,
        memory_bytes=10 * GIB,
        l2_bytes=5 * MIB,
        sm_count=68,
        source=("NVIDIA Ampere GA102 GPU architecture whitepaper v2 (GeForce RTX 3080 10GB, dense, "
                "FP32-accumulate)"),
        pcie="Gen4 x16",
        notes=(f"GA102 whitepaper Table 1, RTX 3080: {_GEFORCE_NOTE} - BF16/FP16 59.5 "
               "(FP16-acc 119); TF32 29.8, INT8 238, FP32 29.8; 10 GB GDDR6X, 760 GB/s, 5 MB L2, "
               "68 SMs; PCIe Gen4, no NVLink. The 12 GB card (70 SMs, 912 GB/s) prints the same "
               "device name and gets these figures, a little under its own. 'RTX 3080 Ti' and "
               "laptop 3080s do not match"),
    ),
    # ---------------------------------------------------------------- AMD
    # https://rocm.docs.amd.com/en/latest/conceptual/gpu-arch/mi300.html
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
        notes=("ROCm 'AMD Instinct MI300 series microarchitecture', MI300X table (per-CU "
               "FLOPS/clock x 304 CUs at 2.1 GHz, i.e. dense; AMD's datasheet 'with sparsity' "
               "figures are twice these): FP64 matrix 163.4 (vector 81.7), FP32 163.4, TF32 653.7, "
               "FP16/BF16 1,307.4, FP8/INT8 2,614.9; 5.3 TB/s HBM3, 192 GB. ROCm 'GPU hardware "
               "specifications': 304 CUs, L2 32 MB (4 MB per XCD), Infinity Cache ('L3') 256 "
               "MB - in infinity_cache_bytes, not l2_bytes. 7 Infinity Fabric links x 128 GB/s = "
               "896 GB/s (the 'nvlink' field); PCIe Gen5 x16 to the host"),
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
