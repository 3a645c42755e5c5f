"""A Hugging Face ``config.json`` read into a ``ModelSpec``: ``from_hf_config``.

Each family reads the keys its transformers 5.17 configuration class reads, with that class's
defaults where a key is absent (a config.json saved by transformers always holds them; the
defaults matter for hand-written files). The sizes that make up a model (hidden, layers, heads,
intermediate, vocab) have no default here: a file without them is a mistake, not a model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from gpudoctor.core.spec import MLA, ModelSpec, MoE
from gpudoctor.errors import InputError

_REQUIRED = object()

# Upper bounds on sizes: far above any real model, low enough to catch a typo or a unit mix-up
# before it turns into an exabyte estimate.
_MAX_HIDDEN = 1_000_000
_MAX_WIDTH = 10_000_000  # MLP widths, ranks, head dims
_MAX_LAYERS = 10_000
_MAX_HEADS = 100_000
_MAX_VOCAB = 100_000_000
_MAX_POSITIONS = 1_000_000_000
_MAX_EXPERTS = 1_000_000

_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16",
           "float32": "fp32", "fp32": "fp32", "float": "fp32"}

# config.json "architectures" -> model_type, for files that lack model_type.
_ARCHITECTURES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "GemmaForCausalLM": "gemma", "Gemma2ForCausalLM": "gemma2", "GPT2LMHeadModel": "gpt2",
    "GPTNeoXForCausalLM": "gpt_neox", "MixtralForCausalLM": "mixtral",
    "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3",
    "Qwen2MoeForCausalLM": "qwen2_moe", "Phi3ForCausalLM": "phi3",
}


class _Config:
    """A config.json object and where it came from, read through validating getters.

    Every getter raises ``InputError`` with one line naming the key and the file, so that no bad
    value reaches the arithmetic (a string width, a zero head count) and surfaces as a traceback.
    """

    def __init__(self, data: Mapping[str, Any], label: str) -> None:
        self.data = data
        self.label = label  # "config.json at /path" or "config dict"

    def fail(self, message: str) -> InputError:
        return InputError(f"{self.label}: {message}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def _first(self, keys: tuple[str, ...]) -> tuple[str, Any]:
        for key in keys:
            if self.data.get(key) is not None:
                return key, self.data[key]
        return keys[0], None

    def size(self, *keys: str, default: Any = _REQUIRED, low: int = 1, high: int) -> int:
        """An integer size from the first of ``keys`` present (aliases: n_embd / hidden_size)."""
        key, value = self._first(keys)
        if value is None:
            if default is _REQUIRED:
                also = "".join(f" (or {k!r})" for k in keys[1:])
                raise InputError(f"{self.label} has no {keys[0]!r}{also}: gpudoctor takes no "
                                 f"default for it; copy it from the model's config.json")
            return default
        return self.check_size(key, value, low=low, high=high)

    def check_size(self, key: str, value: Any, *, low: int = 1, high: int) -> int:
        # bool is an int subclass in Python; `true` for a size is a mistake, not 1
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"{key!r} must be an integer, got {value!r}")
        if value < low:
            bound = "a positive integer" if low == 1 else f"an integer >= {low}"
            raise self.fail(f"{key!r} must be {bound}, got {value}")
        if value > high:
            raise self.fail(f"{key!r} = {value:,} is not a plausible size (at most {high:,}); "
                            f"check the file")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(f"{key!r} must be true or false, got {value!r}")
        return value

    def fraction(self, *keys: str, default: float, low_open: bool = False) -> float:
        """A probability or ratio in [0, 1] ((0, 1] with ``low_open``): dropout, rotary_pct."""
        key, value = self._first(keys)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) \
                or not (0 < value <= 1 if low_open else 0 <= value <= 1):
            span = "(0, 1]" if low_open else "[0, 1]"
            raise self.fail(f"{key!r} must be a number in {span}, got {value!r}")
        return float(value)

    def cap(self, key: str, default: float) -> float | None:
        """A positive soft-capping value; an explicit null turns it off (Gemma2Config)."""
        if key not in self.data:
            return default
        value = self.data[key]
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise self.fail(f"{key!r} must be a positive number or null, got {value!r}")
        return float(value)

    def text(self, *keys: str, default: str) -> str:
        key, value = self._first(keys)
        if value is None:
            return default
        if not isinstance(value, str) or not value:
            raise self.fail(f"{key!r} must be a non-empty string, got {value!r}")
        return value

    def layer_list(self, key: str, layers: int) -> tuple[int, ...]:
        """A list of 0-based layer indices (Qwen2-MoE mlp_only_layers)."""
        value = self.data.get(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.fail(f"{key!r} must be a list of layer indices, got {value!r}")
        return tuple(sorted({self.check_size(key, i, low=0, high=layers) for i in value}))

    def layer_types(self, layers: int) -> tuple[str, ...] | None:
        """transformers 5 ``layer_types`` ("full_attention" / "sliding_attention"), if given."""
        value = self.data.get("layer_types")
        if value is None:
            return None
        if not isinstance(value, list) or len(value) != layers or \
                not all(isinstance(t, str) for t in value):
            raise self.fail(f"'layer_types' must list one string per layer ({layers}), "
                            f"got {value!r}")
        return tuple(value)


def _load(path_or_dict: str | PathLike[str] | Mapping[str, Any]) -> tuple[Mapping[str,
                                                                                  Any], str, str]:
    """(config object, label for messages, source) from a dict, a config.json or its folder."""
    if isinstance(path_or_dict, Mapping):
        return path_or_dict, "config dict", "dict"
    if not isinstance(path_or_dict, str | PathLike):
        raise InputError(f"a model config is a path to config.json, its folder, or a dict; "
                         f"got {type(path_or_dict).__name__}")
    path = Path(path_or_dict)
    if path.is_dir():
        path = path / "config.json"
    label = f"config.json at {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path} does not exist; give a Hugging Face config.json or the folder "
                         f"that holds one") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not a text config.json (binary or compressed); give a "
                         f"Hugging Face config.json or the folder that holds one") from None
    except OSError as exc:
        raise InputError(
            f"cannot read {path}: {exc.strerror or exc}; check the path and its permissions") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{label} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg})") from None
    except RecursionError:
        raise InputError(f"{label} is not a usable config (nested too deeply)") from None
    if not isinstance(data, dict):
        raise InputError(f"{label} is not a JSON object (got a {type(data).__name__}); a "
                         f"Hugging Face config.json is one {{...}} object")
    return data, label, str(path)


def _model_type(cfg: _Config) -> str:
    """The family key: model_type, else the first known entry of architectures."""
    supported = ", ".join(_BUILDERS)
    value = cfg.data.get("model_type")
    if value is None:
        archs = cfg.data.get("architectures")
        for arch in archs if isinstance(archs, list) else []:
            if isinstance(arch, str) and arch in _ARCHITECTURES:
                return _ARCHITECTURES[arch]
        raise cfg.fail(f"no 'model_type' (and no known 'architectures'); supported model types: "
                       f"{supported}")
    if not isinstance(value, str) or value not in _BUILDERS:
        raise cfg.fail(f"model_type {value!r} is not supported; supported: {supported}")
    return value


def _dtype(cfg: _Config) -> str:
    """The checkpoint dtype: transformers 5 writes "dtype", older files "torch_dtype".

    Absent or "auto": fp32, what transformers instantiates when the config names no dtype.
    """
    key, value = cfg._first(("dtype", "torch_dtype"))
    if value is None or value == "auto":
        return "fp32"
    name = value.removeprefix("torch.") if isinstance(value, str) else None
    if name not in _DTYPES:
        raise cfg.fail(f"{key!r} {value!r} is not a weight dtype gpudoctor knows; accepted: "
                       f"bfloat16, float16, float32")
    return _DTYPES[name]


def _rotary_fraction(cfg: _Config, default: float) -> float:
    """Partial rotary: rope_parameters.partial_rotary_factor (transformers 5), else the older
    top-level rotary_pct (GPT-NeoX) or partial_rotary_factor (Phi-3)."""
    rope = cfg.data.get("rope_parameters")
    if isinstance(rope, dict) and rope.get("partial_rotary_factor") is not None:
        return _Config(rope, f"{cfg.label} rope_parameters").fraction(
            "partial_rotary_factor", default=default, low_open=True)
    return cfg.fraction("rotary_pct", "partial_rotary_factor", default=default, low_open=True)


def _attention_shape(cfg: _Config, *, heads_default: int | None, head_dim_default: int | None,
                     hidden: int, heads: int) -> tuple[int, int]:
    """(kv_heads, head_dim). ``heads_default``: the family's num_key_value_heads default (None:
    = heads); ``head_dim_default``: its head_dim default (None: hidden // heads, which must then
    divide: a remainder is always a typo in a real config)."""
    kv_heads = cfg.size("num_key_value_heads",
                        default=heads if heads_default is None else heads_default, high=_MAX_HEADS)
    if heads % kv_heads:
        note = ("" if cfg.has("num_key_value_heads") else
                " (this model_type's default, as the key is absent: set it)")
        raise cfg.fail(f"num_key_value_heads {kv_heads}{note} does not divide num_attention_heads "
                       f"{heads}; grouped-query attention needs heads = k * kv_heads")
    if cfg.has("head_dim"):
        return kv_heads, cfg.size("head_dim", high=_MAX_WIDTH)
    if head_dim_default is not None:
        return kv_heads, head_dim_default
    if hidden % heads:
        raise cfg.fail(f"hidden size {hidden} is not a multiple of num_attention_heads {heads} and "
                       f"there is no 'head_dim'; give head_dim or fix the sizes")
    return kv_heads, hidden // heads


def _core(cfg: _Config, *, tied: bool, positions: int,
          hidden_keys: tuple[str, ...] = ("hidden_size",),
          layer_keys: tuple[str, ...] = ("num_hidden_layers",),
          head_keys: tuple[str, ...] = ("num_attention_heads",)) -> dict[str, Any]:
    """The sizes every family has. ``tied`` / ``positions``: the family's defaults."""
    return {
        "hidden": cfg.size(*hidden_keys, high=_MAX_HIDDEN),
        "layers": cfg.size(*layer_keys, high=_MAX_LAYERS),
        "heads": cfg.size(*head_keys, high=_MAX_HEADS),
        "vocab": cfg.size("vocab_size", high=_MAX_VOCAB),
        "tied_embeddings": cfg.flag("tie_word_embeddings", tied),
        "max_positions": cfg.size("max_position_embeddings", "n_positions", default=positions,
                                  high=_MAX_POSITIONS),
        "dtype": _dtype(cfg),
    }


