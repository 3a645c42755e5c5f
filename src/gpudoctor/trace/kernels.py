"""Kernel names -> what the kernel does.

The name is all a trace says about a kernel, so classification is a table of name patterns,
checked in order (the first match wins: "softmax" inside a flash-attention kernel's name must not
make it a softmax). Patterns come from the kernel names of cuBLAS (``sm90_xmma_gemm_*``,
``nvjet_*``, ``ampere_sgemm_*``, ``cutlass_80_tensorop_*``), cuDNN, PyTorch's ATen CUDA kernels
(``at::native::vectorized_elementwise_kernel``, ``reduce_kernel``, ``cunn_SoftMaxForward``...),
FlashAttention, xFormers/CUTLASS FMHA, NCCL (``ncclDevKernel_*``) and Inductor
(``triton_poi_*`` pointwise, ``triton_red_*``/``triton_per_*`` reductions, ``triton_tem_*``
templates). Names matching nothing are "other": counted and reported, never dropped.
"""

from __future__ import annotations

import re
from enum import IntEnum


class Kind(IntEnum):
    """What a GPU event does."""

    GEMM_TC = 0  # matrix multiply on tensor cores
    GEMM_SIMT = 1  # matrix multiply on CUDA cores (fp32 SIMT, GEMV)
    ATTENTION = 2  # fused attention (flash, memory-efficient, cuDNN)
    CONV = 3
    ELEMENTWISE = 4
    REDUCTION = 5
    NORM = 6
    SOFTMAX = 7
    COPY = 8  # device-side copy / cast / transpose / cat kernels
    INDEX = 9  # gather / scatter / embedding / index
    OPTIMIZER = 10  # multi-tensor-apply and fused optimizer kernels
    NCCL = 11
    MEMCPY_HTOD_PAGEABLE = 12
    MEMCPY_HTOD_PINNED = 13
    MEMCPY_DTOH_PAGEABLE = 14
    MEMCPY_DTOH_PINNED = 15
    MEMCPY_DTOD = 16
    MEMSET = 17
    OTHER = 18

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    Kind.GEMM_TC: "gemm (tensor cores)",
    Kind.GEMM_SIMT: "gemm (CUDA cores)",
    Kind.ATTENTION: "attention (fused)",
    Kind.CONV: "convolution",
    Kind.ELEMENTWISE: "elementwise",
    Kind.REDUCTION: "reduction",
    Kind.NORM: "normalization",
    Kind.SOFTMAX: "softmax",
    Kind.COPY: "copy / cast",
    Kind.INDEX: "index / gather",
    Kind.OPTIMIZER: "optimizer",
    Kind.NCCL: "communication (NCCL)",
    Kind.MEMCPY_HTOD_PAGEABLE: "memcpy HtoD pageable",
    Kind.MEMCPY_HTOD_PINNED: "memcpy HtoD pinned",
    Kind.MEMCPY_DTOH_PAGEABLE: "memcpy DtoH pageable",
    Kind.MEMCPY_DTOH_PINNED: "memcpy DtoH pinned",
    Kind.MEMCPY_DTOD: "memcpy DtoD",
    Kind.MEMSET: "memset",
    Kind.OTHER: "other",
}

MATMUL_KINDS = frozenset({Kind.GEMM_TC, Kind.GEMM_SIMT})
MEMCPY_KINDS = frozenset(
    {
        Kind.MEMCPY_HTOD_PAGEABLE,
        Kind.MEMCPY_HTOD_PINNED,
        Kind.MEMCPY_DTOH_PAGEABLE,
        Kind.MEMCPY_DTOH_PINNED,
        Kind.MEMCPY_DTOD,
    }
)
PAGEABLE_KINDS = frozenset({Kind.MEMCPY_HTOD_PAGEABLE, Kind.MEMCPY_DTOH_PAGEABLE})
# Kernels whose work is streaming bytes through HBM: what fusion removes.
MEMORY_BOUND_KINDS = frozenset(
    {Kind.ELEMENTWISE, Kind.REDUCTION, Kind.NORM, Kind.SOFTMAX, Kind.COPY, Kind.INDEX}
)

