"""The shape of a model, as far as memory and the planner are concerned: ``ModelSpec``.

A spec comes from a Hugging Face ``config.json`` (``hf_config.from_hf_config``), from the table
of presets (``presets.PRESETS``) or from a live ``nn.Module`` (``module_spec``). It records what the
estimators need and nothing else: the sizes that set the parameter count, and the structural
choices of the Hugging Face implementation that set what a forward keeps for backward (gated or
plain MLP, fused QKV projection, RMSNorm or LayerNorm, dropout, MoE routing, MLA).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

# "llama", "mistral", "qwen2", "gemma", "gemma2", "gpt2", "gpt_neox", "mixtral", "deepseek",
# "qwen2_moe", "phi3"
Family = str


@dataclass(frozen=True)
class MoE:
    experts: int  # routed experts per MoE layer
    top_k: int  # experts each token is sent to
    intermediate: int  # each routed expert's MLP width
    shared_experts: int = 0  # DeepSeek: always-on experts (width shared_experts * intermediate)
    first_dense_layers: int = 0  # DeepSeek: the first k layers keep a dense MLP
    # Added for Qwen2-MoE / exact DeepSeek counts (defaults keep older constructions valid):
    shared_intermediate: int | None = None  # the always-on MLP's own width when it is not
    #                                         shared_experts * intermediate (Qwen2-MoE); DeepSeek
    #                                         sets it too, as HF builds that MLP even at 0 experts
    shared_gate: bool = False  # Qwen2-MoE: a Linear(hidden, 1) gates the shared expert
    sparse_step: int = 1  # Qwen2-MoE decoder_sparse_step: layer i is MoE when (i + 1) % step == 0
    dense_layer_ids: tuple[int, ...] = ()  # Qwen2-MoE mlp_only_layers: layers kept dense
    # transformers' routers: Mixtral's and DeepSeek's top-k weights stay fp32 (softmax/sigmoid in
    # fp32, no cast back), so the experts' weighted rows are promoted to fp32; Qwen2-MoE casts back
    router_fp32: bool = False
    shared_first: bool = False  # Qwen2-MoE runs the shared expert before the routed ones

    def is_moe_layer(self, layer: int) -> bool:
        """Whether 0-based decoder layer ``layer`` holds this block rather than a dense MLP.

        DeepSeek: ``layer_idx >= first_k_dense_replace`` (modeling_deepseek_v3.DecoderLayer);
        Qwen2-MoE: not in ``mlp_only_layers`` and ``(layer_idx + 1) % decoder_sparse_step == 0``.
        """
        return (layer >= self.first_dense_layers and layer not in self.dense_layer_ids
                and (layer + 1) % self.sparse_step == 0)


@dataclass(frozen=True)
class MLA:
    """DeepSeek multi-head latent attention: K and V come from a low-rank latent."""

    kv_lora_rank: int
    q_lora_rank: int | None  # None: a plain q projection
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: Family
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense MLP width (DeepSeek: of the first dense layers)
    vocab: int
    tied_embeddings: bool
    gated_mlp: bool = True  # SwiGLU / GeGLU (gate, up, down) vs plain (fc, proj)
    activation: str = "silu"  # HF ACT2FN name: silu, gelu_new, gelu, gelu_pytorch_tanh, ...
    norm: str = "rms"  # "rms" or "layer"
    fused_qkv: bool = False  # one projection makes q, k, v (GPT-2, GPT-NeoX)
    qkv_bias: bool = False
    out_bias: bool = False  # attention output projection bias
    mlp_bias: bool = False
    learned_positions: int = 0  # GPT-2: rows of the learned position table (0: rotary)
    rotary_fraction: float = 1.0  # GPT-NeoX rotary_pct
    parallel_residual: bool = False  # GPT-NeoX: attention and MLP both read the block input
    sliding_window: int | None = None
    attn_dropout: float = 0.0
    resid_dropout: float = 0.0
    embd_dropout: float = 0.0
    embedding_scale: bool = False  # Gemma multiplies the embeddings by sqrt(hidden)
    moe: MoE | None = None
    mla: MLA | None = None
    max_positions: int = 0
    dtype: str = "bf16"  # the checkpoint's dtype (config torch_dtype), the default for weights
    source: str = ""  # where the spec came from (a path, "preset", "module:...")
    exact_params: int | None = None  # a live module's own count, when known
    extra: dict = field(default_factory=dict, compare=False)
    # Added (defaults keep older constructions valid):
    norms_per_layer: int = 2  # Gemma 2: 4 (pre and post norms around attention and MLP)
    fused_gate_up: bool = False  # Phi-3: one gate_up_proj makes gate and up in one matmul
    full_attention_layers: tuple[int, ...] = ()  # layers that ignore sliding_window (Gemma 2,
    #                                              Qwen2 past max_window_layers); empty: none
    # Gemma 2: tanh soft-capping of the attention scores and of the final logits (None: off)
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None

    def tp_degrees(self, candidates: Iterable[int]) -> list[int]:
        """The degrees among ``candidates`` that tensor parallelism can split this model over
        (``tp_degrees``)."""
        return tp_degrees(self.heads, self.kv_heads, candidates)


def tp_degrees(heads: int, kv_heads: int, candidates: Iterable[int]) -> list[int]:
    """The tensor-parallel degrees among ``candidates``, in their order, that split the attention
    evenly: each divides the ``heads``, and the ``kv_heads`` divide among the ranks or are copied
    whole onto groups of them (GQA: the degree a multiple of kv_heads)."""
    return [t for t in candidates if heads % t == 0 and (kv_heads % t == 0 or t % kv_heads == 0)]
