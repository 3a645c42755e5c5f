"""Scenario files: the symptoms and numbers of a problem that has no standard artifact.

A scenario is a small JSON (or YAML) object with a ``scenario`` key naming its kind and the
numbers the engineer has; each kind below documents its fields (docs/explain.md has them all).
The diagnoses follow one casebook style: the boring explanation first, quantitative
reasoning (bandwidth, FLOPs, bytes) in the summary, fixes in order of impact, the tempting wrong
fix named.

Kinds: ``kernel`` (an Nsight Compute summary typed in), ``training-slowdown``, ``serving``,
``fp8-regression``, ``oom-sharding``, ``allreduce-scaling``, ``triton-autotune``,
``pipeline-bubble``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudoctor.core.finding import Finding, Fix, make_hypothesis
from gpudoctor.errors import InputError
from gpudoctor.explain.kernel import KernelMetrics, kernel_hypotheses

KINDS = ("kernel", "training-slowdown", "serving", "fp8-regression", "oom-sharding",
         "allreduce-scaling", "triton-autotune", "pipeline-bubble")


def load_scenario(path: Path, text: str) -> dict:
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise InputError(
                f"{path}: reading YAML needs PyYAML (pip install pyyaml), or write the "
                "scenario as JSON") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InputError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(data, dict) and "traceEvents" in data:
        raise InputError(
            f"{path} is a profiler trace, not a scenario: diagnose it with `gpudoctor "
            f"analyze {path}`")
    if not isinstance(data, dict) or "scenario" not in data:
        raise InputError(
            f"{path}: a scenario is an object with a 'scenario' key, one of: {', '.join(KINDS)}")
    bad = _non_finite(data)
    if bad is not None:
        raise InputError(
            f"{path}: '{bad[0]}' is {bad[1]!r}; give a finite number or leave the field out")
    return data


def _non_finite(value: Any, where: str = "") -> tuple[str, float] | None:
    """The first NaN or infinity (JSON's NaN/Infinity, YAML's .nan/.inf) and where it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "(top)", value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite(item,
                            f"{where}.{key}" if where and isinstance(key, str)
                            else f"{where}[{key}]"
                            if where else str(key))
        if found is not None:
            return found
    return None


MAX_NUMBER = 1e15  # beyond any count, size or time a scenario describes: a typo


def _number(value: Any, name: str, where: str, *, positive: bool = False, lo: float | None = None,
            hi: float | None = None, whole: bool = False) -> float:
    """A scenario's number, checked: a wrong one is a one-line error naming it (never a traceback or
    a silently absurd diagnosis)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{where}: '{name}' must be a number, got {value!r}")
    top = MAX_NUMBER if hi is None else hi
    if (positive and value <= 0) or (lo is not None and value < lo) or value > top or value < -MAX_NUMBER:
        least = "above 0" if positive else f"from {lo:g}" if lo is not None else ""
        raise InputError(
            f"{where}: '{name}' must be a number {least}{' ' if least else ''}up to {top:g}, got "
            f"{value!r}")
    if whole and value != int(value):
        raise InputError(f"{where}: '{name}' must be a whole number, got {value!r}")
    return float(value)


def scenario_hypotheses(data: dict, where: str = "scenario") -> list[Finding]:
    kind = data.get("scenario")
    handler = _HANDLERS.get(str(kind))
    if handler is None:
        raise InputError(f"{where}: scenario {kind!r} is not one of: {', '.join(KINDS)}")
    return handler(_Fields(data, where))


class _Fields:
    """Typed access to a scenario's fields: a wrong or missing one is a one-line error naming it."""

    def __init__(self, data: dict, where: str) -> None:
        self.data, self.where = data, where

    def num(self, key: str, default: float | None = None, **bounds: Any) -> float:
        """``bounds``: ``positive``, ``lo``, ``hi``, ``whole`` (see ``_number``)."""
        value = self.data.get(key, default)
        if value is None:
            raise InputError(
                f"{self.where}: scenario {self.data.get('scenario')!r} needs a number '{key}'")
        return _number(value, key, self.where, **bounds)

    def opt(self, key: str, **bounds: Any) -> float | None:
        return None if self.data.get(key) is None else self.num(key, **bounds)

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def text(self, key: str, default: str | None = None) -> str:
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise InputError(
                    f"{self.where}: scenario {self.data.get('scenario')!r} needs a text '{key}'")
            return default
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{self.where}: '{key}' must be a text (a name), got {value!r}")
        return value.strip()

    def obj(self, key: str) -> dict:
        value = self.data.get(key)
        if not isinstance(value, dict):
            raise InputError(f"{self.where}: '{key}' must be an object")
        return value

    def rows(self, key: str) -> list[dict]:
        value = self.data.get(key)
        if not isinstance(value, list) or not value or not all(isinstance(r, dict) for r in value):
            raise InputError(f"{self.where}: '{key}' must be a non-empty list of objects")
        return value