# A batch norm's kernels, cuDNN's (cudnn::bn_fw_tr_*, cudnn::bn_bw_*) and PyTorch's own
# (batch_norm_collect_statistics_kernel...), in the lower-cased name
BATCH_NORM_NAME = re.compile(r"bn_fw|bn_bw|batch_?norm")

# (kind, pattern) in priority order; patterns are searched in the lower-cased name.
_KERNEL_PATTERNS: list[tuple[Kind, re.Pattern[str]]] = [
    # collectives: NCCL / RCCL, DeepEP's expert-parallel dispatch and combine (NVSHMEM), vLLM's
    # custom all-reduce, PyTorch's symmetric-memory all-reduce
    (Kind.NCCL, re.compile(
        r"^nccl|nccldevkernel|ncclkernel|deep_ep::|\bep::(?:internode|intranode)::|nvshmem"
        r"|cross_device_reduce|(?:one|two)_shot_all_reduce|multimem_all_(?:reduce|gather)")),
    (
        Kind.ATTENTION,
        re.compile(
            r"flash_fwd|flash_bwd|flash::|flashattn|fmha|attention_kernel|attentionkernel"
            r"|attentionbackwardkernel|efficient_attention|native_sdpa|_sdpa_|sdpa_|mha_fwd|mha_bwd"
            # cuDNN SDPA backward's helper kernels
            r"|cudnn::fusion::compute_dot_do_o|cudnn::fusion::convert_dq_to"
        ),
    ),
    # cuDNN's batch-norm kernels (cudnn::bn_fw_tr_1C11_kernel_NCHW, cudnn::bn_bw_1C11_kernel_new)
    # before the convolutions' "cudnn::": a normalization, memory-bound, that a compiler fuses
    (Kind.NORM, re.compile(r"cudnn::bn_(?:fw|bw)|cudnn::batch_?norm")),
    (Kind.CONV, re.compile(r"fprop|dgrad|wgrad|conv|winograd|implicit_convolve|cudnn::")),
    # cuBLASLt's separate epilogue pass (bias and activation over a GEMM's output, where the GEMM
    # kernel did not fuse them: ``_addmm_activation``'s GELU): one read and write of the output,
    # before the matrix patterns that "cublas" would match
    (Kind.ELEMENTWISE, re.compile(r"cublaslt::epilogue")),
    # CUDA-core matrix kernels: SGEMM/SIMT tiles, GEMV, dot products.
    (Kind.GEMM_SIMT, re.compile(r"sgemm|_simt_|gemv|gemmsn|dot_kernel|cudacore|dgemm|_ffma_|ffma")),
    (
        Kind.GEMM_TC,
        re.compile(
            r"gemm|nvjet|xmma|wgmma|hmma|tensorop|s16816|s1688|s884|splitkreduce|cublas"
            r"|matmul|triton_tem_|_mm_|bmm_"
        ),
    ),
    (Kind.SOFTMAX, re.compile(r"softmax")),
    (
        Kind.NORM,
        re.compile(
            r"layer_norm|layernorm|rms_norm|rmsnorm|batch_norm|batchnorm|group_norm|groupnorm"
            r"|bn_fw|bn_bw|rowwisemoments|gammabeta|welford|instance_norm"
        ),
    ),
    (Kind.OPTIMIZER,
     re.compile(r"multi_tensor_apply|fused_adam|fusedadam|fused_sgd|adamw?_|_adam")),
    (Kind.COPY,
     re.compile(r"copy|transpose|catarraybatched|cat_array|permute|contiguous|(?<!no)cast")),
    (Kind.INDEX, re.compile(r"index|gather|scatter|embedding|take_|put_|sort|topk|unique")),
    (Kind.REDUCTION,
     re.compile(r"reduce|reduction|triton_red_|triton_per_|argmax|argmin|cumsum|scan")),
    (
        Kind.ELEMENTWISE,
        re.compile(
            r"elementwise|triton_poi_|vectorized|unrolled|pointwise|fill|gelu|relu|silu|tanh"
            r"|sigmoid|dropout|philox|distribution|clamp|where|masked|binary|unary|launch_kernel"
        ),
    ),
]