def _rope_decoder(cfg: _Config, *, tied: bool, positions: int, kv_default: int | None,
                  head_dim_default: int | None) -> dict[str, Any]:
    """Llama-shaped decoders (RMSNorm, rotary, q/k/v/o, gated MLP): the shared part."""
    out = _core(cfg, tied=tied, positions=positions)
    out["kv_heads"], out["head_dim"] = _attention_shape(
        cfg, heads_default=kv_default, head_dim_default=head_dim_default,
        hidden=out["hidden"], heads=out["heads"])
    out["intermediate"] = cfg.size("intermediate_size", high=_MAX_WIDTH)
    out["attn_dropout"] = cfg.fraction("attention_dropout", default=0.0)
    return out


def _sliding(cfg: _Config, layers: int, window: int | None,
             default_full: tuple[int, ...]) -> dict[str, Any]:
    """sliding_window and the layers that attend fully anyway (layer_types wins when given)."""
    if window is None:
        return {"sliding_window": None, "full_attention_layers": ()}
    types = cfg.layer_types(layers)
    full = default_full if types is None else tuple(i for i, t in enumerate(types)
                                                    if t != "sliding_attention")
    return {"sliding_window": window, "full_attention_layers": full}


def _window(cfg: _Config, default: int | None) -> int | None:
    if "sliding_window" in cfg.data and cfg.data["sliding_window"] is None:
        return None
    return cfg.size("sliding_window", default=default, high=_MAX_POSITIONS)