# -- 1. a slow kernel, from the numbers of an ncu summary
# -------------------------------------------

_KERNEL_FIELDS = {f for f in KernelMetrics.__dataclass_fields__ if f not in ("name", "missing")}


def _kernel(f: _Fields) -> list[Finding]:
    spec = f.obj("kernel")
    unknown = sorted(set(spec) - _KERNEL_FIELDS - {"name"})
    if unknown:
        raise InputError(
            f"{f.where}: unknown kernel field(s) {', '.join(unknown)}; known: "
            f"{', '.join(sorted(_KERNEL_FIELDS))}")
    k = KernelMetrics(name=str(spec.get("name", "kernel")),
                      **{key: _kernel_field(key, v, f.where) for key, v in spec.items()
                         if key != "name" and v is not None})
    found = kernel_hypotheses(k)
    achieved, ceiling = f.opt("achieved_tflops", positive=True), f.opt("reference_tflops",
                                                                       positive=True)
    if achieved and ceiling and found and found[0].id == "tensor-cores-idle":
        top = found[0]
        gap = ceiling / achieved
        summary = (f"{top.summary} It reaches {achieved:.0f} TFLOP/s where the reference (cuBLAS) "
                   f"reaches {ceiling:.0f}: a {gap:.1f}x gap that only the tensor-core path closes.")
        found[0] = make_hypothesis(top.id, top.title, top.confidence or 0.9, summary,
                                   {**top.evidence.numbers, "achieved_tflops": achieved,
                                    "reference_tflops": ceiling},
                                   top.fixes, check_next=top.check_next, wrong_fix=top.wrong_fix,
                                   subject=top.subject)
    return found


def _kernel_field(key: str, value: Any, where: str) -> Any:
    if key == "is_matrix":
        if not isinstance(value, bool):
            raise InputError(f"{where}: 'kernel.is_matrix' must be true or false, got {value!r}")
        return value
    # percents of a peak, of cycles or of all sectors: 0 to 100
    return _number(value, f"kernel.{key}", where, lo=0, hi=100 if key.endswith("_pct") else None)


# -- 2. MFU collapse mid-training
# -------------------------------------------------------------------