# Kernel names that say "fp32 operands on tensor cores" when the op's dtypes were not recorded:
# cuBLAS "..._tf32f32_..." tiles, CUTLASS "tensorop_s1688gemm" (TF32 instruction m16n8k8 on
# single-precision operands; bf16 CUTLASS kernels read "tensorop_bf16_s16816gemm").
TF32_NAME = re.compile(r"tf32|tensorop_s1688gemm|tensorop_s1684gemm")
_MEMCPY = re.compile(r"memcpy\s+(htod|dtoh|dtod|ptop|htoh)(?:.*\((\w+)\s*->\s*(\w+)\))?",
                     re.IGNORECASE)


def classify_kernel(name: str) -> Kind:
    """The kind of a kernel, from its name."""
    low = name.lower()
    for kind, pattern in _KERNEL_PATTERNS:
        if pattern.search(low):
            return kind
    return Kind.OTHER


def classify_memcpy(name: str) -> Kind:
    """The kind of a ``gpu_memcpy`` event, e.g. "Memcpy HtoD (Pageable -> Device)"."""
    match = _MEMCPY.search(name)
    if match is None:
        return Kind.MEMCPY_DTOD
    direction = match.group(1).lower()
    ends = {(match.group(2) or "").lower(), (match.group(3) or "").lower()}
    pinned = "pinned" in ends
    if direction == "htod":
        return Kind.MEMCPY_HTOD_PINNED if pinned else Kind.MEMCPY_HTOD_PAGEABLE
    if direction == "dtoh":
        return Kind.MEMCPY_DTOH_PINNED if pinned else Kind.MEMCPY_DTOH_PAGEABLE
    return Kind.MEMCPY_DTOD


def is_triton_name(name: str) -> bool:
    """Inductor-generated kernels are named triton_<poi|red|per|tem>_..."""
    return name.startswith("triton_")


# Host calls that launch work: kernels through the runtime, Triton through the driver API,
# whole CUDA graphs through cudaGraphLaunch.
RUNTIME_LAUNCHES = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel"})
DRIVER_LAUNCHES = frozenset({"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel"})
GRAPH_LAUNCHES = frozenset({"cudaGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch"})

# Matrix kernels that do attention's QK^T and PV products when attention is not fused.
MATRIX_KINDS_FOR_ATTENTION = [int(Kind.GEMM_TC), int(Kind.GEMM_SIMT)]

# Kernels that come from vendor libraries (cuBLAS, cuDNN, FlashAttention, NCCL), never from Triton.
LIBRARY_KINDS = frozenset({Kind.GEMM_TC, Kind.GEMM_SIMT, Kind.ATTENTION, Kind.CONV, Kind.NCCL})


_SPECIFIC = re.compile(r"\b(\w*(?:_kernel|Kernel|Functor|Ops|gemm)\w*)\b")


def short_name(name: str, limit: int = 80) -> str:
    """A readable kernel name: templates and arguments collapsed, the inner functor kept.

    "void at::native::elementwise_kernel<128, 4, ...masked_fill_kernel...>(int, ...)" ->
    "at::native::elementwise_kernel<…> [masked_fill_kernel]".
    """
    if name.startswith(("Memcpy", "Memset")) or ("<" not in name and "(" not in name):
        return name if len(name) <= limit else name[: limit - 1] + "…"
    text = name.removeprefix("void ").replace("(anonymous namespace)::", "").replace("->",
                                                                                     "→").strip()
    outer: list[str] = []
    template: list[str] = []  # text inside the first-level <...> of the kernel's own name
    stack: list[str] = []
    for ch in text:
        if ch in "<(":
            if not stack:
                outer.append("<…>" if ch == "<" else "")
            elif stack[0] == "<":
                template.append(" ")
            stack.append(ch)
        elif ch in ">)" and stack:
            stack.pop()
            if stack and stack[0] == "<":
                template.append(" ")
        elif not stack:
            outer.append(ch)
        elif stack[0] == "<":
            template.append(ch)
    short = "".join(outer).strip()
    found = [m for m in _SPECIFIC.findall("".join(template)) if m and m not in short]
    if found:
        short += f" [{found[-1]}]"
    return short if len(short) <= limit else short[: limit - 1] + "…"
