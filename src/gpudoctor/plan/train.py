"""Training layouts ranked by predicted step time: FLOPs, communication, the bubble and memory.

``plan_training(spec, gpus=..., gpu=..., global_batch=..., seq=...)`` enumerates DP x TP x PP x CP
x ZeRO x micro-batch x checkpointing, keeps the layouts whose ``gpudoctor memory`` estimate fits
the card, predicts each one's step time and ranks them. The pieces are pure functions
(``step_flops``, ``bubble_fraction``, ``predict_step``) so a benchmark can price one layout.

The model, and what it assumes (each also in ``ASSUMPTIONS``, printed with every answer):

- FLOPs are counted exactly for the spec's matmuls (projections with GQA/MLA, MLP or top-k MoE
  experts plus router, LM head) and attention scores/context; elementwise work is not counted.
  Backward = 2 x forward; full activation checkpointing adds one forward of the decoder layers.
- Compute time = FLOPs / (GPUs x datasheet bf16 peak x ``gemm_efficiency``), the efficiency an
  assumed constant per GEMM width class (``GEMM_EFFICIENCY``), not a measurement. With a bench file
  (``--bench``, ``calibration=``): each GEMM timed at its own shape on the measured grid, attention
  at the measured SDPA rate, HBM work at the measured bandwidth, plus a launch-gap term
  (plan/calibration.py).
- Communication is priced by ``gpudoctor.plan.collectives.predict`` when that module exists, else
  by the alpha-beta fallback here (``_fallback_time``). Ranks are laid out TP innermost, then
  CP, DP, PP (Megatron's order): a group is intra-node when its span fits ``gpus_per_node``.
- Overlap rules are in ``_dp_comm``, ``_zero3_comm``, ``_tp_comm``, ``_cp_comm``, ``_pp_comm``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from gpudoctor.errors import InputError
from gpudoctor.memory.spec import ModelSpec
from gpudoctor.plan.calibration import (
    EAGER_KERNELS_PER_LAYER,
    Calibration,
    launch_gap,
    load_calibration,
    microbatch_times,
)

BYTES_BF16 = 2

# Fraction of the datasheet dense bf16 peak that the GEMMs of a training step reach, by the
# per-GPU output width of the GEMMs (hidden / TP). ASSUMPTIONS, not measurements: cuBLAS reaches
# ~0.75 of the H100 SXM datasheet on 8192-wide bf16 GEMMs and less on narrow ones; Megatron-LM
# (Narayanan et al. 2021) reported 0.44-0.52 of the A100 peak end to end, which includes
# elementwise kernels, communication and the bubble. With --bench (a `gpudoctor bench --json` file)
# the measured (M, N, K) grid replaces this table (plan/calibration.py).
GEMM_EFFICIENCY = ((4096, 0.72), (2048, 0.68), (1024, 0.62), (512, 0.52), (0, 0.40))
# Micro-batches with fewer tokens than this run GEMMs too short to fill the card: efficiency is
# scaled by tokens / SMALL_M_TOKENS (assumption).
SMALL_M_TOKENS = 1024

# Fallback interconnect (used only when gpudoctor.plan.collectives is absent): achievable bus
# bandwidth per GPU. Intra-node: 0.4 x the NVLink total both directions (H100/H200 NVLink 4:
# 900 GB/s -> 360 GB/s busbw, what nccl-tests all_reduce reaches on 8 x H100 SXM). Inter-node:
# one NIC per GPU at ~80% of line rate (IB NDR 400 Gb/s -> 40 GB/s).
FABRIC_BYTES_PER_S = {"ib-ndr": 40e9, "ib-xdr": 80e9, "ib-hdr": 20e9, "roce": 40e9,
                      "pcie4": 20e9, "pcie5": 40e9}
DEFAULT_FABRIC = "ib-ndr"
NVLINK_EFFICIENCY = 0.4
PCIE_INTRA_BYTES_PER_S = 20e9
ALPHA_INTRA_S = 2e-6  # per ring step
ALPHA_INTER_S = 6e-6

# Adam step: read/write of weights, grads, fp32 master and two fp32 moments, ~36 bytes per local
# parameter through HBM (memory-bound elementwise kernel).
OPTIMIZER_BYTES_PER_PARAM = 36

# Gradient buckets: PyTorch DDP's bucket_cap_mb default (25 MB); ZeRO-1/2 use the same size here.
BUCKET_BYTES = 25 * 1024**2

# Within this fraction of the fastest step time the prediction cannot tell layouts apart; there the
# seed's rule decides: the simplest layout (fewest parallel axes, lowest ZeRO stage) comes first.
TIE_TOLERANCE = 0.02

SCHEDULES = ("1f1b", "interleaved", "zb-h1")
MICROBATCHES = (1, 2, 4, 8)
CHECKPOINTING = ("none", "full")

ASSUMPTIONS = (
    "bf16 weights and gradients with fp32 master weights and Adam moments (16 bytes/parameter)",
    ("GEMM efficiency per width class (GEMM_EFFICIENCY) is an assumption: 0.72 of the datasheet "
    "bf16 peak at >= 4096 columns per GPU down to 0.40 below 512"),
    "attention is causal with a FlashAttention-style kernel: half the s x s score and context work",
    "elementwise kernels (norms, activations, softmax) are not priced",
    ("DP gradient all-reduce / ZeRO reduce-scatter is bucketed and overlapped with the last "
    "micro-batch's backward; the last bucket (1/layers of it) stays exposed"),
    "ZeRO-1/2 all-gather the updated parameters after the step: exposed",
    ("ZeRO-3/FSDP gathers each layer's parameters in forward and backward and reduce-scatters its "
    "gradients every micro-batch, overlapped with that layer's compute up to its length"),
    "TP all-reduces (or SP all-gather + reduce-scatter) are exposed, not overlapped",
    ("PP sends one activation forward and one gradient backward per micro-batch per stage boundary, "
    "exposed; the last stage also runs the LM head (imbalance counted)"),
    ("CP all-gathers K/V in forward and reduce-scatters dK/dV in backward per layer, overlapped "
    "with that layer's attention"),
    "expert parallelism (MoE all-to-all) is not modelled",
)
COMPUTE_ASSUMED = "assumed: FLOPs x datasheet bf16 peak x GEMM_EFFICIENCY (no --bench)"


def calibrated_assumptions(cal: Calibration) -> tuple[str, ...]:
    """ASSUMPTIONS with the assumed GEMM efficiency replaced by what --bench measured."""
    attention = ("attention core at the measured causal SDPA rate for its sequence length and head dim"
                 if cal.attention else "attention core at the assumed GEMM efficiency (the bench has no attention grid)")
    measured = (f"GEMMs timed at their own (M, N, K) on the measured bf16 grid of {cal.path} ({cal.gpu}, "
                f"{cal.measured_utc}): separate q, k, v, o, gate, up, down projections, forward and both "
                f"backward GEMMs; {attention}; HBM work at the measured {cal.hbm_bytes_per_s / 1e12:.2f} TB/s; "
                f"launch gap from {EAGER_KERNELS_PER_LAYER} eager kernels per layer x the measured launch time")
    return (measured,) + tuple(a for a in ASSUMPTIONS if not (isinstance(a, str) and a.startswith("GEMM efficiency")))


# ---------------------------------------------------------------------------------------------
# FLOPs


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one optimizer step over the global batch (matmuls and attention only)."""

    layers_fwd: float  # every decoder layer, forward
    head_fwd: float  # LM head, forward
    recompute: float  # extra forward of the layers under full checkpointing (0 otherwise)

    @property
    def model(self) -> float:
        """Model FLOPs: forward + backward (2 x forward), no recompute (the MFU numerator)."""
        return 3 * (self.layers_fwd + self.head_fwd)

    @property
    def hardware(self) -> float:
        """What the GPUs execute: model FLOPs plus recomputation."""
        return self.model + self.recompute


