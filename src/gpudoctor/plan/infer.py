"""Serving sizing: per tensor-parallel degree, how many sequences fit, how fast decode and prefill
run, and the load (QPS) at which the decode batch or the prefill queue saturates.

The model is seed 004's scenario 3 in numbers. Decode is memory-bound: every decode step reads the
weights once and the whole batch's KV cache, so per-user speed falls as the running batch grows.
Prefill is compute-bound: 2 FLOPs per parameter per prompt token. With continuous batching, the
number of sequences in flight follows Little's law, ``C = QPS x (prefill + new x decode_step(C))``;
the load saturates when that ``C`` no longer fits the KV budget, or when prefill alone would keep
the GPUs busy all the time. Past either point requests queue and time-to-first-token explodes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from gpudoctor.errors import InputError
from gpudoctor.memory import load_spec
from gpudoctor.memory.estimate import CUDA_CONTEXT_BYTES
from gpudoctor.memory.inference import kv_bytes_per_token, weight_bytes
from gpudoctor.memory.options import InferOptions, validate_infer
from gpudoctor.memory.params import active_params, count_params

# The share of the datasheet HBM bandwidth a decode step reaches (weights and KV streamed once): measured,
# 0.665-0.696 (median 0.68) over llama-3.1-8b's decode steps of 1-64 sequences of 1024-4096 tokens, one
# H100 SXM, a CUDA-graphed step of cuBLAS GEMVs and batched-matmul attention, torch 2.11, 2026-11-24
# (benchmarks/bench_plan_infer.py; held out there: mistral-7b, qwen2.5-7b, llama-3.2-3b). Other cards
# are assumed to reach the same share. The share of the dense bf16/fp8 peak a prefill reaches: assumed
# 0.6 (the same run measured 0.51-0.66). The share of GPU memory a serving engine takes: vLLM's default
# gpu_memory_utilization, 0.9.
DECODE_HBM_EFFICIENCY = 0.68
PREFILL_EFFICIENCY = 0.6
MEMORY_UTILIZATION = 0.9
# A queue near saturation has unbounded waiting time (M/M/1: wait ~ rho / (1 - rho)); a plan keeps
# the load at or below this share of the saturation QPS.
HEADROOM = 0.8
_TP_DEGREES = (1, 2, 4, 8)


@dataclass(frozen=True)
class ServingOption:
    tp: int
    fits: bool
    weights_bytes_per_gpu: float
    kv_budget_bytes_per_gpu: float
    max_sequences: int  # concurrent sequences at full context that the KV budget holds
    prefill_s: float  # one request's prompt
    decode_step_s: float  # at the operating point
    tokens_per_s_per_user: float
    concurrency: float  # sequences in flight at the asked QPS (Little's law)
    saturation_qps: float  # the load at which the KV budget or the prefill queue runs out
    limited_by: str  # "kv-cache" or "prefill"
    meets_qps: bool

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ServingPlan:
    model: str
    gpu: str
    qps: float
    prompt: int
    new: int
    options: list[ServingOption] = field(default_factory=list)
    choice: int | None = None  # the smallest TP that meets the QPS
    explanation: str = ""
    assumptions: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"model": self.model, "gpu": self.gpu, "qps": self.qps, "prompt": self.prompt, "new": self.new,
                "options": [o.to_dict() for o in self.options], "choice_tp": self.choice,
                "explanation": self.explanation, "assumptions": list(self.assumptions)}


def plan_serving(source: str, *, gpu: str, qps: float, prompt: int, new: int, weights_dtype: str = "bf16",
                 kv_dtype: str = "bf16", tps: tuple[int, ...] = _TP_DEGREES) -> ServingPlan:
    from gpudoctor.hardware.specs import require_spec

    hw = require_spec(gpu)
    if not (qps > 0) or qps > 1e6:
        raise InputError(f"--qps must be a positive number of requests per second, got {qps!r}")
    spec = load_spec(source)
    efficiency = (f"decode reaches {DECODE_HBM_EFFICIENCY:.0%} of HBM bandwidth (measured on an H100); prefill "
                  f"{PREFILL_EFFICIENCY:.0%} "
                  f"of the dense peak; the engine uses {MEMORY_UTILIZATION:.0%} of GPU memory (vLLM's default)")
    plan = ServingPlan(spec.name, hw.name, qps, prompt, new, assumptions=(
        efficiency,
        "one request's KV cache is held for prompt + new tokens; TP all-reduces are not priced",
        f"a plan keeps the load under {HEADROOM:.0%} of its saturation QPS (queueing grows without bound near it)"))
    flops_dtype = "fp8" if weights_dtype == "fp8" and "fp8" in hw.matrix_flops else "bf16"
    peak = hw.matrix_flops[flops_dtype]
    n_active = active_params(spec) if spec.moe else count_params(spec).total
    for tp in tps:
        if spec.heads % tp or (spec.kv_heads % tp and tp % spec.kv_heads):
            continue
        o = validate_infer(spec, InferOptions(batch=1, prompt=prompt, new=new, weights_dtype=weights_dtype,
                                              kv_dtype=kv_dtype, tp=tp))
        plan.options.append(_option(spec, o, hw, peak, n_active, qps, tp))
    fitting = [o for o in plan.options if o.meets_qps]
    if fitting:
        best = fitting[0]
        plan.choice = best.tp
        plan.explanation = (
            f"TP={best.tp} serves {qps:g} QPS: {best.concurrency:.0f} sequences in flight of the "
            f"{best.max_sequences} the KV budget holds, decode at {best.tokens_per_s_per_user:.0f} tok/s per user, "
            f"saturating near {best.saturation_qps:.1f} QPS ({best.limited_by}).")
    elif plan.options:
        top = max(plan.options, key=lambda o: o.saturation_qps)
        plan.explanation = (f"No TP degree up to {max(o.tp for o in plan.options)} serves {qps:g} QPS on one replica: "
                            f"the best, TP={top.tp}, saturates near {top.saturation_qps:.1f} QPS ({top.limited_by}); "
                            f"add replicas (data parallel) or cut context / quantize KV.")
    else:
        raise InputError(f"no TP degree in {tps} divides the model's {spec.heads} heads")
    return plan


def streamed_weight_bytes(spec, o: InferOptions) -> float:
    """Weight bytes one decode step reads on one GPU: every weight but the input embedding table, of
    which a step gathers only its tokens' rows (a tied table is read whole, as the LM head)."""
    weights = weight_bytes(spec, o)
    if spec.tied_embeddings:
        return weights
    return weights - count_params(spec).embedding * 2.0 / o.tp  # embeddings stay bf16 (weight_bytes)


