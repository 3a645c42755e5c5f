"""Gemma 2 under SDPA: the attention asked for is the one priced, and its hybrid KV cache.

The measured peaks are a user's (torch.cuda.max_memory_allocated; transformers 5.17, torch 2.11,
attn_implementation="sdpa" on the config and in from_config, random weights), reported with the
config below: training on an H100, generation on an H200. The estimate priced SDPA as eager
(materialized scores) and was 21% to 131% high; transformers 5.17 ran SDPA.
"""

from __future__ import annotations

import json

import pytest
from test_cli import gd

from gpudoctor.core.hf_config import from_hf_config
from gpudoctor.memory import estimate_from_options
from gpudoctor.memory.activations import Workload, layer_memory

CONFIG = {
    "model_type": "gemma2",
    "architectures": ["Gemma2ForCausalLM"],
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 96,
    "vocab_size": 256000,
    "sliding_window": 1024,
}

# (options, measured peak in GB = 1e9 bytes), as the user measured them
MEASURED = {
    "bf16-adamw-4x2048": (
        {"batch": 4, "seq": 2048, "params_dtype": "bf16", "attention": "sdpa"},
        35.03e9,
    ),
    "fp32-autocast-2x2048": (
        {"batch": 2, "seq": 2048, "params_dtype": "fp32", "autocast": "bf16", "attention": "sdpa"},
        20.58e9,
    ),
    "generate-16x2048+256": (
        {"infer": True, "batch": 16, "prompt": 2048, "new": 256, "attention": "sdpa"},
        1.83e9,
    ),
}


def _spec():
    return from_hf_config(dict(CONFIG), name="gemma2-user")


@pytest.mark.parametrize("case", sorted(MEASURED))
def test_within_10_percent_of_the_measured_peak(case):
    opts, measured = MEASURED[case]
    est = estimate_from_options(_spec(), **opts)
    assert abs(est.peak_bytes / measured - 1) < 0.10, (
        f"{case}: {est.peak_bytes / 1e9:.2f} GB vs {measured / 1e9:.2f}"
    )


def test_sdpa_keeps_no_scores_and_eager_keeps_them():
    spec = _spec()
    sdpa = layer_memory(spec, Workload(batch=1, seq=2048, attention="sdpa"), 1)
    eager = layer_memory(spec, Workload(batch=1, seq=2048, attention="eager"), 1)
    assert "attention_scores" not in sdpa.saved
    assert (
        eager.saved["attention_scores"] == (4 + 2 + 2) * 8 * 2048 * 2048
    )  # fp32 softmax, bf16 probs, tanh


def test_only_the_sliding_layers_get_an_sdpa_mask():
    spec = _spec()  # layers 1, 3, 5, 7 attend fully; 0, 2, 4, 6 within 1,024 tokens
    w = Workload(batch=1, seq=2048, attention="sdpa")
    t, d = 2048, 96
    full = layer_memory(spec, w, 1).saved["attention"]
    sliding = layer_memory(spec, w, 0).saved["attention"]
    assert (
        full == 2 * 2 * t * 8 * d + 2 * 2 * t * 4 * d + 4 * 8 * t
    )  # q, out; k, v at the KV heads; logsumexp
    assert sliding == 4 * 2 * t * 8 * d + 2 * t * t + 4 * 8 * t  # K/V repeated to 8 heads, the mask


def test_generation_cache_holds_the_window_only_in_sliding_layers():
    est = estimate_from_options(
        _spec(), infer=True, batch=16, prompt=2048, new=256, attention="sdpa"
    )
    per_layer_token = 2 * 4 * 96 * 2  # K and V, 4 KV heads of 96, bf16
    # end of decoding: 4 full layers hold the 2,304-token context, 4 sliding layers 1,024 tokens
    assert est.extra["kv_cache_full_context_bytes"] == 16 * (4 * 2304 + 4 * 1024) * per_layer_token
    # after the prefill each sliding layer's window is a view of the whole prompt's K/V: 2,048 tokens everywhere
    assert est.phase == "prefill" and est.breakdown["kv_cache"] == 16 * 8 * 2048 * per_layer_token


def test_the_output_says_which_attention_was_assumed(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CONFIG))
    out = gd("memory", str(cfg), "--batch", "4", "--seq", "2048", "--width", "200")
    assert out.returncode == 0, out.stderr
    assert "assumed: attention: torch SDPA" in out.stdout
    assert "5.21 and later refuse SDPA for Gemma 2" in out.stdout
    eager = gd(
        "memory",
        str(cfg),
        "--batch",
        "4",
        "--seq",
        "2048",
        "--attention",
        "eager",
        "--width",
        "200",
    )
    assert eager.returncode == 0, eager.stderr
    assert "assumed: attention: eager" in eager.stdout and "refuse SDPA" not in eager.stdout