def _llama(cfg: _Config) -> dict[str, Any]:
    # LlamaConfig: head_dim None -> hidden // heads, num_key_value_heads None -> heads;
    # attention_bias on q, k, v and o_proj; mlp_bias on gate, up and down (modeling_llama).
    out = _rope_decoder(cfg, tied=False, positions=2048, kv_default=None, head_dim_default=None)
    bias = cfg.flag("attention_bias", False)
    return out | {"activation": cfg.text("hidden_act", default="silu"), "qkv_bias": bias,
                  "out_bias": bias, "mlp_bias": cfg.flag("mlp_bias", False)}


def _mistral(cfg: _Config) -> dict[str, Any]:
    # MistralConfig defaults: num_key_value_heads 8, sliding_window 4096 (used on every layer).
    out = _rope_decoder(cfg, tied=False, positions=131072, kv_default=8, head_dim_default=None)
    window = _window(cfg, 4096)
    return out | {"activation": cfg.text("hidden_act", default="silu"),
                  "sliding_window": window}


def _mixtral(cfg: _Config) -> dict[str, Any]:
    # MixtralConfig: num_local_experts 8, num_experts_per_tok 2, sliding_window None; every layer
    # is MoE and each expert is intermediate_size wide (MixtralExperts, fused 3-D weights).
    out = _rope_decoder(cfg, tied=False, positions=131072, kv_default=8, head_dim_default=None)
    experts = cfg.size("num_local_experts", default=8, high=_MAX_EXPERTS)
    top_k = cfg.size("num_experts_per_tok", default=2, high=_MAX_EXPERTS)
    _check_top_k(cfg, top_k, experts)
    return out | {"activation": cfg.text("hidden_act", default="silu"),
                  "sliding_window": _window(cfg, None),
                  "moe": MoE(experts=experts, top_k=top_k, intermediate=out["intermediate"],
                             router_fp32=True)}


