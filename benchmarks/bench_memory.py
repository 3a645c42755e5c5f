"""Accuracy of ``gpudoctor memory`` against ``torch.cuda.max_memory_allocated`` on real models.

Two halves, because the prediction needs no GPU and the measurement needs one:

* ``python benchmarks/bench_memory.py measure OUT_DIR [--arch | --heldout] [--parallel N] [--only SUBSTR,..]``
  (on a GPU machine with ``transformers``): builds each configuration below from its Hugging Face
  config with random weights, runs two training steps (the second is the steady state: after the
  first optimizer step and ``zero_grad(set_to_none=True)``) or one ``generate``, and writes one file,
  ``OUT_DIR/results.json``: per run the config, the peak, memory after load, per-phase peaks
  (forward / backward / optimizer; prefill / decode) and what autograd saved, by shape. The sweep
  of issue 21 is ``measure OUT --arch --parallel 4`` (48 runs, each its own process);
  ``--list [--arch]`` names the runs.
* ``python benchmarks/bench_memory.py table RESULTS_JSON`` (anywhere): predicts each run from its
  saved ``config.json`` and options with ``gpudoctor.memory`` and prints the markdown table that
  benchmarks/BENCHMARKS-memory.md carries, with the error per run, the median and the maximum.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from pathlib import Path

GiB = 1024**3

# Each run: a transformers config class, the fields that make it (real models' shapes, fewer
# layers so that a run takes seconds), and the options given to `gpudoctor memory`.
RUNS: list[dict] = [
    {
        "name": "llama-mha-bf16",
        "family": "llama",
        "config": {
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "num_hidden_layers": 8,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
        "opts": {"batch": 4, "seq": 2048, "params_dtype": "bf16", "attention": "sdpa"},
    },
    {
        "name": "llama3-gqa-bf16",
        "family": "llama",
        "config": {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 4,
            "vocab_size": 128256,
            "rope_theta": 500000.0,
            "max_position_embeddings": 8192,
        },
        "opts": {"batch": 2, "seq": 2048, "params_dtype": "bf16", "attention": "sdpa"},
    },
    {
        "name": "llama3-gqa-eager",
        "family": "llama",
        "config": {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 4,
            "vocab_size": 128256,
            "rope_theta": 500000.0,
            "max_position_embeddings": 8192,
        },
        "opts": {"batch": 1, "seq": 2048, "params_dtype": "bf16", "attention": "eager"},
    },
    {
        "name": "llama3-gqa-ckpt",
        "family": "llama",
        "config": {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 4,
            "vocab_size": 128256,
            "rope_theta": 500000.0,
            "max_position_embeddings": 8192,
        },
        "opts": {
            "batch": 4,
            "seq": 4096,
            "params_dtype": "bf16",
            "attention": "sdpa",
            "checkpointing": "full",
        },
    },
    {
        "name": "llama-fp32-autocast",
        "family": "llama",
        "config": {
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "num_hidden_layers": 6,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
        "opts": {
            "batch": 4,
            "seq": 2048,
            "params_dtype": "fp32",
            "autocast": "bf16",
            "attention": "sdpa",
        },
    },
    {
        "name": "llama-sgd-momentum",
        "family": "llama",
        "config": {
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "num_hidden_layers": 8,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
        "opts": {
            "batch": 4,
            "seq": 2048,
            "params_dtype": "bf16",
            "attention": "sdpa",
            "optimizer": "sgd-momentum",
        },
    },
    {
        "name": "qwen2-152k-vocab",
        "family": "qwen2",
        "config": {
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "num_hidden_layers": 8,
            "vocab_size": 151936,
            "tie_word_embeddings": True,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
        },
        "opts": {"batch": 4, "seq": 2048, "params_dtype": "bf16", "attention": "sdpa"},
    },
    {
        "name": "qwen2-fp32-autocast-ckpt",
        "family": "qwen2",
        "config": {
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "num_hidden_layers": 8,
            "vocab_size": 151936,
            "tie_word_embeddings": True,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
        },
        "opts": {
            "batch": 4,
            "seq": 2048,
            "params_dtype": "fp32",
            "autocast": "bf16",
            "attention": "sdpa",
            "checkpointing": "full",
        },
    },
    {
        "name": "mixtral-moe",
        "family": "mixtral",
        "config": {
            "hidden_size": 1024,
            "intermediate_size": 3584,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "num_hidden_layers": 4,
            "vocab_size": 32000,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "max_position_embeddings": 4096,
        },
        "opts": {"batch": 4, "seq": 2048, "params_dtype": "bf16", "attention": "sdpa"},
    },
    {
        "name": "gpt2-large-dropout",
        "family": "gpt2",
        "config": {
            "n_embd": 1280,
            "n_layer": 12,
            "n_head": 20,
            "vocab_size": 50257,
            "n_positions": 1024,
        },
        "opts": {"batch": 8, "seq": 1024, "params_dtype": "bf16", "attention": "eager"},
    },
    {
        "name": "gpt2-sdpa-fp32-autocast",
        "family": "gpt2",
        "config": {
            "n_embd": 1024,
            "n_layer": 12,
            "n_head": 16,
            "vocab_size": 50257,
            "n_positions": 1024,
        },
        "opts": {
            "batch": 8,
            "seq": 1024,
            "params_dtype": "fp32",
            "autocast": "bf16",
            "attention": "sdpa",
        },
    },
    {
        "name": "pythia-neox",
        "family": "gpt_neox",
        "config": {
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_attention_heads": 8,
            "num_hidden_layers": 8,
            "vocab_size": 50304,
            "rotary_pct": 0.25,
            "max_position_embeddings": 2048,
        },
        "opts": {"batch": 4, "seq": 2048, "params_dtype": "bf16", "attention": "sdpa"},
    },
    {
        "name": "gemma-256k-vocab",
        "family": "gemma",
        "config": {
            "hidden_size": 2048,
            "intermediate_size": 16384,
            "num_attention_heads": 8,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "num_hidden_layers": 4,
            "vocab_size": 256000,
            "max_position_embeddings": 8192,
        },
        "opts": {"batch": 2, "seq": 2048, "params_dtype": "bf16", "attention": "sdpa"},
    },
    {
        "name": "mistral-7b-shape",
        "family": "mistral",
        "config": {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 4,
            "vocab_size": 32000,
            "sliding_window": 4096,
            "max_position_embeddings": 32768,
        },
        "opts": {"batch": 2, "seq": 4096, "params_dtype": "bf16", "attention": "sdpa"},
    },
    {
        "name": "llama-adafactor",
        "family": "llama",
        "config": {
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "num_hidden_layers": 8,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
        "opts": {
            "batch": 4,
            "seq": 2048,
            "params_dtype": "bf16",
            "attention": "sdpa",
            "optimizer": "adafactor",
        },
    },
    # generation
    {
        "name": "gen-llama3-gqa",
        "family": "llama",
        "infer": True,
        "config": {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 8,
            "vocab_size": 128256,
            "rope_theta": 500000.0,
            "max_position_embeddings": 8192,
        },
        "opts": {
            "batch": 16,
            "prompt": 1024,
            "new": 256,
            "weights_dtype": "bf16",
            "attention": "sdpa",
        },
    },
    {
        "name": "gen-qwen2-152k",
        "family": "qwen2",
        "infer": True,
        "config": {
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "num_hidden_layers": 28,
            "vocab_size": 151936,
            "tie_word_embeddings": True,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
        },
        "opts": {
            "batch": 32,
            "prompt": 512,
            "new": 128,
            "weights_dtype": "bf16",
            "attention": "sdpa",
        },
    },
    {
        "name": "gen-llama-mha",
        "family": "llama",
        "infer": True,
        "config": {
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "num_hidden_layers": 16,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
        "opts": {
            "batch": 8,
            "prompt": 2048,
            "new": 256,
            "weights_dtype": "bf16",
            "attention": "sdpa",
        },
    },
]

# Held out: measured after the estimator was written, to check it on shapes and options it was not
# looked at against (bench_memory.py measure OUT --heldout).
HELDOUT: list[dict] = [
    {
        "name": "qwen2.5-0.5b-full",
        "family": "qwen2",
        "config": {
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "num_hidden_layers": 24,
            "vocab_size": 151936,
            "tie_word_embeddings": True,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
        },
        "opts": {"batch": 8, "seq": 1024, "params_dtype": "bf16", "attention": "sdpa"},
    },
    {
        "name": "llama3.2-1b-fp32-autocast-ckpt",
        "family": "llama",
        "config": {
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 16,
            "vocab_size": 128256,
            "tie_word_embeddings": True,
            "rope_theta": 500000.0,
            "max_position_embeddings": 8192,
        },
        "opts": {
            "batch": 4,
            "seq": 2048,
            "params_dtype": "fp32",
            "autocast": "bf16",
            "attention": "sdpa",
            "checkpointing": "full",
        },
    },
    {
        "name": "gemma-eager",
        "family": "gemma",
        "config": {
            "hidden_size": 2048,
            "intermediate_size": 16384,
            "num_attention_heads": 8,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "num_hidden_layers": 6,
            "vocab_size": 256000,
            "max_position_embeddings": 8192,
        },
        "opts": {"batch": 1, "seq": 2048, "params_dtype": "bf16", "attention": "eager"},
    },
    {
        "name": "gpt2-medium-ckpt",
        "family": "gpt2",
        "config": {
            "n_embd": 1024,
            "n_layer": 24,
            "n_head": 16,
            "vocab_size": 50257,
            "n_positions": 1024,
        },
        "opts": {
            "batch": 16,
            "seq": 1024,
            "params_dtype": "bf16",
            "attention": "eager",
            "checkpointing": "full",
        },
    },
    {
        "name": "mixtral-fp32-autocast-ckpt",
        "family": "mixtral",
        "config": {
            "hidden_size": 1024,
            "intermediate_size": 3584,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "num_hidden_layers": 6,
            "vocab_size": 32000,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "max_position_embeddings": 4096,
        },
        "opts": {
            "batch": 4,
            "seq": 2048,
            "params_dtype": "fp32",
            "autocast": "bf16",
            "attention": "sdpa",
            "checkpointing": "full",
        },
    },
    {
        "name": "neox-sequential-full-rotary",
        "family": "gpt_neox",
        "config": {
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "num_attention_heads": 32,
            "num_hidden_layers": 6,
            "vocab_size": 50432,
            "rotary_pct": 1.0,
            "use_parallel_residual": False,
            "max_position_embeddings": 2048,
        },
        "opts": {"batch": 2, "seq": 2048, "params_dtype": "bf16", "attention": "sdpa"},
    },
    {
        "name": "deepseek-v2-mla-moe",
        "family": "deepseek_v2",
        "config": {
            "hidden_size": 1024,
            "intermediate_size": 2816,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "num_hidden_layers": 4,
            "vocab_size": 32000,
            "q_lora_rank": None,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
            "n_routed_experts": 16,
            "num_experts_per_tok": 4,
            "moe_intermediate_size": 512,
            "n_shared_experts": 2,
            "first_k_dense_replace": 1,
            "max_position_embeddings": 4096,
        },
        "opts": {"batch": 4, "seq": 1024, "params_dtype": "bf16", "attention": "sdpa"},
    },
    {
        "name": "llama-grad-accumulation",
        "family": "llama",
        "config": {
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "num_attention_heads": 24,
            "num_key_value_heads": 8,
            "num_hidden_layers": 8,
            "vocab_size": 128256,
            "rope_theta": 500000.0,
            "max_position_embeddings": 8192,
        },
        "opts": {
            "batch": 2,
            "seq": 2048,
            "params_dtype": "bf16",
            "attention": "sdpa",
            "microbatches": 2,
        },
    },
    {
        "name": "llama-pure-fp32-eager-sgd",
        "family": "llama",
        "config": {
            "hidden_size": 1024,
            "intermediate_size": 2816,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "num_hidden_layers": 8,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
        "opts": {
            "batch": 2,
            "seq": 2048,
            "params_dtype": "fp32",
            "attention": "eager",
            "optimizer": "sgd",
        },
    },
    {
        "name": "gen-mistral-sliding",
        "family": "mistral",
        "infer": True,
        "config": {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 6,
            "vocab_size": 32000,
            "sliding_window": 4096,
            "max_position_embeddings": 32768,
        },
        "opts": {
            "batch": 4,
            "prompt": 3072,
            "new": 256,
            "weights_dtype": "bf16",
            "attention": "sdpa",
        },
    },
    {
        "name": "gen-gemma",
        "family": "gemma",
        "infer": True,
        "config": {
            "hidden_size": 2048,
            "intermediate_size": 16384,
            "num_attention_heads": 8,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "num_hidden_layers": 18,
            "vocab_size": 256000,
            "max_position_embeddings": 8192,
        },
        "opts": {
            "batch": 16,
            "prompt": 1024,
            "new": 128,
            "weights_dtype": "bf16",
            "attention": "sdpa",
        },
    },
    {
        "name": "gen-gpt2-xl-eager",
        "family": "gpt2",
        "infer": True,
        "config": {
            "n_embd": 1600,
            "n_layer": 48,
            "n_head": 25,
            "vocab_size": 50257,
            "n_positions": 1024,
        },
        "opts": {
            "batch": 16,
            "prompt": 768,
            "new": 128,
            "weights_dtype": "bf16",
            "attention": "eager",
        },
    },
]

# Every model_type the estimator accepts, in the four settings of issue 21 (bf16 + AdamW, fp32
# parameters + bf16 autocast, full checkpointing, generation), small real-shaped configs so that
# the whole set runs in minutes (bench_memory.py measure OUT --arch [--parallel 3]).
_ARCH_CONFIGS: dict[str, dict] = {
    "llama": {
        "hidden_size": 1024,
        "intermediate_size": 2816,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    },
    "mistral": {
        "hidden_size": 1024,
        "intermediate_size": 3584,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
        "sliding_window": 4096,
        "max_position_embeddings": 8192,
    },
    "qwen2": {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "num_hidden_layers": 6,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 32768,
    },
    "gemma": {
        "hidden_size": 1024,
        "intermediate_size": 8192,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "num_hidden_layers": 4,
        "vocab_size": 256000,
        "max_position_embeddings": 8192,
    },
    "gemma2": {
        "hidden_size": 1152,
        "intermediate_size": 6912,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "num_hidden_layers": 4,
        "vocab_size": 256000,
        "sliding_window": 512,
        "final_logit_softcapping": 30.0,
        "attn_logit_softcapping": 50.0,
        "query_pre_attn_scalar": 256,
        "max_position_embeddings": 8192,
    },
    "gpt2": {"n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024},
    "gpt_neox": {
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_attention_heads": 16,
        "num_hidden_layers": 6,
        "vocab_size": 50304,
        "rotary_pct": 0.25,
        "max_position_embeddings": 2048,
    },
    "mixtral": {
        "hidden_size": 1024,
        "intermediate_size": 3584,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 4096,
    },
    "deepseek_v2": {
        "hidden_size": 1024,
        "intermediate_size": 2816,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
        "q_lora_rank": None,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 16,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 512,
        "n_shared_experts": 2,
        "first_k_dense_replace": 1,
        "max_position_embeddings": 4096,
    },
    "deepseek_v3": {
        "hidden_size": 1024,
        "intermediate_size": 2816,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
        "q_lora_rank": 384,
        "kv_lora_rank": 256,
        "qk_nope_head_dim": 64,
        "qk_rope_head_dim": 32,
        "v_head_dim": 64,
        "n_routed_experts": 16,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 512,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        "max_position_embeddings": 4096,
    },
    "qwen2_moe": {
        "hidden_size": 1024,
        "intermediate_size": 2816,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
        "num_experts": 16,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 704,
        "shared_expert_intermediate_size": 2816,
        "decoder_sparse_step": 1,
        "max_position_embeddings": 4096,
    },
    "phi3": {
        "hidden_size": 1024,
        "intermediate_size": 2816,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_hidden_layers": 8,
        "vocab_size": 32064,
        "max_position_embeddings": 4096,
        "original_max_position_embeddings": 4096,
        "pad_token_id": 0,
    },
}
_ARCH_SETTINGS = {
    "bf16": {"batch": 4, "seq": 1024, "params_dtype": "bf16", "attention": "sdpa"},
    "fp32-autocast": {
        "batch": 2,
        "seq": 1024,
        "params_dtype": "fp32",
        "autocast": "bf16",
        "attention": "sdpa",
    },
    "ckpt": {
        "batch": 8,
        "seq": 1024,
        "params_dtype": "bf16",
        "attention": "sdpa",
        "checkpointing": "full",
    },
}


def _attention(family: str, setting: str) -> str:
    # transformers 5.x: Gemma2ForCausalLM refuses sdpa (its attention soft-capping); GPT-2 in bf16
    # keeps its eager attention, as gpt2-large-dropout above
    return "eager" if family == "gemma2" or (family == "gpt2" and setting == "bf16") else "sdpa"


ARCH: list[dict] = [
    {
        "name": f"arch-{family.replace('_', '-')}-{setting}",
        "family": family,
        "config": config,
        "opts": dict(opts, attention=_attention(family, setting)),
    }
    for family, config in _ARCH_CONFIGS.items()
    for setting, opts in _ARCH_SETTINGS.items()
] + [
    {
        "name": f"arch-{family.replace('_', '-')}-gen",
        "family": family,
        "config": config,
        "infer": True,
        "opts": {
            "batch": 8,
            "prompt": 512,
            "new": 64,
            "weights_dtype": "bf16",
            "attention": _attention(family, "gen"),
        },
    }
    for family, config in _ARCH_CONFIGS.items()
]

# Generation on small models in other shapes than ARCH's (batch 8, 512 + 64 tokens): one sequence
# with a long generation, short prompts, eager attention; a Phi-3-style 0.4B model (--gen-small)
_PHI3_04B = {
    "hidden_size": 1536,
    "intermediate_size": 4096,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_hidden_layers": 12,
    "vocab_size": 32064,
    "max_position_embeddings": 4096,
    "original_max_position_embeddings": 4096,
    "pad_token_id": 0,
}
GEN_SMALL: list[dict] = [
    {
        "name": f"gen-small-{family}-{tag}",
        "family": family,
        "config": config,
        "infer": True,
        "opts": {"weights_dtype": "bf16", **opts},
    }
    for family, config in (("gpt2", _ARCH_CONFIGS["gpt2"]), ("phi3", _PHI3_04B))
    for tag, opts in (
        ("b1-p128-n256", {"batch": 1, "prompt": 128, "new": 256, "attention": "sdpa"}),
        ("b4-p64-n512-eager", {"batch": 4, "prompt": 64, "new": 512, "attention": "eager"}),
        ("b16-p256-n128", {"batch": 16, "prompt": 256, "new": 128, "attention": "sdpa"}),
    )
]

# Held-out generation shapes for the MoE and MLA terms of memory/inference.py (--gen-moe): the
# decode step's batched_mm weight gather at batch 1 and at 32-64 routed rows, MLA's per-head
# expansion of a long context (DeepSeek-V2 without q LoRA, V3 with it), a 16k-token prefill
_GEN_MOE_SHAPES = (
    ("mixtral", "b1-p64-n1024", 1, 64, 1024),
    ("mixtral", "b32-p128-n32", 32, 128, 32),
    ("deepseek_v2", "b1-p32-n3000", 1, 32, 3000),
    ("deepseek_v2", "b16-p1024-n32", 16, 1024, 32),
    ("deepseek_v3", "b8-p1024-n2048", 8, 1024, 2048),
    ("qwen2_moe", "b32-p128-n32", 32, 128, 32),
)
GEN_MOE: list[dict] = [
    {
        "name": f"gen-moe-{family.replace('_', '-')}-{tag}",
        "family": family,
        "config": _ARCH_CONFIGS[family],
        "infer": True,
        "opts": {"batch": b, "prompt": p, "new": n, "weights_dtype": "bf16", "attention": "sdpa"},
    }
    for family, tag, b, p, n in _GEN_MOE_SHAPES
]

_CONFIG_CLASSES = {
    "deepseek_v2": "DeepseekV2Config",
    "llama": "LlamaConfig",
    "qwen2": "Qwen2Config",
    "mixtral": "MixtralConfig",
    "gpt2": "GPT2Config",
    "gpt_neox": "GPTNeoXConfig",
    "gemma": "GemmaConfig",
    "mistral": "MistralConfig",
    "gemma2": "Gemma2Config",
    "qwen2_moe": "Qwen2MoeConfig",
    "phi3": "Phi3Config",
    "deepseek_v3": "DeepseekV3Config",
}


# --------------------------------------------------------------------------------------------
# measure (GPU)


def _optimizer(name: str, params):
    import torch

    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-5)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-5, momentum=0.9)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-5)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-5)
    raise ValueError(name)


def _measure_one(run: dict, out: Path) -> dict:
    import torch
    import transformers

    opts = run["opts"]
    cfg_cls = getattr(transformers, _CONFIG_CLASSES[run["family"]], None)
    if cfg_cls is None:
        return {
            "name": run["name"],
            "skipped": f"transformers {transformers.__version__} has no "
            f"{_CONFIG_CLASSES[run['family']]}",
        }
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[
        opts.get("params_dtype", opts.get("weights_dtype", "bf16"))
    ]
    cfg = cfg_cls(**run["config"])
    cfg._attn_implementation = opts.get("attention", "sdpa")
    if run["family"] == "gpt2":
        pass  # keep GPT-2's default dropout (0.1): its masks are part of what is measured
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, dtype=dtype, attn_implementation=opts.get("attention", "sdpa")
        )
    model.to(dtype)
    n_params = sum(p.numel() for p in model.parameters())
    weights = torch.cuda.memory_allocated() - base
    load_peak = torch.cuda.max_memory_allocated() - base
    result = {
        "name": run["name"],
        "config": json.loads(cfg.to_json_string()),
        "opts": opts,
        "infer": bool(run.get("infer")),
        "n_params": n_params,
        "weights_bytes": weights,
        "load_peak_bytes": load_peak,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
    }
    vocab = cfg.vocab_size
    if run.get("infer"):
        model.eval()
        b, p, n = opts["batch"], opts["prompt"], opts["new"]
        ids = torch.randint(0, vocab, (b, p), device="cuda")
        with torch.no_grad():
            model.generate(
                ids[:, :16], max_new_tokens=2, do_sample=False
            )  # warm-up (cuBLAS workspace)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            gen_phases: dict[str, int] = {}

            def after_forward(input_ids, scores):
                # generate calls the logits processors right after each forward: the first call
                # closes the prefill, the later ones the decode steps
                torch.cuda.synchronize()
                peak = torch.cuda.max_memory_allocated() - base
                if "prefill_peak" not in gen_phases:
                    gen_phases.update(
                        prefill_peak=peak,
                        after_prefill=torch.cuda.memory_allocated() - base,
                        prefill_logits_bytes=scores.numel() * scores.element_size(),
                    )
                else:
                    gen_phases["decode_peak"] = max(gen_phases.get("decode_peak", 0), peak)
                torch.cuda.reset_peak_memory_stats()
                return scores

            out_ids = model.generate(
                ids,
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                logits_processor=transformers.LogitsProcessorList([after_forward]),
            )
            torch.cuda.synchronize()
            gen_phases["tail_peak"] = torch.cuda.max_memory_allocated() - base
            gen_phases["after_generate"] = torch.cuda.memory_allocated() - base
        peak = max(v for k, v in gen_phases.items() if k.endswith("_peak"))
        result.update(
            before_bytes=before,
            peak_bytes=peak,
            phases=gen_phases,
            peak_reserved_bytes=torch.cuda.max_memory_reserved(),
            generated=int(out_ids.shape[1] - p),
        )
        del out_ids, ids
    else:
        model.train()
        model.config.use_cache = False
        if opts.get("checkpointing") == "full":
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        opt = _optimizer(opts.get("optimizer", "adamw"), model.parameters())
        b, s = opts["batch"], opts["seq"]
        ids = torch.randint(0, vocab, (b, s), device="cuda")
        autocast = opts.get("autocast", "none")
        phases: dict[str, int] = {}

        def step(record: bool) -> None:
            def mark(name: str) -> None:
                if record:
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated() - base
                    phases[name + "_peak"] = max(phases.get(name + "_peak", 0), peak)
                    phases[name + "_end"] = torch.cuda.memory_allocated() - base
                    torch.cuda.reset_peak_memory_stats()

            for _ in range(opts.get("microbatches", 1)):
                if autocast != "none":
                    with torch.autocast(
                        "cuda", dtype=torch.bfloat16 if autocast == "bf16" else torch.float16
                    ):
                        loss = model(input_ids=ids, labels=ids).loss
                else:
                    loss = model(input_ids=ids, labels=ids).loss
                mark("forward")
                loss.backward()
                del loss
                mark("backward")
            opt.step()
            mark("optimizer")
            opt.zero_grad(set_to_none=True)
            mark("zero_grad")

        step(False)
        torch.cuda.synchronize()
        result["after_first_step_bytes"] = torch.cuda.memory_allocated() - base
        torch.cuda.reset_peak_memory_stats()
        step(True)
        result.update(
            phases=phases,
            peak_bytes=max(v for k, v in phases.items() if k.endswith("_peak")),
            peak_reserved_bytes=torch.cuda.max_memory_reserved(),
        )
        result["saved_by_op"] = _saved_census(model, ids, autocast)
        del opt, ids
    model = None  # the closures above still name it; dropping the reference frees it
    gc.collect()
    torch.cuda.empty_cache()
    return result


def _saved_census(model, ids, autocast: str) -> dict:
    """What autograd keeps for backward in one forward, by the op that saves it (unique storages)."""
    import torch

    seen: dict[int, tuple[str, int]] = {}

    def pack(t):
        try:
            st = t.untyped_storage()
            key = st.data_ptr()
            if key not in seen:
                seen[key] = (f"{tuple(t.shape)}:{str(t.dtype)[6:]}", st.nbytes())
        except Exception:  # noqa: BLE001, S110 - a tensor without storage is not counted
            pass
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if autocast != "none":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
        else:
            loss = model(input_ids=ids, labels=ids).loss
    del loss
    by_shape: dict[str, list[int]] = {}
    for shape, nbytes in seen.values():
        by_shape.setdefault(shape, [0, 0])
        by_shape[shape][0] += 1
        by_shape[shape][1] += nbytes
    return {
        "total_bytes": sum(v[1] for v in by_shape.values()),
        "by_shape": dict(sorted(by_shape.items(), key=lambda kv: -kv[1][1])),
    }


def _context() -> dict:
    """Memory the process holds outside the allocator (CUDA context, libraries), after a matmul."""
    import torch

    x = torch.randn(1024, 1024, device="cuda")
    (x @ x).sum().item()
    free, total = torch.cuda.mem_get_info()
    return {
        "name": "cuda-context",
        "used_bytes": total - free,
        "reserved_bytes": torch.cuda.memory_reserved(),
        "context_bytes": total - free - torch.cuda.memory_reserved(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
    }


def measure(out: Path, names: list[str]) -> None:
    """Each run in its own process, so that nothing one run leaves behind (caches, fragments)
    counts in the next; everything lands in one ``results.json``. ``--parallel N`` runs N processes
    at once: each process's ``max_memory_allocated`` counts its own tensors only (the card must
    hold them all at once; the runs here are small)."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    out.mkdir(parents=True, exist_ok=True)
    runs = RUNS
    parallel = 1
    if "--parallel" in names:
        k = names.index("--parallel")
        parallel, names = int(names[k + 1]), names[:k] + names[k + 2 :]
    only: list[str] = []
    if "--only" in names:
        k = names.index("--only")
        only, names = names[k + 1].split(","), names[:k] + names[k + 2 :]
    if names[:1] == ["--heldout"]:
        runs, names = HELDOUT, names[1:]
    elif names[:1] == ["--arch"]:
        runs, names = ARCH, names[1:]
    elif names[:1] == ["--gen-small"]:
        runs, names = GEN_SMALL, names[1:]
    elif names[:1] == ["--gen-moe"]:
        runs, names = GEN_MOE, names[1:]
    chosen = [
        run
        for run in runs
        if (not names or run["name"] in names) and (not only or any(o in run["name"] for o in only))
    ]

    def one(run: dict) -> dict:
        t0 = time.time()
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "measure-one", str(out), run["name"]],
                capture_output=True,
                text=True,
                check=False,
                timeout=300,
            )
            r = json.loads(proc.stdout.strip().splitlines()[-1])
        except subprocess.TimeoutExpired:
            r = {"name": run["name"], "error": "timed out after 300 s"}
        except (IndexError, json.JSONDecodeError):
            r = {
                "name": run["name"],
                "error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300],
            }
        r["seconds"] = round(time.time() - t0, 1)
        print(
            f"{r['name']:32s} {r.get('peak_bytes', 0) / GiB:8.3f} GiB  {r['seconds']:5.1f}s  "
            f"{r.get('error', r.get('skipped', ''))}",
            flush=True,
        )
        return r

    with ThreadPoolExecutor(max_workers=max(parallel, 1)) as pool:
        rows = list(pool.map(one, chosen))
    proc = subprocess.run(
        [sys.executable, __file__, "measure-one", str(out), "cuda-context"],
        check=False,
        capture_output=True,
        text=True,
    )
    if proc.stdout.strip():
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    done = [r for r in rows if "peak_bytes" in r]
    print(f"\n{'run':32s} {'peak GiB':>9s} {'fwd/prefill':>11s} {'bwd/decode':>11s}")
    for r in done:
        ph = r.get("phases", {})
        a = ph.get("forward_peak", ph.get("prefill_peak", 0)) / GiB
        b = ph.get("backward_peak", ph.get("decode_peak", 0)) / GiB
        print(f"{r['name']:32s} {r['peak_bytes'] / GiB:9.3f} {a:11.3f} {b:11.3f}")
    print(
        f"{len(done)} measured, {sum('skipped' in r for r in rows)} skipped, "
        f"{sum('error' in r for r in rows)} failed -> {out / 'results.json'}"
    )
    if runs is GEN_MOE and done:  # held out: the prediction of each phase next to its measurement
        _phase_table(done)


