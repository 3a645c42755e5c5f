"""Does it fit on ``--gpu``, and if not, the cheapest changes that make it fit.

The changes are tried in the order an experienced engineer tries them on a CUDA out-of-memory
error: precision first (bf16 halves weights and activations), then a smaller
micro-batch with accumulation (same effective batch, no accuracy cost), activation checkpointing
(~33% more compute), a fused/chunked loss where the vocabulary makes the logits dominate, an 8-bit
optimizer, ZeRO/FSDP sharding, and tensor parallelism. Each is priced by re-running the estimate,
so every suggestion carries its own new peak; when no single change is enough, they are combined
in that order until one combination fits.
"""

from __future__ import annotations

from dataclasses import replace

from gpudoctor.core.spec import ModelSpec
from gpudoctor.errors import InputError
from gpudoctor.memory.activations import DTYPE_BYTES
from gpudoctor.memory.capacity import capacity_of, capacity_source
from gpudoctor.memory.estimate import MemoryEstimate, Suggestion
from gpudoctor.memory.options import InferOptions, TrainOptions


def with_fit(spec: ModelSpec, options, est: MemoryEstimate, gpu: str | None,
             suggest: bool) -> MemoryEstimate:
    if not gpu:
        return est
    name, capacity = capacity_of(gpu)
    est = replace(est, gpu=name, capacity_bytes=capacity, capacity_source=capacity_source(gpu))
    if est.fits or not suggest:
        return est
    if isinstance(options, TrainOptions):
        found = _train_suggestions(spec, options, capacity, est.peak_bytes)
    else:
        found = _infer_suggestions(spec, options, capacity, gpu, est.peak_bytes)
    return replace(est, suggestions=tuple(found))


def _total(est: MemoryEstimate) -> int:
    return est.total_bytes


