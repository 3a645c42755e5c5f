"""FLOPs and minimum bytes of an op, from the shapes, strides, dtypes and scalar arguments the
profiler recorded (``record_shapes=True``).

Both are lower bounds of the work the op's kernels must do, so a kernel is never drawn above its
roof because its cost was overstated:

* bytes: each input element the op needs is read once and each output element written once. An
  input's elements are the distinct ones in memory (a broadcast view, stride 0, is read once per
  distinct element); an output is the op's result shape (broadcast of its inputs, a reduction's kept
  dims, a GEMM's M x N...), written in its own dtype. In-place ops write their first argument back,
  ``out=`` overloads write their trailing tensors (aten_out_args.py names them), and write-only ops
  (fill_, zero_, the random fills) read nothing. Index ops (gather, index_select, embedding,
  nll_loss, scatter) count the index and the touched elements only: of the indexed tensor, only what
  the index shape guarantees is distinct (one element per position along the other dims; a gather
  with repeated indices may read the same row many times, from cache).
* FLOPs: the profiler's own (``with_flops=True``) for matmuls and convolutions where present; the
  formulas otherwise (2 x M x N x K, attention with its causal half, convolutions from their
  stride / padding / dilation); one per output element for arithmetic elementwise ops; zero for
  pure data movement (copies, fills, cat, gathers).

Where the cost cannot be bounded from what was recorded (an op family not modelled here, advanced
indexing whose output size depends on the data, a TensorList whose dtype is unknown, an Inductor
kernel that fuses a gather or a slice and so reads only part of a buffer it is passed), the op gets
no cost: its kernels are left off the roofline (``OpCost.known`` is False) rather than placed on a
guess. What the arguments cannot show at all can still make a count too high: the same tensor
passed twice (x * x, addcmul_(v, g, g)) is read once, and attention recorded without its is_causal
flag (a hand-built trace) is counted unmasked; the roofline leaves a kernel that lands above its
roof unplaced (analysis/roofline.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from gpudoctor.analysis.aten_out_args import OUT_OVERLOADS

DTYPE_BYTES = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "c10::Float8_e8m0fnu": 1,
    "c10::Float4_e2m1fn_x2": 1,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "unsigned short": 2,
    "unsigned int": 4,
    "unsigned long": 8,
    "bool": 1,
    "c10::complex<c10::Half>": 4,
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
# the profiler's dtype spelling -> the torch dtype a fix snippet names
TORCH_DTYPES = {
    "float": "torch.float32",
    "double": "torch.float64",
    "c10::Half": "torch.float16",
    "c10::BFloat16": "torch.bfloat16",
    "long int": "torch.int64",
    "int": "torch.int32",
    "short int": "torch.int16",
    "signed char": "torch.int8",
    "unsigned char": "torch.uint8",
    "bool": "torch.bool",
}
# "Input type" entries that are not tensors
_NOT_TENSORS = frozenset({"", "Scalar", "ScalarList", "TensorList", "GenericList", "None",
                          "Device", "Layout", "ScalarType", "MemoryFormat", "string", "str"})
# c10::ScalarType codes (a dtype argument's "Concrete Inputs" value) -> bytes per element
_SCALAR_TYPE_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 15: 2, 23: 1, 24: 1,
                      25: 1, 26: 1}

_GEMMS = {"mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "addbmm", "_addmm_activation", "_int_mm"}
_MATVECS = {"mv", "addmv", "dot", "vdot"}
# fused attention: (query, key, value) positions, layout, position of is_causal (or of xformers'
# custom_mask_type, where 0 is no mask), backward
_ATTENTION = {
    "_scaled_dot_product_flash_attention": (0, 1, 2, "bhsd", 4, False),
    "_scaled_dot_product_flash_attention_backward": (1, 2, 3, "bhsd", 11, True),
    "_scaled_dot_product_efficient_attention": (0, 1, 2, "bhsd", 6, False),
    "_scaled_dot_product_efficient_attention_backward": (1, 2, 3, "bhsd", 11, True),
    "_scaled_dot_product_cudnn_attention": (0, 1, 2, "bhsd", 6, False),
    "_scaled_dot_product_cudnn_attention_backward": (1, 2, 3, "bhsd", 14, True),
    "_scaled_dot_product_fused_attention_overrideable": (0, 1, 2, "bhsd", 5, False),
    "_scaled_dot_product_fused_attention_overrideable_backward": (1, 2, 3, "bhsd", 13, True),
    "_cudnn_attention_forward": (0, 1, 2, "bhsd", 10, False),
    "_cudnn_attention_backward": (1, 2, 3, "bhsd", 14, True),
    "_flash_attention_forward": (0, 1, 2, "bshd", 8, False),
    "_flash_attention_backward": (1, 2, 3, "bshd", 11, True),
    "_efficient_attention_forward": (0, 1, 2, "bshd", 9, False),
    "_efficient_attention_backward": (1, 2, 3, "bshd", 14, True),
}
# convolution forward: (stride, padding, dilation, transposed, output_padding, groups) positions;
# -1: not an argument (cudnn_convolution is never transposed, cudnn_convolution_transpose always)
_CONV = {
    "convolution": (3, 4, 5, 6, 7, 8),
    "_convolution": (3, 4, 5, 6, 7, 8),
    "convolution_overrideable": (3, 4, 5, 6, 7, 8),
    "cudnn_convolution": (3, 2, 4, -1, -1, 5),
    "cudnn_convolution_transpose": (4, 2, 5, -2, 3, 6),
}
_CONV_BACKWARD = {"convolution_backward": 0, "convolution_backward_overrideable": -1}

_UNARY = {
    "abs", "neg", "negative", "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10",
    "log1p", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
    "atanh", "sigmoid", "logit", "relu", "relu6", "gelu", "silu", "mish", "hardswish",
    "hardsigmoid", "hardtanh", "elu", "selu", "celu", "leaky_relu", "softplus", "softshrink",
    "hardshrink", "threshold", "clamp", "clamp_min", "clamp_max", "clip",
    "reciprocal", "sign", "sgn", "floor", "ceil", "round", "trunc", "fix", "frac", "erf",
    "erfc", "erfinv", "lgamma", "digamma", "square", "nan_to_num", "bitwise_not", "deg2rad",
    "rad2deg", "i0", "sinc", "conj_physical", "_masked_scale", "masked_fill", "where",
}
_BINARY = {
    "add", "sub", "subtract", "rsub", "mul", "multiply", "div", "divide", "true_divide",
    "floor_divide", "remainder", "fmod", "pow", "float_power", "maximum", "minimum", "fmax", "fmin",
    "atan2", "arctan2", "hypot",
    "copysign", "nextafter", "xlogy", "logaddexp", "logaddexp2", "ldexp", "heaviside",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift",
    "__and__", "__or__", "__xor__", "__lshift__", "__rshift__", "lerp", "addcmul", "addcdiv",
}
_COMPARE = {
    "eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal",
    "not_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "isnan", "isinf",
    "isfinite", "isneginf", "isposinf", "signbit", "isclose",
}
_POINTWISE_BACKWARD = {
    "gelu_backward", "silu_backward", "threshold_backward", "tanh_backward", "sigmoid_backward",
    "hardtanh_backward", "leaky_relu_backward", "elu_backward", "softplus_backward",
    "hardswish_backward", "hardsigmoid_backward", "mish_backward", "logit_backward",
    "native_dropout_backward", "mse_loss_backward",
    "smooth_l1_loss_backward", "huber_loss_backward", "soft_margin_loss_backward",
    "binary_cross_entropy_backward", "rrelu_with_noise_backward", "glu_backward",
}
# pointwise losses: position of the reduction argument (0: none, an output per element; else one)
_LOSSES = {"mse_loss": 2, "l1_loss": 2, "smooth_l1_loss": 2, "huber_loss": 2, "soft_margin_loss": 2,
           "binary_cross_entropy": 3, "binary_cross_entropy_with_logits": 4, "kl_div": 2}
# reductions: position of the dim argument
_REDUCTIONS = {
    "sum": 1, "nansum": 1, "mean": 1, "nanmean": 1, "prod": 1, "amax": 1, "amin": 1,
    "max": 1, "min": 1, "argmax": 1, "argmin": 1, "all": 1, "any": 1, "logsumexp": 1, "var": 1,
    "std": 1, "var_mean": 1,
    "std_mean": 1, "count_nonzero": 1, "aminmax": 1, "_aminmax": 1, "norm": 2,
    "linalg_vector_norm": 2,
}
_REDUCTION_OUT_BYTES = {"argmax": 8, "argmin": 8, "count_nonzero": 8, "all": 1, "any": 1}
# one output of the first argument's shape; the backward ones write the gradient of their input
_SAME_SHAPE = {
    "_softmax", "_log_softmax", "_safe_softmax", "native_layer_norm", "native_batch_norm",
    "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "native_group_norm",
    "_fused_rms_norm", "cumsum", "cumprod", "logcumsumexp", "native_dropout", "_fused_dropout",
    "cudnn_batch_norm",
    "_softmax_backward_data", "_log_softmax_backward_data", "native_layer_norm_backward",
    "native_batch_norm_backward", "cudnn_batch_norm_backward", "native_group_norm_backward",
    "_fused_rms_norm_backward",
}
# arguments passed for their shape or for the other mode, not read: layer norm backward's bias,
# batch norm backward's running statistics (training) or saved ones (eval) -- the smaller pair
_NOT_READ = {"native_layer_norm_backward": (6,), "native_batch_norm_backward": (3, 4, 5, 6),
             "cudnn_batch_norm_backward": (3, 4, 5, 6)}
# ScalarType argument naming the output dtype
_SAME_SHAPE_DTYPE_ARG = {"_softmax_backward_data": 3, "_log_softmax_backward_data": 3}
_WRITE_ONLY = {"fill", "zero", "normal", "uniform", "random", "exponential", "cauchy", "log_normal",
               "geometric", "bernoulli"}
_FACTORIES = {"arange", "linspace", "logspace", "full", "zeros", "ones", "empty", "randperm"}
_FUSED_OPTIMIZERS = {"_fused_adam": (0, 2, 3, 4), "_fused_adamw": (0, 2, 3, 4),
                     "_fused_sgd": (0, 2), "_fused_adagrad": (0, 2)}
# _foreach ops whose result is one value per tensor
_FOREACH_REDUCTIONS = {"norm", "max", "min"}
# names of fused ops inside an Inductor kernel's name that read only part of a buffer it is passed
_PARTIAL_IN_TRITON = ("slice", "select", "narrow", "split", "unbind", "index", "gather",
                      "embedding", "nll_loss", "take", "as_strided", "diagonal", "scatter",
                      "masked", "unfold", "constant_pad", "reflection_pad", "replication_pad",
                      "upsample", "pool", "roll", "flip")
# the element type of a multi-tensor-apply / cat kernel's tensors: the first template argument
# of its functor (BinaryOpListAlphaFunctor<c10::BFloat16, 2, 2, 0>), or cat's OpaqueType<2u>
_FUNCTOR_TYPE = re.compile(r"Functor<\s*(c10::BFloat16|c10::Half|float|double|c10::Float8_e4m3fn|c10::Float8_e5m2"
                           r"|signed char|unsigned char|long|int|short|bool)\b")
_OPAQUE_TYPE = re.compile(r"OpaqueType<(\d+)u?>")
_OPAQUE_NAMES = {1: "unsigned char", 2: "opaque16", 4: "opaque32", 8: "opaque64", 16: "opaque128"}
_OPAQUE_BYTES = {"opaque16": 2, "opaque32": 4, "opaque64": 8, "opaque128": 16}


class OpCost(msgspec.Struct, frozen=True):
    flops: float
    bytes: float
    dtype: str  # bf16 | fp16 | fp32 | fp8 | fp64 | int8 | "" (unknown)
    gemm_shape: tuple[int, int, int, int] | None = None  # (batch, M, N, K) for matmuls
    numel: int = 0  # elements of the largest tensor input
    shape: tuple[int, ...] = ()  # the largest tensor input's shape
    square: int = 0  # S when an input is [..., S, S] (>= 3 dims): attention scores
    matrix: bool = False  # a GEMM / attention / convolution: its cost belongs to its matrix kernels
    known: bool = True  # False: the cost could not be bounded; the op's kernels stay off the roofline


class _Tensor(msgspec.Struct, frozen=True):
    shape: tuple[int, ...]
    size: int  # bytes per element (1 when the dtype is not one we know: every dtype takes at least one)
    type: str  # the profiler's dtype string
    elements: int  # distinct elements in memory (a stride-0 broadcast dim counts once)

    @property
    def numel(self) -> int:
        return _numel(self.shape)

    @property
    def nbytes(self) -> float:
        return float(self.elements * self.size)


def tensor_inputs(dims: list[Any], types: list[Any]) -> list[tuple[list[int], str]]:
    """(shape, dtype) of each plain tensor input (TensorLists flattened)."""
    out: list[tuple[list[int], str]] = []
    for d, t in zip(dims, types):
        if t == "TensorList" and isinstance(d, list):
            out.extend((sub, "") for sub in d if isinstance(sub, list) and _is_shape(sub))
        elif isinstance(t, str) and t in DTYPE_BYTES and isinstance(d, list) and _is_shape(d):
            out.append((d, t))
    return out


def element_type_of_kernel(kernel_name: str) -> str:
    """The dtype (the profiler's spelling) of the tensors a multi-tensor-apply or cat kernel works
    on, read off its template arguments; "" when the name does not say."""
    m = _FUNCTOR_TYPE.search(kernel_name)
    if m:
        t = m.group(1)
        return {"long": "long int", "short": "short int"}.get(t, t)
    m = _OPAQUE_TYPE.search(kernel_name)
    if m:
        return _OPAQUE_NAMES.get(int(m.group(1)), "")
    return ""


def _is_shape(d: list[Any]) -> bool:
    return all(isinstance(x, int) and not isinstance(x, bool) for x in d)


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def _type_bytes(t: str) -> int:
    return DTYPE_BYTES.get(t) or _OPAQUE_BYTES.get(t) or 1


def _distinct(shape: list[int], strides: Any) -> int:
    """Distinct elements of a view: stride-0 (broadcast) dims count once; overlapping windows
    (an unfold) no more than the span they cover."""
    n = _numel(shape)
    if not isinstance(strides, list) or len(strides) != len(shape) or not _is_shape(strides) or n == 0:
        return n
    prod = math.prod(s for s, st in zip(shape, strides) if st != 0)
    span = 1 + sum((s - 1) * abs(st) for s, st in zip(shape, strides))
    return int(min(prod, span))


def _parse(dims: list[Any], types: list[Any], strides: list[Any], list_type: str) -> list[Any]:
    """Per argument position: a _Tensor, a list of _Tensor (a TensorList; None when its dtype is
    unknown), or None (not a tensor)."""
    args: list[Any] = []
    for i, (d, t) in enumerate(zip(dims, types)):
        st = strides[i] if i < len(strides) else None
        if t == "TensorList" and isinstance(d, list):
            if not list_type:
                args.append(None if d else [])
                continue
            size = _type_bytes(list_type)
            subs = st if isinstance(st, list) else []
            args.append([
                _Tensor(tuple(sub), size, list_type,
                        _distinct(sub, subs[j] if j < len(subs) else None))
                for j, sub in enumerate(d) if isinstance(sub, list) and _is_shape(sub)
            ])
        elif isinstance(t, str) and t not in _NOT_TENSORS and isinstance(d, list) and _is_shape(d):
            args.append(_Tensor(tuple(d), _type_bytes(t), t, _distinct(d, st)))
        else:
            args.append(None)
    return args


def _concrete(concrete: list[Any], i: int) -> str:
    if i < 0 or i >= len(concrete) or not isinstance(concrete[i], str):
        return ""
    return concrete[i].strip()


def _ints(text: str) -> list[int] | None:
    """'[0, -1]' or '2' -> [0, -1] / [2]; None when not integers."""
    text = text.strip().strip("[]()").strip()
    if not text:
        return []
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        return None


def _flag(text: str) -> bool | None:
    return {"true": True, "false": False, "1": True, "0": False}.get(text.lower())


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes)) if shapes else ()
    except ValueError:
        return max(shapes, key=_numel)


def _promoted_size(tensors: list[_Tensor]) -> int:
    """Bytes per element of an elementwise result (type promotion: dimensioned tensors decide;
    a 0-dim one only when of a higher category, then at the default 4 bytes)."""

    def category(t: _Tensor) -> int:
        if t.type == "bool":
            return 0
        if "int" in t.type or "char" in t.type or "short" in t.type or "long" in t.type:
            return 1
        return 3 if "complex" in t.type else 2

    if not tensors:
        return 4
    dimmed = [t for t in tensors if t.shape] or tensors
    top = max(category(t) for t in dimmed)
    size = max(t.size for t in dimmed if category(t) == top)
    if any(category(t) > top for t in tensors):
        return 4
    return size


def _pointwise_result_size(stem: str, tensors: list[_Tensor]) -> int:
    if stem in _COMPARE:
        return 1  # bool
    size = _promoted_size(tensors)
    if stem == "abs" and "complex" in tensors[0].type:
        return size // 2  # the magnitude of a complex number is real
    if stem in ("div", "divide", "true_divide") and all(
            any(w in t.type for w in ("int", "char", "short", "long", "bool")) for t in tensors
            if t.shape):
        return 4  # true division of integers gives the default float
    return size


def _unknown(dtype: str = "", numel: int = 0, shape: tuple[int, ...] = (), square: int = 0,
             gemm: tuple[int, int, int, int] | None = None, matrix: bool = False) -> OpCost:
    return OpCost(0.0, 0.0, dtype, gemm, numel, shape, square, matrix, known=False)


def op_cost(name: str, dims: list[Any], types: list[Any], profiler_flops: float,
            strides: list[Any] | None = None, concrete: list[Any] | None = None,
            list_type: str = "") -> OpCost:
    """Cost of one op call. ``strides`` and ``concrete`` are the recorded "Input Strides" and
    "Concrete Inputs"; ``list_type`` the dtype of its TensorLists' tensors (the profiler leaves it
    out; element_type_of_kernel reads it off the op's kernel)."""
    strides = strides if isinstance(strides, list) else []
    concrete = concrete if isinstance(concrete, list) else []
    pflops = None if profiler_flops is None or np.isnan(profiler_flops) else float(profiler_flops)
    args = _parse(dims, types, strides, list_type)
    flat = [a for a in args if isinstance(a, _Tensor)] + [t for a in args
                                                          if isinstance(a, list) for t in a]
    first_type = next((a.type for a in args if isinstance(a, _Tensor)), "") or (list_type
                                                                                if flat else "")
    dtype = DTYPE_NAMES.get(first_type, "")
    legacy = tensor_inputs(dims, types)  # the largest input and the square, as the rules know them
    largest_shape: tuple[int, ...] = ()
    if legacy:
        sizes = [_numel(s) for s, _ in legacy]
        largest_shape = tuple(legacy[sizes.index(max(sizes))][0])
    largest = _numel(largest_shape) if legacy else 0
    square = max((s[-1] for s, _ in legacy if len(s) >= 3 and s[-1] == s[-2]), default=0)
    meta = {"numel": largest, "shape": largest_shape, "square": square}

    is_triton = name.startswith("triton_")
    if not name.startswith("aten::") and not is_triton:
        return _unknown(dtype, **meta)
    base = name.removeprefix("aten::")
    n_out = _out_count(base, args, types)
    outs = args[len(args) - n_out:] if n_out else []
    ins = args[: len(args) - n_out] if n_out else args
    in_place = base.endswith("_") and not base.endswith("__")
    stem = base.rstrip("_") if in_place else base

    if is_triton:
        return _triton_cost(name, flat, pflops, dtype, meta)
    if stem in _GEMMS or stem in _MATVECS:
        return _gemm_cost(stem, ins, outs, concrete, pflops, dtype, meta)
    if stem in _ATTENTION:
        return _attention_cost(stem, ins, concrete, dtype, meta)
    if stem in _CONV or stem in _CONV_BACKWARD:
        return _conv_cost(stem, ins, concrete, pflops, dtype, meta)
    if stem.startswith("_foreach_"):
        return _foreach_cost(stem, in_place, ins, outs, pflops, dtype, meta)
    if stem in _FUSED_OPTIMIZERS:
        return _fused_optimizer_cost(stem, ins, dtype, meta)
    if any(a is None and t == "TensorList" for a, t in zip(args, types)):
        return _unknown(dtype, **meta)  # a TensorList of unknown dtype
    tensors = [a for a in ins if isinstance(a, _Tensor)]
    out_tensors = [a for a in outs if isinstance(a, _Tensor)]
    reads = sum(t.nbytes for t in tensors)
    if stem in _WRITE_ONLY and in_place and tensors:
        # fill_(self, value): self is written, never read; a tensor value / probability is read
        return OpCost(0.0, sum(t.nbytes for t in tensors[1:]) + tensors[0].nbytes, dtype, **meta)
    if stem in _FACTORIES:
        if not out_tensors or not out_tensors[0].numel:
            return _unknown(dtype, **meta)  # the result's size is not in the arguments
        return OpCost(0.0, out_tensors[0].nbytes, dtype, **meta)
    if stem == "copy" and in_place and len(tensors) >= 2:
        return OpCost(0.0, tensors[0].nbytes + tensors[1].nbytes, dtype, **meta)
    if stem in ("cat", "stack", "_cat", "concat", "concatenate", "hstack", "vstack"):
        return _cat_cost(ins, out_tensors, dtype, meta)
    if stem == "im2col":
        return _im2col_cost(ins, out_tensors, concrete, dtype, meta)
    if stem in ("gather", "index_select", "embedding"):
        return _gather_cost(stem, ins, out_tensors, concrete, dtype, meta)
    if stem in ("scatter", "scatter_add", "scatter_reduce", "index_add", "index_copy"):
        return _scatter_cost(stem, ins, concrete, dtype, meta)
    if stem in ("nll_loss_forward", "nll_loss2d_forward", "nll_loss_backward",
                "nll_loss2d_backward"):
        return _nll_loss_cost(stem, ins, concrete, dtype, meta)
    if stem == "embedding_dense_backward" and len(tensors) >= 2:
        # reads the gradient rows (all, unless a padding row is skipped) and the indices; the
        # gradient table it accumulates into is zeroed and summed by kernels of unknown split
        skips = _ints(_concrete(concrete, 3)) not in ([-1], None)
        return OpCost(float(tensors[0].numel),
                      tensors[1].nbytes + (0.0 if skips else tensors[0].nbytes), dtype, **meta)
    if not tensors:
        return _unknown(dtype, **meta)
    if stem in _REDUCTIONS and not (stem in ("max", "min") and len(tensors) >= 2):
        # the dim argument, where this overload has one (sum(self, dtype) and var(self, unbiased)
        # reduce everything: their second argument is not a dim)
        pos = _REDUCTIONS[stem]
        dims = _ints(_concrete(concrete, pos)) if len(ins) >= pos + 2 or stem == "count_nonzero" else []
        return _reduction_cost(stem, tensors[0], tensors[1:], out_tensors, dims, pflops,
                               dtype, meta)
    if stem in _LOSSES:
        reduction = _ints(_concrete(concrete, _LOSSES[stem]))
        shape = _broadcast([t.shape for t in tensors[:2]])
        out_numel = _numel(shape) if reduction == [0] else 1
        out_bytes = out_numel * _out_size(out_tensors, _promoted_size(tensors[:2]))
        return OpCost(pflops if pflops is not None else float(_numel(shape)), reads + out_bytes,
                      dtype, **meta)
    if stem in _SAME_SHAPE:
        skip = _NOT_READ.get(stem, ())
        read_tensors = [a for i, a in enumerate(ins) if isinstance(a, _Tensor) and i not in skip]
        return _same_shape_cost(stem, read_tensors, out_tensors, concrete, pflops, dtype, meta)
    pointwise = stem in _UNARY or stem in _BINARY or stem in _COMPARE or stem in _POINTWISE_BACKWARD
    if stem in ("max", "min"):
        pointwise = True  # max(self, other): elementwise
    if not pointwise:
        return _unknown(dtype, **meta)
    if stem == "where" and len(ins) == 1:
        return _unknown(dtype, **meta)  # where(condition): the indices of the true elements
    shape = _broadcast([t.shape for t in tensors])
    out_numel = _numel(shape)
    if in_place:
        out_bytes = tensors[0].nbytes
    else:
        out_bytes = out_numel * _out_size(out_tensors, _pointwise_result_size(stem, tensors))
    flops = pflops if pflops is not None else float(out_numel)
    return OpCost(flops, reads + out_bytes, dtype, **meta)


def _out_size(out_tensors: list[_Tensor], default: int) -> int:
    """Bytes per element of an op's result: its out= tensor's dtype where it was passed one. Not
    that tensor's recorded size: an out= tensor is often passed empty, for the op to resize."""
    return out_tensors[0].size if out_tensors else default


def _out_count(base: str, args: list[Any], types: list[Any]) -> int:
    """How many trailing arguments are out= tensors (0 for the functional and in-place
    overloads)."""
    n = len(types)
    for k in (1, 2, 3):
        names = OUT_OVERLOADS.get((n, k))
        if names is None or f" {base} " not in f" {names} ":
            continue
        tail = args[n - k:]
        if all(isinstance(a, (_Tensor, list)) or t == "TensorList" for a, t in zip(tail,
                                                                                   types[n - k:])):
            return k
    return 0


def _triton_cost(name: str, flat: list[_Tensor], pflops: float | None, dtype: str,
                 meta: dict[str, Any]) -> OpCost:
    """An Inductor kernel is recorded with the buffers it is passed: each is read or written at
    least once, unless the kernel fuses an op that reads only part of one (a slice, a gather) or is
    a template (a GEMM whose M, N, K the buffer list does not say)."""
    fused = name.split("_", 3)[-1] if name.count("_") >= 3 else ""
    if name.startswith("triton_tem") or any(p in fused for p in _PARTIAL_IN_TRITON) or not flat:
        return _unknown(dtype, **meta)
    return OpCost(pflops or 0.0, sum(t.nbytes for t in flat), dtype, **meta)


def _gemm_cost(stem: str, ins: list[Any], outs: list[Any], concrete: list[Any],
               pflops: float | None, dtype: str, meta: dict[str, Any]) -> OpCost:
    def at(i: int) -> _Tensor | None:
        return ins[i] if i < len(ins) and isinstance(ins[i], _Tensor) else None

    c: _Tensor | None = None
    if stem in ("addmm", "baddbmm", "addbmm", "_addmm_activation", "addmv"):
        c, a, b = at(0), at(1), at(2)
    else:
        a, b = at(0), at(1)
    if a is None or b is None:
        return _unknown(dtype, matrix=True, **meta)
    if stem in _MATVECS:
        if len(a.shape) == 2 and len(b.shape) == 1:  # [M, K] x [K]
            gemm = (1, a.shape[0], 1, a.shape[1])
        elif len(a.shape) == 1 and len(b.shape) == 1:  # dot: [K] . [K]
            gemm = (1, 1, 1, a.shape[0])
        else:
            return _unknown(dtype, matrix=True, **meta)
    elif len(a.shape) == 3 and len(b.shape) == 3:
        gemm = (a.shape[0], a.shape[1], b.shape[2], a.shape[2])
    elif len(a.shape) >= 2 and len(b.shape) >= 2:
        gemm = (1, a.shape[-2], b.shape[-1], a.shape[-1])
    else:
        return _unknown(dtype, matrix=True, **meta)
    bsz, m, n, k = gemm
    out_size = a.size
    if stem == "_scaled_mm":
        out_size = _SCALAR_TYPE_BYTES.get((_ints(_concrete(concrete, 6)) or [15])[0], 2)
    elif stem == "_int_mm":
        out_size = 4
    out_numel = m * n if stem == "addbmm" else bsz * m * n
    out_bytes = out_numel * _out_size([t for t in outs if isinstance(t, _Tensor)], out_size)
    read = a.nbytes + b.nbytes + (c.nbytes if c is not None else 0.0)
    if stem == "_scaled_mm":  # its scales and bias
        read += sum(t.nbytes for t in ins[2:] if isinstance(t, _Tensor))
    flops = pflops if pflops is not None else 2.0 * bsz * m * n * k
    return OpCost(float(flops), read + out_bytes, dtype, gemm, meta["numel"], meta["shape"],
                  meta["square"], matrix=True)


# arguments that, when passed, leave the query-key pairs unknown: sliding windows, per-sequence
# key lengths, a paged KV cache
_ATTENTION_UNKNOWN_IF_SET = {
    "_flash_attention_forward": (11, 12, 13, 15),
    "_flash_attention_backward": (15, 16),
    "_efficient_attention_forward": (12, 13),
    "_efficient_attention_backward": (18,),
}


def _causal_pairs(sq: int, sk: int) -> float:
    """Query-key pairs a causal mask keeps, the fewest of its two alignments (top-left)."""
    if sq <= sk:
        return sq * (sq + 1) / 2
    return sk * (sk + 1) / 2 + (sq - sk) * sk


def _attention_cost(stem: str, ins: list[Any], concrete: list[Any], dtype: str,
                    meta: dict[str, Any]) -> OpCost:
    qi, ki, vi, layout, causal_at, backward = _ATTENTION[stem]
    q, k, v = (ins[i] if i < len(ins) and isinstance(ins[i], _Tensor)
               else None for i in (qi, ki, vi))
    if q is None or k is None or v is None or len(q.shape) != 4 or len(k.shape) != 4 or len(v.shape) != 4:
        # variable-length batches: sequence lengths unknown
        return _unknown(dtype, matrix=True, **meta)
    if any(_concrete(concrete, i) not in ("", "None", "-1") or (i < len(ins) and ins[i] is not None)
           for i in _ATTENTION_UNKNOWN_IF_SET.get(stem, ())):
        return _unknown(dtype, matrix=True, **meta)
    if layout == "bhsd":
        b, h, sq, d = q.shape
        sk, dv = k.shape[2], v.shape[3]
    else:
        b, sq, h, d = q.shape
        sk, dv = k.shape[1], v.shape[3]
    # is_causal (xformers: a custom_mask_type, 0 for none) from "Concrete Inputs", which every
    # torch that records shapes writes; a trace without it (hand-built) is taken as unmasked
    flag = _concrete(concrete, causal_at)
    if stem.startswith("_efficient_attention"):
        causal = _ints(flag) not in (None, [], [0])
    else:
        causal = bool(_flag(flag))
    pairs = _causal_pairs(sq, sk) if causal else float(sq * sk)
    fwd = 2.0 * b * h * pairs * (d + dv)  # S = QK^T and O = PV
    # backward recomputes S, then dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: 2.5x forward
    flops = 2.5 * fwd if backward else fwd
    tensors = [t for t in ins if isinstance(t, _Tensor)]
    read = sum(t.nbytes for t in tensors)
    out_bytes = (q.nbytes + k.nbytes + v.nbytes) if backward else b * h * sq * dv * q.size
    return OpCost(flops, read + out_bytes, dtype, None, meta["numel"], meta["shape"],
                  meta["square"], matrix=True)


def _conv_cost(stem: str, ins: list[Any], concrete: list[Any], pflops: float | None, dtype: str,
               meta: dict[str, Any]) -> OpCost:
    backward = stem in _CONV_BACKWARD
    if backward:
        # bias_sizes sits at 3 in convolution_backward
        offset = 1 if _CONV_BACKWARD[stem] == 0 else 0
        g_out, x, w = (ins[i] if i < len(ins) and isinstance(ins[i], _Tensor)
                       else None for i in (0, 1, 2))
        pos = (3 + offset, 4 + offset, 5 + offset, 6 + offset, 7 + offset, 8 + offset)
        mask_text = _concrete(concrete, 9 + offset)
    else:
        x, w = (ins[i] if i < len(ins) and isinstance(ins[i], _Tensor) else None for i in (0, 1))
        g_out, pos, mask_text = None, _CONV[stem], ""
    if x is None or w is None or len(x.shape) < 3 or len(x.shape) != len(w.shape):
        return _unknown(dtype, matrix=True, **meta)
    spatial = len(x.shape) - 2
    stride_at, pad_at, dil_at, transposed_at, outpad_at, groups_at = pos

    def ints_at(i: int, default: int) -> list[int] | None:
        if i < 0:
            return [default] * spatial
        vals = _ints(_concrete(concrete, i))
        if vals is None or not _concrete(concrete, i):
            return None
        return vals * spatial if len(vals) == 1 else vals

    transposed = {-1: False, -2: True}.get(transposed_at)
    if transposed is None:
        transposed = _flag(_concrete(concrete, transposed_at))
    groups = ints_at(groups_at, 1)
    if transposed is None or not groups:
        return _unknown(dtype, matrix=True, **meta)
    if backward:
        if g_out is None or len(g_out.shape) != len(x.shape):
            return _unknown(dtype, matrix=True, **meta)
        out_shape = g_out.shape
    else:
        stride, pad, dil = ints_at(stride_at, 1), ints_at(pad_at, 0), ints_at(dil_at, 1)
        outpad = ints_at(outpad_at, 0)
        if not stride or pad is None or not dil or outpad is None:
            return _unknown(dtype, matrix=True, **meta)
        kernel = w.shape[2:]
        if transposed:
            sp = [(i - 1) * s - 2 * p + d * (kk - 1) + op + 1
                  for i, s, p, d, kk, op in zip(x.shape[2:], stride, pad, dil, kernel, outpad)]
            channels = w.shape[1] * groups[0]
        else:
            sp = [(i + 2 * p - d * (kk - 1) - 1) // s + 1
                  for i, s, p, d, kk in zip(x.shape[2:], stride, pad, dil, kernel)]
            channels = w.shape[0]
        if min(sp, default=0) <= 0:
            return _unknown(dtype, matrix=True, **meta)
        out_shape = (x.shape[0], channels, *sp)
    # every output (regular) / input (transposed) position meets every weight element once
    positions = _numel(x.shape[2:]) if transposed else _numel(out_shape[2:])
    one_pass = 2.0 * x.shape[0] * positions * w.numel
    if not backward:
        bias = ins[2] if len(ins) > 2 and isinstance(ins[2], _Tensor) and stem != "cudnn_convolution" else None
        read = x.nbytes + w.nbytes + (bias.nbytes if bias is not None else 0.0)
        flops = pflops if pflops is not None else one_pass
        return OpCost(float(flops), read + _numel(out_shape) * x.size, dtype, None, meta["numel"],
                      meta["shape"], meta["square"], matrix=True)
    mask = [_flag(t.strip()) for t in mask_text.strip("[]").split(",")] if mask_text else [
        True, True, True]
    grad_input, grad_weight = bool(mask and mask[0]), bool(len(mask) > 1 and mask[1])
    if g_out is None:
        return _unknown(dtype, matrix=True, **meta)
    read = g_out.nbytes + (w.nbytes if grad_input else 0.0) + (x.nbytes if grad_weight else 0.0)
    write = (x.numel * x.size if grad_input else 0.0) + (w.numel * w.size if grad_weight else 0.0)
    flops = one_pass * (int(grad_input) + int(grad_weight))
    if pflops is not None:
        flops = pflops
    return OpCost(float(flops), read + write, dtype, None, meta["numel"], meta["shape"],
                  meta["square"], matrix=True)


def _foreach_cost(stem: str, in_place: bool, ins: list[Any], outs: list[Any],
                  pflops: float | None, dtype: str, meta: dict[str, Any]) -> OpCost:
    lists = [a for a in ins if isinstance(a, list)]
    if not lists or any(a is None for a in ins[:1]):
        return _unknown(dtype, **meta)
    first = lists[0]
    if not first:
        return _unknown(dtype, **meta)  # the profiler left the list's shapes out
    op = stem.removeprefix("_foreach_")
    numel = sum(t.numel for t in first)
    others = sum(t.nbytes for a in ins[1:] if isinstance(a, list) for t in a)
    others += sum(a.nbytes for a in ins if isinstance(a, _Tensor))
    flops = pflops if pflops is not None else float(numel)
    if op in ("zero", "fill") and in_place:
        return OpCost(0.0, sum(t.nbytes for t in first), dtype, **meta)
    if op == "copy" and in_place:
        return OpCost(0.0, sum(t.nbytes for t in first) + others, dtype, **meta)
    read = sum(t.nbytes for t in first) + others
    if op in _FOREACH_REDUCTIONS:
        return OpCost(flops, read + len(first) * first[0].size if first else read, dtype, **meta)
    out_lists = [a for a in outs if isinstance(a, list)]
    if in_place:
        write = sum(t.nbytes for t in first)
    else:  # a new list like the first (an out= list is often passed empty, to be resized)
        write = sum(t.numel for t in first) * (out_lists[0][0].size if out_lists and out_lists[0]
                                               else first[0].size)
    return OpCost(flops, read + write, dtype, **meta)


def _fused_optimizer_cost(stem: str, ins: list[Any], dtype: str, meta: dict[str, Any]) -> OpCost:
    """_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, ...):
    reads every list, writes back the params and the optimizer state."""
    lists = [a if isinstance(a, list) else None for a in ins[:6]]
    if len(lists) < 2 or not lists[0] or not lists[1]:
        # params / grads unrecorded (a long list) or of unknown dtype
        return _unknown(dtype, **meta)
    read = sum(t.nbytes for a in lists if a for t in a)
    read += sum(a.nbytes for a in ins if isinstance(a, _Tensor))
    write = sum(t.nbytes for i in _FUSED_OPTIMIZERS[stem] if i < len(lists) and lists[i]
                for t in lists[i])
    return OpCost(float(sum(t.numel for t in lists[0])), read + write, dtype, **meta)


def _cat_cost(ins: list[Any], out_tensors: list[_Tensor], dtype: str,
              meta: dict[str, Any]) -> OpCost:
    parts = ins[0] if ins and isinstance(ins[0], list) else None
    if not parts:
        return _unknown(dtype, **meta)  # no dtype, or the shapes unrecorded
    read = sum(t.nbytes for t in parts)
    write = sum(t.numel for t in parts) * _out_size(out_tensors, parts[0].size)
    return OpCost(0.0, read + write, dtype, **meta)


def _im2col_cost(ins: list[Any], out_tensors: list[_Tensor], concrete: list[Any], dtype: str,
                 meta: dict[str, Any]) -> OpCost:
    """im2col(self, kernel_size, dilation, padding, stride) writes [N, C x kh x kw, L]; it reads all
    of its input only when the windows leave no gap (stride <= dilated kernel)."""
    x = ins[0] if ins and isinstance(ins[0], _Tensor) else None
    ks, dil, pad, st = (_ints(_concrete(concrete, i)) for i in (1, 2, 3, 4))
    if x is None or len(x.shape) not in (3, 4) or not ks or not dil or pad is None or not st:
        return _unknown(dtype, **meta)
    ks, dil, pad, st = ([v[0]] * 2 if len(v) == 1 else v for v in (ks, dil, pad, st))
    spatial = [(i + 2 * p - d * (k - 1) - 1) // s + 1 for i, k, d, p, s in zip(x.shape[-2:], ks,
                                                                               dil, pad, st)]
    if min(spatial) <= 0:
        return _unknown(dtype, **meta)
    out_numel = x.numel // _numel(x.shape[-2:]) * ks[0] * ks[1] * spatial[0] * spatial[1]
    write = out_numel * _out_size(out_tensors, x.size)
    read = x.nbytes if all(s <= d * (k - 1) + 1 for s, d, k in zip(st, dil, ks)) else 0.0
    return OpCost(0.0, read + write, dtype, **meta)


