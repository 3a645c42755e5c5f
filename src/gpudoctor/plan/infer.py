"""Serving sizing: per tensor-parallel degree, how many sequences fit, how fast decode and prefill
run, and the load (QPS) at which the decode batch or the prefill queue saturates.

The model is the usual serving-capacity reasoning in numbers. Decode is memory-bound: every decode
step reads the weights once and the whole batch's KV cache, so per-user speed falls as the running
batch grows. Prefill is compute-bound: 2 FLOPs per parameter per prompt token. With continuous
batching, the number of sequences in flight follows Little's law,
``C = QPS x (prefill + new x decode_step(C))``; the load saturates when that ``C`` no longer fits
the KV budget, or when prefill alone would keep the GPUs busy all the time. Past either point
requests queue and time-to-first-token explodes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from gpudoctor.core.params import active_params, count_params
from gpudoctor.errors import InputError
from gpudoctor.memory import load_spec
from gpudoctor.memory.activations import DTYPE_BYTES
from gpudoctor.memory.estimate import CUDA_CONTEXT_BYTES
from gpudoctor.memory.inference import kv_bytes_per_token, weight_bytes
from gpudoctor.memory.options import InferOptions, validate_infer
from gpudoctor.plan.limits import gib, half_precision, plural

# The share of the datasheet HBM bandwidth a decode step reaches (weights and KV streamed once):
# measured, 0.665-0.696 (median 0.68) over llama-3.1-8b's decode steps of 1-64 sequences of
# 1024-4096 tokens, a CUDA-graphed step of cuBLAS GEMVs and batched-matmul attention
# (benchmarks/bench_plan_infer.py, held out there: mistral-7b, qwen2.5-7b, llama-3.2-3b;
# benchmarks/BENCHMARKS-plan.md "`gpudoctor plan infer`: decode and prefill on one H100"). Other
# cards are assumed to reach the same share. The share of the dense bf16/fp8 peak a prefill reaches:
# assumed 0.6 (the same run measured 0.51-0.66). The share of GPU memory a serving engine takes:
# vLLM's default gpu_memory_utilization, 0.9.
DECODE_HBM_EFFICIENCY = 0.68
PREFILL_EFFICIENCY = 0.6
MEMORY_UTILIZATION = 0.9
# A queue near saturation has unbounded waiting time (M/M/1: wait ~ rho / (1 - rho)); a plan keeps
# the load at or below this share of the saturation QPS.
HEADROOM = 0.8
_TP_DEGREES = (1, 2, 4, 8)
# The load a plan accepts: a million requests per second is far beyond one deployment (hundreds of
# replicas of the largest models); above it a number is a typo.
MAX_QPS = 1e6


@dataclass(frozen=True)
class ServingOption:
    tp: int
    fits: bool
    weights_bytes_per_gpu: float
    kv_budget_bytes_per_gpu: float
    max_sequences: int  # concurrent sequences at full context that the KV budget holds
    # speeds and load: None when not even one request fits (there is nothing to run)
    prefill_s: float | None  # one request's prompt
    decode_step_s: float | None  # at the operating point
    tokens_per_s_per_user: float | None
    concurrency: float | None  # sequences in flight at the asked QPS (Little's law)
    saturation_qps: float  # the load at which the KV budget or the prefill queue runs out (0: nothing fits)
    limited_by: str  # "kv-cache" or "prefill"; "no-fit" when not one request fits
    meets_qps: bool
    why_not: str = ""  # when it does not fit: why, and what would

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
    # when no TP degree meets the QPS on one replica: how many of ``replica_tp``
    replicas: int | None = None
    replica_tp: int | None = None

    @property
    def feasible(self) -> bool:
        """Some TP degree holds the weights and at least one request's KV cache."""
        return any(o.fits for o in self.options)

    def to_dict(self) -> dict:
        return {"model": self.model, "gpu": self.gpu, "qps": self.qps, "prompt": self.prompt,
                "new": self.new,
                "options": [o.to_dict() for o in self.options], "choice_tp": self.choice,
                "feasible": self.feasible, "replicas": self.replicas, "replica_tp": self.replica_tp,
                "explanation": self.explanation, "assumptions": list(self.assumptions)}