def _qwen2(cfg: _Config) -> dict[str, Any]:
    # Qwen2Attention: q/k/v bias=True, o_proj bias=False (hard-coded, no config key).
    # Qwen2Config: num_key_value_heads defaults to 32 (not to heads); sliding_window applies only
    # with use_sliding_window, and then only to layers >= max_window_layers.
    out = _rope_decoder(cfg, tied=False, positions=32768, kv_default=32, head_dim_default=None)
    window = _window(cfg, 4096) if cfg.flag("use_sliding_window", False) else None
    first = cfg.size("max_window_layers", default=28, low=0, high=_MAX_LAYERS)
    full = tuple(range(min(first, out["layers"])))
    return out | {"activation": cfg.text("hidden_act", default="silu"), "qkv_bias": True,
                  **_sliding(cfg, out["layers"], window, full)}


def _qwen2_moe(cfg: _Config) -> dict[str, Any]:
    # Qwen2MoeConfig: qkv_bias True, 60 experts, top-4, moe width 1408, one shared expert of
    # shared_expert_intermediate_size behind a sigmoid gate (Qwen2MoeSparseMoeBlock).
    out = _rope_decoder(cfg, tied=False, positions=32768, kv_default=16, head_dim_default=None)
    experts = cfg.size("num_experts", default=60, low=0, high=_MAX_EXPERTS)
    moe = None
    if experts:
        top_k = cfg.size("num_experts_per_tok", default=4, high=_MAX_EXPERTS)
        _check_top_k(cfg, top_k, experts)
        moe = MoE(experts=experts, top_k=top_k,
                  intermediate=cfg.size("moe_intermediate_size", default=1408, high=_MAX_WIDTH),
                  shared_experts=1,
                  shared_intermediate=cfg.size("shared_expert_intermediate_size", default=5632,
                                               low=0, high=_MAX_WIDTH),
                  shared_gate=True, shared_first=True,
                  sparse_step=cfg.size("decoder_sparse_step", default=1, high=_MAX_LAYERS),
                  dense_layer_ids=cfg.layer_list("mlp_only_layers", out["layers"]))
    sliding = {"sliding_window": None, "full_attention_layers": ()}
    if cfg.flag("use_sliding_window", False):
        first = cfg.size("max_window_layers", default=28, low=0, high=_MAX_LAYERS)
        # Qwen2MoeConfig: sliding on odd-numbered (1-based) layers below max_window_layers
        full = tuple(i for i in range(out["layers"]) if not ((i + 1) % 2 and i < first))
        sliding = _sliding(cfg, out["layers"], _window(cfg, 4096), full)
    return out | {"activation": cfg.text("hidden_act", default="silu"),
                  "qkv_bias": cfg.flag("qkv_bias", True), "moe": moe, **sliding}