def _phase_table(done: list[dict]) -> None:
    from gpudoctor.core.hf_config import from_hf_config
    from gpudoctor.memory import estimate_from_options

    print(f"\n{'run':34s} {'phase':8s} {'measured GiB':>12s} {'predicted':>9s} {'error':>7s}")
    for r in done:
        est = estimate_from_options(from_hf_config(r["config"]), infer=True, **r["opts"])
        for phase, key in (("prefill", "prefill_peak"), ("decode", "decode_peak")):
            m = r["phases"][key]  # from the allocator's count before the model, as peak_bytes
            print(
                f"{r['name']:34s} {phase:8s} {m / GiB:12.3f} {est.phases[phase] / GiB:9.3f} "
                f"{100 * (est.phases[phase] - m) / m:+6.1f}%"
            )


def measure_one(out: Path, name: str) -> None:
    if name == "cuda-context":
        print(json.dumps(_context()))
        return
    run = next(r for r in RUNS + HELDOUT + ARCH + GEN_SMALL + GEN_MOE if r["name"] == name)
    import torch

    try:
        r = _measure_one(run, out)
    except torch.cuda.OutOfMemoryError as exc:  # skipped, not failed: the card is too small for it
        r = {"name": name, "skipped": f"OOM: {str(exc)[:200]}"}
    except Exception as exc:  # noqa: BLE001  (reported in the table; the other runs go on)
        r = {"name": name, "error": f"{type(exc).__name__}: {exc}"[:300]}
    print(json.dumps(r))