def _training_slowdown(f: _Fields) -> list[Finding]:
    # fractions: 0.48
    before, after = (f.num(key, positive=True, hi=1) for key in ("mfu_before", "mfu_after"))
    gpus = f.opt("gpus", lo=1, whole=True)
    code_changed = bool(f.get("code_changed", False))
    drop = 1 - after / before
    step_factor = before / after
    numbers = {"mfu_before": before, "mfu_after": after, "step_time_factor": round(step_factor, 2)}
    if gpus:
        numbers["gpus"] = gpus
    sudden = "suddenly " if f.get("sudden", True) else ""
    out = [
        make_hypothesis(
            "straggler", "One degraded node or GPU drags every synchronous step",
            0.8 if not code_changed else 0.5,
            f"MFU {sudden}fell from {100 * before:.0f}% to {100 * after:.0f}% (steps "
            f"{step_factor:.1f}x slower) with {'no' if not code_changed else 'a'} code change: in "
            "synchronous training the slowest rank sets every "
            f"step{f' across all {gpus:.0f} GPUs' if gpus else ''}, so one throttled, ECC-degraded "
            "or PCIe-downgraded node is the boring and most likely cause.",
            numbers,
            (Fix("Find the slow rank: per-rank step and NCCL all-reduce times (a histogram "
                 "per rank); `gpudoctor explain ranks.csv` flags stragglers",
                 "columns: rank,step,step_ms"),
             Fix("Check that node's health: `nvidia-smi -q -d PERFORMANCE,CLOCK,ECC,PCIE` "
                 "(throttling, ECC, link downgrade), `dcgmi diag -r 3`",
                 "gpudoctor explain nvidia-smi-q.txt"),
             Fix("Drain and reschedule the degraded node; resume from the last checkpoint", "")),
            check_next=("Per-rank step-time histogram before/after the drop",
                        "nvidia-smi -q on the slowest node",
                        "NCCL all-reduce time per rank (one rank late on every collective)"),
            wrong_fix="Code-level changes (sharding, recompute policy) before checking hardware: "
                      "nothing in the code changed.",
            saving_ms=drop, step_ms=1.0),
        make_hypothesis(
            "dataloader-stall", "The input pipeline fell behind", 0.4,
            "If step time grew but GPU busy time did not, the host is the bottleneck: worker "
            "count, prefetch depth, or read latency of streamed data.",
            {},
            (Fix("DataLoader(num_workers=..., prefetch_factor=..., persistent_workers=True); check "
                     "storage read latency", ""),),
            check_next=("GPU busy time per step vs step time (a profile: `gpudoctor run`)",)),
        make_hypothesis(
            "checkpoint-stall", "Checkpoint writes serialize the ranks", 0.3,
            "An async checkpoint hanging on slow storage can hold every rank at the next "
            "collective.",
            {},
            (Fix(
                "Check storage throughput and the checkpoint interval; make saves asynchronous", ""),),
            check_next=("Step times around checkpoint steps",)),
        make_hypothesis(
            "network-fabric", "Network fabric: a link flap or a rail down", 0.3,
            "An InfiniBand link flap or congestion, or one rail down forcing fallback, slows every "
            "collective.",
            {},
            (Fix(
                "Check IB port counters / link state (ibstat, perfquery), NCCL_DEBUG=INFO for "
                "fallbacks", ""),),
            check_next=("All-reduce bus bandwidth per node pair (nccl-tests)",)),
    ]
    return out


# -- 3. serving throughput collapse under load
# ------------------------------------------------------