def _gemma(cfg: _Config) -> dict[str, Any]:
    # GemmaConfig: head_dim 256 and num_key_value_heads 16 when absent; ties embeddings; the
    # MLP is GeGLU through ACT2FN[hidden_act]; the embeddings are scaled by sqrt(hidden).
    out = _rope_decoder(cfg, tied=True, positions=8192, kv_default=16, head_dim_default=256)
    bias = cfg.flag("attention_bias", False)
    return out | {"activation": cfg.text("hidden_act", default="gelu_pytorch_tanh"),
                  "qkv_bias": bias, "out_bias": bias, "embedding_scale": True}


def _gemma2(cfg: _Config) -> dict[str, Any]:
    # Gemma2: as Gemma, plus post-attention and post-feedforward norms (4 per layer), the
    # activation key renamed hidden_activation, and a 4096 sliding window on every other layer.
    out = _rope_decoder(cfg, tied=True, positions=8192, kv_default=4, head_dim_default=256)
    bias = cfg.flag("attention_bias", False)
    full = tuple(i for i in range(out["layers"]) if (i + 1) % 2 == 0)
    extra = {k: cfg.data[k] for k in ("attn_logit_softcapping", "final_logit_softcapping",
                                      "query_pre_attn_scalar") if k in cfg.data}
    return out | {"activation": cfg.text("hidden_activation", default="gelu_pytorch_tanh"),
                  "qkv_bias": bias, "out_bias": bias, "embedding_scale": True,
                  "norms_per_layer": 4, "extra": extra,
                  "attn_logit_softcapping": cfg.cap("attn_logit_softcapping", 50.0),
                  "final_logit_softcapping": cfg.cap("final_logit_softcapping", 30.0),
                  **_sliding(cfg, out["layers"], _window(cfg, 4096), full)}


def _phi3(cfg: _Config) -> dict[str, Any]:
    # Phi3Attention: one qkv_proj (no bias); Phi3MLP: one gate_up_proj, then down_proj.
    out = _rope_decoder(cfg, tied=False, positions=4096, kv_default=None, head_dim_default=None)
    return out | {"activation": cfg.text("hidden_act", default="silu"), "fused_qkv": True,
                  "fused_gate_up": True, "rotary_fraction": _rotary_fraction(cfg, 1.0),
                  "resid_dropout": cfg.fraction("resid_pdrop", default=0.0),
                  "embd_dropout": cfg.fraction("embd_pdrop", default=0.0),
                  "sliding_window": _window(cfg, None)}


def _gpt2(cfg: _Config) -> dict[str, Any]:
    # GPT2Config: n_embd / n_layer / n_head / n_positions (hidden_size etc. are aliases), n_inner
    # None -> 4 * n_embd; Conv1D c_attn (fused q, k, v) and every projection carry a bias;
    # LayerNorm; a learned position table wpe of n_positions rows; embeddings tied by default.
    if cfg.flag("add_cross_attention", False):
        raise cfg.fail("add_cross_attention is true (an encoder-decoder GPT-2); gpudoctor sizes "
                       "decoder-only GPT-2 models")
    out = _core(cfg, tied=True, positions=1024, hidden_keys=("n_embd", "hidden_size"),
                layer_keys=("n_layer", "num_hidden_layers"),
                head_keys=("n_head", "num_attention_heads"))
    out["max_positions"] = cfg.size("n_positions", "max_position_embeddings", default=1024,
                                    high=_MAX_POSITIONS)
    if out["hidden"] % out["heads"]:
        raise cfg.fail(f"n_embd {out['hidden']} is not a multiple of n_head {out['heads']} "
                       f"(GPT2Attention requires it)")
    return out | {
        "kv_heads": out["heads"], "head_dim": out["hidden"] // out["heads"],
        "intermediate": cfg.size("n_inner", "intermediate_size", default=4 * out["hidden"],
                                 high=_MAX_WIDTH),
        "gated_mlp": False, "activation": cfg.text("activation_function", default="gelu_new"),
        "norm": "layer", "fused_qkv": True, "qkv_bias": True, "out_bias": True, "mlp_bias": True,
        "learned_positions": out["max_positions"],
        "attn_dropout": cfg.fraction("attn_pdrop", default=0.1),
        "resid_dropout": cfg.fraction("resid_pdrop", default=0.1),
        "embd_dropout": cfg.fraction("embd_pdrop", default=0.1),
    }