# --------------------------------------------------------------------------------------------
# table (anywhere)


def table(results: Path) -> None:
    from gpudoctor.core.hf_config import from_hf_config
    from gpudoctor.memory import estimate_from_options

    lines = [
        "| run | params | measured peak GiB | predicted GiB | error | weights err | states err |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    train_err, gen_err = [], []
    for m in json.loads(results.read_text()):
        if m["name"] == "cuda-context":
            continue
        if "error" in m or "skipped" in m:
            lines.append(
                f"| {m['name']} | {'failed' if 'error' in m else 'skipped'}: "
                f"{m.get('error', m.get('skipped', ''))[:60]} | | | | | |"
            )
            continue
        opts = dict(m["opts"])
        spec = from_hf_config(m["config"], name=m["name"])
        est = estimate_from_options(spec, infer=m["infer"], **opts)
        pred = est.peak_bytes
        err = (pred - m["peak_bytes"]) / m["peak_bytes"]
        w_err = (est.breakdown.get("weights", 0) - m["weights_bytes"]) / m["weights_bytes"]
        s_err = ""
        if not m["infer"]:
            # after the first step: weights, optimizer states and the cuBLAS workspaces
            states = (
                m["after_first_step_bytes"]
                - m["weights_bytes"]
                - est.breakdown.get("cuda_workspaces", 0)
            )
            pred_states = est.breakdown.get("optimizer_states", 0) + est.breakdown.get(
                "master_weights", 0
            )
            s_err = (
                f"{100 * (pred_states - states) / states:+.2f}%" if states > 2**20 else "(< 1 MiB)"
            )
            train_err.append(abs(err))
        else:
            gen_err.append(abs(err))
        lines.append(
            f"| {m['name']} | {m['n_params'] / 1e9:.2f} B | {m['peak_bytes'] / GiB:.3f} | "
            f"{pred / GiB:.3f} | {100 * err:+.1f}% | {100 * w_err:+.2f}% | {s_err} |"
        )
    print("\n".join(lines))
    if train_err:
        print(
            f"\ntraining peak: median |error| {100 * statistics.median(train_err):.1f}%, "
            f"max {100 * max(train_err):.1f}% over {len(train_err)} runs"
        )
    if gen_err:
        print(
            f"generation peak: median |error| {100 * statistics.median(gen_err):.1f}%, "
            f"max {100 * max(gen_err):.1f}% over {len(gen_err)} runs"
        )


_FACTORY = """
import json, transformers
CONFIG = json.loads({config!r})
FAMILY = {family!r}

def build():
    cls = getattr(transformers, {cls!r})
    cfg = cls(**{{k: v for k, v in CONFIG.items() if k not in ("architectures", "transformers_version")}})
    cfg._attn_implementation = {attention!r}
    return transformers.AutoModelForCausalLM.from_config(cfg)
"""


def dryrun_table(results: Path) -> None:
    """The module:factory path (a dry run on fake tensors) on the same training runs; needs transformers."""
    import tempfile

    from gpudoctor.errors import InputError
    from gpudoctor.memory import estimate_from_options

    runs = RUNS + HELDOUT
    lines = [
        "| run | measured peak GiB | config.json rules GiB | module dry run GiB | dry-run error |",
        "|---|---:|---:|---:|---:|",
    ]
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for f in results.parent.glob(results.name):
            for m in json.loads(f.read_text()):
                if m.get("infer", True) or "error" in m or m["name"] == "cuda-context":
                    continue
                fam = next(r["family"] for r in runs if r["name"] == m["name"])
                path = Path(tmp) / f"factory_{m['name'].replace('-', '_').replace('.', '_')}.py"
                path.write_text(
                    _FACTORY.format(
                        config=json.dumps(m["config"]),
                        family=fam,
                        cls=_CONFIG_CLASSES[fam],
                        attention=m["opts"].get("attention", "sdpa"),
                    )
                )
                opts = {k: v for k, v in m["opts"].items() if k != "attention"}
                from gpudoctor.core.hf_config import from_hf_config

                rules = estimate_from_options(from_hf_config(m["config"]), **m["opts"]).peak_bytes
                try:
                    pred = estimate_from_options(f"{path}:build", **opts).peak_bytes
                except InputError as exc:
                    lines.append(
                        f"| {m['name']} | {m['peak_bytes'] / GiB:.3f} | {rules / GiB:.3f} | "
                        f"refused: {str(exc)[:60]} | |"
                    )
                    continue
                err = (pred - m["peak_bytes"]) / m["peak_bytes"]
                errors.append(abs(err))
                lines.append(
                    f"| {m['name']} | {m['peak_bytes'] / GiB:.3f} | {rules / GiB:.3f} | "
                    f"{pred / GiB:.3f} | {100 * err:+.2f}% |"
                )
    print("\n".join(lines))
    if errors:
        print(
            f"\nmodule dry run: median |error| {100 * statistics.median(errors):.2f}%, "
            f"max {100 * max(errors):.2f}% over {len(errors)} runs"
        )


if __name__ == "__main__":
    if "--list" in sys.argv[1:]:
        sets = {
            "--heldout": HELDOUT,
            "--arch": ARCH,
            "--gen-small": GEN_SMALL,
            "--gen-moe": GEN_MOE,
        }
        for run in next(
            (v for k, v in sets.items() if k in sys.argv),
            RUNS + HELDOUT + ARCH + GEN_SMALL + GEN_MOE,
        ):
            print(
                f"{run['name']:34s} {run['family']:12s} {'generate' if run.get('infer') else 'train'}"
            )
        sys.exit(0)
    if len(sys.argv) < 3 or sys.argv[1] not in ("measure", "measure-one", "table", "dryrun"):
        sys.exit(
            "usage: bench_memory.py measure OUT_DIR [--heldout | --arch | --gen-small | --gen-moe] [--parallel N] [--only SUBSTR,..] [NAME...] | --list [--arch] | table RESULTS_JSON | "
            "dryrun 'RESULTS_GLOB'"
        )
    if sys.argv[1] == "dryrun":
        dryrun_table(Path(sys.argv[2]))
        sys.exit(0)
    if sys.argv[1] == "measure":
        measure(Path(sys.argv[2]), sys.argv[3:])
    elif sys.argv[1] == "measure-one":
        measure_one(Path(sys.argv[2]), sys.argv[3])
    else:
        table(Path(sys.argv[2]))