def plan_serving(source: str, *, gpu: str, qps: float, prompt: int, new: int,
                 weights_dtype: str = "bf16",
                 kv_dtype: str = "bf16", tps: tuple[int, ...] = _TP_DEGREES,
                 allow_long_context: bool = False) -> ServingPlan:
    """Per TP degree in ``tps``: what fits and the load it serves (module doc). A context (prompt +
    new) beyond the model's maximum positions is refused unless ``allow_long_context``."""
    from gpudoctor.hardware.specs import require_spec

    hw = require_spec(gpu)
    _check_qps(qps)
    spec = load_spec(source)
    validate_infer(spec, InferOptions(batch=1, prompt=prompt, new=new, weights_dtype=weights_dtype,
                                      kv_dtype=kv_dtype))
    efficiency = (f"decode reaches {DECODE_HBM_EFFICIENCY:.0%} of HBM bandwidth (measured on an "
                  f"H100); prefill {PREFILL_EFFICIENCY:.0%} "
                  f"of the dense peak; the engine uses {MEMORY_UTILIZATION:.0%} of GPU memory "
                  "(vLLM's default)")
    _, peak, precision_note = half_precision(hw)
    if weights_dtype == "fp8" and "fp8" in hw.matrix_flops:
        peak = hw.matrix_flops["fp8"]
    assumptions = (*_context_notes(spec, prompt, new, allow_long_context),
                   *((precision_note,) if precision_note else ()), efficiency,
                   ("one request's KV cache is held for prompt + new tokens; TP all-reduces are "
                    "not priced"),
                   (f"a plan keeps the load under {HEADROOM:.0%} of its saturation QPS (queueing "
                    "grows without bound near it)"))
    plan = ServingPlan(spec.name, hw.name, qps, prompt, new, assumptions=assumptions)
    n_active = active_params(spec) if spec.moe else count_params(spec).total
    for tp in spec.tp_degrees(tps):
        o = validate_infer(spec,
                           InferOptions(batch=1, prompt=prompt, new=new,
                                        weights_dtype=weights_dtype,
                                              kv_dtype=kv_dtype, tp=tp))
        plan.options.append(_option(spec, o, hw, peak, n_active, qps, tp))
    fitting = [o for o in plan.options if o.meets_qps]
    if fitting:
        best = fitting[0]
        plan.choice = best.tp
        plan.explanation = (
            f"TP={best.tp} serves {qps:g} QPS: {best.concurrency:.0f} sequences in flight of the "
            f"{best.max_sequences} the KV budget holds, decode at {best.tokens_per_s_per_user:.0f} "
            f"tok/s per user, saturating near {best.saturation_qps:.1f} QPS ({best.limited_by}).")
    elif not plan.options:
        raise InputError(f"no TP degree in {tps} divides the model's {spec.heads} heads")
    elif plan.feasible:
        _replicas(plan, qps)
    else:
        plan.explanation = _nothing_fits(spec, hw, plan, weights_dtype, kv_dtype)
    if plan.feasible:
        # the degrees below the first that fits: say so, and what would, rather than leave a blank
        # row
        plan.explanation = " ".join([o.why_not for o in plan.options if not o.fits]
                                    + [plan.explanation])
    return plan


def _check_qps(qps: float) -> None:
    if not (qps > 0):  # also NaN
        raise InputError("--qps must be a positive number of requests per second (more than 0, "
                         f"at most {MAX_QPS:,.0f}), got {qps!r}")
    if qps > MAX_QPS:
        raise InputError(f"--qps {qps:g} is more than the {MAX_QPS:,.0f} requests per second a "
                         "plan sizes (far beyond one deployment; likely a typo): give a load above "
                         f"0 and at most {MAX_QPS:,.0f}")


def _context_notes(spec, prompt: int, new: int, allow: bool) -> tuple[str, ...]:
    """Refuse a context past the model's positions (a learned table always, rotary ones unless
    ``allow``)."""
    ctx, most = prompt + new, spec.max_positions
    if not most or ctx <= most:
        return ()
    what = f"--prompt {prompt:,} + --new {new:,} = {ctx:,} tokens is beyond {spec.name}'s maximum context of {most:,}"
    if spec.learned_positions:
        raise InputError(f"{what} (its learned position table has {most:,} rows); give a prompt + "
                         f"new of at most {most:,} tokens")
    if not allow:
        raise InputError(f"{what} (max_position_embeddings); give a prompt + new of at most "
                         f"{most:,} tokens, or pass --allow-long-context if you serve it with a "
                         "longer RoPE scaling than its config says")
    return ((f"the context, {ctx:,} tokens, is beyond {spec.name}'s {most:,} positions "
             "(--allow-long-context): priced as if the model served it"),)