def attended_pairs(seq: int, causal: bool, window: int | None = None) -> float:
    """Query-key pairs one sequence's attention computes. Non-causal: s^2. Causal: s^2 / 2 (what a
    FlashAttention kernel does, skipping masked blocks; the exact s(s+1)/2 differs by 1/s).
    A sliding window w < s: s*w - w^2/2 (causal)."""
    if window is not None and window < seq:
        return seq * window - window * window / 2 if causal else 2 * seq * window - window * window
    return seq * seq / 2 if causal else float(seq * seq)


def attention_flops(spec: ModelSpec, batch: int, seq: int, layer: int = 0, causal: bool = True) -> float:
    """Forward FLOPs of one attention block: projections + scores (QK^T) + context (PV)."""
    h, n, tokens = spec.hidden, spec.heads, batch * seq
    if spec.mla is not None:
        m = spec.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = h * n * qk if m.q_lora_rank is None else h * m.q_lora_rank + m.q_lora_rank * n * qk
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim)
        proj = 2 * tokens * (q + kv + n * m.v_head_dim * h)
        qk_d, v_d = qk, m.v_head_dim
    else:
        d, kv = spec.head_dim, spec.kv_heads
        proj = 2 * tokens * (h * n * d + 2 * h * kv * d + n * d * h)  # q, k, v, o with GQA
        qk_d = v_d = d
    window = None if layer in spec.full_attention_layers else spec.sliding_window
    pairs = attended_pairs(seq, causal, window)
    return proj + 2 * batch * pairs * n * (qk_d + v_d)  # QK^T and PV: 2 FLOPs per MAC each