def _gpt_neox(cfg: _Config) -> dict[str, Any]:
    # GPTNeoXConfig: attention_bias (default True) on query_key_value and dense; the MLP's two
    # Linears always have a bias; LayerNorm; rotary on rotary_pct (default 0.25) of each head;
    # use_parallel_residual default True; hidden_dropout on both residual branches.
    out = _core(cfg, tied=False, positions=2048)
    if out["hidden"] % out["heads"]:
        raise cfg.fail(f"hidden_size {out['hidden']} is not a multiple of num_attention_heads "
                       f"{out['heads']} (GPTNeoXConfig requires it)")
    bias = cfg.flag("attention_bias", True)
    return out | {
        "kv_heads": out["heads"], "head_dim": out["hidden"] // out["heads"],
        "intermediate": cfg.size("intermediate_size", high=_MAX_WIDTH),
        "gated_mlp": False, "activation": cfg.text("hidden_act", default="gelu"), "norm": "layer",
        "fused_qkv": True, "qkv_bias": bias, "out_bias": bias, "mlp_bias": True,
        "rotary_fraction": _rotary_fraction(cfg, 0.25),
        "parallel_residual": cfg.flag("use_parallel_residual", True),
        "attn_dropout": cfg.fraction("attention_dropout", default=0.0),
        "resid_dropout": cfg.fraction("hidden_dropout", default=0.0),
    }


def _deepseek(cfg: _Config, v3: bool) -> dict[str, Any]:
    # DeepseekV2/V3: MLA attention (q through an optional low-rank q_lora_rank, k and v from one
    # kv_lora_rank latent plus a shared rope key); layers >= first_k_dense_replace are MoE with
    # n_shared_experts always-on experts. moe_layer_freq is ignored, as transformers ignores it.
    # V2's dense and shared MLPs honour mlp_bias; V3's never have a bias. DeepseekV2Config has no
    # num_experts_per_tok default (None), so a V2 file must give it.
    # the config classes' defaults
    d = ({"experts": 256, "top_k": 8, "width": 2048, "shared": 1, "dense": 3, "positions": 4096}
         if v3 else
         {"experts": 64, "top_k": _REQUIRED, "width": 1407, "shared": 2, "dense": 0,
          "positions": 2048})
    out = _core(cfg, tied=False, positions=d["positions"])
    out["intermediate"] = cfg.size("intermediate_size", high=_MAX_WIDTH)
    q_lora = None
    if "q_lora_rank" not in cfg.data:
        q_lora = 1536  # both config classes default to 1536; null in the file means "no q LoRA"
    elif cfg.data["q_lora_rank"] is not None:
        q_lora = cfg.size("q_lora_rank", high=_MAX_WIDTH)
    mla = MLA(kv_lora_rank=cfg.size("kv_lora_rank", default=512, high=_MAX_WIDTH),
              q_lora_rank=q_lora,
              qk_nope_head_dim=cfg.size("qk_nope_head_dim", default=128, low=0, high=_MAX_WIDTH),
              qk_rope_head_dim=cfg.size("qk_rope_head_dim", default=64, low=0, high=_MAX_WIDTH),
              v_head_dim=cfg.size("v_head_dim", default=128, high=_MAX_WIDTH))
    if mla.qk_nope_head_dim + mla.qk_rope_head_dim == 0:
        raise cfg.fail("qk_nope_head_dim + qk_rope_head_dim is 0: queries and keys would be empty")
    experts = cfg.size("n_routed_experts", default=d["experts"], high=_MAX_EXPERTS)
    top_k = cfg.size("num_experts_per_tok", default=d["top_k"], high=_MAX_EXPERTS)
    _check_top_k(cfg, top_k, experts)
    width = cfg.size("moe_intermediate_size", default=d["width"], high=_MAX_WIDTH)
    shared = cfg.size("n_shared_experts", default=d["shared"], low=0, high=_MAX_EXPERTS)
    moe = MoE(experts=experts, top_k=top_k, intermediate=width, shared_experts=shared,
              first_dense_layers=cfg.size("first_k_dense_replace", default=d["dense"], low=0,
                                          high=_MAX_LAYERS),
              shared_intermediate=shared * width, router_fp32=True)
    bias = cfg.flag("attention_bias", False)
    extra = {"model_type": "deepseek_v3" if v3 else "deepseek_v2"}
    quant = cfg.data.get("quantization_config")
    if isinstance(quant, dict) and isinstance(quant.get("quant_method"), str):
        extra["quant_method"] = quant["quant_method"]
    return out | {
        # attention runs on K and V expanded to every head (kv_b_proj); transformers 5 caches the
        # latent before that expansion (memory/inference.py kv_bytes_per_token)
        "kv_heads": out["heads"], "head_dim": mla.qk_nope_head_dim + mla.qk_rope_head_dim,
        "activation": cfg.text("hidden_act", default="silu"), "qkv_bias": bias, "out_bias": bias,
        "mlp_bias": False if v3 else cfg.flag("mlp_bias", False),
        "attn_dropout": cfg.fraction("attention_dropout", default=0.0),
        "mla": mla, "moe": moe, "extra": extra,
    }