def _replicas(plan: ServingPlan, qps: float) -> None:
    """No TP degree meets the load on one replica: the fewest GPUs in replicas of one TP degree."""
    usable = [o for o in plan.options if o.fits and o.saturation_qps > 0]
    top = max(usable, key=lambda o: o.saturation_qps)

    def count(o: ServingOption) -> int:
        return math.ceil(qps / (HEADROOM * o.saturation_qps))

    best = min(usable, key=lambda o: (count(o) * o.tp, o.tp))
    plan.replicas, plan.replica_tp = count(best), best.tp
    plan.explanation = (
        f"No TP degree up to {max(o.tp for o in plan.options)} serves {qps:g} QPS on one replica: "
        f"the best, TP={top.tp}, saturates near {_qps(top.saturation_qps)} QPS ({top.limited_by}); "
        f"add replicas: {plan.replicas:,} replicas of TP={best.tp} "
        f"({plural(plan.replicas * best.tp, 'GPU')}, each under {HEADROOM:.0%} of its "
        f"{_qps(best.saturation_qps)} QPS), or cut context / quantize KV to need fewer.")


def _qps(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 0.1 else f"{v:.1g}"


def _nothing_fits(spec, hw, plan: ServingPlan, weights_dtype: str, kv_dtype: str) -> str:
    """Why no TP degree holds one replica, and what can: the weights alone, or one request's KV
    cache."""
    from gpudoctor.hardware.specs import SPECS

    capacity = _capacity(hw)
    o = max(plan.options, key=lambda x: x.tp)
    opts = InferOptions(batch=1, prompt=plan.prompt, new=plan.new, weights_dtype=weights_dtype,
                        kv_dtype=kv_dtype, tp=o.tp)
    t, ctx = o.tp, plan.prompt + plan.new
    kv_one = kv_bytes_per_token(spec, opts) * ctx  # one request, per GPU at TP=t
    given = (f"the {gib(capacity)} the {hw.name} gives them ({MEMORY_UTILIZATION:.0%} of "
             f"{gib(hw.memory_bytes)}, less the CUDA context)")
    if o.weights_bytes_per_gpu <= capacity:  # the weights fit: one request's KV cache does not
        per_token = kv_bytes_per_token(spec, opts)
        most = int((capacity - o.weights_bytes_per_gpu) // per_token) if per_token else 0
        return (f"One request's KV cache ({ctx:,} tokens) takes {gib(kv_one)} per GPU at TP={t}, "
                f"more than the {gib(o.kv_budget_bytes_per_gpu)} left after the weights: cut "
                f"--prompt + --new to at most {most:,} tokens, quantize the KV cache (--kv-dtype "
                "fp8 halves it), or spread a replica over more GPUs (pipeline parallel).")
    stages = math.ceil((o.weights_bytes_per_gpu + kv_one) / capacity)
    ways = [
        (f"{t * stages:,} or more GPUs per replica (TP={t} x PP={stages}, pipeline parallel: not "
         "priced here)")]
    quantized: dict[tuple[str, int], list[str]] = {}  # (size, stages) -> dtypes: fp8 and int8 weigh the same
    for q in ("fp8", "int8", "int4") if "fp8" in hw.matrix_flops else ("int8", "int4"):  # fp8 needs fp8 hardware
        w = weight_bytes(spec, replace(opts, weights_dtype=q))
        if w < o.weights_bytes_per_gpu:
            quantized.setdefault((gib(w), math.ceil((w + kv_one) / capacity)), []).append(q)
    for (size, pp), names in quantized.items():
        ways.append(f"{' or '.join(names)} weights ({size} per GPU at TP={t}"
                    + (f", so TP={t} fits one replica)" if pp == 1
                       else f": TP={t} x PP={pp}, {t * pp} GPUs)"))
    need = (o.weights_bytes_per_gpu + kv_one + CUDA_CONTEXT_BYTES) / MEMORY_UTILIZATION
    bigger = sorted((h for h in SPECS if h.memory_bytes >= need
                     and ({"bf16", "fp16"} & set(h.matrix_flops))),
                    key=lambda h: h.memory_bytes)
    ways.append(f"a card with at least {gib(need)} at TP={t}"
                + (f" (e.g. {bigger[0].key}, {gib(bigger[0].memory_bytes)})"
                                                                   if bigger
                   else " (none in the datasheet table)"))
    return (f"The weights alone take {gib(o.weights_bytes_per_gpu)} per GPU at TP={t}, more than "
            f"{given}: no TP degree up to {t} holds one replica. What can work: "
            + "; ".join(ways) + ".")


def _why_not(o: InferOptions, weights: float, budget: float, per_token: float, capacity: float,
             fp8: bool) -> str:
    """One TP degree that cannot hold one request, in a sentence: why, and what would (more TP, a
    shorter context, a narrower KV cache or weights)."""
    ctx = o.prompt + o.new
    if weights > capacity:
        why = f"its weights alone take {gib(weights)} per GPU, more than the {gib(capacity)} an engine has"
        narrower = [q for q in (("fp8",) if fp8 else ()) + ("int8", "int4")
                    if DTYPE_BYTES[q] < DTYPE_BYTES[o.weights_dtype]]
        fix = "more GPUs (a larger TP)" + (" or narrower weights (--weights-dtype "
                                           f"{' or '.join(narrower)})"
                                          if narrower else "")
    else:
        most = int(budget // per_token) if per_token else 0
        why = (f"one request's KV cache ({ctx:,} tokens) takes {gib(per_token * ctx)} per GPU, "
               f"more than the {gib(budget)} left after the weights")
        fix = (f"a larger TP, a context of at most {most:,} tokens (--prompt + --new), or "
               "--kv-dtype fp8"
               if most else "a larger TP or narrower weights")
    return f"TP={o.tp} does not fit: {why}; what would: {fix}."


def _capacity(hw) -> float:
    """Bytes a serving engine has for weights and KV cache on one GPU."""
    return hw.memory_bytes * MEMORY_UTILIZATION - CUDA_CONTEXT_BYTES


def streamed_weight_bytes(spec, o: InferOptions) -> float:
    """Weight bytes one decode step reads on one GPU: every weight but the input embedding table, of
    which a step gathers only its tokens' rows (a tied table is read whole, as the LM head)."""
    weights = weight_bytes(spec, o)
    if spec.tied_embeddings:
        return weights
    # embeddings stay bf16 (weight_bytes)
    return weights - count_params(spec).embedding * 2.0 / o.tp


def decode_step_seconds(weights: float, per_token: float, sequences: float, context: float,
                        hbm: float) -> float:
    """One decode step of ``sequences`` sequences ``context`` tokens long: the weights and their KV
    cache read once, at DECODE_HBM_EFFICIENCY of ``hbm`` bytes/s."""
    return (weights + sequences * context * per_token) / (hbm * DECODE_HBM_EFFICIENCY)


def prefill_seconds(n_active: int, tokens: int, tp: int, peak: float) -> float:
    """One prompt of ``tokens``: 2 FLOPs per active parameter per token at PREFILL_EFFICIENCY of
    ``peak``."""
    return 2 * n_active * tokens / (tp * peak * PREFILL_EFFICIENCY)


def _option(spec, o: InferOptions, hw, peak: float, n_active: int, qps: float,
            tp: int) -> ServingOption:
    capacity = _capacity(hw)
    weights = weight_bytes(spec, o)  # per GPU, held
    streamed = streamed_weight_bytes(spec, o)  # per GPU, read by each decode step
    per_token = kv_bytes_per_token(spec, o)  # per GPU
    ctx = o.prompt + o.new
    budget = max(capacity - weights, 0.0)
    max_seq = int(budget // (per_token * ctx)) if per_token else 0
    fits = max_seq >= 1
    if not fits:
        return ServingOption(tp=tp, fits=False, weights_bytes_per_gpu=weights,
                             kv_budget_bytes_per_gpu=budget, max_sequences=0, prefill_s=None,
                             decode_step_s=None, tokens_per_s_per_user=None,
                             concurrency=None, saturation_qps=0.0, limited_by="no-fit",
                             meets_qps=False,
                             why_not=_why_not(o, weights, budget, per_token, capacity,
                                              "fp8" in hw.matrix_flops))
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
    return ServingOption(tp=tp, fits=fits, weights_bytes_per_gpu=weights,
                         kv_budget_bytes_per_gpu=budget,
                         max_sequences=max_seq, prefill_s=prefill, decode_step_s=step(at),
                         tokens_per_s_per_user=1.0 / step(at), concurrency=c, saturation_qps=sat,
                         limited_by=limit, meets_qps=fits and qps <= HEADROOM * sat)

