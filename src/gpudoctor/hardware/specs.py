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

Each row names its source document. Datasheet peaks are 10-25% above what a card reaches:
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


GIB = 1024**3
MIB = 1024**2

_HOPPER_NOTE = "dense = half the sparsity figure"
_GEFORCE_NOTE = ("16-bit/FP8 tensor figures are the FP32-accumulate rates (what PyTorch uses), "
                 "half the FP16-accumulate ones")


def _v100(key: str, name: str, aliases: tuple[str, ...], gib: int, sxm: bool) -> GpuSpec:
    if sxm:
        flops = {"fp16": 125 * T, "fp32": 15.7 * T, "fp64": 7.8 * T}
        source = ("NVIDIA Tesla V100 datasheet, SXM2 column (also NVIDIA 'Ampere Architecture "
                  "In-Depth' Table 3, V100 SXM2: FP16 tensor 125 TF with FP32 accumulate, FP32 "
                  "15.7, FP64 7.8, 900 GB/s, L2 6144 KB, 80 SMs); no BF16/TF32/FP8 on Volta; "
                  "INT8 (DP4A, not tensor) left out")
    else:
        flops = {"fp16": 112 * T, "fp32": 14 * T, "fp64": 7 * T}
        source = ("NVIDIA Tesla V100 datasheet, PCIe column: tensor 112 TF, FP32 14, FP64 7, "
                  "900 GB/s, PCIe Gen3 32 GB/s, no NVLink; 80 SMs and 6 MB L2 as GV100; no "
                  "BF16/TF32/FP8 on Volta; INT8 (DP4A, not tensor) left out")
    return GpuSpec(
        key=key, name=name, aliases=aliases, matrix_flops=flops, vector_flops=flops["fp32"],
        hbm_bytes_per_s=900e9, memory_bytes=gib * GIB, l2_bytes=6 * MIB, sm_count=80,
        source=source, nvlink_bytes_per_s=300e9 if sxm else 0.0, pcie="Gen3 x16",
    )


_A100_FLOPS = {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T,
               "int8": 624 * T, "fp64": 19.5 * T}