def _gather_cost(stem: str, ins: list[Any], out_tensors: list[_Tensor],
                 concrete: list[Any], dtype: str, meta: dict[str, Any]) -> OpCost:
    """gather(self, dim, index) / index_select(self, dim, index) / embedding(weight, indices):
    the index is read, the output written; of the source, only what is sure to be distinct."""
    if stem == "embedding":
        src, index, dim = (ins[0], ins[1], 0) if len(ins) > 1 else (None, None, 0)
    else:
        src, index = (ins[0], ins[2]) if len(ins) > 2 else (None, None)
        dims = _ints(_concrete(concrete, 1))
        dim = dims[0] if dims else None
    if not isinstance(src, _Tensor) or not isinstance(index, _Tensor) or dim is None or not src.shape:
        return _unknown(dtype, **meta)
    dim = dim % len(src.shape) if src.shape else 0
    if stem == "gather":
        out_numel = index.numel
        along = index.shape[dim] if dim < len(index.shape) else 1
        distinct = out_numel // along if along else 0  # one element per position of the other dims
    else:
        row = src.numel // src.shape[dim] if src.shape[dim] else 0
        out_numel = row * index.numel
        distinct = row if index.numel else 0  # at least one slice
    out_bytes = out_numel * _out_size(out_tensors, src.size)
    return OpCost(0.0, index.nbytes + distinct * src.size + out_bytes, dtype, **meta)


