"""Gated linear units: ``swiglu(gate, up) = silu(gate) * up`` and ``geglu(gate, up) = gelu(gate) *
up``.

The cure for the VRAM wall (activation memory that outgrows the card): for backward, eager
PyTorch keeps ``gate`` (for the activation), ``act(gate)`` and ``up`` (for the product). This op
keeps only ``gate`` and ``up`` and recomputes the activation in backward, where one kernel writes
both ``dgate`` and ``dup``: one [tokens, intermediate] tensor less per MLP layer (Llama-3-8B, 8192
tokens, 14336 wide, bf16: 235 MB a layer).

Numerics follow Hugging Face's ``act_fn(gate_proj(x)) * up_proj(x)``: the activation is computed
in fp32 and rounded to the input dtype, then multiplied by ``up`` (in fp32) and rounded again, the
two roundings eager bf16/fp16 makes. The backward computes in fp32 and rounds once per output.

Formulas (fp32 inside the kernels):

- silu(x) = x / (1 + exp(-x)); silu'(x) = s (1 + x (1 - s)) with s = sigmoid(x).
- tanh-GELU(x) = 0.5 x (1 + t), t = tanh(k), k = sqrt(2/pi) (x + 0.044715 x^3), with CUDA's
  tanhf (libdevice) as PyTorch; derivative 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
  The interpreter, which has no libdevice, takes t = 2 sigmoid(2k) - 1.
- erf-GELU(x) = 0.5 x (1 + erf(x / sqrt(2))); derivative Phi(x) + x exp(-x^2 / 2) / sqrt(2 pi).

Memory, time and bit-equality against eager on an H100: benchmarks/BENCHMARKS-kernels.md "Evidence
moved from the source: kernel constants".
"""

from __future__ import annotations

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from gpudoctor.errors import InputError
from gpudoctor.kernels._common import (
    Launcher,
    check_same,
    check_tensor,
    define_op,
    interpreting,
    tl,
    use_triton,
)
from gpudoctor.kernels._common import jit as _jit

try:
    from triton.language.extra import libdevice
except ImportError:  # without triton the GLU kernels are never launched
    libdevice = None


# activation kinds (a constexpr of the kernels)
SILU, GELU_TANH, GELU_ERF = 0, 1, 2
_KIND_NAMES = {SILU: "silu", GELU_TANH: "gelu (tanh)", GELU_ERF: "gelu (erf)"}

# Elements per program. 1024 with 4 warps is 8 values a thread, a 16-byte load for bf16 x 8; the
# same choice as Triton tutorial 01 "Vector Addition" (BLOCK_SIZE=1024). Not yet tuned on the H100.
BLOCK = 1024

# -- kernels
# -----------------------------------------------------------------------------------------


@_jit
def _act_and_grad(x, KIND: tl.constexpr, GRAD: tl.constexpr, LIBDEVICE: tl.constexpr):
    """(act(x), act'(x)) in fp32; act'(x) is 0.0 unless GRAD. Constants: sqrt(2/pi) =
    0.7978845608028654, 1/sqrt(2) = 0.7071067811865476, 1/sqrt(2 pi) = 0.3989422804014327."""
    da = 0.0
    if KIND == 0:  # silu
        s = 1.0 / (1.0 + tl.exp(-x))
        a = x * s
        if GRAD:
            da = s * (1.0 + x * (1.0 - s))
    # tanh-GELU, k = sqrt(2/pi) (x + 0.044715 x^3), in PyTorch's order of operations
    elif KIND == 1:
        k = 0.7978845608028654 * (x + 0.044715 * (x * x * x))
        if LIBDEVICE:  # CUDA's tanhf, the function PyTorch's kernel calls
            t = libdevice.tanh(k)
        else:  # the interpreter has no libdevice: tanh(k) = 2 sigmoid(2k) - 1
            t = 2.0 / (1.0 + tl.exp(-2.0 * k)) - 1.0
        a = 0.5 * x * (1.0 + t)
        if GRAD:
            da = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (
                1.0 + 3.0 * 0.044715 * x * x)
    else:  # erf-GELU
        cdf = 0.5 * (1.0 + tl.erf(x * 0.7071067811865476))
        a = x * cdf
        if GRAD:
            da = cdf + x * 0.3989422804014327 * tl.exp(-0.5 * x * x)
    return a, da


