"""Peak GPU memory of one training step, per GPU, walked through the step's phases.

Model states (weights, gradients, optimizer states, master weights) follow ``torch.optim`` and the
sharding options; activations come from ``activations.py``. The step is then walked as the
allocator sees it: the forward adds each layer's saved tensors and ends with the logits and their
fp32 copy; the backward starts with the loss's two fp32 grads, then frees each layer's saved
tensors as its gradients appear; the optimizer step adds its temporaries. The peak is the largest
of those moments, and its phase is reported with it.

Measured facts used here (benchmarks/bench_memory.py; benchmarks/BENCHMARKS-memory.md "Evidence
moved from the source: memory"): ``AdamW`` (foreach, the CUDA default) allocates one parameter-sized
temporary in its step (``exp_avg_sq.sqrt()``); SGD with momentum none; ``torch.optim.Adafactor``
about one copy of the largest parameter plus a 32 MiB workspace.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from gpudoctor.core.params import ParamCounts, count_params, norm_params
from gpudoctor.core.spec import ModelSpec
from gpudoctor.memory.activations import (
    DTYPE_BYTES,
    Workload,
    attention_assumption,
    attention_note,
    embedding_saved,
    head_memory,
    layer_memory,
    rope_tables,
)
from gpudoctor.memory.estimate import (
    CUBLAS_WORKSPACE_BYTES,
    CUDA_CONTEXT_BYTES,
    RESERVED_OVER_ALLOCATED,
    MemoryEstimate,
)
from gpudoctor.memory.options import TrainOptions, precision_summary

# bitsandbytes 8-bit optimizers: one byte per state plus an fp32 absmax per 256-element block.
ADAM8BIT_STATE_BYTES = 2 * (1 + 4 / 256)

# DeepSpeed's default reduce bucket (reduce_bucket_size = 5e8 elements) bounds the full-size
# gradients that ZeRO-2 holds before reduce-scattering them.
_ZERO2_BUCKET_ELEMENTS = 500_000_000


@dataclass(frozen=True)
class _Stage:
    """The part of the model one GPU holds, and how many micro-batches are in flight on it."""

    index: int
    layers: tuple[int, ...]
    embedding: bool
    head: bool
    in_flight: float  # micro-batches whose activations are alive at once (pipeline parallelism)


def _stages(spec: ModelSpec, o: TrainOptions) -> list[_Stage]:
    layers = spec.layers
    out = []
    for s in range(o.pp):
        lo, hi = s * layers // o.pp, (s + 1) * layers // o.pp
        if o.pp == 1:
            flight = 1.0
        else:
            # 1F1B: stage s has min(pp - s, micro-batches) forwards in flight before its first
            # backward. Interleaved (Narayanan et al. 2021, Korthikanti et al. 2022 sec. 4.2.3): the
            # first stage keeps 1 + (pp - 1) / (pp * v) times the non-interleaved amount.
            flight = float(min(o.pp - s, o.microbatches))
            if o.virtual_stages > 1:
                flight *= 1 + (o.pp - 1) / (o.pp * o.virtual_stages) if s == 0 else 1.0
        out.append(_Stage(s, tuple(range(lo, hi)), s == 0, s == o.pp - 1, flight))
    return out


def _stage_params(counts: ParamCounts, stage: _Stage) -> int:
    """Parameters held by a stage before tensor parallelism."""
    total = sum(counts.per_layer[i] for i in stage.layers)
    if stage.embedding:
        total += counts.embedding + counts.positions
    if stage.head:
        total += counts.final_norm + counts.lm_head
    return total


def state_bytes_per_param(o: TrainOptions) -> float:
    state = 4 if o.master_weights else DTYPE_BYTES[o.params_dtype]
    return {"adamw": 2 * state, "adamw8bit": ADAM8BIT_STATE_BYTES, "sgd": 0.0,
            "sgd-momentum": float(state), "adafactor": 0.0}[o.optimizer]


def _adafactor_state_bytes(spec: ModelSpec, o: TrainOptions) -> float:
    """Factored second moments: a row and a column vector per matrix (torch.optim.Adafactor)."""
    h, d = spec.hidden, spec.head_dim
    per_layer = ((h + spec.heads * d) * 2 + (h + spec.kv_heads * d) * 2
                 + (h + spec.intermediate) * (3 if spec.gated_mlp else 2) + 2 * h)
    vectors = spec.layers * per_layer + (spec.vocab + h) * (1 if spec.tied_embeddings else 2)
    return vectors * (4 if o.master_weights else DTYPE_BYTES[o.params_dtype])


def estimate_training(spec: ModelSpec, o: TrainOptions) -> MemoryEstimate:
    counts = count_params(spec)
    n_params = spec.exact_params or counts.total
    best: MemoryEstimate | None = None
    for stage in _stages(spec, o):
        est = _estimate_stage(spec, o, counts, n_params, stage)
        if best is None or est.peak_bytes > best.peak_bytes:
            best = est
    assert best is not None
    return best


def _estimate_stage(spec: ModelSpec, o: TrainOptions, counts: ParamCounts, n_params: int,
                    stage: _Stage) -> MemoryEstimate:
    pb = DTYPE_BYTES[o.params_dtype]
    tp, shard = o.tp, o.shard_degree
    stage_params = _stage_params(counts, stage)
    local = stage_params / tp  # norms are replicated; they are a rounding error here
    largest_layer = counts.largest_layer / tp

    # -- model states --
    weights = local * pb / (shard if o.zero_stage >= 3 else 1)
    grads_full = local * pb
    grads = grads_full / (shard if o.zero_stage >= 2 else 1)
    if o.optimizer == "adafactor":
        states = _adafactor_state_bytes(spec, o) * local / max(n_params, 1)
    else:
        states = local * state_bytes_per_param(o)
    states /= shard if o.zero_stage >= 1 else 1
    master = (local * 4 / (shard if o.zero_stage >= 1 else 1)) if o.master_weights else 0.0
    gathered = 0.0
    if o.zero_stage >= 3:
        gathered = 2 * largest_layer * pb  # the unit being computed and the one prefetched
    bucket = min(_ZERO2_BUCKET_ELEMENTS, local) * pb if o.zero_stage == 2 and shard > 1 else 0.0
    persistent = weights + states + master

    # -- activations of one micro-batch on this stage --
    w = Workload(batch=o.batch, seq=o.seq, params_bytes=pb,
                 autocast_bytes=None if o.autocast == "none" else DTYPE_BYTES[o.autocast],
                 attention=o.attention, checkpointing=o.checkpointing, tp=tp, sp=o.sp, cp=o.cp,
                 loss=o.loss)
    layers = [layer_memory(spec, w, i) for i in stage.layers]
    casts_per_layer = [0.0] * len(layers)
    if w.autocast:
        # bf16 copies of each linear weight, cached by autocast and kept for backward; not of the
        # routed experts, which run outside autocast (activations.expert_workload)
        norms = spec.norms_per_layer * norm_params(spec, spec.hidden)
        casts_per_layer = [(counts.per_layer[i] - norms - counts.expert_per_layer[i]) / tp * w.c
                           for i in stage.layers]
    full = o.checkpointing == "full"
    saved_layers = [(lm.checkpoint_input if full else lm.total + cast)
                    for lm, cast in zip(layers, casts_per_layer)]
    recompute = [lm.total + cast for lm, cast in zip(layers, casts_per_layer)]
    rope = rope_tables(spec, w)
    emb_saved = embedding_saved(spec, w) if stage.embedding else 0.0
    fixed = rope + emb_saved
    head = head_memory(spec, w) if stage.head else None
    head_cast = 0.0
    if head and w.autocast:
        head_cast = (counts.lm_head or counts.embedding) / tp * w.c
    head_saved = (head.total + head_cast) if head else 0.0
    micro = fixed + sum(saved_layers) + head_saved
    others = (stage.in_flight - 1) * micro  # earlier micro-batches still waiting for their backward
    persistent_grads = grads if (o.microbatches > 1) else 0.0  # accumulation keeps them between micro-batches
    workspace = 2 * CUBLAS_WORKSPACE_BYTES

    base = persistent + gathered + persistent_grads + workspace + others
    phases: dict[str, float] = {}
    # forward: everything saved, plus the logits and their fp32 copy while the loss runs
    phases["forward"] = base + micro + (head.forward_transient if head else 0.0)
    # backward: walk down, freeing saved tensors while gradients appear
    grad_share = grads / max(stage_params, 1)  # bytes of (possibly sharded) gradient per parameter
    head_params = (counts.final_norm + counts.lm_head) if stage.head else 0
    g_so_far = 0.0 if persistent_grads else head_params * grad_share
    alive_saved = micro
    bwd_peak = base + micro + (head.backward_transient if head else 0.0) + bucket
    alive_saved -= head_saved
    for k in range(len(layers) - 1, -1, -1):
        layer_params = counts.per_layer[stage.layers[k]]
        extra = (recompute[k] if full else 0.0) + layers[k].backward_transient
        g_layer = 0.0 if persistent_grads else layer_params * grad_share
        if o.zero_stage >= 3:
            g_layer += largest_layer * pb  # the unit's full gradient before its reduce-scatter
        bwd_peak = max(bwd_peak, base + alive_saved + extra + g_so_far + g_layer + bucket)
        alive_saved -= saved_layers[k]
        g_so_far += 0.0 if persistent_grads else layer_params * grad_share
    if stage.embedding:
        emb = (counts.embedding + counts.positions) * grad_share
        tied_extra = counts.embedding * pb / tp if spec.tied_embeddings and stage.head else 0.0
        bwd_peak = max(bwd_peak,
                       base + fixed + g_so_far + (0 if persistent_grads else emb) + tied_extra)
    phases["backward"] = bwd_peak
    # optimizer step: all gradients, the states and the step's temporaries
    adafactor_temp = max(counts.embedding, counts.lm_head, counts.largest_layer // 4) / tp * pb + CUBLAS_WORKSPACE_BYTES
    temp = {"adamw": local * (4 if o.master_weights else pb), "adamw8bit": 0.0, "sgd": 0.0,
            "sgd-momentum": 0.0, "adafactor": adafactor_temp}[o.optimizer]
    temp /= shard if o.zero_stage >= 1 and o.optimizer == "adamw" else 1
    phases["optimizer"] = persistent + grads + workspace + temp

    phase = max(phases, key=lambda p: phases[p])
    peak = phases[phase]
    activations = micro + others
    breakdown = {
        # ZeRO-3's gathered unit is freed before the optimizer step (phases["optimizer"] leaves it
        # out)
        "weights": weights + (gathered if phase != "optimizer" else 0.0),
        "gradients": grads if phase == "optimizer" or persistent_grads else 0.0,
        "optimizer_states": states,
        "master_weights": master,
        "activations": 0.0,
        "cuda_workspaces": workspace,
    }
    if phase == "optimizer":
        breakdown["optimizer_step_temporaries"] = temp
    else:
        breakdown["activations"] = activations
    # whatever the phase's walk adds beyond those (gradients so far, the loss's fp32 grads, logits)
    breakdown["transient"] = peak - sum(breakdown.values())
    act_detail = _activation_detail(layers, casts_per_layer, head, head_cast, (rope, emb_saved),
                                    full, o, stage)
    notes = _notes(spec, o, stage)
    return MemoryEstimate(
        mode="train",
        model=spec.name,
        n_params=n_params,
        breakdown={k: round(v) for k, v in breakdown.items() if round(v) != 0
                   or k in ("weights", "activations")},
        peak_bytes=round(peak),
        phase=phase if o.pp == 1 else f"{phase} (pipeline stage {stage.index})",
        reserved_bytes=round(peak * RESERVED_OVER_ALLOCATED),
        context_bytes=CUDA_CONTEXT_BYTES,
        options=asdict(o),
        phases={k: round(v) for k, v in phases.items()},
        notes=notes,
        assumptions=(precision_summary(o), attention_assumption(o.attention)),
        extra={"activations_by_component": {k: round(v) for k, v in act_detail.items()},
               "params_per_gpu": round(local / (shard if o.zero_stage >= 3 else 1))},
    )


def _activation_detail(layers, casts, head, head_cast, fixed, full, o: TrainOptions,
                       stage: _Stage) -> dict[str, float]:
    detail: dict[str, float] = {}
    if full:
        detail["checkpointed_layer_inputs"] = sum(lm.checkpoint_input for lm in layers)
    else:
        for lm in layers:
            for k, v in lm.saved.items():
                detail[k] = detail.get(k, 0.0) + v
        if any(casts):
            detail["autocast_weight_copies"] = sum(casts)
    if head:
        for k, v in head.saved.items():
            detail[k] = detail.get(k, 0.0) + v
        if head_cast:
            detail["autocast_weight_copies"] = detail.get("autocast_weight_copies", 0.0) + head_cast
    rope, emb = fixed
    if rope:
        detail["rope_tables"] = rope  # cos and sin of rotary positions (none for learned ones)
    if emb:
        detail["embedding_dropout_mask"] = emb
    if stage.in_flight > 1:
        detail = {k: v * stage.in_flight for k, v in detail.items()}
    return detail


def _notes(spec: ModelSpec, o: TrainOptions, stage: _Stage) -> tuple[str, ...]:
    notes = []
    if o.checkpointing == "selective" and o.attention != "eager":
        notes.append("selective checkpointing recomputes the attention core, which SDPA/flash "
                     "already does not store: it saves nothing here")
    gemma2 = attention_note(spec, o.attention)
    if gemma2:
        notes.append(gemma2)
    if o.attention == "flash":
        notes.append("flash: counted as SDPA's flash backend (same saved tensors)")
    if o.pp > 1:
        notes.append(f"the peak GPU is pipeline stage {stage.index} "
                     f"({len(stage.layers)} layers, {stage.in_flight:g} micro-batches in flight)")
    return tuple(notes)