_A100_SOURCE = ("NVIDIA A100 Tensor Core GPU datasheet, {col} column; dense (TF32 156, BF16/FP16 "
                "312, INT8 624 = half the sparsity figures); FP64 = FP64 tensor core 19.5 (9.7 "
                "FMA); {bw}; 108 SMs, 40 MB L2 (Ampere architecture whitepaper); no FP8")
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
        source=("NVIDIA H100 Tensor Core GPU datasheet (2024 revision), H100 NVL column, per GPU; "
                f"{_HOPPER_NOTE} (BF16/FP16 1,671, FP8 3,341); FP32 60, 94 GB, 3.9 TB/s, NVLink "
                "bridge 600 GB/s, PCIe Gen5. Could not locate the datasheet text itself: BF16/FP8 "
                "confirmed only against secondary tables (~835 / ~1,670 dense), FP32 60 likewise; "
                "TF32, INT8 and FP64 tensor not confirmed, left out; 132 SMs / 50 MB L2 as GH100 "
                "SXM5 (not confirmed)"),
        nvlink_bytes_per_s=600e9,
        pcie="Gen5 x16",
    ),
    GpuSpec(
        key="h100-sxm",
        name="NVIDIA H100 SXM5 80GB",
        aliases=(r"h100.*(sxm|hbm3)", r"^nvidia h100$"),
        matrix_flops=dict(_H100_SXM_FLOPS),
        vector_flops=67 * T,
        hbm_bytes_per_s=3.35e12,
        memory_bytes=80 * GIB,
        l2_bytes=50 * MIB,
        sm_count=132,
        source=("NVIDIA H100 Tensor Core GPU datasheet, 2023, SXM5 column, and H100 architecture "
                f"whitepaper Table 1; {_HOPPER_NOTE} (TF32 989, BF16/FP16 1,979, FP8/INT8 3,958); "
                "FP64 = FP64 tensor core 67 (34 FMA); 3.35 TB/s, 50 MB L2, 132 SMs, NVLink 900 GB/s, "
                "PCIe Gen5 128 GB/s"),
        nvlink_bytes_per_s=900e9,
        pcie="Gen5 x16",
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
        source=("NVIDIA H100 Tensor Core GPU datasheet, 2023, PCIe column, and H100 architecture "
                f"whitepaper Table 1; {_HOPPER_NOTE} (TF32 756, BF16/FP16 1,513, FP8/INT8 3,026); "
                "FP64 = FP64 tensor core 51 (26 FMA); 2,000 GB/s, 50 MB L2, 114 SMs, NVLink bridge "
                "600 GB/s, PCIe Gen5 128 GB/s"),
        nvlink_bytes_per_s=600e9,
        pcie="Gen5 x16",
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
        source=("NVIDIA H200 Tensor Core GPU datasheet, SXM column; compute identical to H100 SXM5 "
                f"(GH100), {_HOPPER_NOTE} (FP8 3,958); 141 GB HBM3e, 4.8 TB/s, NVLink 900 GB/s, "
                "PCIe Gen5 128 GB/s. Note: the 'h200' alias also catches 'H200 NVL' (a lower-clocked "
                "PCIe card) and 'GH200', which get these SXM figures"),
        nvlink_bytes_per_s=900e9,
        pcie="Gen5 x16",
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
        source=("NVIDIA Blackwell datasheet (2025), 'Individual Blackwell GPU Specifications', "
                "GB200 NVL72 column (one GPU of the superchip, up to 1,200 W); footnote 'all Tensor "
                "Core numbers except FP64 with sparsity', so dense = half (TF32 2.5, FP16/BF16 5, "
                "FP8/INT8 10 PF printed); FP32 80 TF, FP64 40 TF; 186 GB HBM3e, 8 TB/s; NVLink 5 "
                "1.8 TB/s; host CPU over NVLink-C2C. SM count and L2 size not published there (0); "
                "PCIe generation not confirmed for this form factor"),
        nvlink_bytes_per_s=1.8e12,
        pcie="",
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
        source=("NVIDIA Blackwell datasheet (2025), 'Individual Blackwell GPU Specifications', HGX "
                "B200 column (up to 1,000 W); footnote 'all Tensor Core numbers except FP64 with "
                "sparsity', so dense = half (TF32 2.2, FP16/BF16 4.5, FP8/INT8 9 PF printed); FP32 "
                "75 TF, FP64 37 TF; 180 GB HBM3e, 7.7 TB/s; NVLink 5 1.8 TB/s; PCIe Gen5 128 GB/s. "
                "148 SMs as measured by Chips and Cheese ('Nvidia's B200', 74 per die); L2 size not "
                "published (0). Early 2024 figures (192 GB, 8 TB/s) superseded"),
        nvlink_bytes_per_s=1.8e12,
        pcie="Gen5 x16",
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
        source=_A100_SOURCE.format(col="80GB PCIe", bw="80 GB HBM2e, 1,935 GB/s; NVLink bridge "
                                   "(2 GPUs) 600 GB/s; PCIe Gen4"),
        nvlink_bytes_per_s=600e9,
        pcie="Gen4 x16",
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
        source=_A100_SOURCE.format(col="40GB PCIe", bw="40 GB HBM2, 1,555 GB/s; NVLink bridge "
                                   "(2 GPUs) 600 GB/s; PCIe Gen4"),
        nvlink_bytes_per_s=600e9,
        pcie="Gen4 x16",
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
        source=_A100_SOURCE.format(col="80GB SXM", bw="80 GB HBM2e, 2,039 GB/s; NVLink 600 GB/s; "
                                   "PCIe Gen4"),
        nvlink_bytes_per_s=600e9,
        pcie="Gen4 x16",
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
        source=_A100_SOURCE.format(col="40GB SXM", bw="40 GB HBM2, 1,555 GB/s; NVLink 600 GB/s; "
                                   "PCIe Gen4. Also the fallback for any other 'A100' name"),
        nvlink_bytes_per_s=600e9,
        pcie="Gen4 x16",
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
        source=("No NVIDIA datasheet exists for the A10G (an AWS-only GA102 part, EC2 G5); 24 GB "
                "GDDR6 at 600 GB/s per Baseten 'NVIDIA A10 vs A10G for ML model inference', which "
                "also says the A10G has lower tensor and higher CUDA-core throughput than the A10. "
                "No tensor figure could be confirmed, so every matrix dtype is left out; "
                "vector_flops is the A10's datasheet FP32 (31.2 TF), a floor for the A10G. SM "
                "count, L2 and PCIe generation not confirmed"),
        pcie="",
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
        source=("NVIDIA A10 Tensor Core GPU datasheet; dense = half the sparsity figure (BF16/FP16 "
                "250, INT8 500 printed with sparsity); FP32 31.2, 24 GB GDDR6, 600 GB/s, PCIe Gen4, "
                "no NVLink; 72 SMs, 6 MB L2 (GA102). TF32 (62.5 dense as recalled) not confirmed, "
                "left out; FP64 not listed"),
        pcie="Gen4 x16",
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
        source=("NVIDIA L40S datasheet; dense = the unstarred column (TF32 183 | 366*, BF16/FP16 "
                "362.05 | 733*, FP8 733 | 1,466*); FP32 91.6; 48 GB GDDR6, 864 GB/s; PCIe Gen4 x16, "
                "no NVLink; 142 SMs (568 tensor cores). INT8 not confirmed, left out; FP64 not "
                "listed; 96 MB L2 is the full AD102 figure (Ada whitepaper), not confirmed for L40S"),
        pcie="Gen4 x16",
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
        source=("NVIDIA L4 Tensor Core GPU datasheet; dense = half the sparsity figure (TF32 120, "
                "FP16/BF16 242, FP8/INT8 485 printed with sparsity); FP32 30.3; 24 GB GDDR6, "
                "300 GB/s, 48 MB L2, 58 SMs (7,424 CUDA cores); PCIe Gen4 x16, no NVLink; FP64 "
                "not listed"),
        pcie="Gen4 x16",
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
        source=("NVIDIA Ada GPU architecture whitepaper, Appendix (GeForce RTX 4090), dense "
                f"column; {_GEFORCE_NOTE}: BF16/FP16 165.2 (FP16-acc 330.3), FP8 330.3 (FP16-acc "
                "660.6); TF32 82.6, INT8 660.6, FP32 82.6; 24 GB GDDR6X, 1,008 GB/s, 72 MB L2, "
                "128 SMs; PCIe Gen4, no NVLink. Excludes 'RTX 4090 D' and laptop parts"),
        pcie="Gen4 x16",
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
        source=("NVIDIA Ampere GA102 GPU architecture whitepaper, Appendix A (GeForce RTX 3090), "
                f"dense column; {_GEFORCE_NOTE}: BF16/FP16 71 (FP16-acc 142); TF32 35.6, FP32 "
                "35.6; 24 GB GDDR6X, 936 GB/s, 6 MB L2, 82 SMs; PCIe Gen4; NVLink bridge 112.5 "
                "GB/s total (GA102 third-gen NVLink, 4 x4 links). INT8 not confirmed, left out; no "
                "FP8 on Ampere. Excludes 'RTX 3090 Ti'"),
        nvlink_bytes_per_s=112.5e9,
        pcie="Gen4 x16",
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
        source=("AMD ROCm docs 'AMD Instinct MI300 series microarchitecture', MI300X peak table "
                "(per-CU FLOPS/clock x 304 CUs, i.e. dense; the AMD datasheet's 'with sparsity' "
                "figures are twice these): FP64 matrix 163.4 (vector 81.7), FP32 163.4, TF32 653.7, "
                "FP16/BF16 1,307.4, FP8/INT8 2,614.9; 5.3 TB/s HBM3, 192 GB; 'GPU hardware "
                "specifications' table: 304 CUs, L2 32 MB (4 MB per XCD) and a separate 256 MB "
                "Infinity Cache (infinity_cache_bytes); 7 Infinity Fabric links x 128 GB/s = 896 "
                "GB/s; PCIe Gen5 x16 to the host"),
        nvlink_bytes_per_s=896e9,
        pcie="Gen5 x16",
        infinity_cache_bytes=256 * MIB,
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
