"""What one forward keeps for backward, layer by layer, as Hugging Face's implementations do it.

Every term below is a tensor that autograd saves (or that stays alive) in ``transformers``' eager
PyTorch code, counted by unique storage. The rules were read off the autograd graph
(``grad_fn._saved_*``) and checked against ``torch.cuda.memory_allocated`` after the forward
(``benchmarks/bench_memory.py``; benchmarks/BENCHMARKS-memory.md "Evidence moved from the source:
memory"): the saved bytes matched to within a few MB per run. Notation: ``T`` tokens of the
micro-batch on this GPU, ``c`` bytes of a matmul output (the autocast dtype, else the parameters'),
``r`` bytes of the residual stream (the parameters' dtype).

Facts the numbers rest on (each one visible in the graph):

* RMSNorm (Llama family) upcasts to fp32 and keeps that copy (4 bytes per element), the
  normalised tensor in the residual dtype, and its output; Gemma's keeps the normalised tensor in
  fp32 too. ``nn.LayerNorm`` keeps its input. Under autocast each consumer linear keeps its own
  bf16 cast of the norm's fp32 output (three for separate q, k, v projections).
* Rotary embeddings keep nothing large (``cos``/``sin`` need no grad). SDPA/flash keeps q, k, v
  (at the KV heads: transformers passes ``enable_gqa``), its output and a small logsumexp; when q,
  k, v are views of one fused projection, that whole output stays alive.
* Eager attention keeps the fp32 softmax (Llama family upcasts; GPT-2 does not) and the probs in
  the compute dtype, with repeated K/V heads; attention dropout adds a 1-byte mask.
* A SwiGLU/GeGLU MLP keeps four tensors of the MLP width (gate out, activation out, up out,
  product); a plain one with a native GELU two; GPT-2's ``gelu_new`` is written in Python and
  keeps five (under autocast three of them in fp32).
* The loss (``ForCausalLMLoss``) upcasts the logits to fp32; ``log_softmax`` keeps its fp32
  output (4 bytes x tokens x vocab). At the start of backward two more fp32 tensors of that size
  exist (the incoming grad and the grad of the input): with a large vocabulary that is the peak.
* Under autocast with fp32 parameters, the bf16 casts of every linear weight are kept for backward,
  but for the routed experts: transformers 5 runs them through ``grouped_mm`` (its default experts
  implementation), which autocast does not cover, so they compute in the parameters' dtype (fp32
  activations) and make no bf16 copy of their weights; the router casts the norm's output once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpudoctor.core.spec import ModelSpec

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}

# Measured, not derived: a fused-qkv model with rotary embeddings (GPT-NeoX, Phi-3) keeps, under
# SDPA, one more K/V-sized copy than q, k, the fused qkv output and the attention output
# (memory_allocated after the forward, pythia-1b shape, H200, transformers 5.17; the same on the
# fake-tensor dry run for Phi-3, transformers 5.24).
_FUSED_ATTENTION_CORE_EXTRA = 1.0


@dataclass(frozen=True)
class Workload:
    """One micro-batch on one GPU, with the precision and the parallel split that shape it."""

    batch: int
    seq: int
    params_bytes: int = 2
    autocast_bytes: int | None = None  # None: no autocast
    attention: str = "sdpa"  # sdpa | flash | eager
    checkpointing: str = "none"  # none | selective | full
    tp: int = 1
    sp: bool = False
    cp: int = 1
    loss: str = "standard"  # standard | chunked (fused linear + cross-entropy, no full logits)

    @property
    def tokens(self) -> int:
        return self.batch * max(self.seq // self.cp, 1)

    @property
    def local_seq(self) -> int:
        return max(self.seq // self.cp, 1)

    @property
    def c(self) -> int:
        return self.autocast_bytes if self.autocast_bytes is not None else self.params_bytes

    @property
    def r(self) -> int:
        return self.params_bytes

    @property
    def autocast(self) -> bool:
        return self.autocast_bytes is not None and self.autocast_bytes != self.params_bytes


@dataclass(frozen=True)
class LayerMemory:
    """One decoder layer: what it keeps for backward, and what its backward briefly adds."""

    saved: dict[str, float] = field(default_factory=dict)  # component -> bytes
    backward_transient: float = 0.0
    checkpoint_input: float = 0.0  # bytes a full-recompute checkpoint keeps (the layer input)

    @property
    def total(self) -> float:
        return sum(self.saved.values())


@dataclass(frozen=True)
class HeadMemory:
    """Final norm, LM head and loss."""

    saved: dict[str, float]
    forward_transient: float  # logits and their fp32 copy while the loss runs
    backward_transient: float  # the two fp32 grads at the start of backward

    @property
    def total(self) -> float:
        return sum(self.saved.values())


def tp_local(n: int, tp: int) -> float:
    """Heads or widths split over tensor-parallel ranks; fewer KV heads than ranks are
    replicated."""
    return max(n / tp, 1.0) if n >= 1 else 0.0


def _norm(spec: ModelSpec, w: Workload, th: float, consumers: int) -> float:
    """Bytes one norm keeps: its saved inputs and its output as the consumers keep it."""
    out = consumers * w.c * th if w.autocast else w.r * th
    if spec.norm == "layer":
        # native_layer_norm keeps its input (and a mean/rstd per token); under autocast it runs
        # in fp32, so the input is the fp32 residual itself.
        return w.r * th + out
    if spec.family in ("gemma", "gemma2"):
        return 4 * th + 4 * th + out  # x.float() and the fp32 normalised tensor
    if w.r == 4:
        return 4 * th + 4 * th + out  # fp32 in, fp32 normalised (the .to() calls are no-ops)
    return 4 * th + w.r * th + out


def _mlp(spec: ModelSpec, w: Workload, tokens: float, width: float) -> float:
    ti = tokens * width
    if spec.gated_mlp:
        return 4 * w.c * ti
    if spec.activation in ("gelu_new", "gelu_fast", "quick_gelu"):
        # Python-level GELU: pow keeps x, tanh keeps its output, 0.5*x and 1+tanh are kept by the
        # final mul, and the product is kept by the projection. Under autocast pow runs in fp32.
        return (3 * 4 + 2 * w.c) * ti if w.autocast else 5 * w.c * ti
    return 2 * w.c * ti


def layer_memory(spec: ModelSpec, w: Workload, layer: int = 0) -> LayerMemory:
    b, s, tp = w.batch, w.local_seq, w.tp
    tokens = float(w.tokens)
    th = tokens * spec.hidden
    th_rep = th / tp if w.sp else th  # replicated parts shrink only with sequence parallelism
    heads, kv = tp_local(spec.heads, tp), tp_local(spec.kv_heads, tp)
    d = spec.head_dim
    saved: dict[str, float] = {}

    # -- norms (pre-attention, pre-MLP) --
    attn_consumers = 1 if spec.fused_qkv else (2 if spec.mla else 3)
    moe_layer = spec.moe is not None and spec.moe.is_moe_layer(layer)
    mlp_consumers = 1 if (not spec.gated_mlp) else 2
    if moe_layer:
        mlp_consumers = moe_norm_consumers(spec)
    norms = _norm(spec, w, th_rep, attn_consumers) + _norm(spec, w, th_rep, mlp_consumers)
    if spec.parallel_residual and spec.norm == "layer":
        norms -= w.r * th_rep  # both norms read the same block input
    if spec.norms_per_layer == 4:
        # Gemma 2's post-attention and post-feedforward norms: x.float() and the fp32 normalised
        # tensor each (8 bytes an element in every precision); their output goes into the residual
        # add, which keeps nothing
        norms += 2 * 8 * th_rep
    saved["norms"] = norms

    # -- attention --
    c = w.c
    if spec.mla is not None:
        m = spec.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        attn = 0.0
        if m.q_lora_rank:
            attn += c * tokens * m.q_lora_rank + _norm(spec, w, tokens * m.q_lora_rank, 1)
        attn += c * tokens * (m.kv_lora_rank + m.qk_rope_head_dim)  # kv_a output
        attn += _norm(spec, w, tokens * m.kv_lora_rank, 1)
        attn += c * tokens * heads * (m.qk_nope_head_dim + m.v_head_dim)  # kv_b output (v is a view)
        attn += 2 * c * tokens * heads * qk  # q and k after the rope concat
        attn += c * tokens * heads * m.v_head_dim  # attention output
        if w.attention == "eager":
            attn += (4 + c) * b * heads * s * s
        saved["attention"] = attn
    elif attention_kind(spec, w.attention) == "eager":
        if spec.fused_qkv:
            qkv = 3 * c * tokens * heads * d  # q, k, v copied for the batched matmuls
        else:
            qkv = c * tokens * heads * d * 3  # q, and K/V repeated to all query heads
        out = c * tokens * heads * d  # transpose(1, 2).contiguous() before the output projection
        saved["attention"] = qkv + out
        probs = b * heads * s * s
        dropout = spec.attn_dropout > 0
        if spec.family == "gpt2":
            scores = c * probs + ((1 + c) * probs if dropout else 0.0)
        else:
            # softmax(dtype=float32) keeps its fp32 output; .to(dtype) is kept by the PV matmul
            # (a no-op in fp32); dropout adds its mask and its output replaces the probs.
            scores = 4 * probs + (0 if c == 4 else c * probs) + (1 * probs if dropout else 0.0)
        if spec.attn_logit_softcapping:
            scores += c * probs  # Gemma 2: tanh(scores / cap) keeps its output for backward
        saved["attention_scores"] = scores
    else:
        if spec.fused_qkv:
            # the fused qkv output (v stays a view of it) and the attention output
            core = c * tokens * (heads + 2 * kv) * d + c * tokens * heads * d
            if not spec.learned_positions:
                # GPT-NeoX and Phi-3 rotate with a cat([rotated, passed]) (partial rotary): q and
                # k are new tensors that SDPA keeps
                core += c * tokens * (heads + kv) * d
            core += _FUSED_ATTENTION_CORE_EXTRA * c * tokens * kv * d if not spec.learned_positions else 0.0
        elif sdpa_with_mask(spec, w.local_seq, layer):
            # A sliding window makes transformers build an explicit (b, 1, s, s) mask: SDPA then
            # gets K/V repeated to every query head (no enable_gqa), and the memory-efficient
            # backend keeps its own copy of the mask in every layer.
            core = 4 * c * tokens * heads * d + c * b * s * s
        else:
            core = 2 * c * tokens * heads * d + 2 * c * tokens * kv * d
        core += 4 * b * heads * s  # logsumexp
        saved["attention"] = core

    # -- MLP --
    if moe_layer:
        moe = spec.moe
        routed = tokens * moe.top_k
        experts = expert_workload(w)
        mlp = _mlp(spec, experts, routed, moe.intermediate / tp)
        # gathered inputs, expert outputs (kept by the weighting)
        mlp += 2 * experts.c * routed * spec.hidden
        mlp += 4 * tokens * moe.experts * 2 + 8 * routed * 2  # router logits/probs, indices
        if spec.family == "deepseek" and not w.autocast and w.r != 4:
            # DeepSeek's router is fp32: F.linear(x.type(float32), weight) keeps the fp32 copy of
            # its input (transformers 5.17 to 5.24; under autocast the linear keeps a bf16 cast,
            # counted as the router's consumer cast; in fp32 the .type is a no-op)
            mlp += 4 * tokens * spec.hidden
        shared = shared_width(spec)
        if shared:
            mlp += _mlp(spec, w, tokens, shared / tp)
        if moe.shared_gate:
            # Qwen2-MoE: sigmoid(shared_expert_gate(x)) * shared output keeps both factors
            mlp += c * tokens * (spec.hidden + 1)
        saved["mlp"] = mlp
    else:
        saved["mlp"] = _mlp(spec, w, tokens, spec.intermediate / tp)

    # -- dropout masks on the residual branches (1 byte per element) --
    if spec.resid_dropout > 0:
        saved["dropout_masks"] = 2 * th_rep

    if w.checkpointing == "selective":
        saved.pop("attention_scores", None)  # Megatron-style: recompute only the attention core

    if moe_layer:
        width = spec.moe.intermediate * spec.moe.top_k / tp
        backward_transient = 3 * expert_workload(w).c * tokens * width + 2 * c * th
    else:
        backward_transient = 3 * c * tokens * spec.intermediate / tp + 2 * c * th
    if attention_kind(spec, w.attention) == "eager":
        backward_transient = max(backward_transient, (2 * c + 4) * b * heads * s * s)
    return LayerMemory(saved=saved, backward_transient=backward_transient,
                       checkpoint_input=w.r * th_rep)


def attention_kind(spec: ModelSpec, attention: str) -> str:
    """The attention priced: the one asked for (``--attention``), for every architecture. Gemma 2 is
    no exception: transformers 5.17 to 5.20 run it under SDPA when ``attn_implementation="sdpa"`` is
    asked (``Gemma2PreTrainedModel._supports_sdpa = True``; the SDPA path drops the attention
    soft-capping, so no s x s scores are kept); 5.21 and later refuse SDPA for it (a ValueError) and
    load eager by default, which ``--attention eager`` prices (``attention_note`` says so)."""
    return attention


def attention_assumption(attention: str) -> str:
    """The attention an estimate assumed, in one line (printed with every estimate)."""
    what = {"sdpa": "torch SDPA (flash / memory-efficient kernels: no s x s scores kept)",
            "flash": "flash attention (counted as SDPA's flash backend)",
            "eager": "eager (the s x s attention scores materialized)"}[attention]
    return f"attention: {what}; --attention sdpa, flash or eager to change it"


def attention_note(spec: ModelSpec, attention: str) -> str | None:
    """Gemma 2: which transformers versions run the attention asked for."""
    if spec.family != "gemma2" or not spec.attn_logit_softcapping or attention != "sdpa":
        return None
    return ("Gemma 2 under SDPA, as transformers 5.17 to 5.20 run it with "
            "attn_implementation=\"sdpa\" (attention soft-capping dropped); 5.21 and later refuse "
            "SDPA for Gemma 2 and load eager attention by default: price that with "
            "--attention eager")


def expert_workload(w: Workload) -> Workload:
    """The workload as the routed experts see it: transformers 5's ``grouped_mm`` experts are not
    covered by autocast (``integrations/moe.py`` casts the input to the weights' dtype instead), so
    under autocast over fp32 weights they compute in fp32. Measured on CPU with the CUDA autocast
    policy (``dryrun._cuda_kernels``, transformers 5.24, Mixtral-shaped 2 x 1024): the saved
    tensors and the backward peak within 0.1% with this, 10% and 8% low with bf16 experts."""
    return replace(w, autocast_bytes=None) if w.autocast else w


def moe_norm_consumers(spec: ModelSpec) -> int:
    """The consumers of an MoE layer's pre-MLP norm that each keep their own autocast cast of its
    output: the router, and the shared experts' projections (gate and up, or one fc), and their
    gate. The routed experts gather the norm's output without autocast (``expert_workload``)."""
    return 1 + ((2 if spec.gated_mlp else 1) if shared_width(spec) else 0) + (
        1 if spec.moe.shared_gate else 0)


def shared_width(spec: ModelSpec) -> int:
    """The always-on MLP's width (DeepSeek's shared experts, Qwen2-MoE's shared expert), as
    ``params.moe_block_params`` counts it; 0: none."""
    moe = spec.moe
    return moe.shared_intermediate if moe.shared_intermediate is not None else moe.shared_experts * moe.intermediate


def sdpa_with_mask(spec: ModelSpec, seq: int, layer: int | None = None) -> bool:
    """Whether transformers hands SDPA an explicit mask for plain causal training (no padding):
    on a sliding-window layer only when the sequence reaches the window (``masking_utils.
    _ignore_causal_mask_sdpa``: ``kv_length >= local_attention_size``, transformers 5.17 to 5.24);
    a shorter one, and a full-attention layer (Gemma 2's every other one), runs causal with GQA like
    a model without a window."""
    if layer is not None and not is_sliding_layer(spec, layer):
        return False
    return bool(spec.sliding_window) and seq >= spec.sliding_window


def is_sliding_layer(spec: ModelSpec, layer: int) -> bool:
    """Whether ``layer`` attends within ``sliding_window`` (not one of
    ``full_attention_layers``)."""
    return bool(spec.sliding_window) and layer not in spec.full_attention_layers


def head_memory(spec: ModelSpec, w: Workload) -> HeadMemory:
    tokens = float(w.tokens)
    th = tokens * spec.hidden
    vocab = spec.vocab / w.tp  # vocab-parallel head and loss under tensor parallelism
    tv = tokens * vocab
    saved = {"final_norm": _norm(spec, w, th / w.tp if w.sp else th, 1)}
    if w.loss == "chunked":
        # fused linear + cross-entropy (e.g. Liger): logits exist one chunk at a time and the grad
        # of the head input is computed in the forward; keep that grad (c x T x h) only.
        saved["loss"] = w.c * th
        return HeadMemory(saved, forward_transient=(w.c + 4) * tv / 8, backward_transient=0.0)
    saved["loss"] = 4 * tv  # log_softmax's fp32 output
    if spec.final_logit_softcapping:
        # Gemma 2: logits = tanh(logits / cap) * cap keeps the tanh output (in the logits' dtype)
        # for backward; the capped logits replace the raw ones, so the transient is unchanged
        saved["logit_softcap"] = w.c * tv
    logits = w.c * tv + (4 * tv if w.c != 4 else 0.0)  # logits and their fp32 copy
    return HeadMemory(saved, forward_transient=logits, backward_transient=8 * tv)


def embedding_saved(spec: ModelSpec, w: Workload) -> float:
    """The embedding keeps only the token ids; GPT-2's embedding dropout keeps a mask."""
    th = float(w.tokens) * spec.hidden
    return (th / w.tp if w.sp else th) if spec.embd_dropout > 0 else 0.0


def rope_tables(spec: ModelSpec, w: Workload) -> float:
    """cos and sin, shared by every layer, alive through the forward (and kept for backward)."""
    if spec.learned_positions:
        return 0.0
    rot = spec.mla.qk_rope_head_dim if spec.mla else int(spec.head_dim * spec.rotary_fraction)
    return 2.0 * w.local_seq * rot * (4 if w.autocast else w.r)