def _serving(f: _Fields) -> list[Finding]:
    from gpudoctor.hardware.specs import find_spec

    rows = f.rows("load")
    for i, point in enumerate(rows):
        for key in ("qps", "tok_s_per_user"):
            if point.get(key) is None:
                raise InputError(
                    f"{f.where}: each 'load' point needs a positive '{key}' (point {i} has none)")
            _number(point[key], f"load[{i}].{key}", f.where, positive=True)
        if point.get("ttft_p50_ms") is not None:
            _number(point["ttft_p50_ms"], f"load[{i}].ttft_p50_ms", f.where, positive=True)
    loads = sorted(rows, key=lambda r: float(r["qps"]))
    if len(loads) < 2:
        raise InputError(
            f"{f.where}: 'load' needs at least two points (qps, tok_s_per_user, ttft_p50_ms)")
    low, high = loads[0], loads[-1]
    params_b = f.num("model_params_b", positive=True, hi=1e5)  # billions: 100T parameters at most
    gpus = f.num("gpus", 1, lo=1, hi=1e7, whole=True)
    sizes = {"fp8": 1.0, "int8": 1.0, "int4": 0.5, "bf16": 2.0, "fp16": 2.0}
    dtype = f.text("weights_dtype", "bf16").lower()
    if dtype not in sizes:  # not a silent 2 bytes per weight
        raise InputError(f"{f.where}: 'weights_dtype' {dtype!r} is not one of {', '.join(sizes)}")
    wbytes = sizes[dtype]
    gpu_name = f.text("gpu", "h100-sxm")
    spec = find_spec(gpu_name)
    if spec is None:  # an unknown name would silently price the weights at another card's bandwidth
        from gpudoctor.hardware.specs import known_names

        raise InputError(f"{f.where}: unknown gpu {gpu_name!r}; known: {', '.join(known_names())}")
    bw = spec.hbm_bytes_per_s
    weights_per_gpu = params_b * 1e9 * wbytes / gpus
    weight_read_ms = weights_per_gpu / bw * 1e3
    step_low = 1e3 / float(low["tok_s_per_user"])
    step_high = 1e3 / float(high["tok_s_per_user"])
    other_ms = max(step_high - weight_read_ms, 0.0)
    ttft_low, ttft_high = low.get("ttft_p50_ms"), high.get("ttft_p50_ms")
    numbers = {"qps_low": low["qps"], "qps_high": high["qps"],
               "decode_step_ms_low": round(step_low, 2), "decode_step_ms_high": round(step_high, 2),
               "weights_per_gpu_GB": round(weights_per_gpu / 1e9, 2),
               "weight_read_ms_per_step": round(weight_read_ms, 2), "hbm_TB_s": round(bw / 1e12, 2)}
    kv_note = ""
    layers, kv_heads, head_dim = (f.opt(key, lo=1, hi=1e6, whole=True)
                                  for key in ("layers", "kv_heads", "head_dim"))
    if layers and kv_heads and head_dim:
        kv_bytes = 2 * layers * kv_heads * head_dim * f.num("kv_bytes", 2, positive=True, hi=8)
        tokens_read = other_ms / 1e3 * bw * gpus / kv_bytes
        numbers["kv_bytes_per_token"] = kv_bytes
        numbers["kv_tokens_read_per_step"] = round(tokens_read)
        kv_note = (f" At {kv_bytes / 1024:.0f} KiB of KV per token, the rest of the step is the "
                   f"time to read ~{tokens_read / 1e6:.1f} M cached tokens per decode step across "
                   "the batch.")
    if ttft_low and ttft_high:
        numbers.update(ttft_p50_ms_low=ttft_low, ttft_p50_ms_high=ttft_high)
    util = f.opt("gpu_util_pct", lo=0, hi=100)
    chunked = bool(f.get("chunked_prefill", False))
    out = [
        make_hypothesis(
            "decode-memory-bound",
            "Decode batch grown past the KV budget: HBM-bound on KV reads", 0.85,
            f"Per-user decode went from {low['tok_s_per_user']} to {high['tok_s_per_user']} tok/s: "
            f"a decode step takes {step_high:.0f} ms at QPS {high['qps']} against {step_low:.1f} "
            f"ms at QPS {low['qps']}. Reading the {weights_per_gpu / 1e9:.1f} GB of weights per "
            f"GPU takes {weight_read_ms:.1f} ms at {bw / 1e12:.2f} TB/s, so "
            f"{100 * other_ms / step_high:.0f}% of the step is something else: continuous batching "
            f"admitted a batch whose KV-cache reads dominate.{kv_note}"
            + (f" GPU util {util:.0f}% only says a kernel was resident: decode at a large batch is "
               "HBM-bound, SMs wait." if util else ""),
            numbers,
            (Fix("Chunked prefill, and prefill/decode disaggregation if available",
                 "vllm ... --enable-chunked-prefill"),
             Fix("Cap the running batch from KV-budget arithmetic, not request count",
                 "--max-num-seqs N --max-num-batched-tokens T   # N x context x KV bytes/token <= "
                 "KV budget"),
             Fix("Speculative decoding to raise decode's arithmetic intensity", ""),
             Fix("Tune max_num_seqs / max_num_batched_tokens explicitly", ""),
             Fix("MQA/GQA KV sharing if the model allows (Llama-70B already has GQA: bounded gain)", "")),
            check_next=("Running batch size and KV-cache usage % over time (engine metrics)",
                        "Preemptions / swaps count at high QPS"),
            wrong_fix="Just adding GPUs: decode is memory-bandwidth-bound per token; the batch "
                      "policy is the problem."),
    ]
    if ttft_low and ttft_high and float(ttft_high) > 5 * float(ttft_low):
        out.append(make_hypothesis(
            "prefill-contention", "Prefills queue behind decode batches (TTFT)",
            0.7 if not chunked else 0.4,
            f"TTFT p50 rose from {ttft_low} ms to {ttft_high} ms "
            f"({float(ttft_high) / float(ttft_low):.0f}x): new prompts wait behind decode steps"
            + (" (no chunked prefill)" if not chunked else "")
            + ", or prefill and decode contend for the SMs.",
            {"ttft_p50_ms_low": ttft_low, "ttft_p50_ms_high": ttft_high},
            (Fix("Chunked prefill", "--enable-chunked-prefill"),
             Fix("Prefill/decode disaggregation", "")),
            check_next=("Queue time vs prefill time in TTFT",)))
    return out


# -- 4. FP8 long-context regression
# -----------------------------------------------------------------


