"""Parameter counts of a ``ModelSpec``, exactly as transformers builds the model.

``count_params`` reproduces ``sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg)
.parameters())`` for transformers 5.17 (shared tensors counted once, buffers such as rotary
tables, GPT-2's causal mask or DeepSeek-V3's ``e_score_correction_bias`` not counted): the weight,
gradient and optimizer-state terms of a memory estimate scale with it, so an approximate count
would put an error into every term. The breakdown per layer is there because sharding (FSDP
units, pipeline stages) and offload are decided per layer, and MoE routed experts apart because
expert parallelism splits only them.

Every formula names the module it counts; the per-family choices (biases, fused projections,
norms) are already in the spec (``hf_config.from_hf_config``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudoctor.core.spec import ModelSpec


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts by part. ``total`` is the sum of the parts, nothing else."""

    embedding: int  # token table (vocab x hidden)
    positions: int  # learned position table (GPT-2 wpe); 0 with rotary
    per_layer: tuple[int, ...]  # each decoder layer, its norms included
    expert_per_layer: tuple[int, ...]  # the routed experts inside each layer (0: dense layer)
    final_norm: int
    lm_head: int  # 0 when tied to the token table
    total: int
    largest_layer: int

    @property
    def layers_total(self) -> int:
        return sum(self.per_layer)

    @property
    def routed_experts_total(self) -> int:
        return sum(self.expert_per_layer)


def norm_params(spec: ModelSpec, width: int) -> int:
    """One norm: RMSNorm has a weight, LayerNorm a weight and a bias."""
    return 2 * width if spec.norm == "layer" else width


def _linear(fan_in: int, fan_out: int, bias: bool) -> int:
    return fan_in * fan_out + (fan_out if bias else 0)


def attention_params(spec: ModelSpec) -> int:
    """One attention block. A fused q/k/v projection (GPT-2 c_attn, NeoX query_key_value, Phi-3
    qkv_proj) has exactly the weights of the three separate ones, so it needs no case here."""
    h = spec.hidden
    if spec.mla is not None:
        return _mla_params(spec)
    q_out, kv_out = spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim
    return (_linear(h, q_out + 2 * kv_out, spec.qkv_bias)
            + _linear(q_out, h, spec.out_bias))


def _mla_params(spec: ModelSpec) -> int:
    """DeepSeek MLA (modeling_deepseek_v3.DeepseekV3Attention): attention_bias sits on q_a_proj,
    kv_a_proj_with_mqa and o_proj only; q_b_proj, kv_b_proj and the plain q_proj never have one."""
    m, h, n = spec.mla, spec.hidden, spec.heads
    qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank is None:
        q = _linear(h, n * qk_head, False)  # q_proj
    else:
        q = (_linear(h, m.q_lora_rank, spec.qkv_bias)  # q_a_proj
             + m.q_lora_rank  # q_a_layernorm (RMSNorm)
             + _linear(m.q_lora_rank, n * qk_head, False))  # q_b_proj
    kv = (_linear(h, m.kv_lora_rank + m.qk_rope_head_dim, spec.qkv_bias)  # kv_a_proj_with_mqa
          + m.kv_lora_rank  # kv_a_layernorm
          + _linear(m.kv_lora_rank, n * (m.qk_nope_head_dim + m.v_head_dim), False))  # kv_b_proj
    return q + kv + _linear(n * m.v_head_dim, h, spec.out_bias)  # o_proj


def mlp_params(spec: ModelSpec, width: int) -> int:
    """A dense MLP of ``width``: gate/up/down (gated; Phi-3's fused gate_up_proj is the same
    weights) or fc/proj. ``mlp_bias`` puts a bias on each of its Linears."""
    h, b = spec.hidden, spec.mlp_bias
    if spec.gated_mlp:
        return 2 * _linear(h, width, b) + _linear(width, h, b)
    return _linear(h, width, b) + _linear(width, h, b)


def routed_expert_params(spec: ModelSpec) -> int:
    """All routed experts of one MoE layer: transformers 5 stores them fused, gate_up_proj
    (E, 2I, H) and down_proj (E, H, I), without biases (MixtralExperts, DeepseekV3Experts)."""
    moe = spec.moe
    return moe.experts * 3 * spec.hidden * moe.intermediate if moe is not None else 0


def moe_block_params(spec: ModelSpec) -> int:
    """One MoE block without its routed experts: the router (a bias-free E x H weight in every
    supported family), the always-on shared MLP (DeepSeek, Qwen2-MoE) and Qwen2-MoE's
    shared_expert_gate, a Linear(hidden, 1, bias=False)."""
    moe = spec.moe
    params = moe.experts * spec.hidden
    if moe.shared_intermediate is not None or moe.shared_experts:
        width = (moe.shared_intermediate if moe.shared_intermediate is not None
                 else moe.shared_experts * moe.intermediate)
        params += mlp_params(spec, width)
    if moe.shared_gate:
        params += spec.hidden
    return params


def _layer(spec: ModelSpec, index: int) -> tuple[int, int]:
    """(all parameters, routed-expert parameters) of decoder layer ``index``."""
    common = attention_params(spec) + spec.norms_per_layer * norm_params(spec, spec.hidden)
    if spec.moe is not None and spec.moe.is_moe_layer(index):
        experts = routed_expert_params(spec)
        return common + moe_block_params(spec) + experts, experts
    return common + mlp_params(spec, spec.intermediate), 0


def count_params(spec: ModelSpec) -> ParamCounts:
    """The exact parameter count transformers 5.17 builds for ``spec`` (see the module doc).

    ``spec.exact_params`` (a live module's own count) is not consulted: reconciling the two is
    the caller's decision, and a mismatch is itself worth reporting.
    """
    layers = [_layer(spec, i) for i in range(spec.layers)]
    per_layer = tuple(total for total, _ in layers)
    embedding = spec.vocab * spec.hidden
    positions = spec.learned_positions * spec.hidden
    final_norm = norm_params(spec, spec.hidden)
    lm_head = 0 if spec.tied_embeddings else spec.vocab * spec.hidden  # lm_head has no bias
    return ParamCounts(
        embedding=embedding,
        positions=positions,
        per_layer=per_layer,
        expert_per_layer=tuple(experts for _, experts in layers),
        final_norm=final_norm,
        lm_head=lm_head,
        total=embedding + positions + sum(per_layer) + final_norm + lm_head,
        largest_layer=max(per_layer, default=0),
    )


def active_params(spec: ModelSpec) -> int:
    """Parameters one token runs through: every dense weight plus ``top_k`` of each MoE layer's
    routed experts (the shared experts and the router always run). Equals the total for a
    dense model. The embedding and lm_head count in full, as in Mixtral's "12.9B active"."""
    counts = count_params(spec)
    if spec.moe is None or spec.moe.experts == 0:
        return counts.total
    per_expert = 3 * spec.hidden * spec.moe.intermediate
    touched = sum(spec.moe.top_k * per_expert for e in counts.expert_per_layer if e)
    return counts.total - counts.routed_experts_total + touched
