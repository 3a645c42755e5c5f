"""FLOPs and minimum bytes of an aten op, from the shapes and dtypes the profiler recorded.

The profiler's own ``flops`` (``with_flops=True``) is used where present (matmuls, convolutions,
add/mul); formulas cover the rest. Minimum bytes = each input read once + each output written
once: the profiler records input shapes only, so outputs are derived per op family (GEMM
[M,K]x[K,N] -> [M,N]; elementwise -> the broadcast input; reductions -> small).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DTYPE_BYTES = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
}
DTYPE_NAMES = {
    "float": "fp32",
    "double": "fp64",
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
    "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
    "signed char": "int8",
}

_GEMMS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm", "aten::addbmm"}
_MATVECS = {"aten::mv", "aten::addmv", "aten::addmv_", "aten::dot", "aten::vdot"}
_ATTENTION_FWD = {
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_flash_attention_forward",
    "aten::_efficient_attention_forward",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
}
_REDUCTIONS = ("sum", "mean", "amax", "amin", "max", "min", "norm", "var", "std", "prod", "all", "any", "argmax", "argmin", "nll_loss")


@dataclass(frozen=True)
class OpCost:
    flops: float
    bytes: float
    dtype: str  # bf16 | fp16 | fp32 | fp8 | fp64 | int8 | "" (unknown)
    gemm_shape: tuple[int, int, int, int] | None = None  # (batch, M, N, K) for matmuls
    numel: int = 0  # elements of the largest tensor input
    shape: tuple[int, ...] = ()  # the largest tensor input's shape
    square: int = 0  # S when an input is [..., S, S] (>= 3 dims): attention scores


def tensor_inputs(dims: list[Any], types: list[Any]) -> list[tuple[list[int], str]]:
    """(shape, dtype) of each plain tensor input (TensorLists flattened)."""
    out: list[tuple[list[int], str]] = []
    for d, t in zip(dims, types):
        if t == "TensorList" and isinstance(d, list):
            out.extend((sub, "") for sub in d if isinstance(sub, list) and _is_shape(sub))
        elif isinstance(t, str) and t in DTYPE_BYTES and isinstance(d, list) and _is_shape(d):
            out.append((d, t))
    return out


def _is_shape(d: list[Any]) -> bool:
    return all(isinstance(x, int) for x in d)


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def op_cost(name: str, dims: list[Any], types: list[Any], profiler_flops: float) -> OpCost:
    inputs = tensor_inputs(dims, types)
    if not inputs:
        return OpCost(0.0 if np.isnan(profiler_flops) else float(profiler_flops), 0.0, "")
    first_type = next((t for _, t in inputs if t), "")
    size = DTYPE_BYTES.get(first_type, 4)
    read = float(sum(_numel(s) * DTYPE_BYTES.get(t, size) for s, t in inputs))
    dtype = DTYPE_NAMES.get(first_type, "")
    sizes = [_numel(s) for s, _ in inputs]
    largest_shape = tuple(inputs[sizes.index(max(sizes))][0])
    largest = _numel(list(largest_shape))
    square = max((s[-1] for s, _ in inputs if len(s) >= 3 and s[-1] == s[-2]), default=0)
    gemm = _gemm_shape(name, [s for s, _ in inputs])
    if gemm is not None:
        b, m, n, k = gemm
        flops = profiler_flops if not np.isnan(profiler_flops) else 2.0 * b * m * n * k
        out_size = 2 if name == "aten::_scaled_mm" else size
        return OpCost(float(flops), read + b * m * n * out_size, dtype, gemm, largest, largest_shape, square)
    if name in _ATTENTION_FWD or "attention_backward" in name or "flash_attention_backward" in name:
        return _attention_cost(name, inputs, read, size, dtype)
    flops = profiler_flops if not np.isnan(profiler_flops) else float(largest)
    base = name.split("::")[-1].rstrip("_")
    if base in ("copy", "cat", "stack") or base.startswith(_REDUCTIONS):
        write = 0.0 if base == "copy" or base.startswith(_REDUCTIONS) else read
        return OpCost(float(flops), read + write, dtype, numel=largest, shape=largest_shape, square=square)
    return OpCost(float(flops), read + largest * size, dtype, numel=largest, shape=largest_shape, square=square)


def _gemm_shape(name: str, shapes: list[list[int]]) -> tuple[int, int, int, int] | None:
    if name in _MATVECS:
        mats = [s for s in shapes if len(s) == 2]
        vecs = [s for s in shapes if len(s) == 1]
        if mats and vecs:  # [M, K] x [K] -> (1, M, 1, K)
            return (1, mats[0][0], 1, mats[0][1])
        if len(vecs) >= 2:  # dot: [K] . [K]
            return (1, 1, 1, vecs[0][0])
        return None
    if name not in _GEMMS:
        return None
    mats = [s for s in shapes if len(s) >= 2]
    if name in ("aten::addmm", "aten::baddbmm", "aten::addbmm") and len(mats) >= 3:
        mats = mats[-2:]
    if len(mats) < 2:
        return None
    a, b = mats[0], mats[1]
    if len(a) == 3 and len(b) == 3:
        return (a[0], a[1], b[2], a[2])
    return (1, a[-2], b[-1], a[-1])


def _attention_cost(name: str, inputs: list[tuple[list[int], str]], read: float, size: int, dtype: str) -> OpCost:
    shapes = [s for s, _ in inputs if len(s) == 4]
    if len(shapes) < 2:
        return OpCost(0.0, read, dtype)
    q, k = shapes[0], shapes[1]
    # q [B, H, Sq, D], k [B, H, Sk, D]: QK^T and PV are 2*B*H*Sq*Sk*D each.
    fwd = 4.0 * q[0] * q[1] * q[2] * k[2] * q[3]
    backward = "backward" in name
    flops = 2.5 * fwd if backward else fwd
    out = 0.0 if backward else _numel(q) * size
    return OpCost(flops, read + out, dtype)