def _fp8(f: _Fields) -> list[Finding]:
    long_task = f.obj("long_task")
    seq = 0.0 if long_task.get("seq") is None else _number(long_task["seq"], "long_task.seq",
                                                           f.where, lo=0,
                                                             whole=True)
    fp8_acc, ref_acc = long_task.get("fp8"), long_task.get("bf16")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (fp8_acc, ref_acc)):
        raise InputError(f"{f.where}: 'long_task' needs numbers 'fp8' and 'bf16' (the task metric)")
    calib = f.opt("calibration_seq", positive=True, whole=True)
    fmt = f.text("format", "e4m3").lower()
    if "e4m3" not in fmt and "e5m2" not in fmt:  # the two FP8 formats, with their largest values
        raise InputError(f"{f.where}: 'format' {fmt!r} is not an FP8 format: e4m3 or e5m2")
    fmax = 448.0 if "e4m3" in fmt else 57344.0
    scaling = str(f.get("scaling", "per-tensor"))
    short = f.get("short_eval") or {}
    numbers = {"long_seq": seq, "long_fp8": fp8_acc, "long_bf16": ref_acc, "fp8_max": fmax}
    if calib:
        numbers["calibration_seq"] = calib
    if isinstance(short, dict) and short:
        numbers.update({f"short_{k}": v for k, v in short.items()})
    ratio = f" ({seq / calib:.0f}x the calibration length)" if calib and seq else ""
    return [
        make_hypothesis(
            "fp8-saturation",
            "Per-tensor FP8 scales calibrated short saturate at long context", 0.8,
            f"Short-context quality holds but the {seq:.0f}-token task drops from {ref_acc} to "
            f"{fp8_acc}{ratio}. {fmt.upper()} tops out at {fmax:.0f}; {scaling} scales calibrated "
            "on short sequences underestimate the range that long contexts reach (pre-softmax "
            "logits, accumulated attention outputs, late-layer residuals), so specific layers "
            "saturate.",
            numbers,
            (Fix("Recalibrate the scales with long-context data", ""),
             Fix("Per-row / per-block scaling (MXFP8) for the offending layers", ""),
             Fix("Keep attention accumulation in higher precision; quantize only the QKV and "
                 "output projections", ""),
             Fix("Per-layer sensitivity analysis: quantize layer by layer and watch the long task", "")),
            check_next=(("Per-layer activation amax vs sequence length (hooks on each Linear's "
                         "input/output)"),
                        "Which layers hit the FP8 max (saturation counts) at 32k but not at 4k"),
            wrong_fix="Blaming the calibration set's size without localising which "
                      "layers/ops drift."),
    ]


# -- 5. OOM at one sharding configuration but not another
# --------------------------------------------


