"""Communication of one training step by parallel axis: what each collective moves, over which
group, and how much of it is exposed (the overlap rules).

Every collective is priced by ``gpudoctor.plan.collective_cost.predict``, the alpha-beta model
validated against measured NCCL curves (benchmarks/BENCHMARKS-plan.md, "plan comm: predicted vs
measured collectives"); its interconnect presets are the only fabric table. Ranks are laid out TP
innermost, then CP, DP, PP (Megatron's order): a group is intra-node when its span fits
``gpus_per_node``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from gpudoctor.core.spec import ModelSpec
from gpudoctor.plan.collective_cost import predict

if TYPE_CHECKING:
    from gpudoctor.core.layout import Layout

BYTES_BF16 = 2
# what prices the collectives (TrainPlanResult.comm_model)
COMM_MODEL = "gpudoctor.plan.collective_cost"

# Gradient buckets: PyTorch DDP's bucket_cap_mb default (25 MB); ZeRO-1/2 use the same size here.
BUCKET_BYTES = 25 * 1024**2


@dataclass(frozen=True)
class Net:
    """How collectives are priced for one request: the arguments ``predict`` needs besides the
    op."""

    gpu: str
    gpus_per_node: int
    fabric: str | None
    nvls: bool = False  # NVLink SHARP on: all-reduces inside one NVSwitch node may use it

    def time(self, op: str, nbytes: float, group: int, stride: int) -> float:
        """Seconds for one collective of ``nbytes`` (the full buffer, nccl-tests convention) over
        ``group`` ranks ``stride`` apart in the rank order."""
        if group <= 1 or nbytes <= 0:
            return 0.0
        if op == "p2p":  # the slowest stage boundary: inter-node as soon as the group spans nodes
            group, per_node = 2, (2 if stride * group <= self.gpus_per_node else 1)
        else:
            per_node = math.gcd(group, self.gpus_per_node // stride) if stride < self.gpus_per_node else 1
        return _predict_time(op, int(nbytes), group, per_node, self.gpu, self.fabric, self.nvls)


@lru_cache(maxsize=4096)
def _predict_time(op: str, nbytes: int, group: int, per_node: int, gpu: str, fabric: str | None,
                  nvls: bool = False) -> float:
    return float(predict(op, nbytes, gpus=group, gpus_per_node=per_node, gpu=gpu, fabric=fabric,
                         nvls=nvls).time_s)


def make_net(gpu: str, gpus_per_node: int, fabric: str | None, nvls: bool = False) -> Net:
    """The pricing context of one plan. An unknown ``fabric`` is refused by ``predict`` (naming the
    presets it knows) when the first collective is priced."""
    return Net(gpu, gpus_per_node, fabric, nvls)


def tp_backward_allreduces(spec: ModelSpec, lay: Layout, per_projection: bool) -> int:
    """All-reduces of an input gradient per decoder layer in backward. Megatron-LM reduces each
    block's input gradient once (its ``f`` operator before the fused QKV / fc1 GEMM): 2 per layer;
    so does torch's TP with sequence parallelism, whose ``PrepareModuleInput`` hands every
    projection of a block one DTensor. ``per_projection``: torch's ``ColwiseParallel`` on each
    projection module of an unfused model (Hugging Face's q, k, v and gate, up) wraps each module's
    input on its own, so each all-reduces its own input gradient: 5 per Llama layer (counted on a
    2-rank CPU run of the torch 2.13 styles on transformers' LlamaDecoderLayer: 2 all-reduces per
    layer forward, 5 backward)."""
    if not per_projection or lay.sequence_parallel:
        return 2
    # MLA: q (or q_b) and kv_b
    attention = 2 if spec.mla is not None else (1 if spec.fused_qkv else 3)
    return attention + (2 if spec.gated_mlp else 1)


def tp_comm(spec: ModelSpec, lay: Layout, seq: int, m: int, layers: int, net: Net,
            backward: int = 2) -> float:
    """Megatron TP: 2 all-reduces of b*s*h activations per layer in forward, ``backward`` (2 in
    Megatron, ``tp_backward_allreduces``) in backward, 2 more in the recomputed forward (with SP:
    all-gather + reduce-scatter, the same bytes). Exposed."""
    if lay.tp == 1:
        return 0.0
    nbytes = lay.microbatch * (seq // lay.cp) * spec.hidden * BYTES_BF16
    per_layer = 2 + backward + (2 if lay.checkpointing == "full" else 0)
    return m * layers * per_layer * net.time("all-reduce", nbytes, lay.tp, 1)


def cp_comm(spec: ModelSpec, lay: Layout, seq: int, m: int, layers: int, net: Net,
            mb_fwd_s: float) -> float:
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


def pp_comm(spec: ModelSpec, lay: Layout, seq: int, m: int, net: Net) -> float:
    """PP: per micro-batch one activation sent forward and one gradient backward across each stage
    boundary (b*s*h bf16; interleaving sends v times as many). Exposed. With TP > 1 each TP rank
    sends 1/t of it: with sequence parallelism the boundary tensor is already split (b*s/t*h per
    rank); without, Megatron-LM's scatter/gather (Narayanan et al. 2021 sec. 4.1) sends b*s*h/t per
    rank over the fabric and all-gathers b*s*h over the TP group's NVLink on the receiving stage."""
    if lay.pp == 1:
        return 0.0
    nbytes = lay.microbatch * (seq // lay.cp) * spec.hidden * BYTES_BF16
    hops = lay.virtual_stages if lay.schedule == "interleaved" else 1
    send = net.time("p2p", nbytes / lay.tp, lay.pp, lay.tp * lay.cp * lay.dp)
    gather = 0.0 if lay.sequence_parallel else net.time("all-gather", nbytes, lay.tp, 1)
    return m * 2 * hops * (send + gather)


def dp_comm(lay: Layout, grad_bytes: float, layers: int, bwd_last_s: float, m: int,
            mb_fwd_s: float, mb_rc_s: float, net: Net, last_bucket_bytes: float = 0.0,
            slowdown: tuple[float, float] | None = None) -> tuple[float, float]:
    """(dp_comm_s, zero_comm_s), exposed seconds.

    DDP: the bucketed gradient all-reduce runs under the last micro-batch's backward; exposed is the
    last bucket (an average bucket, or ``last_bucket_bytes`` when given: PyTorch DDP fills buckets
    in reverse parameter order and gives a parameter larger than the cap a bucket of its own, so the
    embedding's gradient, ready last, is all-reduced alone after the backward) or whatever exceeds
    that backward. ZeRO-1/2: the same for a reduce-scatter, then an exposed all-gather of the
    updated parameters. ZeRO-3: per micro-batch, an all-gather in forward and in backward plus a
    reduce-scatter, each phase hidden behind its compute up to that compute's length (the first
    layer's gather is always exposed).

    ``slowdown``: (compute, communication) slowdowns measured under overlap (hardware/overlap.py);
    then ``dp_overlap`` prices it and this returns the exposed part only of its result.
    """
    if lay.dp == 1:
        return 0.0, 0.0
    if slowdown is not None:
        dp_s, zero_s, _ = dp_overlap(lay, grad_bytes, layers, bwd_last_s, m, mb_fwd_s, mb_rc_s, net,
                                     last_bucket_bytes, slowdown)
        return dp_s, zero_s
    stride = lay.tp * lay.cp
    buckets = max(1, math.ceil(grad_bytes / BUCKET_BYTES))

    def chunked(op: str, pieces: int) -> float:  # one collective per bucket / per layer
        return pieces * net.time(op, grad_bytes / pieces, lay.dp, stride)

    if lay.zero == 0:
        ar = chunked("all-reduce", buckets)
        last = net.time("all-reduce", last_bucket_bytes, lay.dp, stride) if last_bucket_bytes else ar / buckets
        return max(last, ar - bwd_last_s), 0.0
    if lay.zero in (1, 2):
        rs = chunked("reduce-scatter", buckets)
        return max(rs / buckets, rs - bwd_last_s), chunked("all-gather", buckets)
    rs, ag = chunked("reduce-scatter", layers), chunked("all-gather", layers)
    fwd = max(ag / layers, ag - mb_fwd_s)
    bwd = max((ag + rs) / layers, ag + rs - 2 * mb_fwd_s - mb_rc_s)
    return 0.0, m * (fwd + bwd)


def dp_overlap(lay: Layout, grad_bytes: float, layers: int, bwd_last_s: float, m: int,
               mb_fwd_s: float, mb_rc_s: float, net: Net, last_bucket_bytes: float,
               slowdown: tuple[float, float]
               ) -> tuple[float, float, float]:
    """``dp_comm`` with measured overlap costs: (dp_comm_s, zero_comm_s, overlap_s).

    While a collective overlaps compute, the collective takes ``comm`` x its time alone and the
    compute progresses at 1 / ``compute`` of its rate: a window of W seconds delays the compute by W
    (1 - 1 / compute) (``overlap_s``), which in turn leaves the collectives that much more compute
    to hide behind. The window is the overlapped collective's (slowed) time, up to the compute it
    overlaps. What stays exposed is priced as in ``dp_comm``; DDP's last bucket, all-reduced after
    the backward, runs alone."""
    compute, comm = slowdown
    lost = 1.0 - 1.0 / compute
    stride = lay.tp * lay.cp
    buckets = max(1, math.ceil(grad_bytes / BUCKET_BYTES))

    def chunked(op: str, pieces: int) -> float:
        return pieces * net.time(op, grad_bytes / pieces, lay.dp, stride)

    if lay.zero in (0, 1, 2):
        op = "all-reduce" if lay.zero == 0 else "reduce-scatter"
        total = chunked(op, buckets)
        last = net.time(op, last_bucket_bytes, lay.dp, stride) if last_bucket_bytes else total / buckets
        # all but the last bucket, under the backward
        window = min(max(0.0, total - last) * comm, bwd_last_s)
        penalty = window * lost
        exposed = max(last, max(0.0, total - last) * comm + last - (bwd_last_s + penalty))
        return exposed, (chunked("all-gather", buckets) if lay.zero else 0.0), penalty
    rs, ag = chunked("reduce-scatter", layers), chunked("all-gather", layers)
    win_f = min(ag * comm, mb_fwd_s)
    win_b = min((ag + rs) * comm, 2 * mb_fwd_s + mb_rc_s)
    fwd = max(ag / layers, ag * comm - (mb_fwd_s + win_f * lost))
    bwd = max((ag + rs) / layers, (ag + rs) * comm - (2 * mb_fwd_s + mb_rc_s + win_b * lost))
    return 0.0, m * (fwd + bwd), m * (win_f + win_b) * lost
