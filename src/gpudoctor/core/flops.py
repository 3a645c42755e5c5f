"""FLOPs of a training step: matmuls of the spec (projections with GQA/MLA, dense or top-k MoE MLP,
LM head) and the attention core, forward, backward (2 x forward) and recomputation."""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.core.spec import ModelSpec


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one optimizer step over the global batch (matmuls and attention only)."""

    layers_fwd: float  # every decoder layer, forward
    head_fwd: float  # LM head, forward
    recompute: float  # full: one more forward of the layers; selective: of the attention cores; none: 0

    @property
    def model(self) -> float:
        """Model FLOPs: forward + backward (2 x forward), no recompute (the MFU numerator)."""
        return 3 * (self.layers_fwd + self.head_fwd)

    @property
    def hardware(self) -> float:
        """What the GPUs execute: model FLOPs plus recomputation."""
        return self.model + self.recompute


def attended_pairs(seq: int, causal: bool, window: int | None = None) -> float:
    """Query-key pairs one sequence's attention computes. Non-causal: s^2. Causal: s^2 / 2 (what a
    FlashAttention kernel does, skipping masked blocks; the exact s(s+1)/2 differs by 1/s).
    A sliding window w < s: s*w - w^2/2 (causal)."""
    if window is not None and window < seq:
        return seq * window - window * window / 2 if causal else 2 * seq * window - window * window
    return seq * seq / 2 if causal else float(seq * seq)


def attention_flops(spec: ModelSpec, batch: int, seq: int, layer: int = 0,
                    causal: bool = True) -> float:
    """Forward FLOPs of one attention block: projections + scores (QK^T) + context (PV)."""
    h, n, tokens = spec.hidden, spec.heads, batch * seq
    if spec.mla is not None:
        m = spec.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = h * n * qk if m.q_lora_rank is None else h * m.q_lora_rank + m.q_lora_rank * n * qk
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * n * (m.qk_nope_head_dim
                                                                               + m.v_head_dim)
        proj = 2 * tokens * (q + kv + n * m.v_head_dim * h)
    else:
        d, kv = spec.head_dim, spec.kv_heads
        proj = 2 * tokens * (h * n * d + 2 * h * kv * d + n * d * h)  # q, k, v, o with GQA
    return proj + attention_core_flops(spec, batch, seq, layer, causal)


def attention_core_flops(spec: ModelSpec, batch: int, seq: int, layer: int = 0,
                         causal: bool = True) -> float:
    """Forward FLOPs of one layer's attention core, QK^T and PV (2 FLOPs per MAC each):
    2 B pairs n (qk_d + v_d); non-causal MHA: 4 B s^2 h. What selective recomputation runs again
    (Korthikanti et al. 2022, sec. 5: the core's softmax, dropout and the two batched matmuls)."""
    if spec.mla is not None:
        qk_d, v_d = spec.mla.qk_nope_head_dim + spec.mla.qk_rope_head_dim, spec.mla.v_head_dim
    else:
        qk_d = v_d = spec.head_dim
    window = None if layer in spec.full_attention_layers else spec.sliding_window
    return 2 * batch * attended_pairs(seq, causal, window) * spec.heads * (qk_d + v_d)


def mlp_flops(spec: ModelSpec, batch: int, seq: int, layer: int = 0) -> float:
    """Forward FLOPs of one MLP block: dense (3 or 2 matmuls) or MoE (router, top_k routed
    experts per token, always-on shared MLP)."""
    h, tokens = spec.hidden, batch * seq
    mats = 3 if spec.gated_mlp else 2
    moe = spec.moe
    if moe is None or not moe.is_moe_layer(layer):
        return 2 * tokens * mats * h * spec.intermediate
    flops = 2 * tokens * h * moe.experts  # router
    flops += moe.top_k * 2 * tokens * 3 * h * moe.intermediate  # routed experts are gated
    shared = moe.shared_intermediate if moe.shared_intermediate is not None else moe.shared_experts * moe.intermediate
    return flops + 2 * tokens * mats * h * shared


def step_flops(spec: ModelSpec, batch: int, seq: int, checkpointing: str = "none",
               causal: bool = True) -> StepFlops:
    """FLOPs for ``batch`` sequences of ``seq`` tokens (forward, backward, recompute). Recompute:
    "full" runs every layer's forward again, "selective" only the attention cores (QK^T, PV), "none"
    nothing. (Korthikanti et al.'s eq. 8 counts selective as 72 B L s h^2 (1 + s/3h + V/12hL), i.e.
    the core's backward again too; that is their HFU metric, not what the GPU executes.)"""
    layers = sum(attention_flops(spec, batch, seq, i, causal) + mlp_flops(spec, batch, seq, i)
                 for i in range(spec.layers))
    head = 2 * batch * seq * spec.hidden * spec.vocab
    if checkpointing == "full":
        recompute = layers
    elif checkpointing == "selective":
        recompute = sum(attention_core_flops(spec, batch, seq, i, causal)
                        for i in range(spec.layers))
    else:
        recompute = 0.0
    return StepFlops(layers, head, recompute)