def _oom_sharding(f: _Fields) -> list[Finding]:
    from gpudoctor.memory import estimate_from_options

    model = str(f.get("model", ""))
    if not model:
        raise InputError(
            f"{f.where}: 'model' names a preset or a config.json (e.g. llama-3.1-405b)")
    works, fails = f.obj("works"), f.obj("fails")
    for label, cfg in (("works", works), ("fails", fails)):
        for key in ("tp", "dp"):  # left out or null: 1
            cfg[key] = 1 if cfg.get(key) is None else int(_number(cfg[key], f"{label}.{key}",
                                                                  f.where, lo=1, hi=1e7,
                                                                  whole=True))
    base = {"batch": int(f.num("batch", 1, lo=1, whole=True)),
            "seq": int(f.num("seq", 4096, lo=1, whole=True)),
            "checkpointing": str(f.get("checkpointing", "full")),
            "attention": str(f.get("attention", "eager"))}
    if f.get("fsdp", True):
        base["fsdp"] = True
    gpu = None if f.get("gpu") is None else f.text("gpu")

    def est(cfg: dict):
        opts = dict(base, tp=int(cfg.get("tp", 1)), dp=int(cfg.get("dp", 1)),
                    sp=bool(cfg.get("sp", False)))
        if opts["dp"] < 2:
            opts.pop("fsdp", None)
        return estimate_from_options(model, gpu=gpu, suggest=False, **opts)

    good, bad = est(works), est(fails)
    from gpudoctor.memory import load_spec

    spec = load_spec(model)
    tp_good, tp_bad = int(works.get("tp", 1)), int(fails.get("tp", 1))
    states_good = good.breakdown.get("optimizer_states", 0) / 1e9
    states_bad = bad.breakdown.get("optimizer_states", 0) / 1e9
    numbers = {"peak_GB_works": round(good.peak_bytes / 1e9, 1),
               "peak_GB_fails": round(bad.peak_bytes / 1e9, 1),
               "tp_works": tp_good, "tp_fails": tp_bad,
               "optimizer_states_GB_works": round(states_good, 2),
               "optimizer_states_GB_fails": round(states_bad, 2)}
    summary = (f"At TP={tp_bad} each rank holds {tp_good / tp_bad:.0f}x the heads and MLP width it "
               f"holds at TP={tp_good}, so the one layer that the backward recomputes at a time is "
               f"that much larger. Predicted peak {bad.peak_bytes / 1e9:.0f} GB vs "
               f"{good.peak_bytes / 1e9:.0f} GB (in the {bad.phase}). Optimizer states per GPU: "
               f"{states_good:.2f} GB vs {states_bad:.2f} GB "
               f"({'unchanged: sharded over TP x DP ranks either way' if abs(states_good - states_bad) < 0.01 * max(states_good, 1e-9) else 'smaller with more DP'}): not the cause.")
    if base["attention"] == "eager":
        def scores(tp):
            return base["batch"] * spec.heads / tp * base["seq"] ** 2 * 6
        numbers["attention_scores_GB_per_layer_fails"] = round(scores(tp_bad) / 1e9, 1)
        numbers["attention_scores_GB_per_layer_works"] = round(scores(tp_good) / 1e9, 1)
        summary += (" The real culprit is the attention matrix: QK^T is O(seq^2 x heads "
                    f"per rank), {scores(tp_bad) / 1e9:.1f} GB for one layer at TP={tp_bad} "
                    f"against {scores(tp_good) / 1e9:.1f} GB at TP={tp_good} (seq {base['seq']}, "
                    "fp32 softmax + bf16 probs).")
    return [
        make_hypothesis(
            "tp-activation-peak",
            "Fewer TP ranks: twice the heads per rank, twice the per-layer activation peak",
            0.85, summary, numbers,
            (Fix(
                "Sequence parallelism: shard the norm/dropout activations along the sequence", "--sp"),
             Fix("FlashAttention / SDPA: no s x s scores at all (the headline fix if attention "
                 "is eager)",
                 "attn_implementation='sdpa'"),
             Fix("A smaller micro-batch", ""),
             Fix("Back to TP=8 if the fabric allows", "")),
            check_next=(("torch.cuda.memory._record_memory_history() around the failing step: which "
                         "layer's recompute"),
                        (f"gpudoctor memory {model} --tp {fails.get('tp')} --dp {fails.get('dp')} "
                         "--fsdp ...")),
            wrong_fix="More activation checkpointing: every layer already recomputes; the peak is "
                      "one layer's own activations."),
    ]


# -- 6. all-reduce time vs GPU count
# ----------------------------------------------------------------


def _allreduce(f: _Fields) -> list[Finding]:
    from gpudoctor.explain import timings

    rows = f.rows("points")
    lines = ["gpus,allreduce_ms" + (",bytes" if all("bytes" in r for r in rows) else "")]
    for r in rows:
        lines.append(",".join(str(r.get(k, ""))
                              for k in (["gpus", "allreduce_ms"]
                                        + (["bytes"] if "bytes" in r else []))))
    algo, gpu, fabric = (f.get(key) for key in ("algo", "gpu", "fabric"))
    return timings.collective_hypotheses(
        "\n".join(lines) + "\n", gpu=None if gpu is None else str(gpu),
        fabric=None if fabric is None else str(fabric), gpus_per_node=f.get("gpus_per_node"),
        nbytes=f.opt("bytes"), algo=None if algo is None else str(algo))


# -- 7. a Triton kernel slower than eager
# ------------------------------------------------------------