def decode_step_seconds(weights: float, per_token: float, sequences: float, context: float, hbm: float) -> float:
    """One decode step of ``sequences`` sequences ``context`` tokens long: the weights and their KV
    cache read once, at DECODE_HBM_EFFICIENCY of ``hbm`` bytes/s."""
    return (weights + sequences * context * per_token) / (hbm * DECODE_HBM_EFFICIENCY)


def prefill_seconds(n_active: int, tokens: int, tp: int, peak: float) -> float:
    """One prompt of ``tokens``: 2 FLOPs per active parameter per token at PREFILL_EFFICIENCY of ``peak``."""
    return 2 * n_active * tokens / (tp * peak * PREFILL_EFFICIENCY)


def _option(spec, o: InferOptions, hw, peak: float, n_active: int, qps: float, tp: int) -> ServingOption:
    capacity = hw.memory_bytes * MEMORY_UTILIZATION - CUDA_CONTEXT_BYTES
    weights = weight_bytes(spec, o)  # per GPU, held
    streamed = streamed_weight_bytes(spec, o)  # per GPU, read by each decode step
    per_token = kv_bytes_per_token(spec, o)  # per GPU
    ctx = o.prompt + o.new
    budget = max(capacity - weights, 0.0)
    max_seq = int(budget // (per_token * ctx)) if per_token else 0
    fits = max_seq >= 1
    avg_ctx = o.prompt + o.new / 2  # a running sequence is, on average, halfway through its answer

    def step(c: float) -> float:
        return decode_step_seconds(streamed, per_token, c, avg_ctx, hw.hbm_bytes_per_s)

    prefill = prefill_seconds(n_active, o.prompt, tp, peak)
    # Little's law, solved by iteration (step grows with the batch, the batch with the step)
    c = qps * (prefill + o.new * step(1.0))
    for _ in range(60):
        c = qps * (prefill + o.new * step(max(c, 1.0)))
        if c > 10 * max(max_seq, 1):
            break
    kv_sat = max_seq / (prefill + o.new * step(max_seq)) if max_seq else 0.0
    prefill_sat = 1.0 / prefill if prefill else float("inf")
    sat, limit = (kv_sat, "kv-cache") if kv_sat <= prefill_sat else (prefill_sat, "prefill")
    at = min(max(c, 1.0), max(max_seq, 1))
    return ServingOption(tp=tp, fits=fits, weights_bytes_per_gpu=weights, kv_budget_bytes_per_gpu=budget,
                         max_sequences=max_seq, prefill_s=prefill, decode_step_s=step(at),
                         tokens_per_s_per_user=1.0 / step(at), concurrency=c, saturation_qps=sat,
                         limited_by=limit, meets_qps=fits and qps <= HEADROOM * sat)