def mlp_flops(spec: ModelSpec, batch: int, seq: int, layer: int = 0) -> float:
    """Forward FLOPs of one MLP block: dense (3 or 2 matmuls) or MoE (router, top_k routed
    experts per token, always-on shared MLP)."""
    h, tokens = spec.hidden, batch * seq
    mats = 3 if spec.gated_mlp else 2
    moe = spec.moe
    if moe is None or not moe.is_moe_layer(layer):
        return 2 * tokens * mats * h * spec.intermediate
    flops = 2 * tokens * h * moe.experts  # router
    flops += moe.top_k * 2 * tokens * 3 * h * moe.intermediate  # routed experts are gated
    shared = moe.shared_intermediate if moe.shared_intermediate is not None else moe.shared_experts * moe.intermediate
    return flops + 2 * tokens * mats * h * shared


def step_flops(spec: ModelSpec, batch: int, seq: int, checkpointing: str = "none",
               causal: bool = True) -> StepFlops:
    """FLOPs for ``batch`` sequences of ``seq`` tokens (forward, backward, recompute)."""
    layers = sum(attention_flops(spec, batch, seq, i, causal) + mlp_flops(spec, batch, seq, i)
                 for i in range(spec.layers))
    head = 2 * batch * seq * spec.hidden * spec.vocab
    return StepFlops(layers, head, layers if checkpointing == "full" else 0.0)


# ---------------------------------------------------------------------------------------------
# Pipeline bubble


def bubble_fraction(pp: int, microbatches: int, schedule: str = "1f1b", virtual_stages: int = 2) -> float:
    """Idle time over ideal compute time (Narayanan et al. 2021, sec. 2.2): 1F1B (p-1)/m;
    interleaved (p-1)/(v m); ZB-H1 (Qi et al. 2023) about a third of 1F1B, (p-1)/(3m)."""
    if schedule not in SCHEDULES:
        raise InputError(f"schedule {schedule!r} is not one of: {', '.join(SCHEDULES)}")
    if pp <= 1:
        return 0.0
    p, m = pp, microbatches
    if schedule == "interleaved":
        return (p - 1) / (virtual_stages * m)
    if schedule == "zb-h1":
        return (p - 1) / (3 * m)
    return (p - 1) / m


# ---------------------------------------------------------------------------------------------
# Communication


