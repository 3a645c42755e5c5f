"""ModelSpec from config.json, presets and exact parameter counts, without transformers.

The pinned counts are what transformers 5.17 builds: the H200 runs' ``n_params`` were summed over
real models on the GPU; the family cases and presets were checked against
``AutoModelForCausalLM.from_config`` on the meta device when this file was written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoctor.core.hf_config import SUPPORTED_MODEL_TYPES, from_hf_config
from gpudoctor.core.params import active_params, count_params
from gpudoctor.core.presets import PRESETS, from_preset
from gpudoctor.errors import InputError

RUNS_FILE = Path(__file__).parent.parent / "benchmarks" / "results" / "memory_h200_2026-11-22.json"
RUNS = [run for run in json.loads(RUNS_FILE.read_text()) if not run.get("error")]


@pytest.mark.parametrize("run", RUNS, ids=[run["name"] for run in RUNS])
def test_h200_runs_count_exactly(run):
    assert count_params(from_hf_config(run["config"])).total == run["n_params"]


def test_h200_file_has_runs():
    assert len(RUNS) >= 10


# (config, total) per family and per structural choice, checked on the meta device.
B = {"vocab_size": 1000, "max_position_embeddings": 512}
FAMILY_CASES = {
    "llama-bias-tied-gqa": (
        dict(
            model_type="llama",
            hidden_size=512,
            intermediate_size=1376,
            num_hidden_layers=3,
            num_attention_heads=8,
            num_key_value_heads=2,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=True,
            **B,
        ),
        8_835_904,
    ),
    "llama-explicit-head-dim": (
        dict(
            model_type="llama",
            hidden_size=512,
            intermediate_size=1024,
            num_hidden_layers=2,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=96,
            **B,
        ),
        6_531_584,
    ),
    "llama-kv-absent": (
        dict(
            model_type="llama",
            hidden_size=256,
            intermediate_size=512,
            num_hidden_layers=2,
            num_attention_heads=4,
            **B,
        ),
        1_824_000,
    ),
    "mistral-kv-default-8": (
        dict(
            model_type="mistral",
            hidden_size=512,
            intermediate_size=1024,
            num_hidden_layers=2,
            num_attention_heads=16,
            **B,
        ),
        5_745_152,
    ),
    "qwen2-kv-default-32": (
        dict(
            model_type="qwen2",
            hidden_size=2048,
            intermediate_size=1024,
            num_hidden_layers=2,
            num_attention_heads=32,
            **B,
        ),
        50_255_872,
    ),
    "qwen2-sliding-tied": (
        dict(
            model_type="qwen2",
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=3,
            num_attention_heads=14,
            num_key_value_heads=2,
            use_sliding_window=True,
            sliding_window=256,
            max_window_layers=1,
            tie_word_embeddings=True,
            **B,
        ),
        45_634_048,
    ),
    "gemma-defaults-bias-untied": (
        dict(
            model_type="gemma",
            hidden_size=1024,
            intermediate_size=2048,
            num_hidden_layers=2,
            num_attention_heads=16,
            attention_bias=True,
            tie_word_embeddings=False,
            **B,
        ),
        48_217_088,
    ),
    "gemma2-four-norms": (
        dict(
            model_type="gemma2",
            hidden_size=576,
            intermediate_size=2304,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=64,
            **B,
        ),
        20_049_984,
    ),
    "gpt2-n-inner-untied": (
        {
            "model_type": "gpt2",
            "n_embd": 256,
            "n_layer": 3,
            "n_head": 4,
            "n_inner": 700,
            "n_positions": 300,
            "vocab_size": 1000,
            "tie_word_embeddings": False,
        },
        2_459_956,
    ),
    "neox-no-bias-tied": (
        dict(
            model_type="gpt_neox",
            hidden_size=512,
            intermediate_size=2048,
            num_hidden_layers=2,
            num_attention_heads=8,
            attention_bias=False,
            tie_word_embeddings=True,
            rotary_pct=0.5,
            **B,
        ),
        6_813_696,
    ),
    "mixtral-head-dim-tied": (
        dict(
            model_type="mixtral",
            hidden_size=512,
            intermediate_size=768,
            num_hidden_layers=2,
            num_attention_heads=8,
            num_key_value_heads=2,
            head_dim=32,
            num_local_experts=4,
            num_experts_per_tok=1,
            tie_word_embeddings=True,
            **B,
        ),
        10_611_200,
    ),
    "deepseek-v2-no-q-lora-biases": (
        dict(
            model_type="deepseek_v2",
            hidden_size=512,
            intermediate_size=1024,
            moe_intermediate_size=128,
            num_hidden_layers=4,
            num_attention_heads=8,
            n_routed_experts=8,
            n_shared_experts=2,
            num_experts_per_tok=2,
            first_k_dense_replace=2,
            kv_lora_rank=64,
            q_lora_rank=None,
            qk_nope_head_dim=32,
            qk_rope_head_dim=16,
            v_head_dim=48,
            attention_bias=True,
            mlp_bias=True,
            **B,
        ),
        10_025_024,
    ),
    "deepseek-v2-q-lora": (
        dict(
            model_type="deepseek_v2",
            hidden_size=512,
            intermediate_size=1024,
            moe_intermediate_size=128,
            num_hidden_layers=3,
            num_attention_heads=8,
            n_routed_experts=8,
            n_shared_experts=1,
            num_experts_per_tok=2,
            first_k_dense_replace=1,
            kv_lora_rank=64,
            q_lora_rank=96,
            qk_nope_head_dim=32,
            qk_rope_head_dim=16,
            v_head_dim=32,
            **B,
        ),
        7_020_512,
    ),
    "deepseek-v3-q-lora-attn-bias": (
        dict(
            model_type="deepseek_v3",
            hidden_size=512,
            intermediate_size=1024,
            moe_intermediate_size=128,
            num_hidden_layers=4,
            num_attention_heads=8,
            n_routed_experts=8,
            n_shared_experts=1,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            first_k_dense_replace=1,
            kv_lora_rank=64,
            q_lora_rank=96,
            qk_nope_head_dim=32,
            qk_rope_head_dim=16,
            v_head_dim=32,
            attention_bias=True,
            **B,
        ),
        9_088_832,
    ),
    "deepseek-v3-no-q-lora-tied": (
        dict(
            model_type="deepseek_v3",
            hidden_size=256,
            intermediate_size=512,
            moe_intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            n_routed_experts=4,
            n_shared_experts=2,
            num_experts_per_tok=2,
            n_group=1,
            topk_group=1,
            first_k_dense_replace=1,
            kv_lora_rank=32,
            q_lora_rank=None,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
            tie_word_embeddings=True,
            **B,
        ),
        1_408_864,
    ),
    "qwen2-moe-sparse-step": (
        dict(
            model_type="qwen2_moe",
            hidden_size=512,
            intermediate_size=1024,
            moe_intermediate_size=128,
            shared_expert_intermediate_size=384,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=2,
            num_experts=6,
            num_experts_per_tok=2,
            decoder_sparse_step=2,
            mlp_only_layers=[1],
            qkv_bias=False,
            **B,
        ),
        10_141_696,
    ),
    "qwen2-moe-defaults": (
        dict(
            model_type="qwen2_moe",
            hidden_size=256,
            intermediate_size=512,
            num_hidden_layers=2,
            num_attention_heads=16,
            **B,
        ),
        139_482_368,
    ),
    "phi3-gqa-tied": (
        dict(
            model_type="phi3",
            hidden_size=512,
            intermediate_size=1024,
            num_hidden_layers=2,
            num_attention_heads=8,
            num_key_value_heads=2,
            tie_word_embeddings=True,
            **B,
        ),
        4_971_008,
    ),
}


@pytest.mark.parametrize("case", sorted(FAMILY_CASES))
def test_family_counts_match_transformers(case):
    config, total = FAMILY_CASES[case]
    assert count_params(from_hf_config(config)).total == total


def test_every_supported_model_type_has_a_pinned_case():
    covered = {config["model_type"] for config, _ in FAMILY_CASES.values()}
    assert covered == set(SUPPORTED_MODEL_TYPES)


# ------------------------------------------------------------------------------ key mapping


def test_gpt2_keys_map_to_the_spec():
    spec = from_hf_config(
        {
            "model_type": "gpt2",
            "n_embd": 768,
            "n_layer": 12,
            "n_head": 12,
            "n_positions": 1024,
            "n_inner": None,
            "vocab_size": 50257,
            "activation_function": "gelu_new",
            "attn_pdrop": 0.1,
            "resid_pdrop": 0.2,
            "embd_pdrop": 0.3,
        }
    )
    assert (spec.hidden, spec.layers, spec.heads, spec.kv_heads, spec.head_dim) == (
        768,
        12,
        12,
        12,
        64,
    )
    assert spec.intermediate == 4 * 768  # n_inner null -> 4 * n_embd
    assert spec.learned_positions == spec.max_positions == 1024
    assert spec.tied_embeddings  # GPT-2 ties unless told otherwise
    assert (spec.attn_dropout, spec.resid_dropout, spec.embd_dropout) == (0.1, 0.2, 0.3)
    assert (spec.norm, spec.gated_mlp, spec.fused_qkv, spec.activation) == (
        "layer",
        False,
        True,
        "gelu_new",
    )
    assert spec.qkv_bias and spec.out_bias and spec.mlp_bias
    assert spec.dtype == "fp32"  # no torch_dtype: the weights are fp32
    counts = count_params(spec)
    assert counts.positions == 1024 * 768 and counts.lm_head == 0


def test_neox_keys_map_to_the_spec():
    old = from_hf_config(
        {
            "model_type": "gpt_neox",
            "hidden_size": 2048,
            "num_hidden_layers": 16,
            "num_attention_heads": 8,
            "intermediate_size": 8192,
            "vocab_size": 50304,
            "rotary_pct": 0.25,
            "use_parallel_residual": True,
            "hidden_dropout": 0.1,
            "torch_dtype": "float16",
        }
    )
    new = from_hf_config(
        {
            "model_type": "gpt_neox",
            "hidden_size": 2048,
            "num_hidden_layers": 16,
            "num_attention_heads": 8,
            "intermediate_size": 8192,
            "vocab_size": 50304,
            "dtype": "bfloat16",
            "rope_parameters": {"partial_rotary_factor": 0.5, "rope_type": "default"},
            "use_parallel_residual": False,
            "attention_bias": False,
        }
    )
    assert old.rotary_fraction == 0.25 and new.rotary_fraction == 0.5
    assert old.parallel_residual and not new.parallel_residual
    assert old.qkv_bias and old.out_bias and not new.qkv_bias and new.mlp_bias
    assert not old.tied_embeddings  # GPT-NeoX does not tie by default
    assert (old.dtype, new.dtype, old.resid_dropout) == ("fp16", "bf16", 0.1)
    assert old.fused_qkv and old.norm == "layer" and not old.gated_mlp and old.head_dim == 256


def test_qwen2_biases_and_sliding_window():
    base = {
        "model_type": "qwen2",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 2048,
        "vocab_size": 1000,
        "sliding_window": 4096,
        "max_window_layers": 2,
    }
    spec = from_hf_config(base)
    assert spec.qkv_bias and not spec.out_bias and spec.sliding_window is None
    sliding = from_hf_config(base | {"use_sliding_window": True})
    assert sliding.sliding_window == 4096 and sliding.full_attention_layers == (0, 1)


def test_gemma_and_deepseek_structure():
    gemma = from_preset("gemma-2b")
    assert gemma.embedding_scale and gemma.tied_embeddings and gemma.kv_heads == 1
    assert gemma.head_dim == 256 and gemma.gated_mlp
    v3 = from_preset("deepseek-v3")
    assert v3.family == "deepseek" and v3.mla.q_lora_rank == 1536 and v3.head_dim == 192
    assert v3.moe.first_dense_layers == 3 and v3.moe.shared_intermediate == 2048
    lite = from_preset("deepseek-v2-lite")
    assert lite.mla.q_lora_rank is None and lite.moe.top_k == 6
    counts = count_params(v3)
    assert counts.expert_per_layer[:3] == (0, 0, 0)
    assert counts.expert_per_layer[3] == 256 * 3 * 7168 * 2048
    assert counts.largest_layer == max(counts.per_layer)


def test_config_file_and_folder(tmp_path):
    config = dict(PRESETS["llama-3.2-1b"])
    (tmp_path / "config.json").write_text(json.dumps(config))
    from_folder = from_hf_config(tmp_path)
    from_file = from_hf_config(str(tmp_path / "config.json"), name="mine")
    assert from_folder.name == tmp_path.name and from_file.name == "mine"
    assert count_params(from_folder).total == count_params(from_file).total == 1_235_814_400


def test_architectures_stand_in_for_a_missing_model_type():
    config = {k: v for k, v in PRESETS["mistral-7b"].items() if k != "model_type"}
    assert from_hf_config(config).family == "mistral"


# ------------------------------------------------------------------------------ presets


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_loads(name):
    spec = from_preset(name)
    counts = count_params(spec)
    assert spec.source == "preset" and spec.name == name
    assert counts.total > 0 and counts.total == (
        counts.embedding
        + counts.positions
        + counts.layers_total
        + counts.final_norm
        + counts.lm_head
    )
    assert 0 < active_params(spec) <= counts.total


@pytest.mark.parametrize(
    ("name", "total"),
    [
        ("llama-3.1-8b", 8_030_261_248),
        ("llama-3.1-70b", 70_553_706_496),
        ("mistral-7b", 7_241_732_096),
        ("gpt2", 124_439_808),
        ("llama-3.1-405b", 405_853_388_800),
        ("llama-3.2-1b", 1_235_814_400),
        ("llama-3.2-3b", 3_212_749_824),
        ("mixtral-8x7b", 46_702_792_704),
        ("qwen2.5-0.5b", 494_032_768),
        ("qwen2.5-7b", 7_615_616_512),
        ("qwen2.5-72b", 72_706_203_648),
        ("gemma-2b", 2_506_172_416),
        ("gemma-7b", 8_537_680_896),
        ("gpt2-xl", 1_557_611_200),
        ("pythia-1b", 1_011_781_632),
        ("deepseek-v2-lite", 15_706_484_224),
        ("deepseek-v3", 671_026_404_352),
    ],
)
def test_preset_totals(name, total):
    assert count_params(from_preset(name)).total == total


def test_active_params_of_moe_presets():
    assert active_params(from_preset("mixtral-8x7b")) == 12_879_925_248
    assert active_params(from_preset("deepseek-v3")) == 37_552_282_624
    assert active_params(from_preset("llama-3.1-8b")) == 8_030_261_248


def test_unknown_preset_lists_the_names():
    with pytest.raises(InputError, match=r"known presets: llama-3\.1-8b, .*deepseek-v3"):
        from_preset("llama-9")


def test_exact_params_does_not_change_the_formula():
    from dataclasses import replace

    spec = from_preset("gpt2")
    assert count_params(replace(spec, exact_params=1)).total == 124_439_808


# ------------------------------------------------------------------------------ tied embeddings


def test_tied_embeddings_drop_the_lm_head():
    config = dict(PRESETS["llama-3.2-1b"])
    tied = count_params(from_hf_config(config))
    untied = count_params(from_hf_config(config | {"tie_word_embeddings": False}))
    assert tied.lm_head == 0 and untied.lm_head == 128256 * 2048
    assert untied.total - tied.total == 128256 * 2048


@pytest.mark.parametrize(
    ("model_type", "tied"),
    [
        ("llama", False),
        ("mistral", False),
        ("qwen2", False),
        ("gemma", True),
        ("gemma2", True),
        ("gpt_neox", False),
        ("phi3", False),
        ("mixtral", False),
        ("deepseek_v3", False),
        ("qwen2_moe", False),
    ],
)
def test_tie_defaults_per_family(model_type, tied):
    config = {
        "model_type": model_type,
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 512,
        "vocab_size": 100,
    }
    assert from_hf_config(config).tied_embeddings is tied


# ------------------------------------------------------------------------------ errors


LLAMA = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "vocab_size": 100,
}


def test_missing_field_names_the_field_and_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in LLAMA.items() if k != "hidden_size"}))
    with pytest.raises(InputError, match=r"config\.json at .*config\.json has no 'hidden_size'"):
        from_hf_config(path)
    gpt2 = {"model_type": "gpt2", "n_layer": 2, "n_head": 2, "vocab_size": 10}
    with pytest.raises(InputError, match=r"has no 'n_embd' \(or 'hidden_size'\)"):
        from_hf_config(gpt2)


def test_bad_json_and_not_an_object(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama",')
    with pytest.raises(InputError, match="is not valid JSON"):
        from_hf_config(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(InputError, match="is not a JSON object"):
        from_hf_config(bad)
    with pytest.raises(InputError, match="does not exist"):
        from_hf_config(tmp_path / "nothing" / "config.json")


def test_unknown_model_type_lists_supported():
    with pytest.raises(InputError, match="model_type 'bert' is not supported; supported: llama, "):
        from_hf_config(LLAMA | {"model_type": "bert"})


def test_kv_heads_must_divide_heads():
    with pytest.raises(
        InputError, match="num_key_value_heads 3 does not divide num_attention_heads 4"
    ):
        from_hf_config(LLAMA | {"num_key_value_heads": 3})


def test_heads_must_divide_hidden_without_head_dim():
    with pytest.raises(InputError, match="not a multiple of num_attention_heads 3"):
        from_hf_config(LLAMA | {"num_attention_heads": 3})
    assert (
        from_hf_config(
            LLAMA | {"num_attention_heads": 3, "num_key_value_heads": 1, "head_dim": 80}
        ).head_dim
        == 80
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("intermediate_size", -5, "'intermediate_size' must be a positive integer, got -5"),
        ("num_hidden_layers", 0, "'num_hidden_layers' must be a positive integer, got 0"),
        ("hidden_size", 4096.5, "'hidden_size' must be an integer, got 4096.5"),
        ("hidden_size", "4096", "'hidden_size' must be an integer, got '4096'"),
        ("vocab_size", True, "'vocab_size' must be an integer, got True"),
        ("hidden_size", 2_000_000, "'hidden_size' = 2,000,000 is not a plausible size"),
        ("tie_word_embeddings", "yes", "'tie_word_embeddings' must be true or false"),
        ("attention_dropout", 1.5, r"'attention_dropout' must be a number in \[0, 1\]"),
        ("dtype", "int4", "'dtype' 'int4' is not a weight dtype"),
    ],
)
def test_bad_values_are_one_line_input_errors(key, value, message):
    with pytest.raises(InputError, match=message) as info:
        from_hf_config(LLAMA | {key: value})
    assert "\n" not in str(info.value)


def test_moe_top_k_cannot_exceed_experts():
    config = dict(FAMILY_CASES["mixtral-head-dim-tied"][0]) | {"num_experts_per_tok": 5}
    with pytest.raises(InputError, match="num_experts_per_tok 5 is more than the 4 experts"):
        from_hf_config(config)


def test_deepseek_v2_needs_top_k():
    config = dict(FAMILY_CASES["deepseek-v2-q-lora"][0])
    del config["num_experts_per_tok"]
    with pytest.raises(InputError, match="has no 'num_experts_per_tok'"):
        from_hf_config(config)


def test_no_transformers_or_torch_import():
    code = (
        "import sys, gpudoctor.core.spec, gpudoctor.core.hf_config, gpudoctor.core.params, gpudoctor.core.presets;"
        "print('transformers' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# ------------------------------------------------------------------------------ properties

_KEYS = [
    "model_type",
    "hidden_size",
    "n_embd",
    "num_hidden_layers",
    "n_layer",
    "num_attention_heads",
    "n_head",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "n_inner",
    "vocab_size",
    "tie_word_embeddings",
    "attention_bias",
    "mlp_bias",
    "num_local_experts",
    "num_experts_per_tok",
    "n_routed_experts",
    "moe_intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "num_experts",
    "decoder_sparse_step",
    "mlp_only_layers",
    "shared_expert_intermediate_size",
    "sliding_window",
    "use_sliding_window",
    "layer_types",
    "rotary_pct",
    "dtype",
    "torch_dtype",
    "attention_dropout",
    "rope_parameters",
    "architectures",
]
_JUNK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-10, 10**7)
    | st.floats(allow_nan=True)
    | st.text(max_size=8)
    | st.sampled_from(SUPPORTED_MODEL_TYPES),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=5,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_KEYS), _JUNK, max_size=14))
def test_random_dicts_give_input_error_or_a_positive_count(config):
    try:
        spec = from_hf_config(config)
    except InputError:
        return
    counts = count_params(spec)
    assert counts.total > 0 and active_params(spec) > 0


_SMALL = st.integers(1, 64)


@settings(max_examples=300, deadline=None)
@given(
    model_type=st.sampled_from(SUPPORTED_MODEL_TYPES),
    hidden=_SMALL,
    layers=st.integers(1, 6),
    heads=st.integers(1, 16),
    kv=st.integers(1, 16),
    inter=_SMALL,
    vocab=_SMALL,
    experts=st.integers(1, 8),
    top_k=st.integers(1, 8),
    lora=st.none() | _SMALL,
    tied=st.booleans(),
    head_dim=st.none() | _SMALL,
)
def test_random_sizes_give_input_error_or_a_positive_count(
    model_type, hidden, layers, heads, kv, inter, vocab, experts, top_k, lora, tied, head_dim
):
    config = {
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "intermediate_size": inter,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "head_dim": head_dim,
        "num_local_experts": experts,
        "n_routed_experts": experts,
        "num_experts": experts,
        "num_experts_per_tok": top_k,
        "moe_intermediate_size": inter,
        "q_lora_rank": lora,
        "kv_lora_rank": inter,
        "qk_nope_head_dim": hidden,
        "qk_rope_head_dim": 2,
        "v_head_dim": hidden,
        "shared_expert_intermediate_size": inter,
    }
    try:
        spec = from_hf_config(config)
    except InputError:
        return
    counts = count_params(spec)
    assert counts.total > 0 and min(counts.per_layer) > 0
    assert 0 < active_params(spec) <= counts.total