def _triton(f: _Fields) -> list[Finding]:
    configs = f.rows("configs")
    for i, c in enumerate(configs):
        for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps"):
            if c.get(key) is not None:
                _number(c[key], f"configs[{i}].{key}", f.where, lo=0, hi=1e6, whole=True)
    expected, measured = f.num("speedup_expected", positive=True), f.num("speedup_measured",
                                                                         positive=True)
    ks = [int(c.get("BLOCK_K", 0) or 0) for c in configs]
    stages = sorted({int(c.get("num_stages", 0) or 0) for c in configs})
    warps = sorted({int(c.get("num_warps", 0) or 0) for c in configs})
    numbers = {"configs": len(configs), "block_k": sorted(set(ks)), "num_stages": stages,
               "num_warps": warps, "speedup_expected": expected, "speedup_measured": measured}
    problems = []
    if len(configs) < 8:
        problems.append(f"only {len(configs)} configs")
    if ks and max(ks) < 64:
        problems.append(f"BLOCK_K <= {max(ks)} (bf16/fp16 wgmma wants >= 64)")
    if stages and max(stages) <= 2:
        problems.append(f"num_stages {stages} (Hopper wants 3-5 for async-copy overlap)")
    if warps and max(warps) <= 4:
        problems.append(f"num_warps {warps} (128 threads per block)")
    fused = f.get("fused") or []
    fused = [fused] if isinstance(fused, str) else fused
    if not isinstance(fused, list):
        raise InputError(f"{f.where}: 'fused' must be a list of the fused ops' names (e.g. "
                         f"[\"rmsnorm\", \"linear\"]), got {fused!r}")
    gemm_note = ""
    if any("linear" in str(x).lower() or "matmul" in str(x).lower() for x in fused):
        gemm_note = (" Eager runs the linear on cuBLAS, which is already near the roof: the fused "
                     "kernel must beat cuBLAS on the GEMM, and fusing a cheap RMSNorm into it "
                     "gains little.")
    return [
        make_hypothesis(
            "autotune-space", "Autotune space too small to reach the tensor-core path", 0.85,
            f"Measured {measured}x where {expected}x was expected. The autotune space: "
            f"{'; '.join(problems) or 'fine'}."
            + gemm_note,
            numbers,
            (Fix("Widen the grid: BLOCK_M, BLOCK_N in {64,128,256}, BLOCK_K in {64,128}, "
                 "num_stages in {3,4,5}, num_warps in {4,8}",
                 "configs = [triton.Config({'BLOCK_M': m, 'BLOCK_N': n, 'BLOCK_K': k}, "
                 "num_stages=s, num_warps=w)\n"
                 "           for m in (64, 128, 256) for n in (64, 128, 256) for k in (64, 128)\n"
                 "           for s in (3, 4, 5) for w in (4, 8)]"),
             Fix("Check the SASS for wgmma (HGMMA) instructions",
                 "TRITON_CACHE_DIR=...; cuobjdump -sass *.cubin | grep -c HGMMA"),
             Fix("Ask whether the fusion pays: if the GEMM dominates, fuse RMSNorm into the QKV "
                 "projection instead of one linear", ""),
             Fix("CUTLASS epilogue fusion if Triton cannot reach cuBLAS", "")),
            check_next=(
                "ncu on both kernels: tensor pipe utilization and achieved TFLOP/s vs cuBLAS",),
            wrong_fix="Blaming Triton in general: the autotune levers and the fusion's arithmetic "
                      "intensity decide."),
    ]


# -- 8. pipeline bubble larger than the formula
# ------------------------------------------------------


def _pipeline(f: _Fields) -> list[Finding]:
    from gpudoctor.explain import timings

    stage_ms = f.get("stage_ms")
    return timings.pipeline_hypotheses(
        pp=int(f.num("pp", positive=True)), microbatches=int(f.num("microbatches", positive=True)),
        measured_bubble=f.num("measured_bubble"),
        virtual_stages=int(f.num("virtual_stages", 1, positive=True)),
        stage_ms=stage_ms if isinstance(stage_ms, list) else None, p2p_ms=f.opt("p2p_ms"),
        recompute=f.get("recompute"), schedule=f.get("schedule"))


_HANDLERS: dict[str, Callable[[_Fields], list[Finding]]] = {
    "kernel": _kernel,
    "training-slowdown": _training_slowdown,
    "serving": _serving,
    "fp8-regression": _fp8,
    "oom-sharding": _oom_sharding,
    "allreduce-scaling": _allreduce,
    "triton-autotune": _triton,
    "pipeline-bubble": _pipeline,
}