def _check_top_k(cfg: _Config, top_k: int, experts: int) -> None:
    if top_k > experts:
        raise cfg.fail(f"num_experts_per_tok {top_k} is more than the {experts} experts")


_BUILDERS = {
    "llama": _llama, "mistral": _mistral, "qwen2": _qwen2, "gemma": _gemma, "gemma2": _gemma2,
    "gpt2": _gpt2, "gpt_neox": _gpt_neox, "mixtral": _mixtral,
    "deepseek_v2": lambda cfg: _deepseek(cfg, v3=False),
    "deepseek_v3": lambda cfg: _deepseek(cfg, v3=True),
    "qwen2_moe": _qwen2_moe, "phi3": _phi3,
}
_FAMILY = {"deepseek_v2": "deepseek", "deepseek_v3": "deepseek"}  # else the model_type itself

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_BUILDERS)


def _default_name(data: Mapping[str, Any], source: str, model_type: str) -> str:
    given = data.get("_name_or_path")
    if isinstance(given, str) and given:
        return given
    if source != "dict":
        folder = Path(source).parent.name
        if folder:
            return folder
    return model_type


def from_hf_config(path_or_dict: str | PathLike[str] | Mapping[str, Any],
                   name: str | None = None) -> ModelSpec:
    """The ModelSpec of a Hugging Face ``config.json`` (a path, its folder, or the parsed dict).

    Supported model types: llama, mistral, qwen2, gemma, gemma2, gpt2, gpt_neox, mixtral,
    deepseek_v2, deepseek_v3, qwen2_moe, phi3 (``model_type``, else ``architectures``). Keys
    absent from the file take the defaults of the transformers 5.17 configuration class, so that
    ``params.count_params`` matches what ``AutoModelForCausalLM.from_config`` builds. Anything
    unusable (a missing size, bad JSON, an unknown model type, kv heads that do not divide the
    heads, a negative or absurd size) is an ``InputError`` with one line naming the key.
    """
    data, label, source = _load(path_or_dict)
    cfg = _Config(data, label)
    model_type = _model_type(cfg)
    fields = _BUILDERS[model_type](cfg)
    extra = {"model_type": model_type} | fields.pop("extra", {})
    return ModelSpec(name=name or _default_name(data, source, model_type),
                     family=_FAMILY.get(model_type, model_type), source=source, extra=extra,
                     **fields)
