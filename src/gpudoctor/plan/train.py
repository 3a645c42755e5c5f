"""Training layouts ranked by predicted step time: FLOPs, communication, the bubble and memory.

``plan_training(spec, gpus=..., gpu=..., global_batch=..., seq=...)`` enumerates DP x TP x PP x CP
x ZeRO x micro-batch x checkpointing, keeps the layouts whose ``gpudoctor memory`` estimate fits
the card, predicts each one's step time and ranks them. The pieces are pure functions
(``step_flops``, ``bubble_fraction``, ``predict_step``) so a benchmark can price one layout.

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
- Communication is priced by ``gpudoctor.plan.collectives.predict`` when that module exists, else
  by an alpha-beta fallback; what each axis sends and how much of it is exposed is in plan/comm.py.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from gpudoctor.core.flops import step_flops
from gpudoctor.core.layout import CHECKPOINTING, Layout, bubble_fraction
from gpudoctor.core.spec import ModelSpec
from gpudoctor.errors import InputError
from gpudoctor.plan.calibration import (
    EAGER_KERNELS_PER_LAYER,
    Calibration,
    launch_gap,
    load_calibration,
    microbatch_times,
)
from gpudoctor.plan.comm import (
    BUCKET_BYTES,
    DEFAULT_FABRIC,
    Net,
    cp_comm,
    dp_comm,
    dp_overlap,
    make_net,
    pp_comm,
    tp_comm,
)
from gpudoctor.plan.limits import check_gpus, gib, half_precision, plural
from gpudoctor.plan.pins import Pins, check_pins, whole
from gpudoctor.plan.traffic import (
    dp_copy_bytes,
    elementwise_kinds,
    elementwise_seconds,
    implementation,
)

BYTES_BF16 = 2

# Fraction of the datasheet dense bf16 peak that a GEMM of a training step reaches, by its narrower
# per-GPU dimension, min(N, K) (a row-parallel projection at TP 8 has K = hidden / 8, the column-parallel
# one beside it N = 3 hidden / 8: each is classed by its own shape). ASSUMPTIONS, not measurements: cuBLAS reaches
# ~0.75 of the H100 SXM datasheet on 8192-wide bf16 GEMMs and less on narrow ones; Megatron-LM
# (Narayanan et al. 2021) reported 0.44-0.52 of the A100 peak end to end, which includes
# elementwise kernels, communication and the bubble. With --bench (a `gpudoctor bench --json` file)
# the measured (M, N, K) grid replaces this table (plan/calibration.py).
GEMM_EFFICIENCY = ((4096, 0.72), (2048, 0.68), (1024, 0.62), (512, 0.52), (0, 0.40))
# Micro-batches with fewer tokens than this run GEMMs too short to fill the card: efficiency is
# scaled by tokens / SMALL_M_TOKENS (assumption).
SMALL_M_TOKENS = 1024

# Within this fraction of the fastest step time the prediction cannot tell layouts apart; there the
# seed's rule decides: the simplest layout (fewest parallel axes, lowest ZeRO stage) comes first.
TIE_TOLERANCE = 0.02

MICROBATCHES = (1, 2, 4, 8)

ASSUMPTIONS = (
    "bf16 weights and gradients with fp32 master weights and Adam moments (16 bytes/parameter)",
    ("GEMM efficiency per width class (GEMM_EFFICIENCY) is an assumption: 0.72 of the datasheet "
    "bf16 peak for GEMMs whose narrower side (N or K, per GPU) is >= 4096, down to 0.40 below 512"),
    "attention is causal with a FlashAttention-style kernel: half the s x s score and context work",
    ("memory-bound work (norms, activations, RoPE, residual adds, the loss, the optimizer, DDP/FSDP "
    "copies) priced per implementation (plan/traffic.py): eager-hf counted op by op from Hugging Face's "
    "eager code and torch.optim.AdamW foreach, fused as 4 passes over the saved activations and a fused "
    "mixed-precision Adam; every op at the HBM bandwidth (strided/broadcast kernels' lower rate is not priced)"),
    "NCCL kernels overlapping compute do not slow it (not priced)",
    ("DP gradient all-reduce / ZeRO reduce-scatter is bucketed and overlapped with the last "
    "micro-batch's backward; the last bucket (1/layers of it) stays exposed"),
    "ZeRO-1/2 all-gather the updated parameters after the step: exposed",
    ("ZeRO-3/FSDP gathers each layer's parameters in forward and backward and reduce-scatters its "
    "gradients every micro-batch, overlapped with that layer's compute up to its length"),
    ("TP all-reduces (or, with sequence parallelism, all-gather + reduce-scatter: the same bytes, "
    "Korthikanti et al. 2022 sec. 4.2.2) are exposed, not overlapped; selective recompute adds none"),
    ("PP sends one activation forward and one gradient backward per micro-batch per stage boundary, "
    "exposed; the last stage also runs the LM head (imbalance counted)"),
    ("PP with TP > 1: Megatron-LM's scatter/gather (Narayanan et al. 2021 sec. 4.1) is assumed on: "
    "each TP rank sends b*s*h/t over the fabric, then an NVLink all-gather of b*s*h (none with "
    "sequence parallelism, whose activations are already split)"),
    ("CP all-gathers K/V in forward and reduce-scatters dK/dV in backward per layer, overlapped "
    "with that layer's attention"),
    "expert parallelism (MoE all-to-all) is not modelled",
)
COMPUTE_ASSUMED = "assumed: FLOPs x datasheet bf16 peak x GEMM_EFFICIENCY (no --bench)"
# Under ZeRO-3 the weights, gradients and Adam states are spread over every GPU; a layout needs at least
# this share of the card left for them (the rest for activations, buffers and the allocator's slack)
# before more GPUs are what is missing.
STATES_SHARE = 0.8


def calibrated_assumptions(cal: Calibration) -> tuple[str, ...]:
    """ASSUMPTIONS with what --bench measured in place of what it replaces: the assumed GEMM
    efficiency; with its elementwise / optimizer / overlap sections, the unpriced kernel kinds and
    the NCCL-free overlap."""
    attention = ("attention core at the measured causal SDPA rate for its sequence length and head dim"
                 if cal.attention else "attention core at the assumed GEMM efficiency (the bench has no attention grid)")
    measured = (f"GEMMs timed at their own (M, N, K) on the measured bf16 grid of {cal.path} ({cal.gpu}, "
                f"{cal.measured_utc}): separate q, k, v, o, gate, up, down projections, forward and both "
                f"backward GEMMs; {attention}; HBM work at the measured {cal.hbm_bytes_per_s / 1e12:.2f} TB/s; "
                f"launch gap from {EAGER_KERNELS_PER_LAYER} eager kernels per layer x the measured launch time")
    extra = []
    if cal.elementwise:
        rates = ", ".join(f"{k} {v / 1e12:.2f}" for k, v in cal.elementwise.items())
        extra.append(f"eager-hf elementwise ops each at the measured rate of its kind (TB/s: {rates}; "
                     "plan/traffic.py classifies them by operand layout); the fused model at the HBM rate")
    if cal.optimizer:
        extra.append("optimizer step at its measured rate: " + ", ".join(
            f"{k} {v / 1e12:.2f} TB/s" for k, v in cal.optimizer.items()))
    if cal.overlap:
        o = cal.overlap
        extra.append(f"compute overlapping DP communication runs {o.gemm:.2f}x (GEMMs) / {o.memory:.2f}x "
                     f"(memory-bound) slower and the collective {o.allreduce:.2f}x slower than alone (measured)")
    dropped = ("GEMM efficiency",) + (("memory-bound work",) if cal.elementwise else ()) + \
        (("NCCL kernels overlapping",) if cal.overlap else ())
    kept = tuple(a for a in ASSUMPTIONS if not (isinstance(a, str) and a.startswith(dropped)))
    if cal.elementwise:
        kept = (MEMORY_MEASURED,) + kept
    return (measured, *extra) + kept


MEMORY_MEASURED = ("memory-bound work (norms, activations, RoPE, residual adds, the loss, the optimizer, DDP/FSDP "
                   "copies) priced per implementation (plan/traffic.py): eager-hf counted op by op from Hugging "
                   "Face's eager code and torch.optim.AdamW foreach, fused as 4 passes over the saved activations "
                   "and a fused mixed-precision Adam")




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
    c = _counts(spec)
    return float(c.layers_total), float(c.total - c.layers_total)


@lru_cache(maxsize=64)
def _counts(spec: ModelSpec):
    from gpudoctor.core.params import count_params

    return count_params(spec)


def predict_step(spec: ModelSpec, lay: Layout, *, global_batch: int, seq: int, peak_flops: float,
                 net: Net, hbm_bytes_per_s: float = 3.35e12, causal: bool = True,
                 calibration: Calibration | None = None, impl: str = "eager-hf") -> dict[str, float]:
    """Seconds per optimizer step for one layout, by part (the ``breakdown`` of a Plan) plus
    ``step_s``, ``model_flops`` and ``hardware_flops``.

    ``peak_flops``: the datasheet bf16 rate. With ``calibration`` (plan/calibration.py) the matmuls
    and attention are timed at their measured shape rates, HBM work at the measured bandwidth
    (``hbm_bytes_per_s`` is then unused), and the launch gap is priced; without it, FLOPs at
    ``peak_flops`` x the assumed ``gemm_efficiency`` and HBM at ``HBM_EFFICIENCY`` x the datasheet.
    ``impl``: one of plan/traffic.py's IMPLEMENTATIONS (elementwise, optimizer and DP-wrapper bytes)."""
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
        t = microbatch_times(spec, calibration, microbatch=lay.microbatch, seq=seq, tp=lay.tp, cp=lay.cp,
                             layers=spec.layers / lay.pp, assumed_rate=peak_flops * eff, causal=causal)
        mb_fwd_s, mb_bwd_s = t.layers_fwd + t.head_fwd, t.layers_bwd + t.head_bwd
        compute_s = m * (mb_fwd_s + mb_bwd_s)
        recompute_s = m * {"full": t.layers_fwd, "selective": t.attention_fwd}.get(lay.checkpointing, 0.0)
        hbm = calibration.hbm_bytes_per_s
        eff = (fl.hardware / lay.pp / shard) / ((compute_s + recompute_s) * peak_flops)  # what it amounts to
    tp_s = tp_comm(spec, lay, seq, m, layers_stage, net)
    cp_s = cp_comm(spec, lay, seq, m, layers_stage, net, mb_fwd_s)
    pp_s = pp_comm(spec, lay, seq, m, net)
    by_kind = elementwise_kinds(spec, lay, seq, layers_stage, code)
    memory_s = m * elementwise_seconds(by_kind, hbm, calibration.elementwise if calibration else None)
    launch_s = launch_gap(calibration, m, layers_stage, (compute_s + recompute_s + memory_s) / m)
    pipelined = compute_s + recompute_s + memory_s + launch_s + tp_s + cp_s + pp_s
    bubble_s = pipelined * bubble_fraction(lay.pp, m, lay.schedule, lay.virtual_stages)
    layer_p, other_p = _param_split(spec)
    local_params = (layer_p / lay.pp + other_p / (2 if lay.pp > 1 else 1)) / lay.tp
    grad_bytes = local_params * BYTES_BF16
    bwd_last_s = mb_bwd_s + recompute_s / m
    # PyTorch DDP: the embedding, ready last, is a bucket of its own when larger than the cap
    last = max(BUCKET_BYTES, _counts(spec).embedding * BYTES_BF16 / lay.tp) if code.dp_copies and lay.pp == 1 else 0.0
    overlap_s = 0.0
    if calibration is not None and calibration.overlap is not None and lay.dp > 1:
        # the overlapped stretch is backward / forward compute: GEMMs and elementwise in the step's mix
        slow = (calibration.overlap.compute(compute_s + recompute_s, memory_s), calibration.overlap.allreduce)
        dp_s, zero_s, overlap_s = dp_overlap(lay, grad_bytes, layers_stage, bwd_last_s, m, mb_fwd_s, recompute_s / m,
                                             net, last, slow)
    else:
        dp_s, zero_s = dp_comm(lay, grad_bytes, layers_stage, bwd_last_s, m, mb_fwd_s, recompute_s / m, net, last)
    opt_hbm = hbm_bytes_per_s if calibration is None else calibration.hbm_bytes_per_s
    if calibration is not None and calibration.optimizer is not None:
        opt_hbm = calibration.optimizer[code.optimizer_probe]  # bytes/s of that step, measured
    opt_s = local_params / (lay.dp if lay.zero else 1) * code.optimizer_bytes_per_param / opt_hbm
    copies = dp_copy_bytes(lay, local_params, code) * (m if lay.zero == 3 else 1)
    dp_copy_s = copies / (hbm_bytes_per_s * HBM_EFFICIENCY if calibration is None else calibration.hbm_bytes_per_s)
    parts = {"compute_s": compute_s, "recompute_s": recompute_s, "memory_s": memory_s, "launch_s": launch_s,
             "bubble_s": bubble_s, "tp_comm_s": tp_s, "cp_comm_s": cp_s, "pp_comm_s": pp_s, "dp_comm_s": dp_s,
             "zero_comm_s": zero_s, "overlap_s": overlap_s, "dp_copy_s": dp_copy_s, "optimizer_s": opt_s}
    return {**parts, "step_s": sum(parts.values()), "model_flops": fl.model,
            "hardware_flops": fl.hardware, "microbatches": float(m), "gemm_efficiency": eff}


