"""Training layouts ranked by predicted step time: FLOPs, communication, the bubble and memory.

This module is the cost model: ``Layout``, the pipeline bubble and ``predict_step``, pure functions
(``step_flops``, ``bubble_fraction``, ``predict_step``) so a benchmark can price one layout, and the
planner's result types (``Plan``, ``TrainPlanResult``). The search over layouts,
``plan_training(spec, gpus=..., gpu=..., global_batch=..., seq=...)``, is plan/train_search.py; the
explanation in words is plan/train_prose.py.

The model, and what it assumes (each also in ``ASSUMPTIONS``, printed with every answer):

- FLOPs are counted exactly for the spec's matmuls (projections with GQA/MLA, MLP or top-k MoE
  experts plus router, LM head) and attention scores/context (core/flops.py). Backward = 2 x
  forward; full activation checkpointing adds one forward of the decoder layers, selective
  checkpointing one forward of the attention cores (Korthikanti et al. 2022).
- Compute time = FLOPs / (GPUs x datasheet bf16 peak x ``gemm_efficiency``), the efficiency an
  assumed constant per GEMM width class (``GEMM_EFFICIENCY``), not a measurement. With a bench file
  (``--bench``, ``calibration=``): each GEMM timed at its own shape on the measured grid, attention
  at the measured SDPA rate, HBM work at the measured bandwidth, plus a launch-gap term
  (plan/calibration.py).
- Communication is priced by ``gpudoctor.plan.collective_cost.predict`` (the collective model validated
  in benchmarks/BENCHMARKS-plan.md); what each axis sends and how much of it is exposed is in plan/comm.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache

from gpudoctor.core.flops import step_flops
from gpudoctor.core.layout import Layout, bubble_fraction
from gpudoctor.core.spec import ModelSpec
from gpudoctor.plan.calibration import (
    EAGER_KERNELS_PER_LAYER,
    Calibration,
    launch_gap,
    microbatch_times,
)
from gpudoctor.plan.comm import (  # noqa: F401 - make_net re-exported: a benchmark prices one layout with it
    BUCKET_BYTES,
    Net,
    cp_comm,
    dp_comm,
    dp_overlap,
    make_net,
    pp_comm,
    tp_backward_allreduces,
    tp_comm,
)
from gpudoctor.plan.traffic import (
    dp_copy_bytes,
    elementwise_kinds,
    elementwise_seconds,
    implementation,
)

BYTES_BF16 = 2

# Fraction of the datasheet dense bf16 peak that a GEMM of a training step reaches, by its narrower
# per-GPU dimension, min(N, K) (a row-parallel projection at TP 8 has K = hidden / 8, the
# column-parallel one beside it N = 3 hidden / 8: each is classed by its own shape). ASSUMPTIONS,
# not measurements: cuBLAS reaches ~0.75 of the H100 SXM datasheet on 8192-wide bf16 GEMMs and less
# on narrow ones; Megatron-LM (Narayanan et al. 2021) reported 0.44-0.52 of the A100 peak end to
# end, which includes elementwise kernels, communication and the bubble. With --bench (a `gpudoctor
# bench --json` file) the measured (M, N, K) grid replaces this table (plan/calibration.py).
GEMM_EFFICIENCY = ((4096, 0.72), (2048, 0.68), (1024, 0.62), (512, 0.52), (0, 0.40))
# Micro-batches with fewer tokens than this run GEMMs too short to fill the card: efficiency is
# scaled by tokens / SMALL_M_TOKENS (assumption).
SMALL_M_TOKENS = 1024

# Within this fraction of the fastest step time the prediction cannot tell layouts apart; there the
# simplest layout (fewest parallel axes, lowest ZeRO stage) comes first: less to run and debug.
TIE_TOLERANCE = 0.02


# The memory side (weights, gradients, optimizer states per parameter) is `gpudoctor memory`'s, at
# the precision options given: plan_training prints its line (memory.options.precision_summary)
# first.
ASSUMPTIONS = (
    ("step time priced as 16-bit matmuls and bf16 gradient traffic whatever the precision options, "
     "which set the memory only"),
    ("GEMM efficiency per width class (GEMM_EFFICIENCY) is an assumption: 0.72 of the datasheet "
    "bf16 peak for GEMMs whose narrower side (N or K, per GPU) is >= 4096, down to 0.40 below 512"),
    "attention is causal with a FlashAttention-style kernel: half the s x s score and context work",
    ("memory-bound work (norms, activations, RoPE, residual adds, the loss, the optimizer, "
    "DDP/FSDP copies) priced per implementation (plan/traffic.py): eager-hf counted op by op from "
    "Hugging Face's eager code and torch.optim.AdamW foreach, fused as 4 passes over the saved "
    "activations and a fused mixed-precision Adam; every op at the HBM bandwidth "
    "(strided/broadcast kernels' lower rate is not priced)"),
    "NCCL kernels overlapping compute do not slow it (not priced)",
    ("DP gradient all-reduce / ZeRO reduce-scatter is bucketed and overlapped with the last "
    "micro-batch's backward; the last bucket (1/layers of it) stays exposed"),
    "ZeRO-1/2 all-gather the updated parameters after the step: exposed",
    ("ZeRO-3/FSDP gathers each layer's parameters in forward and backward and reduce-scatters its "
    "gradients every micro-batch, overlapped with that layer's compute up to its length"),
    ("TP all-reduces (or, with sequence parallelism, all-gather + reduce-scatter: the same bytes, "
    "Korthikanti et al. 2022 sec. 4.2.2) are exposed, not overlapped; selective recompute "
    "adds none; 4 per layer (Megatron), 7 for eager-hf without sequence parallelism (torch's "
    "ColwiseParallel all-reduces the input gradient of each of q, k, v, gate, up)"),
    ("PP sends one activation forward and one gradient backward per micro-batch per stage "
    "boundary, exposed; the last stage also runs the LM head (imbalance counted)"),
    ("PP with TP > 1: Megatron-LM's scatter/gather (Narayanan et al. 2021 sec. 4.1) is assumed on: "
    "each TP rank sends b*s*h/t over the fabric, then an NVLink all-gather of b*s*h (none with "
    "sequence parallelism, whose activations are already split)"),
    ("CP all-gathers K/V in forward and reduce-scatters dK/dV in backward per layer, overlapped "
    "with that layer's attention"),
    "expert parallelism (MoE all-to-all) is not modelled",
)
COMPUTE_ASSUMED = "assumed: FLOPs x datasheet bf16 peak x GEMM_EFFICIENCY (no --bench)"


def calibrated_assumptions(cal: Calibration) -> tuple[str, ...]:
    """ASSUMPTIONS with what --bench measured in place of what it replaces: the assumed GEMM
    efficiency; with its elementwise / optimizer / overlap sections, the unpriced kernel kinds and
    the NCCL-free overlap."""
    attention = ("attention core at the measured causal SDPA rate for its sequence length and "
                 "head dim"
                 if cal.attention
                 else "attention core at the assumed GEMM efficiency (the bench has no "
                      "attention grid)")
    measured = (f"GEMMs timed at their own (M, N, K) on the measured bf16 grid of {cal.path} "
                f"({cal.gpu}, {cal.measured_utc}): separate q, k, v, o, gate, up, down "
                f"projections, forward and both backward GEMMs; {attention}; HBM work at the "
                f"measured {cal.hbm_bytes_per_s / 1e12:.2f} TB/s; launch gap from "
                f"{EAGER_KERNELS_PER_LAYER} eager kernels per layer x the measured launch time")
    extra = []
    if cal.elementwise:
        rates = ", ".join(f"{k} {v / 1e12:.2f}" for k, v in cal.elementwise.items())
        extra.append("eager-hf elementwise ops each at the measured rate of its kind (TB/s: "
                     f"{rates}; plan/traffic.py classifies them by operand layout); the fused "
                     "model at the HBM rate")
    if cal.optimizer:
        extra.append("optimizer step at its measured rate: " + ", ".join(
            f"{k} {v / 1e12:.2f} TB/s" for k, v in cal.optimizer.items()))
    if cal.overlap:
        o = cal.overlap
        extra.append(f"compute overlapping DP communication runs {o.gemm:.2f}x (GEMMs) / "
                     f"{o.memory:.2f}x (memory-bound) slower and the collective {o.allreduce:.2f}x "
                     "slower than alone (measured)")
    dropped = ("GEMM efficiency",) + (("memory-bound work",) if cal.elementwise else ()) + \
        (("NCCL kernels overlapping",) if cal.overlap else ())
    kept = tuple(a for a in ASSUMPTIONS if not (isinstance(a, str) and a.startswith(dropped)))
    if cal.elementwise:
        kept = (MEMORY_MEASURED,) + kept
    return (measured, *extra) + kept


MEMORY_MEASURED = ("memory-bound work (norms, activations, RoPE, residual adds, the loss, the "
                   "optimizer, DDP/FSDP copies) priced per implementation (plan/traffic.py): "
                   "eager-hf counted op by op from Hugging Face's eager code and torch.optim.AdamW "
                   "foreach, fused as 4 passes over the saved activations and a fused "
                   "mixed-precision Adam")


def gemm_efficiency(spec: ModelSpec, tp: int, tokens_per_microbatch: int) -> float:
    """Assumed fraction of peak for the step's GEMMs: each of a decoder layer's per-GPU GEMMs at the
    ``GEMM_EFFICIENCY`` of its narrower side, weighted by its FLOPs (the time-weighted mean)."""
    from gpudoctor.plan.calibration import layer_gemms

    flops = seconds = 0.0
    for _, n, k, count in layer_gemms(spec, 0, max(1, tokens_per_microbatch), tp):
        work = n * k * count  # x 2 M, the same for every GEMM of the layer
        flops += work
        seconds += work / next(e for w, e in GEMM_EFFICIENCY if min(n, k) >= w)
    eff = flops / seconds if seconds else GEMM_EFFICIENCY[-1][1]
    return eff * min(1.0, tokens_per_microbatch / SMALL_M_TOKENS)


def _param_split(spec: ModelSpec) -> tuple[float, float]:
    """(decoder-layer parameters, embedding + head + final norm parameters)."""
    c = param_counts(spec)
    return float(c.layers_total), float(c.total - c.layers_total)


@lru_cache(maxsize=64)
def param_counts(spec: ModelSpec):
    """``gpudoctor memory``'s parameter counts of the spec (cached: the search prices many layouts
    of one model)."""
    from gpudoctor.core.params import count_params

    return count_params(spec)


def predict_step(spec: ModelSpec, lay: Layout, *, global_batch: int, seq: int, peak_flops: float,
                 net: Net, hbm_bytes_per_s: float = 3.35e12, causal: bool = True,
                 calibration: Calibration | None = None,
                 impl: str = "eager-hf") -> dict[str, float]:
    """Seconds per optimizer step for one layout, by part (the ``breakdown`` of a Plan) plus
    ``step_s``, ``model_flops`` and ``hardware_flops``.

    ``peak_flops``: the datasheet bf16 rate. With ``calibration`` (plan/calibration.py) the matmuls
    and attention are timed at their measured shape rates, HBM work at the measured bandwidth
    (``hbm_bytes_per_s`` is then unused), and the launch gap is priced; without it, FLOPs at
    ``peak_flops`` x the assumed ``gemm_efficiency`` and HBM at ``HBM_EFFICIENCY`` x the datasheet.
    ``impl``: one of plan/traffic.py's IMPLEMENTATIONS (elementwise, optimizer and DP-wrapper
    bytes)."""
    code = implementation(impl)
    m = global_batch // (lay.dp * lay.microbatch)  # micro-batches per pipeline
    fl = step_flops(spec, global_batch, seq, lay.checkpointing, causal)
    eff = gemm_efficiency(spec, lay.tp, lay.microbatch * seq // lay.cp)
    shard = lay.dp * lay.tp * lay.cp  # GPUs sharing one stage's work
    layers_stage = max(1, spec.layers // lay.pp)
    if calibration is None:
        rate = peak_flops * eff
        # the last stage holds layers/pp layers and the LM head: it sets the pipeline's pace
        layers_fwd_stage = fl.layers_fwd / lay.pp
        compute_s = 3 * (layers_fwd_stage + fl.head_fwd) / (shard * rate)
        recompute_s = (fl.recompute / lay.pp) / (shard * rate)
        mb_fwd_s = (layers_fwd_stage + fl.head_fwd) / (shard * rate) / m  # one micro-batch, forward
        mb_bwd_s = 2 * mb_fwd_s
        hbm = hbm_bytes_per_s * HBM_EFFICIENCY
    else:
        t = microbatch_times(spec, calibration, microbatch=lay.microbatch, seq=seq,
                             tp=lay.tp, cp=lay.cp, layers=spec.layers / lay.pp,
                             assumed_rate=peak_flops * eff, causal=causal)
        mb_fwd_s, mb_bwd_s = t.layers_fwd + t.head_fwd, t.layers_bwd + t.head_bwd
        compute_s = m * (mb_fwd_s + mb_bwd_s)
        recompute_s = m * {"full": t.layers_fwd,
                           "selective": t.attention_fwd}.get(lay.checkpointing, 0.0)
        hbm = calibration.hbm_bytes_per_s
        # what it amounts to
        eff = (fl.hardware / lay.pp / shard) / ((compute_s + recompute_s) * peak_flops)
    tp_s = tp_comm(spec, lay, seq, m, layers_stage, net,
                   tp_backward_allreduces(spec, lay, code.tp_per_projection))
    cp_s = cp_comm(spec, lay, seq, m, layers_stage, net, mb_fwd_s)
    pp_s = pp_comm(spec, lay, seq, m, net)
    by_kind = elementwise_kinds(spec, lay, seq, layers_stage, code)
    memory_s = m * elementwise_seconds(by_kind, hbm,
                                       calibration.elementwise if calibration else None)
    launch_s = launch_gap(calibration, m, layers_stage, (compute_s + recompute_s + memory_s) / m)
    pipelined = compute_s + recompute_s + memory_s + launch_s + tp_s + cp_s + pp_s
    bubble_s = pipelined * bubble_fraction(lay.pp, m, lay.schedule, lay.virtual_stages)
    layer_p, other_p = _param_split(spec)
    local_params = (layer_p / lay.pp + other_p / (2 if lay.pp > 1 else 1)) / lay.tp
    grad_bytes = local_params * BYTES_BF16
    bwd_last_s = mb_bwd_s + recompute_s / m
    # PyTorch DDP: the embedding, ready last, is a bucket of its own when larger than the cap
    last = max(BUCKET_BYTES, param_counts(spec).embedding * BYTES_BF16 / lay.tp) if code.dp_copies and lay.pp == 1 else 0.0
    overlap_s = 0.0
    if calibration is not None and calibration.overlap is not None and lay.dp > 1:
        # the overlapped stretch is backward / forward compute: GEMMs and elementwise in the step's
        # mix
        slow = (calibration.overlap.compute(compute_s + recompute_s, memory_s),
                calibration.overlap.allreduce)
        dp_s, zero_s, overlap_s = dp_overlap(lay, grad_bytes, layers_stage, bwd_last_s, m, mb_fwd_s,
                                             recompute_s / m, net, last, slow)
    else:
        dp_s, zero_s = dp_comm(lay, grad_bytes, layers_stage, bwd_last_s, m, mb_fwd_s,
                               recompute_s / m, net, last)
    opt_hbm = hbm_bytes_per_s if calibration is None else calibration.hbm_bytes_per_s
    if calibration is not None and calibration.optimizer is not None:
        opt_hbm = calibration.optimizer[code.optimizer_probe]  # bytes/s of that step, measured
    opt_s = local_params / (lay.dp if lay.zero else 1) * code.optimizer_bytes_per_param / opt_hbm
    copies = dp_copy_bytes(lay, local_params, code) * (m if lay.zero == 3 else 1)
    dp_copy_s = copies / (hbm_bytes_per_s * HBM_EFFICIENCY
                          if calibration is None else calibration.hbm_bytes_per_s)
    parts = {"compute_s": compute_s, "recompute_s": recompute_s, "memory_s": memory_s,
             "launch_s": launch_s, "bubble_s": bubble_s, "tp_comm_s": tp_s, "cp_comm_s": cp_s,
             "pp_comm_s": pp_s, "dp_comm_s": dp_s,
             "zero_comm_s": zero_s, "overlap_s": overlap_s, "dp_copy_s": dp_copy_s,
             "optimizer_s": opt_s}
    return {**parts, "step_s": sum(parts.values()), "model_flops": fl.model,
            "hardware_flops": fl.hardware, "microbatches": float(m), "gemm_efficiency": eff}


# assumed share of the datasheet HBM bandwidth memory-bound kernels reach (no --bench)
HBM_EFFICIENCY = 0.8


# ---------------------------------------------------------------------------------------------
# The planner


@dataclass(frozen=True)
class Plan:
    """One layout that fits, with its predicted step time."""

    dp: int
    tp: int
    pp: int
    cp: int
    zero: int  # 0: DDP; 1, 2: ZeRO stages; 3: ZeRO-3 / FSDP
    microbatch: int  # sequences per micro-batch per DP rank
    microbatches: int  # micro-batches per step (gradient accumulation / pipeline)
    checkpointing: str  # "none", "selective" or "full"
    schedule: str
    step_s: float
    mfu: float  # model FLOPs (no recompute) / (step_s x GPUs x datasheet bf16 peak)
    tokens_per_s: float
    peak_bytes: int  # allocated at the peak (gpudoctor memory)
    total_bytes: int  # reserved + CUDA context, what is compared with the card
    breakdown: dict[str, float] = field(default_factory=dict)
    sp: bool = False  # sequence parallelism on (TP > 1 only)

    @property
    def label(self) -> str:
        z = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3/FSDP"}[self.zero] if self.dp > 1 else "no DP"
        tp = f"TP={self.tp}" + (" (SP)" if self.sp else "")
        parts = [f"DP={self.dp}", tp, f"PP={self.pp}"] + ([f"CP={self.cp}"] if self.cp > 1 else [])
        return f"{' x '.join(parts)} {z}, micro-batch {self.microbatch}, checkpointing {self.checkpointing}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["label"] = self.label
        return d


@dataclass(frozen=True)
class TrainPlanResult:
    model: str
    gpus: int
    gpu: str
    global_batch: int
    seq: int
    gpus_per_node: int
    fabric: str
    plans: list[Plan]  # the best ``top``, fastest first
    explanation: str  # why the winner beats the runner-up, in a few sentences (plan/train_prose.py)
    infeasible: str | None  # None, or the constraint no layout meets
    considered: int  # layouts priced (memory estimated)
    fitting: int  # layouts that fit
    comm_model: str  # what priced the collectives: COMM_MODEL ("gpudoctor.plan.collective_cost")
    assumptions: tuple[str, ...] = ASSUMPTIONS
    compute_model: str = COMPUTE_ASSUMED  # or Calibration.label (--bench)
    memory_model: str = ""  # the bytes per parameter the memory estimates assumed (memory.options.precision_summary)

    def to_dict(self) -> dict:
        return {"model": self.model, "gpus": self.gpus, "gpu": self.gpu,
                "global_batch": self.global_batch, "seq": self.seq,
                "gpus_per_node": self.gpus_per_node, "fabric": self.fabric,
                "plans": [p.to_dict() for p in self.plans], "explanation": self.explanation,
                "infeasible": self.infeasible, "considered": self.considered,
                "fitting": self.fitting,
                "comm_model": self.comm_model, "compute_model": self.compute_model,
                "memory_model": self.memory_model,
                "assumptions": list(self.assumptions)}
