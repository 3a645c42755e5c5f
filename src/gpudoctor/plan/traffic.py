"""HBM traffic outside the matmuls, per implementation: elementwise kernels, the optimizer step and
the data-parallel wrapper's own copies.

``IMPLEMENTATIONS`` names what a step runs (``impl=`` of ``predict_step``, ``--impl`` of plan
train):

- ``eager-hf``: a Hugging Face Transformers model in eager PyTorch (bf16 parameters, no autocast),
  ``torch.optim.AdamW`` (foreach, the default), DDP / FSDP2 with their defaults, tensor parallelism
  as torch's ``ColwiseParallel`` / ``RowwiseParallel`` on each projection module. The elementwise bytes
  are counted op by op from transformers 5.17's ``modeling_llama.py`` and the autograd formulas of
  torch (``hf_layer_bytes``); ``benchmarks/count_hf_traffic.py`` checks the count against every aten
  op a CPU forward + backward of a small Llama dispatches.
- ``fused``: Megatron-style fused kernels (fused LayerNorm/RMSNorm, bias-GeLU/SwiGLU, softmax, loss)
  and a fused mixed-precision Adam: elementwise work as 4 passes over what a micro-batch keeps for
  backward (memory/activations.py), 36 bytes per parameter for the optimizer; flash attention.
- ``fused-noflash``: the same, with attention as Megatron-LM ran it before flash attention (2021-22):
  the scores materialized per head, its fused scale-mask-softmax and attention dropout, so each layer
  also keeps and moves the 5 a s^2 b bytes of Korthikanti et al. 2022 eq. 1 (softmax output, dropout
  mask, dropout output).

Every op is priced as reading each input once and writing its output once. Without a bench file, or
with one that lacks the ``elementwise`` section, every byte goes at the HBM bandwidth (measured with
--bench). With it (hardware/kinds.py), each eager-hf op is priced at the measured rate of its kind,
from its operands' layout: ``contiguous`` (vectorized, all operands alike), ``rope`` (an operand in
the [b, s, H, d] -> [b, H, s, d] transposed layout the projections leave, or a strided half of it),
``broadcast_heads`` (a contiguous [b, H, s, d] times a [1, 1, s, d] table), ``weight`` ([tokens, h]
times the norm weight [h]), ``rowscale`` (fp32 [tokens, h] times [tokens, 1]), ``cast_up`` /
``cast_down`` (bf16 <-> fp32) and ``reduction``. The fused model's kernels are not PyTorch's eager
ones: they stay at the HBM bandwidth. The optimizer is priced at its implementation's measured step
rate (``optimizer`` section: torch.optim.AdamW foreach for eager-hf, fused for fused).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudoctor.core.spec import ModelSpec
from gpudoctor.errors import InputError
from gpudoctor.hardware.kinds import ADAMW_FOREACH_PASSES
from gpudoctor.memory.activations import Workload, head_memory, layer_memory, tp_local

if TYPE_CHECKING:
    from gpudoctor.core.layout import Layout


@dataclass(frozen=True)
class Implementation:
    """How a training step is implemented, as far as its memory-bound work goes."""

    name: str
    elementwise: str  # "eager-hf": op-by-op count; "fused": passes over the saved activations
    optimizer_bytes_per_param: float  # HBM bytes the optimizer step moves per local parameter
    optimizer_doc: str
    dp_copies: bool  # DDP gradient_as_bucket_view=False / FSDP2 copy-in, copy-out (PyTorch defaults)
    optimizer_probe: str  # the bench's ``optimizer`` row that prices its step (hardware/kinds.py)
    attention: str = "sdpa"  # the fused model's attention: "sdpa" (flash) or "eager" (scores materialized)
    # TP: torch's ColwiseParallel on each projection module, each all-reducing its own input
    # gradient (plan/comm.py tp_backward_allreduces); False: Megatron's one per block
    tp_per_projection: bool = False


# torch.optim.AdamW foreach moves ADAMW_FOREACH_PASSES x 2 bytes per parameter (the count is in
# hardware/kinds.py, beside the bench probe that times that step).
# Fused mixed-precision Adam (Megatron / Apex): read bf16 grad, read+write fp32 master, two fp32
# moments and the bf16 weight copy: ~36 bytes per parameter.
FUSED_MIXED_ADAM_BYTES = 36

IMPLEMENTATIONS = {
    "eager-hf": Implementation("eager-hf", "eager-hf", ADAMW_FOREACH_PASSES * 2,
                               "torch.optim.AdamW foreach on bf16 parameters: 20 passes x 2 bytes",
                               True, "adamw_foreach", tp_per_projection=True),
    "fused": Implementation("fused", "fused", FUSED_MIXED_ADAM_BYTES,
                            "fused mixed-precision Adam: 36 bytes per parameter", False,
                            "adamw_fused"),
    "fused-noflash": Implementation("fused-noflash", "fused", FUSED_MIXED_ADAM_BYTES,
                                    "fused mixed-precision Adam: 36 bytes per parameter", False,
                                    "adamw_fused", attention="eager"),
}


def implementation(name: str) -> Implementation:
    if name not in IMPLEMENTATIONS:
        raise InputError(f"implementation {name!r} is not one of: {', '.join(IMPLEMENTATIONS)}")
    return IMPLEMENTATIONS[name]


# ---------------------------------------------------------------------------------------------
# Elementwise bytes


# The fused model: each tensor a micro-batch keeps for backward is written in the forward and read
# in the backward, and its gradient is written and read once (4 passes; a recomputed forward writes
# it once more). Checked within 3% of memory_allocated on an H200 for what is kept
# (memory/activations.py).
ACTIVATION_PASSES = 4

# Hugging Face eager, bytes per element (bf16 parameters: 2-byte activations, fp32 where the code
# upcasts), forward + backward, by op, from transformers 5.17 modeling_llama.py and torch's
# autograd; each op as (what, bytes per element, kind): the kind names the bench probe whose rate
# prices it (hardware/kinds.py's ELEMENTWISE_KINDS), read off the op's operand layout.
Op = tuple[str, float, str]
# LlamaRMSNorm forward = 36 bytes, backward = 92.
RMSNORM_FWD_OPS: tuple[Op, ...] = (
    ("x.to(fp32)", 6, "cast_up"), ("pow(2)", 8, "contiguous"), ("mean(-1)", 4, "reduction"),
    ("h * rsqrt(var + eps), [t, h] x [t, 1]", 8, "rowscale"), (".to(bf16)", 6, "cast_down"),
    ("weight * h, [h] x [t, h]", 4, "weight"))
RMSNORM_BWD_OPS: tuple[Op, ...] = (
    ("dY * weight", 4, "weight"), ("dY * h (weight grad)", 6, "contiguous"),
    ("its sum over tokens", 2, "reduction"), ("grad.to(fp32)", 6, "cast_up"),
    ("g * h32", 12, "contiguous"), ("g * rsqrt", 8, "rowscale"),
    ("sum(-1) of g * h32", 4, "reduction"), ("mean backward: expand / h", 4, "rowscale"),
    ("pow backward: self.pow(1) copy", 8, "contiguous"), ("pow backward: x 2", 8, "contiguous"),
    ("pow backward: x grad", 12, "contiguous"), ("add of the two paths", 12, "contiguous"),
    (".to(bf16)", 6, "cast_down"))
# nn.LayerNorm (one native per-row kernel each way): forward reads x, writes y (4); backward reads
# dY and x, writes dx (6), and the weight/bias grads read dY and x again (4).
LAYERNORM_FWD_OPS: tuple[Op, ...] = (("layer_norm", 4, "reduction"),)
LAYERNORM_BWD_OPS: tuple[Op, ...] = (("layer_norm backward: dx", 6, "reduction"),
                                     ("layer_norm backward: weight and bias", 4, "reduction"))
# apply_rotary_pos_emb on q, per element of q (the same for k); q arrives as view(b, s, H, d)
# .transpose(1, 2) of its projection, so the ops reading it run on permuted strides.
ROPE_FWD_OPS: tuple[Op, ...] = (
    ("q * cos", 4, "rope"), ("neg of the strided half", 2, "rope"), ("cat", 4, "rope"),
    ("rotate_half(q) * sin", 4, "broadcast_heads"), ("add, permuted + contiguous", 6, "rope"))
ROPE_BWD_OPS: tuple[Op, ...] = (
    ("grad * cos, grad * sin", 8, "broadcast_heads"), ("neg of a strided half", 2, "rope"),
    ("two slice_backward: zeros", 4, "contiguous"),
    ("two slice_backward: copy into a half", 4, "rope"), ("two adds", 12, "contiguous"),
    ("clone of the transposed gradient for its projection", 4, "rope"))
# DynamicCache.update (use_cache defaults to True, also in training): torch.cat of k and v
# (transposed layout), 4 each.
CACHE_OPS: tuple[Op, ...] = (("DynamicCache torch.cat", 4, "rope"),)
# Residual add 6 (2 reads, 1 write); gradient accumulation where a tensor has two consumers 6.
ADD_OPS: tuple[Op, ...] = (("add", 6, "contiguous"),)
# SwiGLU per element of the MLP width: silu 4, act * up 6; backward: two muls 12, silu_backward 6.
SWIGLU_FWD_OPS: tuple[Op, ...] = (("silu", 4, "contiguous"), ("act * up", 6, "contiguous"))
SWIGLU_BWD_OPS: tuple[Op, ...] = (("two muls", 12, "contiguous"),
                                  ("silu_backward", 6, "contiguous"))
# Native GELU: forward 4, gelu_backward 6.
GELU_FWD_OPS: tuple[Op, ...] = (("gelu", 4, "contiguous"),)
GELU_BWD_OPS: tuple[Op, ...] = (("gelu_backward", 6, "contiguous"),)
# ForCausalLMLoss per logit: logits.float() 2+4, log_softmax 4+4, nll_loss backward writes 4,
# log_softmax backward 4+4+4, grad .to(bf16) 4+2 = 36.
LOSS_OPS: tuple[Op, ...] = (
    ("logits.float()", 6, "cast_up"), ("log_softmax", 8, "reduction"),
    ("nll_loss backward", 4, "contiguous"),
    ("log_softmax backward", 12, "reduction"), ("grad.to(bf16)", 6, "cast_down"))
# Embedding: gather forward (read + write, 4 per token x hidden), backward reads the gradient (2)
# and writes the vocab x hidden table (2 per entry).
EMBEDDING_OPS: tuple[Op, ...] = (("embedding gather", 4, "contiguous"),
                                 ("embedding backward", 2, "contiguous"))
EMBEDDING_TABLE_OPS: tuple[Op, ...] = (("embedding backward: the table", 2, "contiguous"),)


def _bytes(ops: tuple[Op, ...]) -> float:
    return sum(b for _, b, _ in ops)


# 36, 128
RMSNORM_FWD, RMSNORM_BYTES = _bytes(RMSNORM_FWD_OPS), _bytes(RMSNORM_FWD_OPS + RMSNORM_BWD_OPS)
LAYERNORM_FWD, LAYERNORM_BYTES = _bytes(LAYERNORM_FWD_OPS), _bytes(LAYERNORM_FWD_OPS
                                                                   + LAYERNORM_BWD_OPS)  # 4, 14
ROPE_FWD, ROPE_BYTES = _bytes(ROPE_FWD_OPS), _bytes(ROPE_FWD_OPS + ROPE_BWD_OPS)  # 20, 54
CACHE_BYTES = _bytes(CACHE_OPS)  # 4
ADD_BYTES = _bytes(ADD_OPS)  # 6
SWIGLU_FWD, SWIGLU_BYTES = _bytes(SWIGLU_FWD_OPS), _bytes(SWIGLU_FWD_OPS + SWIGLU_BWD_OPS)  # 10, 28
GELU_FWD, GELU_BYTES = _bytes(GELU_FWD_OPS), _bytes(GELU_FWD_OPS + GELU_BWD_OPS)  # 4, 10
LOSS_BYTES = _bytes(LOSS_OPS)  # 36


def _add(out: dict[str, float], ops: tuple[Op, ...], elements: float) -> None:
    for _, b, kind in ops:
        out[kind] = out.get(kind, 0.0) + b * elements


@dataclass(frozen=True)
class Widths:
    """Elements one GPU holds of each activation width for T tokens."""

    x: float  # T x hidden: residual stream and norms (split by TP only with sequence parallelism)
    q: float  # T x heads x head_dim / tp
    kv: float  # T x kv_heads x head_dim / tp
    ff: float  # T x intermediate / tp
    logits: float  # T x vocab / tp


def widths(spec: ModelSpec, tokens: float, tp: int = 1, sp: bool = False) -> Widths:
    d = spec.head_dim
    return Widths(x=tokens * spec.hidden / (tp if sp else 1),
                  q=tokens * tp_local(spec.heads, tp) * d,
                  kv=tokens * tp_local(spec.kv_heads, tp) * d, ff=tokens * spec.intermediate / tp,
                  logits=tokens * spec.vocab / tp)


def hf_layer_kinds(spec: ModelSpec, w: Widths, forward_only: bool = False) -> dict[str, float]:
    """HBM bytes of one eager Hugging Face decoder layer's non-matmul ops by kind, forward +
    backward (or the forward alone: what full checkpointing runs again)."""
    layer_norm = spec.norm == "layer"
    norm_fwd, norm_bwd = (LAYERNORM_FWD_OPS, LAYERNORM_BWD_OPS) if layer_norm else (RMSNORM_FWD_OPS,
                                                                                    RMSNORM_BWD_OPS)
    mlp_fwd, mlp_bwd = (SWIGLU_FWD_OPS, SWIGLU_BWD_OPS) if spec.gated_mlp else (GELU_FWD_OPS,
                                                                                GELU_BWD_OPS)
    rope = () if spec.learned_positions else ROPE_FWD_OPS
    out: dict[str, float] = {}
    if forward_only:
        _add(out, norm_fwd, 2 * w.x)
        _add(out, ADD_OPS, 2 * w.x)
        _add(out, rope, w.q + w.kv)
        _add(out, mlp_fwd, w.ff)
        _add(out, CACHE_OPS, 2 * w.kv)
        return out
    _add(out, norm_fwd + norm_bwd, 2 * w.x)
    # separate q, k, v projections read the same norm output
    qkv_consumers = 1 if spec.fused_qkv else 3
    mlp_consumers = 2 if spec.gated_mlp else 1
    grads = 2 + (qkv_consumers - 1) + (mlp_consumers - 1)  # two residual branches + fan-in of the norm outputs
    _add(out, ADD_OPS, (2 + grads) * w.x)  # two residual adds forward, the accumulations backward
    _add(out, rope + (() if spec.learned_positions else ROPE_BWD_OPS), w.q + w.kv)
    _add(out, CACHE_OPS, 2 * w.kv)
    _add(out, mlp_fwd + mlp_bwd, w.ff)
    return out


def hf_layer_bytes(spec: ModelSpec, w: Widths, forward_only: bool = False) -> float:
    """HBM bytes of one eager Hugging Face decoder layer's non-matmul ops (``hf_layer_kinds``
    summed)."""
    return sum(hf_layer_kinds(spec, w, forward_only).values())


def hf_head_kinds(spec: ModelSpec, w: Widths) -> dict[str, float]:
    """Final norm, the fp32 loss over the vocabulary, and the embedding (gather forward; backward
    reads the gradient and writes the vocab x hidden table), by kind."""
    norm = LAYERNORM_FWD_OPS + LAYERNORM_BWD_OPS if spec.norm == "layer" else RMSNORM_FWD_OPS + RMSNORM_BWD_OPS
    out: dict[str, float] = {}
    _add(out, norm, w.x)
    _add(out, LOSS_OPS, w.logits)
    _add(out, EMBEDDING_OPS, w.x)
    _add(out, EMBEDDING_TABLE_OPS, spec.vocab * spec.hidden)
    return out


def hf_head_bytes(spec: ModelSpec, w: Widths) -> float:
    return sum(hf_head_kinds(spec, w).values())


def elementwise_kinds(spec: ModelSpec, lay: Layout, seq: int, layers: int,
                      impl: Implementation) -> dict[str, float]:
    """Bytes of HBM traffic outside the matmuls for one micro-batch on one GPU of the last stage, by
    kind (``"hbm"``: the fused model, priced at the HBM bandwidth)."""
    n = min(layers, spec.layers)
    if impl.elementwise == "fused":
        w = Workload(batch=lay.microbatch, seq=seq, params_bytes=2,
                     attention=impl.attention, tp=lay.tp, sp=lay.sequence_parallel, cp=lay.cp)
        layers_saved = [layer_memory(spec, w, i) for i in range(n)]
        per_layer = sum(m.total for m in layers_saved)
        passes = ACTIVATION_PASSES + (1 if lay.checkpointing == "full" else 0)
        # selective recomputation (Korthikanti et al. 2022) does not keep the scores but writes them
        # twice, in the forward and in the recomputation: the same passes as kept ones, plus one
        rewritten = sum(m.saved.get("attention_scores", 0.0) for m in layers_saved) \
            if lay.checkpointing == "selective" else 0.0
        return {"hbm": passes * (per_layer + head_memory(spec, w).total) + rewritten}
    wd = widths(spec, lay.microbatch * seq / lay.cp, lay.tp, lay.sequence_parallel)
    out = {k: n * v for k, v in hf_layer_kinds(spec, wd).items()}
    if lay.checkpointing == "full":
        for k, v in hf_layer_kinds(spec, wd, forward_only=True).items():
            out[k] = out.get(k, 0.0) + n * v
    for k, v in hf_head_kinds(spec, wd).items():
        out[k] = out.get(k, 0.0) + v
    return out


def elementwise_bytes(spec: ModelSpec, lay: Layout, seq: int, layers: int,
                      impl: Implementation) -> float:
    """Bytes of HBM traffic outside the matmuls for one micro-batch on one GPU of the last stage."""
    return sum(elementwise_kinds(spec, lay, seq, layers, impl).values())


def elementwise_seconds(by_kind: dict[str, float], hbm_bytes_per_s: float,
                        rates: dict[str, float] | None) -> float:
    """Seconds of ``by_kind``'s bytes: each kind at its measured rate (``rates``, bytes/s), all at
    ``hbm_bytes_per_s`` without them (and for the fused model's ``"hbm"``)."""
    if rates is None:
        return sum(by_kind.values()) / hbm_bytes_per_s
    return sum(b / (hbm_bytes_per_s if kind == "hbm" else rates[kind])
               for kind, b in by_kind.items())


# ---------------------------------------------------------------------------------------------
# The data-parallel wrapper's own copies


def dp_copy_bytes(lay: Layout, local_params: float, impl: Implementation) -> float:
    """HBM bytes per step that PyTorch's DP wrappers add, in the compute stream (bf16 = 2 bytes).
    DDP (gradient_as_bucket_view=False, the default): each gradient is copied into its bucket in the
    backward hook (read + write) and back after the all-reduce: 8 bytes per parameter. FSDP2
    (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): each all-gather (forward, and again
    in backward after the reshard) copies the shard in (_foreach_copy_, 2 S/n) and the gathered
    buffer out (split_with_sizes_copy, 2 S); the reduce-scatter copies the gradients in (_chunk_cat,
    2 S) and divides its output shard (2 S/n); S = 2 bytes x the unsharded parameters."""
    if not impl.dp_copies or lay.dp == 1 or lay.zero in (1, 2):
        return 0.0
    s = 2 * local_params
    if lay.zero == 0:
        return 4 * s
    n = lay.dp
    return 2 * (2 * s / n + 2 * s) + 2 * s + 2 * s / n