@dataclass(frozen=True)
class Net:
    """How collectives are priced for one request."""

    gpu: str
    gpus_per_node: int
    fabric: str | None
    intra_bytes_per_s: float
    inter_bytes_per_s: float
    use_predict: bool  # gpudoctor.plan.collectives.predict is importable

    def time(self, op: str, nbytes: float, group: int, stride: int) -> float:
        """Seconds for one collective of ``nbytes`` (the full buffer, nccl-tests convention) over
        ``group`` ranks ``stride`` apart in the rank order."""
        if group <= 1 or nbytes <= 0:
            return 0.0
        if op == "p2p":  # the slowest stage boundary: inter-node as soon as the group spans nodes
            group, per_node = 2, (2 if stride * group <= self.gpus_per_node else 1)
        else:
            per_node = math.gcd(group, self.gpus_per_node // stride) if stride < self.gpus_per_node else 1
        if self.use_predict:
            return _predict_time(op, int(nbytes), group, per_node, self.gpu, self.fabric)
        return _fallback_time(op, nbytes, group, per_node, self)


@lru_cache(maxsize=4096)
def _predict_time(op: str, nbytes: int, group: int, per_node: int, gpu: str, fabric: str | None) -> float:
    from gpudoctor.plan.collectives import predict

    return float(predict(op, nbytes, gpus=group, gpus_per_node=per_node, gpu=gpu, fabric=fabric).time_s)


def _fallback_time(op: str, nbytes: float, group: int, per_node: int, net: Net) -> float:
    """Ring alpha-beta: all-reduce moves 2(n-1)/n of the buffer, all-gather and reduce-scatter
    (n-1)/n, p2p all of it, at the bus bandwidth of the slowest link the ring crosses."""
    intra = group <= per_node
    # across nodes NCCL spreads a ring's channels over the node's NICs: per_node rails
    bw = net.intra_bytes_per_s if intra else min(net.intra_bytes_per_s, per_node * net.inter_bytes_per_s)
    alpha = ALPHA_INTRA_S if intra else ALPHA_INTER_S
    n = group
    if op == "p2p":
        return alpha + nbytes / bw
    steps, factor = (2 * (n - 1), 2 * (n - 1) / n) if op == "all-reduce" else (n - 1, (n - 1) / n)
    return steps * alpha + factor * nbytes / bw


def make_net(gpu: str, gpus_per_node: int, fabric: str | None) -> Net:
    from gpudoctor.hardware.specs import find_spec

    spec = find_spec(gpu)
    nvlink = spec.nvlink_bytes_per_s if spec is not None else 0.0
    intra = NVLINK_EFFICIENCY * nvlink if nvlink else PCIE_INTRA_BYTES_PER_S
    name = fabric or DEFAULT_FABRIC
    if name not in FABRIC_BYTES_PER_S and not _has_predict():
        raise InputError(f"--fabric {fabric!r} is not one of: {', '.join(FABRIC_BYTES_PER_S)}")
    return Net(gpu, gpus_per_node, fabric, intra, FABRIC_BYTES_PER_S.get(name, 40e9), _has_predict())


@lru_cache(maxsize=1)
def _has_predict() -> bool:
    try:
        from gpudoctor.plan.collectives import predict  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# One layout


@dataclass(frozen=True)
class Layout:
    dp: int
    tp: int
    pp: int
    cp: int = 1
    zero: int = 0  # 0 DDP, 1, 2, 3 (= FSDP)
    microbatch: int = 1  # sequences per micro-batch per DP rank
    checkpointing: str = "none"
    schedule: str = "1f1b"
    virtual_stages: int = 2  # interleaved only

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp


def gemm_efficiency(spec: ModelSpec, tp: int, tokens_per_microbatch: int) -> float:
    """Assumed fraction of peak for the step's GEMMs (``GEMM_EFFICIENCY``)."""
    width = spec.hidden // tp
    eff = next(e for w, e in GEMM_EFFICIENCY if width >= w)
    return eff * min(1.0, tokens_per_microbatch / SMALL_M_TOKENS)


def _param_split(spec: ModelSpec) -> tuple[float, float]:
    """(decoder-layer parameters, embedding + head + final norm parameters)."""
    c = _counts(spec)
    return float(c.layers_total), float(c.total - c.layers_total)


@lru_cache(maxsize=64)
def _counts(spec: ModelSpec):
    from gpudoctor.memory.params import count_params

    return count_params(spec)


def predict_step(spec: ModelSpec, lay: Layout, *, global_batch: int, seq: int, peak_flops: float,
                 net: Net, hbm_bytes_per_s: float = 3.35e12, causal: bool = True,
                 calibration: Calibration | None = None) -> dict[str, float]:
    """Seconds per optimizer step for one layout, by part (the ``breakdown`` of a Plan) plus
    ``step_s``, ``model_flops`` and ``hardware_flops``.

    ``peak_flops``: the datasheet bf16 rate. With ``calibration`` (plan/calibration.py) the matmuls
    and attention are timed at their measured shape rates, HBM work at the measured bandwidth
    (``hbm_bytes_per_s`` is then unused), and the launch gap is priced; without it, FLOPs at
    ``peak_flops`` x the assumed ``gemm_efficiency`` and HBM at ``HBM_EFFICIENCY`` x the datasheet."""
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
        recompute_s = m * t.layers_fwd if lay.checkpointing == "full" else 0.0
        hbm = calibration.hbm_bytes_per_s
        eff = (fl.hardware / lay.pp / shard) / ((compute_s + recompute_s) * peak_flops)  # what it amounts to
    tp_s = _tp_comm(spec, lay, seq, m, layers_stage, net)
    cp_s = _cp_comm(spec, lay, seq, m, layers_stage, net, mb_fwd_s)
    pp_s = _pp_comm(spec, lay, seq, m, net)
    memory_s = m * _activation_traffic(spec, lay, seq, layers_stage) / hbm
    launch_s = launch_gap(calibration, m, layers_stage, (compute_s + recompute_s + memory_s) / m)
    pipelined = compute_s + recompute_s + memory_s + launch_s + tp_s + cp_s + pp_s
    bubble_s = pipelined * bubble_fraction(lay.pp, m, lay.schedule, lay.virtual_stages)
    layer_p, other_p = _param_split(spec)
    local_params = (layer_p / lay.pp + other_p / (2 if lay.pp > 1 else 1)) / lay.tp
    grad_bytes = local_params * BYTES_BF16
    bwd_last_s = mb_bwd_s + recompute_s / m
    dp_s, zero_s = _dp_comm(lay, grad_bytes, layers_stage, bwd_last_s, m, mb_fwd_s, recompute_s / m, net)
    opt_hbm = hbm_bytes_per_s if calibration is None else calibration.hbm_bytes_per_s
    opt_s = local_params / (lay.dp if lay.zero else 1) * OPTIMIZER_BYTES_PER_PARAM / opt_hbm
    parts = {"compute_s": compute_s, "recompute_s": recompute_s, "memory_s": memory_s, "launch_s": launch_s,
             "bubble_s": bubble_s, "tp_comm_s": tp_s, "cp_comm_s": cp_s, "pp_comm_s": pp_s, "dp_comm_s": dp_s,
             "zero_comm_s": zero_s, "optimizer_s": opt_s}
    return {**parts, "step_s": sum(parts.values()), "model_flops": fl.model,
            "hardware_flops": fl.hardware, "microbatches": float(m), "gemm_efficiency": eff}


# The non-matmul work (norms, activations, RoPE, softmax of the loss, residual adds) is memory-bound:
# priced as passes over the activations a micro-batch keeps for backward (memory/activations.py,
# checked within 3% on an H200): each is written in the forward and read in the backward, and its
# gradient is written and read once in the backward (4 passes; a recomputed forward writes it once
# more). Derived from the structure, not fitted to a measured step.
ACTIVATION_PASSES = 4
HBM_EFFICIENCY = 0.8  # assumed share of HBM bandwidth elementwise kernels reach


def _activation_traffic(spec: ModelSpec, lay: Layout, seq: int, layers: int) -> float:
    """Bytes of HBM traffic outside the matmuls for one micro-batch on one GPU of the last stage."""
    from gpudoctor.memory.activations import Workload, head_memory, layer_memory

    w = Workload(batch=lay.microbatch, seq=seq, params_bytes=2, attention="sdpa", tp=lay.tp,
                 sp=lay.tp > 1, cp=lay.cp)
    per_layer = sum(layer_memory(spec, w, i).total for i in range(min(layers, spec.layers)))
    passes = ACTIVATION_PASSES + (1 if lay.checkpointing == "full" else 0)
    return passes * (per_layer + head_memory(spec, w).total)


def _tp_comm(spec: ModelSpec, lay: Layout, seq: int, m: int, layers: int, net: Net) -> float:
    """Megatron TP: 2 all-reduces of b*s*h activations per layer in forward, 2 in backward, 2 more
    in the recomputed forward (with SP: all-gather + reduce-scatter, the same bytes). Exposed."""
    if lay.tp == 1:
        return 0.0
    nbytes = lay.microbatch * (seq // lay.cp) * spec.hidden * BYTES_BF16
    per_layer = 4 + (2 if lay.checkpointing == "full" else 0)
    return m * layers * per_layer * net.time("all-reduce", nbytes, lay.tp, 1)


def _cp_comm(spec: ModelSpec, lay: Layout, seq: int, m: int, layers: int, net: Net, mb_fwd_s: float) -> float:
    """CP: all-gather K/V (forward, and again in backward) + reduce-scatter dK/dV per layer,
    overlapped with the layer's attention compute (approximated as its share of the forward)."""
    if lay.cp == 1:
        return 0.0
    kv_width = (spec.kv_heads * spec.head_dim if spec.mla is None else spec.mla.kv_lora_rank) // max(1, lay.tp)
    nbytes = lay.microbatch * seq * 2 * kv_width * BYTES_BF16
    ag = net.time("all-gather", nbytes, lay.cp, lay.tp)
    rs = net.time("reduce-scatter", nbytes, lay.cp, lay.tp)
    layer_fwd = mb_fwd_s / max(1, layers)
    fwd = max(0.0, ag - 0.5 * layer_fwd)
    bwd = max(0.0, ag + rs - layer_fwd)
    return m * layers * (fwd + bwd)


def _pp_comm(spec: ModelSpec, lay: Layout, seq: int, m: int, net: Net) -> float:
    """PP: per micro-batch one activation sent forward and one gradient backward across each stage
    boundary (b*s*h bf16; interleaving sends v times as many). Exposed."""
    if lay.pp == 1:
        return 0.0
    nbytes = lay.microbatch * (seq // lay.cp) * spec.hidden * BYTES_BF16
    hops = lay.virtual_stages if lay.schedule == "interleaved" else 1
    return m * 2 * hops * net.time("p2p", nbytes, lay.pp, lay.tp * lay.cp * lay.dp)


def _dp_comm(lay: Layout, grad_bytes: float, layers: int, bwd_last_s: float, m: int,
             mb_fwd_s: float, mb_rc_s: float, net: Net) -> tuple[float, float]:
    """(dp_comm_s, zero_comm_s), exposed seconds.

    DDP: the bucketed gradient all-reduce runs under the last micro-batch's backward; exposed is
    the last bucket (1/layers of it) or whatever exceeds that backward. ZeRO-1/2: the same for a
    reduce-scatter, then an exposed all-gather of the updated parameters. ZeRO-3: per micro-batch,
    an all-gather in forward and in backward plus a reduce-scatter, each phase hidden behind its
    compute up to that compute's length (the first layer's gather is always exposed).
    """
    if lay.dp == 1:
        return 0.0, 0.0
    stride = lay.tp * lay.cp
    buckets = max(1, math.ceil(grad_bytes / BUCKET_BYTES))

    def chunked(op: str, pieces: int) -> float:  # one collective per bucket / per layer
        return pieces * net.time(op, grad_bytes / pieces, lay.dp, stride)

    if lay.zero == 0:
        ar = chunked("all-reduce", buckets)
        return max(ar / buckets, ar - bwd_last_s), 0.0
    if lay.zero in (1, 2):
        rs = chunked("reduce-scatter", buckets)
        return max(rs / buckets, rs - bwd_last_s), chunked("all-gather", buckets)
    rs, ag = chunked("reduce-scatter", layers), chunked("all-gather", layers)
    fwd = max(ag / layers, ag - mb_fwd_s)
    bwd = max((ag + rs) / layers, ag + rs - 2 * mb_fwd_s - mb_rc_s)
    return 0.0, m * (fwd + bwd)


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
    checkpointing: str  # "none" or "full"
    schedule: str
    step_s: float
    mfu: float  # model FLOPs (no recompute) / (step_s x GPUs x datasheet bf16 peak)
    tokens_per_s: float
    peak_bytes: int  # allocated at the peak (gpudoctor memory)
    total_bytes: int  # reserved + CUDA context, what is compared with the card
    breakdown: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        z = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3/FSDP"}[self.zero] if self.dp > 1 else "no DP"
        parts = [f"DP={self.dp}", f"TP={self.tp}", f"PP={self.pp}"] + ([f"CP={self.cp}"] if self.cp > 1 else [])
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
    for name, v in (("gpus", gpus), ("global-batch", global_batch), ("seq", seq),
                    ("gpus-per-node", gpus_per_node), ("top", top)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise InputError(f"--{name} must be a whole number >= 1, got {v!r}")
    if gpus > gpus_per_node and gpus % gpus_per_node:
        lo = gpus // gpus_per_node * gpus_per_node
        raise InputError(f"--gpus {gpus} is not a whole number of {gpus_per_node}-GPU nodes "
                         f"(--gpus-per-node {gpus_per_node}); use {lo} or {lo + gpus_per_node}")


def _shapes(spec: ModelSpec, gpus: int, seq: int, gpus_per_node: int) -> list[tuple[int, int, int, int]]:
    """(dp, tp, pp, cp) with TP inside a node (dividing its GPUs) and dividing the heads (and compatible with the KV
    heads), PP dividing the layers, CP only for seq >= 8192."""
    tps = [t for t in _divisors(spec.heads) if min(gpus_per_node, gpus) % t == 0
           and (spec.kv_heads % t == 0 or t % spec.kv_heads == 0)]
    cps = [c for c in (1, 2, 4) if c == 1 or (seq >= 8192 and seq % c == 0)]
    out = []
    for tp in tps:
        for cp in cps:
            for pp in _divisors(spec.layers):
                if gpus % (tp * pp * cp) == 0:
                    out.append((gpus // (tp * pp * cp), tp, pp, cp))
    return out


def plan_training(spec: str | ModelSpec, *, gpus: int, gpu: str = "h100-sxm", global_batch: int,
                  seq: int = 4096, gpus_per_node: int = 8, fabric: str | None = None, top: int = 5,
                  schedule: str = "1f1b", calibration: str | Path | Calibration | None = None) -> TrainPlanResult:
    """Every layout that fits ``gpu``'s memory, ranked by predicted step time (see module doc).
    ``calibration``: a ``gpudoctor bench --json`` file of this GPU (or its loaded Calibration)."""
    from gpudoctor.errors import UnknownGpuError
    from gpudoctor.hardware.specs import require_spec
    from gpudoctor.memory import load_spec

    _check_inputs(gpus, global_batch, seq, gpus_per_node, top)
    bubble_fraction(2, 1, schedule)  # validates the name
    model = spec if isinstance(spec, ModelSpec) else load_spec(spec)
    hw = require_spec(gpu)
    if "bf16" not in hw.matrix_flops:
        raise UnknownGpuError(f"--gpu {gpu!r} has no bf16 peak in its datasheet row; use a GPU with tensor cores")
    cal = load_calibration(calibration, hw.key) if isinstance(calibration, (str, Path)) else calibration
    net = make_net(hw.key, gpus_per_node, fabric)
    shapes = [s for s in _shapes(model, gpus, seq, gpus_per_node) if global_batch % s[0] == 0]
    if not shapes:
        dps = sorted({s[0] for s in _shapes(model, gpus, seq, gpus_per_node)})
        near = sorted({(global_batch // d + k) * d for d in dps for k in (0, 1) if (global_batch // d + k) * d > 0},
                      key=lambda b: (abs(b - global_batch), b))[:2]
        raise InputError(f"--global-batch {global_batch} is not a multiple of any data-parallel degree possible "
                         f"for {model.name} on {gpus} GPUs (dp in {', '.join(map(str, dps))}); "
                         f"use {' or '.join(map(str, near))}")
    plans, considered = [], 0
    peak = hw.matrix_flops["bf16"]
    for dp, tp, pp, cp in shapes:
        for zero in ((0, 1, 2, 3) if dp > 1 else (0,)):
            for ckpt in CHECKPOINTING:
                for mb in MICROBATCHES:
                    if (global_batch // dp) % mb:
                        continue
                    lay = Layout(dp, tp, pp, cp, zero, mb, ckpt, schedule)
                    considered += 1
                    est = _memory(model, hw.key, lay, global_batch, seq)
                    if est is None or not est.fits:
                        break  # a larger micro-batch needs more memory still
                    plans.append(_price(model, lay, est, global_batch, seq, peak, net, hw.hbm_bytes_per_s, cal))
    plans = _rank(plans)
    infeasible = None if plans else _infeasible(model, hw, gpus, gpus_per_node, shapes)
    return TrainPlanResult(
        model=model.name, gpus=gpus, gpu=hw.key, global_batch=global_batch, seq=seq,
        gpus_per_node=gpus_per_node, fabric=fabric or DEFAULT_FABRIC, plans=plans[:top],
        explanation=_explain(plans, gpus, gpus_per_node, hw.memory_bytes, model, hw.key, global_batch, seq) if plans else "",
        infeasible=infeasible, considered=considered, fitting=len(plans),
        comm_model="gpudoctor.plan.collectives" if net.use_predict else "fallback alpha-beta",
        assumptions=ASSUMPTIONS if cal is None else calibrated_assumptions(cal),
        compute_model=COMPUTE_ASSUMED if cal is None else cal.label)


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
                dp=lay.dp, zero=lay.zero if lay.zero < 3 else 0, fsdp=lay.zero == 3, sp=lay.tp > 1,
                cp=lay.cp, microbatches=m, checkpointing=lay.checkpointing, params_dtype="bf16",
                master_weights=True,
                virtual_stages=lay.virtual_stages if lay.schedule == "interleaved" and lay.pp > 1 else 1)
        except InputError:
            _MEMORY_CACHE[key] = None
    return _MEMORY_CACHE[key]


def _price(spec: ModelSpec, lay: Layout, est, global_batch: int, seq: int, peak: float, net: Net,
           hbm: float, cal: Calibration | None = None) -> Plan:
    r = predict_step(spec, lay, global_batch=global_batch, seq=seq, peak_flops=peak, net=net, hbm_bytes_per_s=hbm,
                     calibration=cal)
    breakdown = {k: v for k, v in r.items() if k.endswith("_s") and k != "step_s"}
    return Plan(dp=lay.dp, tp=lay.tp, pp=lay.pp, cp=lay.cp, zero=lay.zero, microbatch=lay.microbatch,
                microbatches=int(r["microbatches"]), checkpointing=lay.checkpointing, schedule=lay.schedule,
                step_s=r["step_s"], mfu=r["model_flops"] / (r["step_s"] * lay.gpus * peak),
                tokens_per_s=global_batch * seq / r["step_s"], peak_bytes=int(est.peak_bytes),
                total_bytes=int(est.total_bytes), breakdown=breakdown)


def _infeasible(spec: ModelSpec, hw, gpus: int, gpus_per_node: int, shapes) -> str:
    n = _counts(spec).total
    _, tp, pp, _ = max(shapes, key=lambda s: (s[1] * s[2], s[1]))
    cap = hw.memory_bytes
    weights = n * BYTES_BF16 / (tp * pp)
    states = 16 * n / gpus
    need = math.ceil(16 * n / (0.8 * cap))
    need = need if need <= gpus_per_node else math.ceil(need / gpus_per_node) * gpus_per_node
    why = (f"the weights alone need {weights / 1e9:.0f} GB per GPU at the largest TP x PP ({tp} x {pp})"
           if weights > cap else f"weights at TP x PP = {tp} x {pp} take {weights / 1e9:.0f} GB per GPU")
    return (f"no layout of {spec.name} fits the {hw.name}'s {cap / 1e9:.0f} GB on {gpus} GPUs: {why}, and weights + "
            f"gradients + Adam states (16 bytes per parameter, {16 * n / 1e12:.1f} TB) need {states / 1e9:.0f} GB "
            f"per GPU even fully sharded (ZeRO-3) over {gpus} GPUs; need >= {max(need, gpus + 1)} GPUs "
            f"(with activations, more), or a shorter --seq if the states already fit")


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
    if w.tp == w.pp == w.cp == 1 and w.zero == 0:
        s.append(f"The model fits without sharding -> DDP: replicate it on all {gpus} GPUs and all-reduce "
                 f"gradients, overlapped with backward ({w.breakdown['dp_comm_s'] * 1e3:.0f} ms exposed).")
    if w.tp > 1:
        s.append(f"TP={w.tp} inside the node over NVLink ({w.breakdown['tp_comm_s']:.3g} s of exposed all-reduces "
                 f"per step); TP never crosses a node: its per-layer all-reduces would run at network speed.")
    if w.pp > 1:
        where = "across nodes" if w.tp * w.cp * w.dp >= gpn else "inside the node"
        s.append(f"PP={w.pp} {where}: point-to-point traffic only, at the cost of a "
                 f"{w.breakdown['bubble_s']:.3g} s bubble with {w.microbatches} micro-batches.")
    if w.zero:
        base = _memory(spec, gpu, Layout(w.dp, w.tp, w.pp, w.cp, 0, w.microbatch, w.checkpointing, w.schedule),
                       global_batch, seq)
        stage = {1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}[w.zero]
        if base is not None and not base.fits:
            s.append(f"{stage} because the same layout replicated (DDP) needs {base.total_bytes / 1e9:.0f} GB "
                     f"of the {cap / 1e9:.0f} GB card: shard the states over the {w.dp} DP ranks.")
        else:
            opt = w.breakdown["optimizer_s"]
            s.append(f"{stage} although DDP also fits: it shards the optimizer step ({opt * 1e3:.1f} ms instead of "
                     f"{opt * w.dp * 1e3:.1f} ms replicated) for {w.breakdown['zero_comm_s'] * 1e3:.1f} ms of "
                     f"exposed extra traffic.")
    if w.checkpointing == "full":
        s.append(f"Full checkpointing is needed to fit (+{w.breakdown['recompute_s']:.3g} s of recompute).")
    runner = next((p for p in plans[1:] if (p.dp, p.tp, p.pp, p.cp, p.zero) != (w.dp, w.tp, w.pp, w.cp, w.zero)), None)
    if runner is not None:
        diff = {k: runner.breakdown[k] - w.breakdown.get(k, 0.0) for k in runner.breakdown}
        worst = max(diff, key=diff.get)
        gap = runner.step_s / w.step_s - 1
        s.append(f"Runner-up: {runner.label}, {abs(gap):.1%} {'slower' if gap >= 0 else 'faster'}; it spends "
                 f"{diff[worst]:+.3g} s on {worst.removesuffix('_s').replace('_', ' ')}.")
    return " ".join(s)