HBM_EFFICIENCY = 0.8  # assumed share of the datasheet HBM bandwidth memory-bound kernels reach (no --bench)


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
    explanation: str  # why the winner beats the runner-up, in the seed's terms
    infeasible: str | None  # None, or the constraint no layout meets
    considered: int  # layouts priced (memory estimated)
    fitting: int  # layouts that fit
    comm_model: str  # "gpudoctor.plan.collectives" or "fallback alpha-beta"
    assumptions: tuple[str, ...] = ASSUMPTIONS
    compute_model: str = COMPUTE_ASSUMED  # or Calibration.label (--bench)

    def to_dict(self) -> dict:
        return {"model": self.model, "gpus": self.gpus, "gpu": self.gpu, "global_batch": self.global_batch,
                "seq": self.seq, "gpus_per_node": self.gpus_per_node, "fabric": self.fabric,
                "plans": [p.to_dict() for p in self.plans], "explanation": self.explanation,
                "infeasible": self.infeasible, "considered": self.considered, "fitting": self.fitting,
                "comm_model": self.comm_model, "compute_model": self.compute_model,
                "assumptions": list(self.assumptions)}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _check_inputs(gpus: int, global_batch: int, seq: int, gpus_per_node: int, top: int) -> None:
    check_gpus(gpus)
    check_gpus(gpus_per_node, "gpus-per-node")
    for name, v in (("global-batch", global_batch), ("seq", seq), ("top", top)):
        whole(name, v)
    if gpus > gpus_per_node and gpus % gpus_per_node:
        lo = gpus // gpus_per_node * gpus_per_node
        raise InputError(f"--gpus {gpus} is not a whole number of {gpus_per_node}-GPU nodes "
                         f"(--gpus-per-node {gpus_per_node}); use {lo} or {lo + gpus_per_node}")


