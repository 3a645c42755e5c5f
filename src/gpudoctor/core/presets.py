"""Known models by name: the fields of their Hugging Face ``config.json`` that size them.

Each entry holds the values of the official repository's config.json for the keys
``hf_config.from_hf_config`` reads, plus a few that say what the model is (rope scaling, routing);
token ids and generation settings are left out. A preset and the downloaded file therefore give
the same ``ModelSpec``. The parameter counts below are what transformers 5.17 builds from these
configs (``AutoModelForCausalLM.from_config`` on the meta device gives the same numbers); the
published totals (Llama 3.1 8B / 70B, Mistral 7B, Mixtral "46.7B, 12.9B active", GPT-2 124M,
DeepSeek-V3 "671B, 37B activated") agree.

=================  ==============================  ===============  ===============
preset             repository                           parameters     active (MoE)
=================  ==============================  ===============  ===============
llama-3.1-8b       meta-llama/Llama-3.1-8B           8,030,261,248
llama-3.1-70b      meta-llama/Llama-3.1-70B         70,553,706,496
llama-3.1-405b     meta-llama/Llama-3.1-405B       405,853,388,800
llama-3.2-1b       meta-llama/Llama-3.2-1B           1,235,814,400
llama-3.2-3b       meta-llama/Llama-3.2-3B           3,212,749,824
mistral-7b         mistralai/Mistral-7B-v0.1         7,241,732,096
mixtral-8x7b       mistralai/Mixtral-8x7B-v0.1      46,702,792,704   12,879,925,248
qwen2.5-0.5b       Qwen/Qwen2.5-0.5B                   494,032,768
qwen2.5-7b         Qwen/Qwen2.5-7B                   7,615,616,512
qwen2.5-72b        Qwen/Qwen2.5-72B                 72,706,203,648
gemma-2b           google/gemma-2b                   2,506,172,416
gemma-7b           google/gemma-7b                   8,537,680,896
gpt2               openai-community/gpt2               124,439,808
gpt2-xl            openai-community/gpt2-xl          1,557,611,200
pythia-1b          EleutherAI/pythia-1b              1,011,781,632
deepseek-v2-lite   deepseek-ai/DeepSeek-V2-Lite     15,706,484,224    2,661,150,208
deepseek-v3        deepseek-ai/DeepSeek-V3         671,026,404,352   37,552,282,624
=================  ==============================  ===============  ===============

DeepSeek-V3's count leaves out its multi-token-prediction layer (``num_nextn_predict_layers``):
transformers does not build it, although the checkpoint ships it (hence "685B" on the Hub).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpudoctor.core.hf_config import from_hf_config
from gpudoctor.core.spec import ModelSpec
from gpudoctor.errors import InputError


def _llama3(hidden: int, inter: int, layers: int, heads: int, tied: bool, factor: float,
            head_dim: int | None = None) -> dict[str, Any]:
    # Llama 3.1 files (transformers 4.43) have no head_dim key; the 3.2 ones (4.45) write it
    return {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": 8,
        **({"head_dim": head_dim} if head_dim else {}),
        "vocab_size": 128256, "max_position_embeddings": 131072, "hidden_act": "silu",
        "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
        "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
        "rope_scaling": {"factor": factor, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "tie_word_embeddings": tied, "torch_dtype": "bfloat16",
    }


def _qwen25(hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int, tied: bool,
            positions: int, eps: float) -> dict[str, Any]:
    return {
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab,
        "max_position_embeddings": positions, "max_window_layers": layers,
        "sliding_window": positions, "use_sliding_window": False, "hidden_act": "silu",
        "attention_dropout": 0.0, "rms_norm_eps": eps, "rope_theta": 1000000.0,
        "tie_word_embeddings": tied, "torch_dtype": "bfloat16",
    }


def _gemma(hidden: int, inter: int, layers: int, heads: int, kv: int) -> dict[str, Any]:
    # google/gemma-*: "hidden_act": "gelu"; transformers 5.17 GemmaMLP uses ACT2FN[hidden_act]
    return {
        "model_type": "gemma", "architectures": ["GemmaForCausalLM"],
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": 256,
        "vocab_size": 256000, "max_position_embeddings": 8192, "hidden_act": "gelu",
        "attention_bias": False, "attention_dropout": 0.0, "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0, "torch_dtype": "bfloat16",
    }


def _gpt2(hidden: int, layers: int, heads: int) -> dict[str, Any]:
    # openai-community/gpt2*: no torch_dtype (the weights are fp32), n_inner absent (4 * n_embd)
    return {
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
        "n_embd": hidden, "n_layer": layers, "n_head": heads, "n_ctx": 1024, "n_positions": 1024,
        "vocab_size": 50257, "activation_function": "gelu_new", "attn_pdrop": 0.1,
        "embd_pdrop": 0.1, "resid_pdrop": 0.1, "layer_norm_epsilon": 1e-05,
    }


PRESETS: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": _llama3(4096, 14336, 32, 32, tied=False, factor=8.0),
    "llama-3.1-70b": _llama3(8192, 28672, 80, 64, tied=False, factor=8.0),
    "llama-3.1-405b": _llama3(16384, 53248, 126, 128, tied=False, factor=8.0),
    "llama-3.2-1b": _llama3(2048, 8192, 16, 32, tied=True, factor=32.0, head_dim=64),
    "llama-3.2-3b": _llama3(3072, 8192, 28, 24, tied=True, factor=32.0, head_dim=128),
    "mistral-7b": {
        "model_type": "mistral", "architectures": ["MistralForCausalLM"],
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
        "max_position_embeddings": 32768, "sliding_window": 4096, "hidden_act": "silu",
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "mixtral-8x7b": {
        "model_type": "mixtral", "architectures": ["MixtralForCausalLM"],
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
        "num_local_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 32768,
        "sliding_window": None, "hidden_act": "silu", "attention_dropout": 0.0,
        "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    },
    "qwen2.5-0.5b": _qwen25(896, 4864, 24, 14, 2, 151936, tied=True, positions=32768, eps=1e-06),
    "qwen2.5-7b": _qwen25(3584, 18944, 28, 28, 4, 152064, tied=False, positions=131072,
                          eps=1e-06),
    "qwen2.5-72b": _qwen25(8192, 29568, 80, 64, 8, 152064, tied=False, positions=131072,
                           eps=1e-05),
    "gemma-2b": _gemma(2048, 16384, 18, 8, 1),
    "gemma-7b": _gemma(3072, 24576, 28, 16, 16),
    "gpt2": _gpt2(768, 12, 12),
    "gpt2-xl": _gpt2(1600, 48, 25),
    "pythia-1b": {
        "model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"],
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 8, "vocab_size": 50304, "max_position_embeddings": 2048,
        "rotary_pct": 0.25, "rotary_emb_base": 10000, "use_parallel_residual": True,
        "hidden_act": "gelu", "layer_norm_eps": 1e-05, "tie_word_embeddings": False,
        "torch_dtype": "float16",
    },
    "deepseek-v2-lite": {
        "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"],
        "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
        "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "kv_lora_rank": 512,
        "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "vocab_size": 102400, "max_position_embeddings": 163840, "hidden_act": "silu",
        "attention_bias": False, "attention_dropout": 0.0, "rms_norm_eps": 1e-06,
        "topk_method": "greedy", "n_group": 1, "topk_group": 1, "norm_topk_prob": False,
        "routed_scaling_factor": 1.0, "scoring_func": "softmax",
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    },
    "deepseek-v3": {
        "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
        "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
        "first_k_dense_replace": 3, "moe_layer_freq": 1, "num_nextn_predict_layers": 1,
        "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
        "max_position_embeddings": 163840, "hidden_act": "silu", "attention_bias": False,
        "attention_dropout": 0.0, "rms_norm_eps": 1e-06, "topk_method": "noaux_tc",
        "n_group": 8, "topk_group": 4, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid", "quantization_config": {"quant_method": "fp8"},
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    },
}


def preset_names() -> list[str]:
    return list(PRESETS)


def from_preset(name: str) -> ModelSpec:
    """The ModelSpec of a preset (case-insensitive name); an unknown name lists the known ones."""
    key = name.strip().lower() if isinstance(name, str) else None
    if key not in PRESETS:
        raise InputError(f"unknown model preset {name!r}; known presets: {', '.join(PRESETS)} "
                         f"(or give a config.json)")
    return replace(from_hf_config(PRESETS[key], name=key), source="preset")
