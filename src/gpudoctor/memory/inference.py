"""Peak GPU memory of generation: weights, KV cache and the prefill's scratch.

Two moments can be the peak. The prefill runs the whole prompt through each layer: besides the
prompt's KV cache, the widest live tensors are the MLP's or the experts' (``_prefill_scratch``
says which, per architecture), with four hidden-sized tensors alive around them (the layer input
the model loop still holds, ``inputs_embeds``, the residual, the normalised input). The end of
decoding holds the whole context's KV cache beside the step's widest transient
(``_decode_scratch``: the cache's ``torch.cat`` growth, the routed experts' weight gather on a
GPU, MLA's per-head expansion of the context). ``generate`` computes logits for the last
position only.

Checked against ``torch.cuda.max_memory_allocated`` on six models (three of them held out) and on
the twelve model types of the arch sweep, each phase of the MoE cases measured apart: within 2.1%
(benchmarks/BENCHMARKS-memory.md "Evidence moved from the source: memory"; tests/test_memory_arch.py
pins the sweep).
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace

from gpudoctor.core.params import count_params, norm_params
from gpudoctor.core.spec import ModelSpec
from gpudoctor.memory.activations import (
    DTYPE_BYTES,
    attention_assumption,
    attention_kind,
    attention_note,
    is_sliding_layer,
    sdpa_with_mask,
    shared_width,
)
from gpudoctor.memory.capacity import capacity_of
from gpudoctor.memory.estimate import (
    CUBLAS_WORKSPACE_BYTES,
    CUDA_CONTEXT_BYTES,
    RESERVED_OVER_ALLOCATED,
    MemoryEstimate,
)
from gpudoctor.memory.options import InferOptions

_TP_DEGREES = (1, 2, 4, 8)
_PYTHON_GELU = ("gelu_new", "gelu_fast", "quick_gelu")


def weight_bytes(spec: ModelSpec, o: InferOptions) -> float:
    """Linear weights at the quantized width (with their scales); embeddings, head and norms in
    bf16, as GPTQ/AWQ/fp8 checkpoints ship them."""
    counts = count_params(spec)
    norms = spec.layers * getattr(spec, "norms_per_layer", 2) * norm_params(spec, spec.hidden)
    linear = counts.layers_total - norms
    rest = counts.total - linear
    return (linear * _linear_width(spec, o) + rest * 2.0) / o.tp


def _linear_width(spec: ModelSpec, o: InferOptions) -> float:
    """Bytes per linear weight at the requested storage, scales included."""
    return {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0,
            "int8": 1.0 + 2.0 / spec.hidden,  # an fp16 scale per output channel
            "int4": 0.5 + 2.5 / o.group_size}[o.weights_dtype]  # fp16 scale + 4-bit zero point per group


def kv_bytes_per_token(spec: ModelSpec, o: InferOptions) -> float:
    """Bytes of KV cache one token adds across all layers (on one tensor-parallel rank)."""
    kvb = DTYPE_BYTES[o.kv_dtype]
    if spec.mla is not None:
        # MLA caches its compressed latent and the shared rope key, not per-head K and V: serving
        # engines, and transformers 5 (DeepseekV2Attention / V3: cache.update on the latent, then
        # expand_kv), as the sweep's after-prefill memory shows (4 layers x 576 x 4,096 tokens).
        # The latent is one head, so tensor parallelism does not split it.
        m = spec.mla
        return spec.layers * (m.kv_lora_rank + m.qk_rope_head_dim) * kvb
    kv_heads = max(spec.kv_heads / o.tp, 1.0)
    return spec.layers * 2 * kv_heads * spec.head_dim * kvb


def _cached_tokens(spec: ModelSpec, o: InferOptions, tokens: int, layer: int = 0,
                   prefill: bool = False) -> int:
    """Tokens ``layer``'s cache holds with ``tokens`` of context. A full-attention layer holds them
    all. A sliding-window layer of Hugging Face's DynamicCache (``DynamicSlidingWindowLayer``,
    transformers 5.17; Gemma 2 alternates such layers with full ones) keeps the last window - 1
    tokens as a slice of the K/V it just concatenated: after the prefill that slice is a view of the
    whole prompt's K/V (or of the window plus one chunk), whose storage stays alive until the
    layer's first decode step; from then on it holds min(window, context). A paged cache keeps the
    window only."""
    if is_sliding_layer(spec, layer):
        window = spec.sliding_window
        if prefill and not o.paged_block:
            chunk = o.prefill_chunk
            tokens = min(tokens, window - 1 + chunk) if chunk else tokens
        else:
            tokens = min(tokens, window)
    if o.paged_block:
        tokens = math.ceil(tokens / o.paged_block) * o.paged_block
    return tokens


def _cache_tokens(spec: ModelSpec, o: InferOptions, tokens: int,
                  prefill: bool = False) -> list[int]:
    """``_cached_tokens`` of every layer."""
    return [_cached_tokens(spec, o, tokens, i, prefill) for i in range(spec.layers)]


def _prefill_scratch(spec: ModelSpec, o: InferOptions) -> float:
    """The widest moment of the prefill beside the weights and the cache.

    Read off live-storage traces of ``generate`` (transformers 5.24, CPU, bf16) and checked
    against the H100 sweep (transformers 5.17, benchmarks/results/memory-arch-h100-2026-11-25.json
    and its per-phase rerun memory-arch-gen-phases-h100-2026-11-25.json):

    * a gated MLP with separate gate and up projections: activation out, up out, product (gate out
      is freed once the activation has read it); with a fused gate_up projection (Phi-3, the
      routed experts of transformers 5) both halves are views of one tensor that lives until the
      product exists: four widths;
    * GPT-2's ``gelu_new`` is Python: its input, ``0.5 * x`` and two temporaries: four widths;
    * routed experts: ``_routed_prefill``;
    * MLA attention: ``_mla_prefill``.
    """
    c = 2.0  # activations run in bf16/fp16 whatever the weights' storage
    chunk = o.prefill_chunk or o.prompt
    t = o.batch * min(chunk, o.prompt)
    h = spec.hidden
    dense_widths = 4 if spec.fused_gate_up else (3 if spec.gated_mlp else
                                                 (4 if spec.activation in _PYTHON_GELU else 2))
    dense = dense_widths * c * t * spec.intermediate / o.tp
    if spec.moe is not None:
        mlp = _routed_prefill(spec, o, t)
        if any(not spec.moe.is_moe_layer(i) for i in range(spec.layers)):
            mlp = max(mlp, dense)  # DeepSeek's first dense layers
    else:
        mlp = dense
    # the layer input the model loop holds, inputs_embeds, the residual, the normalised input;
    # through its MLP GPT-2's block also keeps its attention output in a local, and one more
    # hidden-sized tensor was seen alive in its trace (not during the attention)
    hidden = 4 * c * t * h
    mlp_hidden = hidden + (2 * c * t * h if spec.family == "gpt2" else 0.0)
    rot = spec.mla.qk_rope_head_dim if spec.mla else int(spec.head_dim * spec.rotary_fraction)
    rope = 0.0 if spec.learned_positions else 2 * c * t * rot
    attn = 0.0
    if attention_kind(spec, o.attention) == "eager":
        heads = spec.heads / o.tp
        # scores: fp32 softmax + its bf16 copy
        attn = 6 * o.batch * heads * min(chunk, o.prompt) * o.prompt
    widest = max(mlp + mlp_hidden, attn + hidden) + _sliding_mask(spec, o)
    if spec.mla is not None:
        # in the attention the residual is still the layer input: three hidden-sized tensors
        widest = max(widest, _mla_prefill(spec, o, t) + 3 * c * t * h)
    logits = o.batch * spec.vocab / o.tp * (c + 4)  # last position only, and its fp32 copy
    return widest + rope + logits


def _sliding_mask(spec: ModelSpec, o: InferOptions) -> float:
    """The boolean (batch, 1, q, kv) mask transformers builds once per forward for its
    sliding-window layers under SDPA when the keys reach the window (``activations.sdpa_with_mask``;
    generate passes an attention mask, so it is built per sequence), alive through the prefill.
    Full-attention layers and flash attention take none; a serving engine (paged cache) builds
    none."""
    if attention_kind(spec, o.attention) != "sdpa" or o.paged_block:
        return 0.0
    chunk = min(o.prefill_chunk or o.prompt, o.prompt)
    kv = min(o.prompt, spec.sliding_window - 1 + chunk) if (spec.sliding_window and o.prefill_chunk) else o.prompt
    if not any(sdpa_with_mask(spec, kv, i) for i in range(spec.layers)):
        return 0.0
    return float(o.batch * chunk * kv)


def _routed_prefill(spec: ModelSpec, o: InferOptions, t: float) -> float:
    """Routed experts in the prefill (``integrations/moe.py``'s grouped_mm forward), per routed row:
    the gathered input beside the four expert widths, or at the combine the gathered input, the
    expert output, the weighted output and its un-permuted copy. The last two are fp32 where the
    router's top-k weights are (Mixtral, DeepSeek: ``proj_out * sample_weights`` promotes): on
    DeepSeek-V2's shape that combine, not the widths, is the prefill's peak (CPU trace, 5.24).

    The shared expert's output is alive beside the other's scratch: beside the routed experts
    when it runs first (Qwen2-MoE), else the routed output beside the shared expert's three
    widths (DeepSeek: ``experts(...) + shared_experts(residuals)``).
    """
    c = 2.0
    moe, h = spec.moe, spec.hidden
    width = moe.intermediate / o.tp
    weighted = 4.0 if moe.router_fp32 else c
    per_row = max(c * (h + (4 if spec.gated_mlp else 2) * width), 2 * c * h + 2 * weighted * h)
    routed = t * moe.top_k * per_row
    shared = 3 * c * t * shared_width(spec) / o.tp
    if not shared:
        return routed
    out = c * t * h
    return max(routed + out, shared) if moe.shared_first else max(routed, shared + out)


def _mla_prefill(spec: ModelSpec, o: InferOptions, t: float) -> float:
    """DeepSeek's attention over the prompt (``DeepseekV2Attention.forward`` / V3, transformers 5):
    q (its rope half rotated into a new tensor), q re-assembled by ``torch.cat``, the compressed
    latent, ``kv_b_proj``'s per-head output (V is a view of it), K assembled per head, the
    attention output, and the kernel's fp32 log-sum-exp. A CPU trace of the 5.24 code with the
    attention kernel's own scratch left out matches this to 0.1%; on CUDA the kernel's output is
    already in the layout ``.transpose(1, 2).contiguous()`` asks for, so that copy is not counted.
    """
    m = spec.mla
    heads = spec.heads / o.tp
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    per_token = (heads * (2 * qk + m.qk_rope_head_dim)  # q, its rotated rope half, the cat
                 + m.kv_lora_rank + m.qk_rope_head_dim  # kv_a_proj_with_mqa's output
                 + heads * (m.qk_nope_head_dim + m.v_head_dim)  # kv_b_proj's output
                 + heads * qk + heads * m.v_head_dim)  # K, the attention output
    return 2.0 * t * per_token + 4.0 * t * heads


def _decode_scratch(spec: ModelSpec, o: InferOptions, layer_kv: float) -> float:
    """The widest transient of a decode step beside the full cache, in transformers' ``generate``.

    * ``DynamicCache`` grows each layer's K and V with ``torch.cat``: one layer's K (or V) twice;
    * on a GPU ``generate`` switches grouped_mm experts to ``batched_mm`` for decoding
      (``GenerationMixin._optimize_model_for_decode``, transformers 5.x), which gathers each routed
      row's own copy of its expert's weights: ``gate_up_proj[expert_ids]`` and
      ``down_proj[expert_ids]``, both alive at the down projection. This is Mixtral's measured peak
      (batch 8, top-2: 16 rows of 11 M weights, 352 MB, 94% of the decode step's transient);
    * MLA expands the whole context's latent to per-head K and V at every step (``expand_kv``).

    These are at different moments of a layer, so the widest one counts. A serving engine (paged
    cache) does none of them.
    """
    if o.paged_block:
        return 0.0
    growth = layer_kv / 2
    gather = _expert_gather(spec, o)
    expand = 0.0
    if spec.mla is not None:
        m = spec.mla
        per_token = spec.heads / o.tp * (2 * m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
        expand = 2.0 * o.batch * _cached_tokens(spec, o, o.context) * per_token
    return max(growth, gather, expand)


def _expert_gather(spec: ModelSpec, o: InferOptions) -> float:
    """``batched_mm``'s per-row copies of the routed experts' weights in one decode step."""
    if spec.moe is None or o.paged_block:
        return 0.0
    m = spec.moe
    per_expert = ((2 if spec.gated_mlp else 1) + 1) * m.intermediate * spec.hidden / o.tp
    return o.batch * m.top_k * per_expert * _linear_width(spec, o)


def estimate_inference(spec: ModelSpec, o: InferOptions, gpu: str | None = None,
                       past_positions: bool = False) -> MemoryEstimate:
    """``past_positions``: the longest context (with ``gpu``) may go past a rotary model's
    max_position_embeddings (``--allow-long-context``); otherwise it stops at the model's limit."""
    counts = count_params(spec)
    weights = weight_bytes(spec, o)
    per_token = kv_bytes_per_token(spec, o)
    per_layer = per_token / spec.layers
    full_tokens = _cache_tokens(spec, o, o.context)
    kv_prompt = o.batch * sum(_cache_tokens(spec, o, o.prompt, prefill=True)) * per_layer
    kv_full = o.batch * sum(full_tokens) * per_layer
    scratch = _prefill_scratch(spec, o)
    workspace = CUBLAS_WORKSPACE_BYTES
    transient = _decode_scratch(spec, o, o.batch * max(full_tokens) * per_layer)
    decode_scratch = o.batch * spec.vocab / o.tp * 6 + 8 * o.batch * spec.hidden * 2
    phases = {
        "prefill": weights + workspace + kv_prompt + scratch,
        "decode": weights + workspace + kv_full + transient + decode_scratch,
    }
    phase = max(phases, key=lambda p: phases[p])
    peak = phases[phase]
    kv = kv_prompt if phase == "prefill" else kv_full
    breakdown = {"weights": weights, "kv_cache": kv,
                 "activations": scratch if phase == "prefill" else decode_scratch,
                 "cuda_workspaces": workspace}
    breakdown["transient"] = peak - sum(breakdown.values())
    est = MemoryEstimate(
        mode="infer",
        model=spec.name,
        n_params=spec.exact_params or counts.total,
        breakdown={k: round(v) for k, v in breakdown.items() if round(v) != 0 or k != "transient"},
        peak_bytes=round(peak),
        phase=phase,
        reserved_bytes=round(peak * RESERVED_OVER_ALLOCATED),
        context_bytes=CUDA_CONTEXT_BYTES,
        options=asdict(o),
        phases={k: round(v) for k, v in phases.items()},
        notes=_notes(spec, o),
        assumptions=(f"weights {o.weights_dtype}, KV cache {o.kv_dtype}"
                     + (f", KV in paged blocks of {o.paged_block} tokens" if o.paged_block
                        else ", Hugging Face generate's DynamicCache"),
                     attention_assumption(o.attention)),
        extra={"kv_bytes_per_token": round(per_token),
               "kv_cache_full_context_bytes": round(kv_full)},
    )
    if gpu:
        est = replace(est, extra={**est.extra, **_sizing(spec, o, gpu, past_positions)})
    return est


def _fits(spec: ModelSpec, o: InferOptions, capacity: int) -> bool:
    return estimate_inference(spec, o).total_bytes <= capacity


def _sizing(spec: ModelSpec, o: InferOptions, gpu: str, past_positions: bool = False) -> dict:
    """The largest batch at this context, the longest context at this batch (memory's, and no more
    than the model's positions: a learned table has no more rows, and a rotary model past its
    max_position_embeddings is what --allow-long-context asks for), and the GPUs needed."""
    _, capacity = capacity_of(gpu)
    out: dict = {}
    out["max_batch"] = _search(lambda b: _fits(spec, replace(o, batch=b), capacity), 1 << 20)
    max_ctx = _search(lambda n: _fits(spec, replace(o, prompt=max(n - o.new, 1)),
                                      capacity), 1 << 24)
    by_memory = max_ctx if max_ctx > o.new else 0
    limit = spec.max_positions if spec.max_positions and (spec.learned_positions or not past_positions) else 0
    out["max_context"] = min(by_memory, limit) if limit else by_memory
    out["max_context_by_memory"] = by_memory
    out["max_context_limited_by"] = "model" if limit and by_memory > limit else "memory"
    out["model_positions"] = spec.max_positions
    needed = None
    for tp in spec.tp_degrees(_TP_DEGREES):
        if _fits(spec, replace(o, tp=tp), capacity):
            needed = tp
            break
    out["gpus_needed_tp"] = needed  # None: more than 8 GPUs of this kind (pipeline across nodes)
    return out


def _search(ok, upper: int) -> int:
    """The largest n in [1, upper] with ok(n), assuming ok is monotone (0 when even 1 fails)."""
    if not ok(1):
        return 0
    lo, hi = 1, 2
    while hi <= upper and ok(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, upper + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _notes(spec: ModelSpec, o: InferOptions) -> tuple[str, ...]:
    notes = []
    gather = _expert_gather(spec, o)
    if gather:
        notes.append("MoE decode: transformers' generate runs the experts as batched_mm on a GPU, "
                     f"copying each routed row's expert weights ({gather / 2**30:,.2f} GiB at "
                     f"batch {o.batch} x top-{spec.moe.top_k}); it grows with the batch")
    if o.weights_dtype != "bf16":
        notes.append(f"{o.weights_dtype}: linear weights quantized, embeddings/head/norms in bf16")
    sliding = sum(is_sliding_layer(spec, i) for i in range(spec.layers))
    if sliding and o.context > spec.sliding_window:
        which = "every layer" if sliding == spec.layers else f"its {sliding} sliding-window layers of {spec.layers}"
        notes.append(f"sliding window: the cache keeps the last {spec.sliding_window:,} tokens "
                     f"in {which}"
                     + ("" if sliding == spec.layers else "; the others keep the whole context"))
    gemma2 = attention_note(spec, o.attention)
    if gemma2:
        notes.append(gemma2)
    return tuple(notes)