def _shapes(spec: ModelSpec, gpus: int, seq: int, gpus_per_node: int,
            pinned_cp: int | None = None) -> list[tuple[int, int, int, int]]:
    """(dp, tp, pp, cp) with TP inside a node (dividing its GPUs) and dividing the heads (and compatible with the KV
    heads), PP dividing the layers, CP only for seq >= 8192 (or the one the user fixed)."""
    tps = [t for t in spec.tp_degrees(_divisors(spec.heads)) if min(gpus_per_node, gpus) % t == 0]
    cps = [pinned_cp] if pinned_cp else [c for c in (1, 2, 4) if c == 1 or (seq >= 8192 and seq % c == 0)]
    out = []
    for tp in tps:
        for cp in cps:
            for pp in _divisors(spec.layers):
                if gpus % (tp * pp * cp) == 0:
                    out.append((gpus // (tp * pp * cp), tp, pp, cp))
    return out


def plan_training(spec: str | ModelSpec, *, gpus: int, gpu: str = "h100-sxm", global_batch: int,
                  seq: int = 4096, gpus_per_node: int = 8, fabric: str | None = None, top: int = 5,
                  schedule: str = "1f1b", calibration: str | Path | Calibration | None = None,
                  sp: bool = True, impl: str = "eager-hf", pins: Pins | None = None,
                  nvls: bool = False) -> TrainPlanResult:
    """Every layout that fits ``gpu``'s memory, ranked by predicted step time (see module doc).
    ``calibration``: a ``gpudoctor bench --json`` file of this GPU (or its loaded Calibration).
    ``sp``: sequence parallelism on every layout with TP > 1 (it moves the same TP bytes and keeps
    less, so it is a switch, not an enumerated axis). Selective checkpointing is kept only where the
    memory planner says it saves memory over none (with SDPA/flash it saves nothing). ``impl``: what
    runs the step (plan/traffic.py's IMPLEMENTATIONS: eager-hf, fused or fused-noflash). ``pins``: layout values the
    user fixed (plan/pins.py), checked against the model first; the rest is enumerated. ``nvls``:
    NVLink SHARP on, for the all-reduces that stay inside one NVSwitch node (plan/collectives.py)."""
    implementation(impl)  # validates the name
    from gpudoctor.hardware.specs import require_spec
    from gpudoctor.memory import load_spec

    _check_inputs(gpus, global_batch, seq, gpus_per_node, top)
    bubble_fraction(2, 1, schedule)  # validates the name
    model = spec if isinstance(spec, ModelSpec) else load_spec(spec)
    hw = require_spec(gpu)
    dtype, peak, precision_note = half_precision(hw)
    cal = load_calibration(calibration, hw.key) if isinstance(calibration, (str, Path)) else calibration
    net = make_net(hw.key, gpus_per_node, fabric, nvls)
    pins = check_pins(pins or Pins(), heads=model.heads, kv_heads=model.kv_heads, layers=model.layers, gpus=gpus,
                      gpus_per_node=gpus_per_node, seq=seq, global_batch=global_batch,
                      checkpointing_choices=CHECKPOINTING)
    shapes = [s for s in _shapes(model, gpus, seq, gpus_per_node, pinned_cp=pins.cp)
              if global_batch % s[0] == 0 and pins.allows(*s)]
    if not shapes and pins.any():
        fixed = math.prod(v for v in (pins.dp, pins.tp, pins.pp) if v is not None)
        if None not in (pins.dp, pins.tp, pins.pp) and pins.cp is None and gpus > fixed:
            raise InputError(f"{pins.describe()} use {fixed} of the {gpus} GPUs and leave a factor of "
                             f"{gpus // fixed} to context parallelism, which is only tried at --seq >= 8192; "
                             f"fix --cp {gpus // fixed} or free a degree")
        raise InputError(f"no layout of {gpus} GPUs has {pins.describe()} and a data-parallel degree dividing "
                         f"--global-batch {global_batch}; free one of them or change --gpus")
    if not shapes:
        dps = sorted({s[0] for s in _shapes(model, gpus, seq, gpus_per_node)})
        near = sorted({(global_batch // d + k) * d for d in dps for k in (0, 1) if (global_batch // d + k) * d > 0},
                      key=lambda b: (abs(b - global_batch), b))[:2]
        raise InputError(f"--global-batch {global_batch} is not a multiple of any data-parallel degree possible "
                         f"for {model.name} on {gpus} GPUs (dp in {', '.join(map(str, dps))}); "
                         f"use {' or '.join(map(str, near))}")
    plans, considered, smallest = [], 0, None
    for dp, tp, pp, cp in shapes:
        zeros = (0, 1, 2, 3) if dp > 1 else (0,)
        for zero in zeros if pins.zero is None else (z for z in zeros if z == pins.zero):
            for ckpt in CHECKPOINTING if pins.checkpointing is None else (pins.checkpointing,):
                for mb in MICROBATCHES if pins.microbatch is None else (pins.microbatch,):
                    if (global_batch // dp) % mb:
                        continue
                    lay = Layout(dp, tp, pp, cp, zero, mb, ckpt, schedule, sp=sp)
                    considered += 1
                    est = _memory(model, hw.key, lay, global_batch, seq)
                    if est is not None and (smallest is None or est.total_bytes < smallest[0].total_bytes):
                        smallest = (est, lay)
                    if est is None or not est.fits:
                        break  # a larger micro-batch needs more memory still
                    if ckpt == "selective" and pins.checkpointing is None and _dominated(
                            model, hw.key, lay, est, global_batch, seq):
                        continue
                    plans.append(_price(model, lay, est, global_batch, seq, peak, net, hw.hbm_bytes_per_s, cal, impl))
    plans = _rank(plans)
    if not considered:  # only pins can leave nothing to price
        raise InputError(f"the fixed values leave no layout to price: {pins.describe(every=True)} "
                         f"{'needs dp > 1 (ZeRO shards over data-parallel ranks)' if pins.zero else 'admit none'}; "
                         "free one of them")
    if plans:
        infeasible = None
    elif pins.any() and smallest is not None:
        est, lay = smallest
        infeasible = (f"no layout with {pins.describe(every=True)} fits the {hw.name}'s "
                      f"{gib(hw.memory_bytes)}: the smallest peak, {gib(est.peak_bytes)} allocated "
                      f"({gib(est.total_bytes)} with the allocator's reserve and the CUDA context), is {_describe(lay)}; "
                      f"free a value or add GPUs")
    else:
        infeasible = _infeasible(model, hw, gpus, gpus_per_node, shapes, smallest, global_batch, seq)
    assumptions = ASSUMPTIONS if cal is None else calibrated_assumptions(cal)
    if precision_note:
        assumptions = (precision_note, *assumptions)
    return TrainPlanResult(
        model=model.name, gpus=gpus, gpu=hw.key, global_batch=global_batch, seq=seq,
        gpus_per_node=gpus_per_node, fabric=fabric or DEFAULT_FABRIC, plans=plans[:top],
        explanation=_explain(plans, gpus, gpus_per_node, hw.memory_bytes, model, hw.key, global_batch, seq) if plans else "",
        infeasible=infeasible, considered=considered, fitting=len(plans),
        comm_model="gpudoctor.plan.collectives" if net.use_predict else "fallback alpha-beta",
        assumptions=assumptions,
        compute_model=COMPUTE_ASSUMED.replace("bf16", dtype) if cal is None else cal.label)


def _dominated(spec: ModelSpec, gpu: str, lay: Layout, est, global_batch: int, seq: int) -> bool:
    """Selective checkpointing that keeps as much as no checkpointing: more FLOPs for nothing."""
    plain = _memory(spec, gpu, replace(lay, checkpointing="none"), global_batch, seq)
    return plain is not None and plain.peak_bytes <= est.peak_bytes


def _complexity(p: Plan) -> tuple[int, int]:
    return (p.tp > 1) + (p.pp > 1) + (p.cp > 1), p.zero


def _rank(plans: list[Plan]) -> list[Plan]:
    """Fastest first, except that the simplest plan within ``TIE_TOLERANCE`` of the fastest leads."""
    plans = sorted(plans, key=lambda p: (p.step_s, _complexity(p)))
    if not plans:
        return plans
    close = [p for p in plans if p.step_s <= plans[0].step_s * (1 + TIE_TOLERANCE)]
    lead = min(close, key=lambda p: (_complexity(p), p.step_s))
    return [lead] + [p for p in plans if p is not lead]


_MEMORY_CACHE: dict = {}


def _memory(spec: ModelSpec, gpu: str, lay: Layout, global_batch: int, seq: int):
    """``gpudoctor memory`` for the layout (mixed precision: bf16 weights, fp32 master + Adam),
    cached; None when the memory planner refuses the combination."""
    from gpudoctor.memory import estimate_from_options

    m = global_batch // (lay.dp * lay.microbatch)
    key = (spec, gpu, lay, m, seq)
    if key not in _MEMORY_CACHE:
        try:
            _MEMORY_CACHE[key] = estimate_from_options(
                spec, gpu=gpu, suggest=False, batch=lay.microbatch, seq=seq, tp=lay.tp, pp=lay.pp,
                dp=lay.dp, zero=lay.zero if lay.zero < 3 else 0, fsdp=lay.zero == 3, sp=lay.sequence_parallel,
                cp=lay.cp, microbatches=m, checkpointing=lay.checkpointing, params_dtype="bf16",
                master_weights=True,
                virtual_stages=lay.virtual_stages if lay.schedule == "interleaved" and lay.pp > 1 else 1)
        except InputError:
            _MEMORY_CACHE[key] = None
    return _MEMORY_CACHE[key]


def _price(spec: ModelSpec, lay: Layout, est, global_batch: int, seq: int, peak: float, net: Net,
           hbm: float, cal: Calibration | None = None, impl: str = "eager-hf") -> Plan:
    r = predict_step(spec, lay, global_batch=global_batch, seq=seq, peak_flops=peak, net=net, hbm_bytes_per_s=hbm,
                     calibration=cal, impl=impl)
    breakdown = {k: v for k, v in r.items() if k.endswith("_s") and k != "step_s"}
    return Plan(dp=lay.dp, tp=lay.tp, pp=lay.pp, cp=lay.cp, zero=lay.zero, microbatch=lay.microbatch,
                microbatches=int(r["microbatches"]), checkpointing=lay.checkpointing, schedule=lay.schedule,
                step_s=r["step_s"], mfu=r["model_flops"] / (r["step_s"] * lay.gpus * peak),
                tokens_per_s=global_batch * seq / r["step_s"], peak_bytes=int(est.peak_bytes),
                total_bytes=int(est.total_bytes), breakdown=breakdown, sp=lay.sequence_parallel)


def _describe(lay: Layout) -> str:
    return (f"dp {lay.dp} x tp {lay.tp} x pp {lay.pp} x cp {lay.cp}, ZeRO-{lay.zero}, micro-batch {lay.microbatch}, "
            f"checkpointing {lay.checkpointing}")


def _infeasible(spec: ModelSpec, hw, gpus: int, gpus_per_node: int, shapes, smallest, global_batch: int,
                seq: int) -> str:
    """Why no layout fits, and what would: more GPUs when the weights, gradients and Adam states do not
    fit even fully sharded over all of them; otherwise the activations, with the layout that came
    closest and the --seq it would fit at."""
    n = _counts(spec).total
    _, tp, pp, _ = max(shapes, key=lambda s: (s[1] * s[2], s[1]))
    cap = hw.memory_bytes
    weights = n * BYTES_BF16 / (tp * pp)
    states = 16 * n / gpus
    head = f"no layout of {spec.name} fits the {hw.name}'s {gib(cap)} on {plural(gpus, 'GPU')}: "
    if states > STATES_SHARE * cap:
        need = math.ceil(16 * n / (STATES_SHARE * cap))
        need = need if need <= gpus_per_node else math.ceil(need / gpus_per_node) * gpus_per_node
        why = (f"the weights alone need {gib(weights)} per GPU at the largest TP x PP ({tp} x {pp}), and "
               if weights > cap else "")
        return (head + why + f"weights + gradients + Adam states (16 bytes per parameter, {gib(16 * n)}) need "
                f"{gib(states)} per GPU even fully sharded (ZeRO-3) over {plural(gpus, 'GPU')}, more than "
                f"{STATES_SHARE:.0%} of the card; need >= {max(need, gpus + 1):,} GPUs (with activations, more)")
    states_fit = (f"weights + gradients + Adam states (16 bytes per parameter) fit, {gib(states)} per GPU fully "
                  f"sharded (ZeRO-3) over {plural(gpus, 'GPU')}, so more GPUs will not help; ")
    beyond = (f"; --seq {seq:,} is also beyond the model's {spec.max_positions:,} positions"
              if spec.max_positions and seq > spec.max_positions else "")
    if smallest is None:
        return (head + states_fit + f"the memory planner accepts no layout at --seq {seq:,}: shorten --seq" + beyond)
    est, lay = smallest
    longest, at = max((_longest_seq(spec, hw.key, s, global_batch, seq) for s in shapes), key=lambda r: r[0])
    shorter = (f"--seq {longest:,} fits {_describe(at)}" if at else "no --seq fits: even one token per sequence "
               "needs more than the card, so check the model and --global-batch")
    return (head + states_fit + f"the activations do not: the layout that needs least, {_describe(lay)}, needs "
            f"{gib(est.total_bytes)}; shorten --seq ({shorter}) or fix a larger --cp than the 1, 2, 4 tried" + beyond)


def _longest_seq(spec: ModelSpec, gpu: str, shape: tuple[int, int, int, int], global_batch: int,
                 seq: int) -> tuple[int, Layout | None]:
    """The longest sequence below ``seq`` (rounded down to a multiple of 1024 above 4096) at which the
    shape's leanest layout (micro-batch 1, full checkpointing, ZeRO-3 where DP > 1) fits, with that
    layout; (0, None) if none does. CP > 1 counts only from 8192 tokens, where the planner tries it."""
    dp, tp, pp, cp = shape
    lay = Layout(dp, tp, pp, cp, 3 if dp > 1 else 0, 1, "full")

    def fits(k: int) -> bool:
        if cp > 1 and k * cp < 8192:
            return False
        est = _memory(spec, gpu, lay, global_batch, k * cp)
        return est is not None and bool(est.fits)

    lo, hi = 0, seq // cp  # fits(lo) or lo == 0; not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    best = lo * cp
    best = best // 1024 * 1024 if best > 4096 else best
    return (best, lay) if best else (0, None)


def _explain(plans: list[Plan], gpus: int, gpn: int, cap: int, spec: ModelSpec, gpu: str,
             global_batch: int, seq: int) -> str:
    """A few sentences in the seed's terms: the winner's layout, why each axis, and the margin over
    the runner-up (the fastest plan with a different DP x TP x PP x CP x ZeRO)."""
    w = plans[0]
    s = [f"Best: {w.label}, {w.step_s:.3g} s/step, MFU {w.mfu:.0%}."]
    fastest = min(plans, key=lambda p: p.step_s)
    if fastest is not w:
        s.append(f"It is within {TIE_TOLERANCE:.0%} of the fastest ({fastest.label}, {fastest.step_s:.3g} s), "
                 f"closer than this model can tell apart, and simpler: the lowest sharding that fits wins.")
    if gpus == 1:
        s.append("The model fits one GPU: no parallelism, no communication.")
    elif w.tp == w.pp == w.cp == 1 and w.zero == 0:
        s.append(f"The model fits without sharding -> DDP: replicate it on all {gpus:,} GPUs and all-reduce "
                 f"gradients, overlapped with backward ({w.breakdown['dp_comm_s'] * 1e3:.0f} ms exposed).")
    if w.tp > 1:
        s.append(f"TP={w.tp} inside the node over NVLink ({w.breakdown['tp_comm_s']:.3g} s of exposed all-reduces "
                 f"per step); TP never crosses a node: its per-layer all-reduces would run at network speed.")
    if w.pp > 1:
        where = "across nodes" if w.tp * w.cp * w.dp >= gpn else "inside the node"
        s.append(f"PP={w.pp} {where}: point-to-point traffic only, at the cost of a "
                 f"{w.breakdown['bubble_s']:.3g} s bubble with {w.microbatches} micro-batches.")
    if w.zero:
        base = _memory(spec, gpu, Layout(w.dp, w.tp, w.pp, w.cp, 0, w.microbatch, w.checkpointing, w.schedule,
                                         sp=w.sp or w.tp == 1), global_batch, seq)
        stage = {1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}[w.zero]
        if base is not None and not base.fits:
            s.append(f"{stage} because the same layout replicated (DDP) needs {gib(base.total_bytes)} "
                     f"of the {gib(cap)} card: shard the states over the {w.dp} DP ranks.")
        else:
            opt = w.breakdown["optimizer_s"]
            s.append(f"{stage} although DDP also fits: it shards the optimizer step ({opt * 1e3:.1f} ms instead of "
                     f"{opt * w.dp * 1e3:.1f} ms replicated) for {w.breakdown['zero_comm_s'] * 1e3:.1f} ms of "
                     f"exposed extra traffic.")
    if w.checkpointing != "none":
        s.append(f"{w.checkpointing.capitalize()} checkpointing is needed to fit "
                 f"(+{w.breakdown['recompute_s']:.3g} s of recompute).")
    runner = next((p for p in plans[1:] if (p.dp, p.tp, p.pp, p.cp, p.zero) != (w.dp, w.tp, w.pp, w.cp, w.zero)), None)
    if runner is not None:
        diff = {k: runner.breakdown[k] - w.breakdown.get(k, 0.0) for k in runner.breakdown}
        worst = max(diff, key=diff.get)
        gap = runner.step_s / w.step_s - 1
        if gap >= 0:
            s.append(f"Runner-up: {runner.label}, {gap:.1%} slower; it spends "
                     f"{diff[worst]:+.3g} s on {worst.removesuffix('_s').replace('_', ' ')}.")
        else:  # _rank put the simpler layout first: the difference is inside what the model can resolve
            s.append(f"Runner-up: {runner.label}, predicted {-gap:.1%} faster, which is within the "
                     f"{TIE_TOLERANCE:.0%} the model cannot resolve, so the simpler layout leads.")
    return " ".join(s)