def _scatter_cost(stem: str, ins: list[Any], concrete: list[Any], dtype: str,
                  meta: dict[str, Any]) -> OpCost:
    """scatter(self, dim, index, src) reads the index and as many src elements, and writes at least
    one element per position of the index's other dims; index_add / index_copy(self, dim, index,
    source) read all of source and write at least one slice."""
    self_, index = (ins[0], ins[2]) if len(ins) > 2 else (None, None)
    src = ins[3] if len(ins) > 3 and isinstance(ins[3], _Tensor) else None
    dims = _ints(_concrete(concrete, 1))
    if not isinstance(self_, _Tensor) or not isinstance(index, _Tensor) or not dims:
        return _unknown(dtype, **meta)
    if stem.startswith("scatter"):
        dim = dims[0] % max(len(index.shape), 1)
        along = index.shape[dim] if index.shape else 1
        read = index.nbytes + (index.numel * src.size if src is not None else 0.0)
        write = (index.numel // along if along else 0) * self_.size
        flops = float(index.numel) if stem != "scatter" else 0.0
        return OpCost(flops, read + write, dtype, **meta)
    if src is None or not src.shape:
        return _unknown(dtype, **meta)
    dim = dims[0] % len(src.shape)
    row = src.numel // src.shape[dim] if src.shape[dim] else 0
    flops = float(src.numel) if stem == "index_add" else 0.0
    return OpCost(flops, index.nbytes + src.nbytes + row * self_.size, dtype, **meta)


def _nll_loss_cost(stem: str, ins: list[Any], concrete: list[Any], dtype: str,
                   meta: dict[str, Any]) -> OpCost:
    """nll_loss picks one element per row: it reads the targets and writes the loss (one value, or
    one per row with reduction='none'). The picked inputs are not counted: rows whose target is
    ignore_index read nothing. Backward reads the targets and the incoming gradient and writes one
    element per row into a gradient an earlier kernel zeroed (again none for ignored rows)."""
    if stem.endswith("forward"):
        self_, target = (ins[0], ins[1]) if len(ins) > 1 else (None, None)
        reduction = _ints(_concrete(concrete, 3))
    else:
        self_, target = (ins[1], ins[2]) if len(ins) > 2 else (None, None)
        reduction = _ints(_concrete(concrete, 4))
    if not isinstance(self_, _Tensor) or not isinstance(target, _Tensor):
        return _unknown(dtype, **meta)
    if stem.endswith("forward"):
        out = target.numel if reduction == [0] else 1
        return OpCost(float(target.numel), target.nbytes + out * self_.size, dtype, **meta)
    grad_out = ins[0] if isinstance(ins[0], _Tensor) else None
    total_weight = ins[6] if len(ins) > 6 and isinstance(ins[6], _Tensor) else None
    read = target.nbytes + (grad_out.nbytes if grad_out else 0.0) + (total_weight.nbytes
                                                                     if total_weight else 0.0)
    return OpCost(float(target.numel), read, dtype, **meta)


def _reduction_cost(stem: str, x: _Tensor, rest: list[_Tensor], out_tensors: list[_Tensor],
                    dims: list[int] | None,
                    pflops: float | None, dtype: str, meta: dict[str, Any]) -> OpCost:
    if dims and x.shape:
        kept = [s for i, s in enumerate(x.shape) if i not in {d % len(x.shape) for d in dims}]
        out_numel = _numel(kept)
    else:
        out_numel = 1  # all dims (or not recorded: one value is the least it writes)
    out_bytes = out_numel * _out_size(out_tensors, _REDUCTION_OUT_BYTES.get(stem, x.size))
    flops = pflops if pflops is not None else float(x.numel)
    return OpCost(flops, x.nbytes + sum(t.nbytes for t in rest) + out_bytes, dtype, **meta)


def _same_shape_cost(stem: str, tensors: list[_Tensor], out_tensors: list[_Tensor],
                     concrete: list[Any],
                     pflops: float | None, dtype: str, meta: dict[str, Any]) -> OpCost:
    """Softmax, norms, dropout, scans and their backwards: every input read, one output the size of
    the first argument written (the norms' small statistics and masks are left out)."""
    reads = sum(t.nbytes for t in tensors)
    lead = tensors[0]
    size = lead.size
    if stem in _SAME_SHAPE_DTYPE_ARG:
        code = _ints(_concrete(concrete, _SAME_SHAPE_DTYPE_ARG[stem]))
        if code:
            size = min(size, _SCALAR_TYPE_BYTES.get(code[0], size))
    elif stem.endswith("_backward") and len(tensors) > 1:
        size = tensors[1].size  # the gradient of the input, in the input's dtype
    elif stem in ("_softmax", "_log_softmax") and _flag(_concrete(concrete, 2)):
        size = 4  # half_to_float
    write = lead.numel * size
    if stem.endswith("_backward") and stem.startswith(("native_", "cudnn_", "_fused_rms")):
        mask = _concrete(concrete,
                         {"native_layer_norm_backward": 7,
                          "native_batch_norm_backward": 9}.get(stem, -1))
        if mask and _flag(mask.strip("[]").split(",")[0].strip()) is False:
            write = 0.0  # no gradient of the input asked for
    if out_tensors and write:
        write = lead.numel * out_tensors[0].size
    flops = pflops if pflops is not None else float(lead.numel)
    return OpCost(flops, reads + write, dtype, **meta)
