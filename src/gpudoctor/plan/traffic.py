"""HBM traffic outside the matmuls, per implementation: elementwise kernels, the optimizer step and
the data-parallel wrapper's own copies.

``IMPLEMENTATIONS`` names what a step runs (``impl=`` of ``predict_step``, ``--impl`` of plan train):

- ``eager-hf``: a Hugging Face Transformers model in eager PyTorch (bf16 parameters, no autocast),
  ``torch.optim.AdamW`` (foreach, the default), DDP / FSDP2 with their defaults. The elementwise bytes
  are counted op by op from transformers 5.17's ``modeling_llama.py`` and the autograd formulas of
  torch (``hf_layer_bytes``); ``benchmarks/count_hf_traffic.py`` checks the count against every aten
  op a CPU forward + backward of a small Llama dispatches.
- ``fused``: Megatron-style fused kernels (fused LayerNorm/RMSNorm, bias-GeLU/SwiGLU, softmax, loss)
  and a fused mixed-precision Adam: elementwise work as 4 passes over what a micro-batch keeps for
  backward (memory/activations.py), 36 bytes per parameter for the optimizer.

Every op is priced as reading each input once and writing its output once at the HBM bandwidth
(measured with --bench). Not derived, so not priced: the lower rate of PyTorch's non-vectorized
``elementwise_kernel`` on broadcast or strided operands (the RoPE and norm-weight multiplies; about a
third of the triad rate in the one-GPU profile of BENCHMARKS.md), and NCCL kernels slowing the
compute they overlap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpudoctor.errors import InputError
from gpudoctor.memory.spec import ModelSpec

if TYPE_CHECKING:
    from gpudoctor.plan.train import Layout


@dataclass(frozen=True)
class Implementation:
    """How a training step is implemented, as far as its memory-bound work goes."""

    name: str
    elementwise: str  # "eager-hf": op-by-op count; "fused": passes over the saved activations
    optimizer_bytes_per_param: float  # HBM bytes the optimizer step moves per local parameter
    optimizer_doc: str
    dp_copies: bool  # DDP gradient_as_bucket_view=False / FSDP2 copy-in, copy-out (PyTorch defaults)


# torch.optim.AdamW, foreach (torch/optim/adam.py, _multi_tensor_adam, decoupled weight decay, not
# capturable), element passes over its tensors, all in the parameters' dtype (bf16 here; AdamW keeps
# exp_avg / exp_avg_sq in the parameter dtype): _foreach_mul_(params) r+w 2; _foreach_lerp_(exp_avgs,
# grads) 2r+w 3; _foreach_mul_(exp_avg_sqs) 2; _foreach_addcmul_(exp_avg_sqs, grads, grads) 3 (the
# grad is read once per element); _foreach_sqrt(exp_avg_sqs) into a temporary 2; _foreach_div_ 2;
# _foreach_add_(eps) 2; _foreach_addcdiv_(params, exp_avgs, temp) 3r+w 4. 20 passes x 2 bytes.
ADAMW_FOREACH_PASSES = 20
# Fused mixed-precision Adam (Megatron / Apex): read bf16 grad, read+write fp32 master, two fp32
# moments and the bf16 weight copy: ~36 bytes per parameter.
FUSED_MIXED_ADAM_BYTES = 36

IMPLEMENTATIONS = {
    "eager-hf": Implementation("eager-hf", "eager-hf", ADAMW_FOREACH_PASSES * 2,
                               "torch.optim.AdamW foreach on bf16 parameters: 20 passes x 2 bytes", True),
    "fused": Implementation("fused", "fused", FUSED_MIXED_ADAM_BYTES,
                            "fused mixed-precision Adam: 36 bytes per parameter", False),
}


def implementation(name: str) -> Implementation:
    if name not in IMPLEMENTATIONS:
        raise InputError(f"implementation {name!r} is not one of: {', '.join(IMPLEMENTATIONS)}")
    return IMPLEMENTATIONS[name]


# ---------------------------------------------------------------------------------------------
# Elementwise bytes


# The fused model: each tensor a micro-batch keeps for backward is written in the forward and read in
# the backward, and its gradient is written and read once (4 passes; a recomputed forward writes it
# once more). Checked within 3% of memory_allocated on an H200 for what is kept (memory/activations.py).
ACTIVATION_PASSES = 4

# Hugging Face eager, bytes per element (bf16 parameters: 2-byte activations, fp32 where the code
# upcasts), forward + backward, by op, from transformers 5.17 modeling_llama.py and torch's autograd:
# LlamaRMSNorm forward: x.to(fp32) 2+4, pow(2) 4+4, mean 4, h * rsqrt 4+4, .to(bf16) 4+2, weight * 2+2
# = 36; backward: dY*weight 4, dY*h (weight grad) 6 + its sum 2, .to(fp32) 6, g*h32 12 and g*rsqrt 8,
# sum 4, mean backward (expand / h) 4, pow backward (self.pow(1) copy 8, x 2 8, x grad 12), add of the
# two paths 12, .to(bf16) 6 = 92.
RMSNORM_FWD, RMSNORM_BYTES = 36, 36 + 92
# nn.LayerNorm (one native kernel each way): forward reads x, writes y (4); backward reads dY and x,
# writes dx (6), and the weight/bias grads read dY and x again (4).
LAYERNORM_FWD, LAYERNORM_BYTES = 4, 4 + 6 + 4
# apply_rotary_pos_emb on q (per element of q): q*cos 4, neg of half 2, cat 4, *sin 4, add 6 = 20;
# backward: two muls 8, neg 2, two slice_backward (zeros + copy of half) 8, two adds 12 = 30, plus the
# clone that makes the transposed gradient contiguous for its projection 4. The same for k.
ROPE_FWD, ROPE_BYTES = 20, 20 + 30 + 4
# DynamicCache.update (use_cache defaults to True, also in training): torch.cat of k and v, 4 each.
CACHE_BYTES = 4
# Residual add 6 (2 reads, 1 write); gradient accumulation where a tensor has two consumers 6.
ADD_BYTES = 6
# SwiGLU per element of the MLP width: silu 4, act * up 6; backward: two muls 12, silu_backward 6.
SWIGLU_FWD, SWIGLU_BYTES = 10, 4 + 6 + 12 + 6
# Native GELU: forward 4, gelu_backward 6.
GELU_FWD, GELU_BYTES = 4, 4 + 6
# ForCausalLMLoss per logit: logits.float() 2+4, log_softmax 4+4, nll_loss backward writes 4,
# log_softmax backward 4+4+4, grad .to(bf16) 4+2 = 36.
LOSS_BYTES = 36


@dataclass(frozen=True)
class Widths:
    """Elements one GPU holds of each activation width for T tokens."""

    x: float  # T x hidden: residual stream and norms (split by TP only with sequence parallelism)
    q: float  # T x heads x head_dim / tp
    kv: float  # T x kv_heads x head_dim / tp
    ff: float  # T x intermediate / tp
    logits: float  # T x vocab / tp


def widths(spec: ModelSpec, tokens: float, tp: int = 1, sp: bool = False) -> Widths:
    from gpudoctor.memory.activations import _local

    d = spec.head_dim
    return Widths(x=tokens * spec.hidden / (tp if sp else 1), q=tokens * _local(spec.heads, tp) * d,
                  kv=tokens * _local(spec.kv_heads, tp) * d, ff=tokens * spec.intermediate / tp,
                  logits=tokens * spec.vocab / tp)


def hf_layer_bytes(spec: ModelSpec, w: Widths, forward_only: bool = False) -> float:
    """HBM bytes of one eager Hugging Face decoder layer's non-matmul ops, forward + backward (or the
    forward alone: what full checkpointing runs again)."""
    layer_norm = spec.norm == "layer"
    if forward_only:
        rope = 0.0 if spec.learned_positions else ROPE_FWD * (w.q + w.kv)
        mlp = (SWIGLU_FWD if spec.gated_mlp else GELU_FWD) * w.ff
        return 2 * (LAYERNORM_FWD if layer_norm else RMSNORM_FWD) * w.x + 2 * ADD_BYTES * w.x + rope + mlp \
            + 2 * CACHE_BYTES * w.kv
    total = 2 * (LAYERNORM_BYTES if layer_norm else RMSNORM_BYTES) * w.x
    qkv_consumers = 1 if spec.fused_qkv else 3  # separate q, k, v projections read the same norm output
    mlp_consumers = 2 if spec.gated_mlp else 1
    grads = 2 + (qkv_consumers - 1) + (mlp_consumers - 1)  # two residual branches + fan-in of the norm outputs
    total += ADD_BYTES * (2 + grads) * w.x  # two residual adds forward, the accumulations backward
    if not spec.learned_positions:
        total += ROPE_BYTES * (w.q + w.kv)
    total += 2 * CACHE_BYTES * w.kv
    total += (SWIGLU_BYTES if spec.gated_mlp else GELU_BYTES) * w.ff
    return total


def hf_head_bytes(spec: ModelSpec, w: Widths) -> float:
    """Final norm, the fp32 loss over the vocabulary, and the embedding (gather forward; backward
    reads the gradient and writes the vocab x hidden table)."""
    norm = LAYERNORM_BYTES if spec.norm == "layer" else RMSNORM_BYTES
    return norm * w.x + LOSS_BYTES * w.logits + 4 * w.x + 2 * w.x + 2 * spec.vocab * spec.hidden


def elementwise_bytes(spec: ModelSpec, lay: Layout, seq: int, layers: int, impl: Implementation) -> float:
    """Bytes of HBM traffic outside the matmuls for one micro-batch on one GPU of the last stage."""
    from gpudoctor.memory.activations import Workload, head_memory, layer_memory

    n = min(layers, spec.layers)
    if impl.elementwise == "fused":
        w = Workload(batch=lay.microbatch, seq=seq, params_bytes=2, attention="sdpa", tp=lay.tp,
                     sp=lay.sequence_parallel, cp=lay.cp)
        per_layer = sum(layer_memory(spec, w, i).total for i in range(n))
        passes = ACTIVATION_PASSES + (1 if lay.checkpointing == "full" else 0)
        return passes * (per_layer + head_memory(spec, w).total)
    wd = widths(spec, lay.microbatch * seq / lay.cp, lay.tp, lay.sequence_parallel)
    layer = hf_layer_bytes(spec, wd)
    recompute = hf_layer_bytes(spec, wd, forward_only=True) if lay.checkpointing == "full" else 0.0
    return n * (layer + recompute) + hf_head_bytes(spec, wd)


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