@_jit
def _glu_fwd(G, U, OUT, stride_g, stride_u, stride_o, n_cols, col_blocks,
             KIND: tl.constexpr, BLOCK: tl.constexpr, LIBDEVICE: tl.constexpr):
    # program p: row p // col_blocks, columns of block p % col_blocks; reads 2, writes 1 element
    # each
    pid = tl.program_id(0)
    row = (pid // col_blocks).to(tl.int64)  # 64-bit: row * stride may pass 2^31
    cols = (pid % col_blocks).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = tl.load(G + row * stride_g + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + row * stride_u + cols, mask=mask, other=0.0).to(tl.float32)
    a, _ = _act_and_grad(g, KIND, False, LIBDEVICE)
    a = a.to(G.dtype.element_ty).to(tl.float32)  # act_fn's output in the input dtype, as eager
    tl.store(OUT + row * stride_o + cols, (a * u).to(OUT.dtype.element_ty), mask=mask)


@_jit
def _glu_bwd(DY, G, U, DG, DU, stride_dy, stride_g, stride_u, stride_dg, stride_du,
             n_cols, col_blocks, KIND: tl.constexpr, BLOCK: tl.constexpr, LIBDEVICE: tl.constexpr):
    # recomputes act(g); reads dy, g, u and writes dg, du: one pass over memory for both gradients
    pid = tl.program_id(0)
    row = (pid // col_blocks).to(tl.int64)
    cols = (pid % col_blocks).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    dy = tl.load(DY + row * stride_dy + cols, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + row * stride_g + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + row * stride_u + cols, mask=mask, other=0.0).to(tl.float32)
    a, da = _act_and_grad(g, KIND, True, LIBDEVICE)
    a = a.to(G.dtype.element_ty).to(tl.float32)  # the value the forward multiplied by
    tl.store(DU + row * stride_du + cols, (dy * a).to(DU.dtype.element_ty), mask=mask)
    tl.store(DG + row * stride_dg + cols, (dy * u * da).to(DG.dtype.element_ty), mask=mask)


_launch_fwd = Launcher(_glu_fwd)
_launch_bwd = Launcher(_glu_bwd)


# -- launchers
# -----------------------------------------------------------------------------------------


def _layout(*tensors: torch.Tensor) -> tuple[int, int]:
    """(rows, cols) every tensor is viewed as: one long row when all are contiguous, else [-1,
    last]. As ints: a compiler's trace with dynamic shapes specializes the op on its size (see
    ``concrete``)."""
    if all(t.is_contiguous() for t in tensors):
        return 1, int(tensors[0].numel())
    cols = int(tensors[0].shape[-1])
    return int(tensors[0].numel()) // cols, cols


def _rows(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """t as [rows, cols] with unit column stride: a view whenever one exists (e.g. a chunk of a
    fused gate_up projection, row stride 2 * cols), else a contiguous copy."""
    t2 = t.reshape(rows, cols)
    if cols > 1 and t2.stride(1) != 1:
        t2 = t2.contiguous()
    return t2


def _launch(rows: int, cols: int) -> tuple[tuple[int], int, int]:
    block = min(BLOCK, max(16, 1 << (cols - 1).bit_length()))
    col_blocks = -(-cols // block)
    return (rows * col_blocks,), col_blocks, block


def _forward(gate: torch.Tensor, up: torch.Tensor, kind: int) -> torch.Tensor:
    rows, cols = _layout(gate, up)
    # contiguous: one long row, the tensors as they are (no view to build: 2-3 us of host each)
    if rows == 1:
        g2, u2, out = gate, up, torch.empty_like(gate)
        strides = (cols,) * 3  # never read (one row), the strides of [1, cols] views
    else:
        g2, u2 = _rows(gate, rows, cols), _rows(up, rows, cols)
        out = torch.empty((rows, cols), dtype=gate.dtype, device=gate.device)  # [rows, cols]
        strides = g2.stride(0), u2.stride(0), out.stride(0)
    grid, col_blocks, block = _launch(rows, cols)
    _launch_fwd.launch(grid, (g2, u2, out, *strides, cols, col_blocks),
                       (kind, block, not interpreting()), max(1, block // 256))
    return out if rows == 1 else out.view(gate.shape)


def _backward(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
              kind: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows, cols = _layout(dy, gate, up)
    if rows == 1:  # contiguous: as the forward
        dy2, g2, u2, dg, du = dy, gate, up, torch.empty_like(gate), torch.empty_like(up)
        strides = (cols,) * 5
    else:
        dy2, g2, u2 = _rows(dy, rows, cols), _rows(gate, rows, cols), _rows(up, rows, cols)
        # fresh buffers, [rows, cols]
        dg = torch.empty((rows, cols), dtype=gate.dtype, device=gate.device)
        du = torch.empty((rows, cols), dtype=up.dtype, device=up.device)
        strides = dy2.stride(0), g2.stride(0), u2.stride(0), dg.stride(0), du.stride(0)
    grid, col_blocks, block = _launch(rows, cols)
    _launch_bwd.launch(grid, (dy2, g2, u2, dg, du, *strides, cols, col_blocks),
                       (kind, block, not interpreting()), max(1, block // 256))
    if rows == 1:
        return dg, du
    return dg.view(gate.shape), du.view(up.shape)


class _GluFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor, kind: int) -> torch.Tensor:
        ctx.save_for_backward(gate, up)  # only the inputs: the activation is recomputed
        ctx.kind = kind
        return _forward(gate, up, kind)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: torch.Tensor):
        gate, up = ctx.saved_tensors
        dg, du = _backward(dy, gate, up, ctx.kind)
        return (dg if ctx.needs_input_grad[0] else None), (du if ctx.needs_input_grad[1]
                                                           else None), None


# -- the gpudoctor::glu custom op (what torch.compile sees)
# ------------------------------------------------


def _op_forward(gate: torch.Tensor, up: torch.Tensor, kind: int) -> torch.Tensor:
    """act(gate) * up, a fresh contiguous tensor of gate's shape."""
    return _forward(gate, up, kind)


def _op_forward_fake(gate, up, kind):
    return torch.empty_like(gate, memory_format=torch.contiguous_format)


def _op_forward_reference(gate, up, kind):
    return _native(gate, up, kind).contiguous()


def _op_backward(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
                 kind: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _backward(dy, gate, up, kind)


def _op_backward_fake(dy, gate, up, kind):
    return (torch.empty_like(gate, memory_format=torch.contiguous_format),
            torch.empty_like(up, memory_format=torch.contiguous_format))


def _op_backward_reference(dy, gate, up, kind):
    """The kernel's backward in PyTorch ops (fp32 math, the formulas of the module docstring)."""
    compute = torch.promote_types(gate.dtype, torch.float32)
    x, u, d = gate.to(compute), up.to(compute), dy.to(compute)
    if kind == SILU:
        s = torch.sigmoid(x)
        act, dact = x * s, s * (1.0 + x * (1.0 - s))
    elif kind == GELU_TANH:
        t = torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))
        act = 0.5 * x * (1.0 + t)
        dact = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0
                                                                                 * 0.044715 * x * x)
    else:
        cdf = 0.5 * (1.0 + torch.erf(x * 0.7071067811865476))
        act, dact = x * cdf, cdf + x * 0.3989422804014327 * torch.exp(-0.5 * x * x)
    act = act.to(gate.dtype).to(compute)  # the value the forward multiplied by
    return (d * u * dact).to(gate.dtype).contiguous(), (d * act).to(up.dtype).contiguous()


def _setup(ctx, inputs, output) -> None:
    gate, up, kind = inputs
    # only the inputs, as the eager path: the activation is recomputed
    ctx.save_for_backward(gate, up)
    ctx.kind = kind


def _op_grad(ctx, dy: torch.Tensor):
    gate, up = ctx.saved_tensors
    dg, du = _BWD_OP(dy, gate, up, ctx.kind)
    return (dg if ctx.needs_input_grad[0] else None), (du if ctx.needs_input_grad[1]
                                                       else None), None


def _native(gate: torch.Tensor, up: torch.Tensor, kind: int) -> torch.Tensor:
    """Eager PyTorch, exactly what HF computes (autograd keeps the activation)."""
    if kind == SILU:
        return F.silu(gate) * up
    return F.gelu(gate, approximate="tanh" if kind == GELU_TANH else "none") * up


def _gated(gate: torch.Tensor, up: torch.Tensor, kind: int) -> torch.Tensor:
    check_tensor("gate", gate, min_dims=1)
    check_tensor("up", up, min_dims=1)
    check_same("gate", gate, up=up)
    if gate.shape != up.shape:
        raise InputError(f"up has shape {tuple(up.shape)} but gate has shape {tuple(gate.shape)}; "
                         "give two tensors of one shape (the gate and up projections of the "
                         "same tokens)")
    if gate.numel() == 0 or not use_triton(gate):
        return _native(gate, up, kind)
    # one node the compiler traces, no break
    if _FWD_OP is not None and torch.compiler.is_compiling():
        return _FWD_OP(gate, up, kind)
    return _GluFunction.apply(gate, up, kind)


# Opaque custom ops, not triton_ops: Inductor's code generation for a user kernel re-emits the
# @triton.jit helpers and names imported from triton that the kernel reads, but not a module global
# such as ``libdevice`` (torch 2.13, torch/_inductor/codegen/wrapper.py), so the traced GLU kernels
# would not compile; and an elementwise kernel gains nothing from Inductor seeing it (it fuses none
# into user kernels).
_FWD_OP = define_op("glu", _op_forward, _op_forward_fake, reference=_op_forward_reference,
                    triton=False)
_BWD_OP = define_op("glu_backward", _op_backward, _op_backward_fake,
                    reference=_op_backward_reference, triton=False)
if _FWD_OP is not None:
    _FWD_OP.register_autograd(_op_grad, setup_context=_setup)


# -- public API
# ----------------------------------------------------------------------------------------


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for two tensors of one shape; saves only ``gate`` and ``up`` for
    backward.

    Triton on CUDA (fp32/bf16/fp16, any strides: a non-unit last stride is copied once); eager
    PyTorch for CPU tensors and fp64.
    """
    return _gated(gate, up, SILU)


def geglu(gate: torch.Tensor, up: torch.Tensor, approximate: str = "tanh") -> torch.Tensor:
    """``gelu(gate, approximate=approximate) * up``: ``"tanh"`` (``gelu_pytorch_tanh``, Gemma) or
    ``"none"`` (the exact erf GELU, HF's ``"gelu"``); saves only ``gate`` and ``up`` for
    backward."""
    if approximate not in ("tanh", "none"):
        raise InputError(
            f"approximate must be 'tanh' or 'none' (the erf GELU), got {approximate!r}")
    return _gated(gate, up, GELU_TANH if approximate == "tanh" else GELU_ERF)


# activation names (HF's ``hidden_act`` values and activation class names) -> kind
_BY_NAME = {
    "silu": SILU, "swish": SILU, "SiLU": SILU, "SiLUActivation": SILU,
    "gelu_pytorch_tanh": GELU_TANH, "gelu_new": GELU_TANH, "gelu_fast": GELU_TANH,
    "gelu_tanh": GELU_TANH,
    "GELUTanh": GELU_TANH, "PytorchGELUTanh": GELU_TANH, "NewGELUActivation": GELU_TANH,
    "FastGELUActivation": GELU_TANH,
    "gelu": GELU_ERF, "gelu_python": GELU_ERF, "GELUActivation": GELU_ERF,
}


def _activation_kind(mlp: nn.Module, activation: object) -> int:
    """The kind of the MLP's activation: ``activation`` if given, else its ``act_fn`` (or
    ``activation_fn``), else its ``config.hidden_act``."""
    if activation is None:
        activation = getattr(mlp, "act_fn", None) or getattr(mlp, "activation_fn", None)
    if activation is None:
        config = getattr(mlp, "config", None)
        activation = getattr(config, "hidden_act", None) or getattr(config,
                                                                    "hidden_activation", None)
    if isinstance(activation, nn.GELU):
        return GELU_TANH if activation.approximate == "tanh" else GELU_ERF
    if activation is F.silu:
        return SILU
    if activation is F.gelu:
        return GELU_ERF
    name = activation if isinstance(activation, str) else type(activation).__name__
    if name in _BY_NAME:
        return _BY_NAME[name]
    known = sorted(k for k in _BY_NAME if k.islower())
    raise InputError(f"the MLP's activation {name!r} is not one the fused gated MLP computes; "
                     f"accepted: {', '.join(known)} (or nn.SiLU / nn.GELU); pass activation= "
                     "to name it")


def fused_gated_mlp_forward(mlp_module: nn.Module, x: torch.Tensor, *,
                            activation: object = None) -> torch.Tensor:
    """``down_proj(act(gate_proj(x)) * up_proj(x))`` with the fused op, for an HF-style gated MLP
    (Llama, Qwen, Mistral, Gemma...; a fused ``gate_up_proj`` as in Phi-3 works too).

    The activation comes from ``mlp_module.act_fn`` (SiLU, HF's GELU classes, ``nn.GELU``) unless
    ``activation`` names it (``"silu"``, ``"gelu"``, ``"gelu_pytorch_tanh"``...). The projections
    are called as modules, so their hooks and adapters (LoRA) still run.
    """
    kind = _activation_kind(mlp_module, activation)
    down = getattr(mlp_module, "down_proj", None)
    if isinstance(getattr(mlp_module, "gate_up_proj", None), nn.Module) and down is not None:
        gate, up = mlp_module.gate_up_proj(x).chunk(2, dim=-1)  # views, row stride 2 * intermediate
    elif all(isinstance(getattr(mlp_module, n, None), nn.Module) for n in ("gate_proj", "up_proj",
                                                                           "down_proj")):
        gate, up = mlp_module.gate_proj(x), mlp_module.up_proj(x)
    else:
        raise InputError(f"mlp_module ({type(mlp_module).__name__}) needs gate_proj, up_proj and "
                         "down_proj modules (or gate_up_proj and down_proj); give an HF-style "
                         "gated MLP")
    return mlp_module.down_proj(_gated(gate, up, kind))