def _train_candidates(spec: ModelSpec, o: TrainOptions) -> list[tuple[str, dict, str]]:
    """(change, new options, cost) in the order they are worth trying."""
    out: list[tuple[str, dict, str]] = []
    if o.params_dtype == "fp32" and o.autocast == "none":
        out.append(("Train in bf16: torch.autocast(dtype=torch.bfloat16) over fp32 weights",
                    {"autocast": "bf16"}, "none on Ampere or newer; fp16 needs a GradScaler"))
    if o.params_dtype == "fp32":
        out.append((("Keep the weights in bf16 (model.to(torch.bfloat16)) with fp32 master weights "
                     "in the optimizer"),
                    {"params_dtype": "bf16", "autocast": "none", "master_weights": True},
                    "an fp32 master copy keeps small updates from rounding away"))
    b = o.batch
    while b > 1:
        b //= 2
        acc = o.microbatches * (o.batch // b)
        out.append((f"Micro-batch {b} with {acc} gradient-accumulation steps (same effective batch)",
                    {"batch": b, "microbatches": acc},
                    "more, smaller steps: slightly lower throughput"))
    if o.checkpointing != "full":
        out.append(("Activation checkpointing per layer: model.gradient_checkpointing_enable()",
                    {"checkpointing": "full"}, "about 33% more compute (one extra forward)"))
    if o.loss == "standard" and spec.vocab >= 32_000:
        change = ("A fused, chunked cross-entropy (e.g. Liger's fused linear cross-entropy) so the "
                  "fp32 logits are never whole")
        out.append((change, {"loss": "chunked"}, "a dependency; same numerics"))
    if o.optimizer in ("adamw",):
        out.append(("8-bit AdamW (bitsandbytes.optim.AdamW8bit)", {"optimizer": "adamw8bit"},
                    "small accuracy risk; validate on your task"))
    if o.dp > 1:
        for stage in (1, 2, 3):
            if o.zero_stage < stage:
                label = {1: "ZeRO-1: shard optimizer states", 2: "ZeRO-2: shard gradients too",
                         3: "ZeRO-3 / FSDP: shard the weights too"}[stage]
                out.append((f"{label} over the {o.dp} data-parallel ranks",
                            {"zero": stage, "fsdp": False},
                            "more communication per step" if stage < 3
                            else "an all-gather per layer"))
    for tp in spec.tp_degrees((2, 4, 8)):
        if tp > o.tp:
            out.append((f"Tensor parallelism over {tp} GPUs (with sequence parallelism)",
                        {"tp": tp, "sp": True}, "needs NVLink: an all-reduce per layer"))
    return out


def _train_suggestions(spec: ModelSpec, o: TrainOptions, capacity: int,
                       peak: int) -> list[Suggestion]:
    """Changes that lower ``peak`` (the current one), those that fit first; a change that does not
    lower the peak is no answer, whatever else it does."""
    from gpudoctor.memory.training import estimate_training

    def price(delta: dict) -> MemoryEstimate | None:
        try:
            return estimate_training(spec, replace(o, **delta))
        except InputError:  # e.g. a TP degree the heads do not allow
            return None

    singles: list[tuple[int, str, dict, str, MemoryEstimate]] = []
    for rank, (change, delta, cost) in enumerate(_train_candidates(spec, o)):
        new = price(delta)
        if new is not None:
            singles.append((rank, change, delta, cost, new))
    # all of them may enter a combination (one that lowers another phase's peak can make room)
    same_gpus = [item for item in singles if "tp" not in item[2]]
    singles = [item for item in singles if item[4].peak_bytes < peak]
    found = [Suggestion(change, delta, new.peak_bytes, _total(new) <= capacity, cost, new.phase)
             for _, change, delta, cost, new in singles]
    # Changes that need no more GPUs come first; when none of them is enough alone, the cheapest
    # combination of them comes before anything that needs more GPUs (TP).
    more_gpus = {id(s) for s, item in zip(found, singles) if "tp" in item[2]}
    local = [s for s in found if id(s) not in more_gpus]
    if not any(s.fits for s in local):
        combo = _cheapest_combination(same_gpus, capacity, price)
        if combo is not None:
            local.insert(0, combo)
    ordered = [s for s in local if s.fits] + [s for s in found if id(s) in more_gpus and s.fits]
    ordered += sorted((s for s in found if not s.fits), key=lambda s: s.peak_bytes)
    return ordered[:8]


def _cheapest_combination(singles, capacity: int, price) -> Suggestion | None:
    """Two, then three changes together, cheapest first (by their order of preference); changes
    to the same option (two micro-batch sizes) are not combined."""
    from itertools import combinations

    for size in (2, 3):
        for combo in sorted(combinations(singles, size), key=lambda c: sum(item[0] for item in c)):
            keys = [k for item in combo for k in item[2]]
            if len(keys) != len(set(keys)):
                continue
            delta = {k: v for item in combo for k, v in item[2].items()}
            new = price(delta)
            if new is not None and _total(new) <= capacity:
                change = " + ".join(item[1].split(":")[0].split(" (")[0] for item in combo)
                return Suggestion(change, delta, new.peak_bytes, True,
                                  "; ".join(item[3] for item in combo), new.phase)
    return None


def _infer_suggestions(spec: ModelSpec, o: InferOptions, capacity: int, gpu: str,
                       peak: int) -> list[Suggestion]:
    from gpudoctor.memory.inference import estimate_inference

    cands: list[tuple[str, dict, str]] = []
    if o.kv_dtype in ("bf16", "fp16"):
        cands.append(("fp8 KV cache", {"kv_dtype": "fp8"}, "small accuracy risk"))
    for dt in ("fp8", "int8", "int4"):
        # only a narrower weight than the current one (int8 after fp8 is no smaller: it adds scales)
        if DTYPE_BYTES[dt] < DTYPE_BYTES[o.weights_dtype]:
            cands.append((f"{dt} weights", {"weights_dtype": dt},
                          "accuracy risk; validate on your task"))
    if o.batch > 1:
        cands.append((f"Batch {max(o.batch // 2, 1)}", {"batch": max(o.batch // 2, 1)},
                      "lower throughput"))
    for tp in (2, 4, 8):
        if tp > o.tp and spec.heads % tp == 0:
            cands.append((f"Tensor parallelism over {tp} GPUs", {"tp": tp}, "needs NVLink"))
    out = []
    for change, delta, cost in cands:
        try:
            new = estimate_inference(spec, replace(o, **delta), gpu)
        except InputError:
            continue
        if new.peak_bytes >= peak:
            continue  # no lower: no answer
        out.append(Suggestion(change, delta, new.peak_bytes, _total(new) <= capacity,
                              cost, new.phase))
    fitting = [s for s in out if s.fits]
    return (fitting + sorted((s for s in out if not s.fits), key=lambda s: s.peak_bytes))[:8]

