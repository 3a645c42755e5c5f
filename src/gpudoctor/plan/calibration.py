"""Calibration of ``plan train`` from a ``gpudoctor bench --json`` file (``--bench FILE``).

What it replaces in the step-time model (plan/train.py), each by a measurement of that card:

- the GEMMs: every matmul of a layer (q, k, v, o, gate, up, down; the LM head), forward and both
  backward GEMMs (dX: tokens x K x N, dW: K x N x tokens), timed at its own (M, N, K) read off the
  bench's ``gemm_grid`` (hardware/shapes.py), instead of FLOPs at an assumed efficiency;
- the attention core (QK^T, softmax, PV): the bench's ``attention_grid`` rate at that sequence
  length and head dim, forward and backward (else, as without --bench, the assumed efficiency);
- HBM bandwidth for the memory-bound work and the optimizer: the better of the measured copy and
  triad rates (read + write kernels, like the elementwise ones), with no assumed efficiency;
- the launch-gap term: kernels x the measured eager launch time (``ceilings.extra.launch_eager_s``);
- with the bench's ``elementwise`` section (hardware/kinds.py): each eager-hf elementwise op at the
  measured rate of its kind (plan/traffic.py classifies the ops); with ``optimizer``: the optimizer
  step at the measured rate of its implementation (AdamW foreach / fused);
- with ``overlap`` (2+ GPUs, hardware/overlap.py): compute that overlaps DP communication runs at
  its rate / the measured slowdown, and the communication at its own measured slowdown (plan/comm.py).

Without those three sections the step is priced as before they existed. A section that is there but
incomplete, or holds the probe's error, is a one-line ``InputError``.

The grid is interpolated linearly in log(rate) over log2(M), log2(N), log2(K); outside the measured
range a dimension is clamped to its edge (wider GEMMs run at about the widest one's rate).
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

from gpudoctor.core.inflate import GZIP_MAGIC
from gpudoctor.core.spec import ModelSpec
from gpudoctor.errors import InputError
from gpudoctor.hardware.kinds import ELEMENTWISE_KINDS


@dataclass(frozen=True)
class GemmGrid:
    """bf16 matmul rate (FLOP/s) at every (M, N, K) in ``dims`` cubed."""

    dims: tuple[int, ...]
    log_rate: dict[tuple[int, int, int], float]  # log(FLOP/s)

    def seconds(self, m: float, n: float, k: float) -> float:
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        log_rate = sum(wm * wn * wk * self.log_rate[(mi, ni, ki)]
                       for (mi, wm), (ni, wn), (ki, wk) in product(*(_bracket(self.dims, x)
                                                                     for x in (m, n, k))))
        return 2.0 * m * n * k / math.exp(log_rate)


def _bracket(dims: tuple[int, ...], x: float) -> list[tuple[int, float]]:
    """The grid points around ``x`` with their linear weights in log2 space (clamped)."""
    if x <= dims[0]:
        return [(dims[0], 1.0)]
    if x >= dims[-1]:
        return [(dims[-1], 1.0)]
    hi = next(i for i, d in enumerate(dims) if d >= x)
    lo_d, hi_d = dims[hi - 1], dims[hi]
    w = (math.log2(x) - math.log2(lo_d)) / (math.log2(hi_d) - math.log2(lo_d))
    return [(lo_d, 1.0 - w), (hi_d, w)]


@dataclass(frozen=True)
class AttentionGrid:
    """Causal attention rate (FLOP/s as the planner counts them) by head dim, then sequence
    length."""

    fwd: dict[int, tuple[tuple[int, float], ...]]  # head_dim -> ((seq, log rate), ...)
    bwd: dict[int, tuple[tuple[int, float], ...]]

    def rates(self, seq: int, head_dim: int) -> tuple[float, float]:
        d = min(self.fwd, key=lambda h: (abs(math.log2(h) - math.log2(max(head_dim, 1))), -h))
        return _interp(self.fwd[d], seq), _interp(self.bwd[d], seq)


def _interp(points: tuple[tuple[int, float], ...], x: int) -> float:
    dims = tuple(p[0] for p in points)
    logs = dict(points)
    return math.exp(sum(w * logs[d] for d, w in _bracket(dims, x)))


@dataclass(frozen=True)
class Overlap:
    """Measured slowdowns under overlapped NCCL communication (hardware/overlap.py), each >= 0."""

    gemm: float  # GEMM seconds with an all-reduce running / alone
    memory: float  # a contiguous memory-bound kernel's, likewise
    allreduce: float  # all-reduce seconds with GEMMs running / alone

    def compute(self, gemm_s: float, memory_s: float) -> float:
        """The slowdown of a stretch of ``gemm_s`` GEMM and ``memory_s`` memory-bound seconds: the
        time-weighted mean of the two."""
        total = gemm_s + memory_s
        return (gemm_s * self.gemm + memory_s * self.memory) / total if total > 0 else self.gemm


@dataclass(frozen=True)
class Calibration:
    """Measured ceilings and shape curves of one card, from one bench JSON."""

    path: str
    gpu: str  # as the bench saw it ("NVIDIA H200")
    measured_utc: str
    matrix_bf16: float  # FLOP/s, 8192^3 bf16
    hbm_bytes_per_s: float  # max(hbm.copy, hbm.triad)
    launch_eager_s: float | None
    gemm: GemmGrid
    attention: AttentionGrid | None
    elementwise: dict[str, float] | None = None  # bytes/s by kind (hardware/kinds.py ELEMENTWISE_KINDS)
    optimizer: dict[str, float] | None = None  # bytes/s by optimizer row ("adamw_foreach", "adamw_fused")
    overlap: Overlap | None = None

    @property
    def label(self) -> str:
        parts = ["GEMM (M, N, K) grid"] + (["attention grid"] if self.attention else []) + \
            (["elementwise rates by kind"] if self.elementwise else []) + \
            (["optimizer step rates"] if self.optimizer else []) + (["compute under NCCL"]
                                                                    if self.overlap else [])
        listed = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
        return f"calibrated: {listed} of {self.path} ({self.gpu}, measured {self.measured_utc})"


def load_calibration(path: str | Path, gpu_key: str | None = None) -> Calibration:
    """Read a ``gpudoctor bench --json`` file (or its .gz); one-line ``InputError`` when it is not
    one, holds no GEMM grid, or was measured on another GPU than ``gpu_key`` (a datasheet row
    key)."""
    from gpudoctor.hardware.specs import find_spec

    where = f"--bench {path}"
    try:
        raw = Path(path).read_bytes()
        data = json.loads(gzip.decompress(raw) if raw[:2] == GZIP_MAGIC else raw)
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{where}: cannot read it as JSON ({exc.__class__.__name__}); give the "
                         "output of `gpudoctor bench --json`") from exc
    if not isinstance(data, dict) or not isinstance(data.get("ceilings"), dict) or "gpu" not in data:
        raise InputError(f"{where}: not a gpudoctor bench JSON (no 'gpu' and 'ceilings'); give the "
                         "output of `gpudoctor bench --json`")
    gpu = str(data["gpu"])
    if gpu_key is not None:
        spec = find_spec(gpu)
        if spec is None or spec.key != gpu_key:
            raise InputError(f"{where} was measured on {gpu!r}, not on --gpu {gpu_key}; pass --gpu "
                             f"{spec.key if spec else '<that GPU>'} or a bench file of a {gpu_key}")
    grid = _gemm_grid(data.get("gemm_grid"), where)
    ceilings = data["ceilings"]
    measured = {m.get("probe"): m.get("value") for m in data.get("measurements") or []
                if isinstance(m, dict)}
    try:
        peak = float(ceilings["matrix_flops"]["bf16"])
        hbm = max(float(measured.get(p) or 0.0) for p in ("hbm.copy", "hbm.triad")) or float(
            ceilings["hbm_bytes_per_s"])
        launch = (ceilings.get("extra") or {}).get("launch_eager_s")
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{where}: its ceilings lack a bf16 matrix rate or HBM bandwidth ({exc}); "
                         "run gpudoctor bench again") from exc
    return Calibration(path=str(path), gpu=gpu, measured_utc=str(data.get("measured_utc", "")),
                       matrix_bf16=peak, hbm_bytes_per_s=hbm,
                       launch_eager_s=float(launch) if launch else None, gemm=grid,
                       attention=_attention_grid(data.get("attention_grid")),
                       elementwise=_rates(data.get("elementwise"), "elementwise",
                                          ELEMENTWISE_KINDS, where),
                       optimizer=_rates(data.get("optimizer"), "optimizer", OPTIMIZER_ROWS, where),
                       overlap=_overlap(data.get("overlap"), where))


OPTIMIZER_ROWS = ("adamw_foreach", "adamw_fused")


def _rates(section: Any, name: str, needed: Any, where: str) -> dict[str, float] | None:
    """``{row: bytes_per_s}`` of a bench section whose ``rows`` map each of ``needed`` to a row with
    ``bytes_per_s``; None when the section is absent or empty (a bench from before it existed)."""
    if section is None or section == {}:
        return None
    rerun = f"run `gpudoctor bench --json` again (or delete the '{name}' section to price as without it)"
    if not isinstance(section, dict) or section.get("error"):
        why = section.get("error") if isinstance(section, dict) else f"not an object: {section!r}"[:80]
        raise InputError(f"{where}: its '{name}' section holds no rates ({why}); {rerun}")
    rows = section.get("rows") if isinstance(section.get("rows"), dict) else {}
    out: dict[str, float] = {}
    for key in needed:
        try:
            out[key] = float(rows[key]["bytes_per_s"])
        except (KeyError, TypeError, ValueError):
            out[key] = 0.0
    bad = [k for k in needed if not out[k] > 0 or math.isinf(out[k])]
    if bad:
        raise InputError(f"{where}: the '{name}' section is incomplete ({len(bad)} of {len(out)} "
                         f"rows lack a positive bytes_per_s, e.g. {bad[0]!r}); {rerun}")
    return out


def _overlap(section: Any, where: str) -> Overlap | None:
    """The ``overlap`` section's slowdowns; None when absent, empty or skipped (one GPU)."""
    if section is None or section == {} or (isinstance(section, dict) and "skipped" in section):
        return None
    rerun = "run `gpudoctor bench --json` on 2+ GPUs again (or delete the 'overlap' section)"
    if not isinstance(section, dict) or section.get("error"):
        why = section.get("error") if isinstance(section, dict) else f"not an object: {section!r}"[:80]
        raise InputError(f"{where}: its 'overlap' section holds no slowdowns ({why}); {rerun}")
    values = {}
    for key in ("gemm_slowdown", "memory_slowdown", "allreduce_slowdown"):
        try:
            values[key] = float(section[key])
        except (KeyError, TypeError, ValueError):
            values[key] = float("nan")
    bad = [k for k, v in values.items() if not 0 < v < 100]
    if bad:
        raise InputError(f"{where}: the 'overlap' section lacks a slowdown between 0 and 100 for "
                         f"{bad[0]!r} (got {section.get(bad[0])!r}); {rerun}")
    return Overlap(values["gemm_slowdown"], values["memory_slowdown"], values["allreduce_slowdown"])


def _gemm_grid(section: Any, where: str) -> GemmGrid:
    if not isinstance(section, dict) or not section.get("rows"):
        why = section.get("error") if isinstance(section, dict) and section.get("error") else "no 'gemm_grid' section"
        raise InputError(f"{where}: {why}; run `gpudoctor bench --json` (with --shapes, the "
                         "default) to measure the GEMM grid")
    try:
        rates = {(int(r["m"]), int(r["n"]), int(r["k"])): float(r["tflops"]) * 1e12
                 for r in section["rows"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{where}: a gemm_grid row lacks m, n, k or tflops ({exc})") from exc
    dims = tuple(sorted({d for key in rates for d in key}))
    missing = [(m, n, k) for m in dims for n in dims for k in dims
               if rates.get((m, n, k), 0.0) <= 0]
    if missing:
        raise InputError(f"{where}: the gemm_grid is incomplete ({len(missing)} of "
                         f"{len(dims) ** 3} shapes missing, e.g. {missing[0]}); run gpudoctor "
                         "bench again")
    return GemmGrid(dims, {key: math.log(v) for key, v in rates.items()})


def _attention_grid(section: Any) -> AttentionGrid | None:
    if not isinstance(section, dict) or not section.get("rows"):
        return None
    fwd: dict[int, list[tuple[int, float]]] = {}
    bwd: dict[int, list[tuple[int, float]]] = {}
    for r in section["rows"]:
        try:
            d, s, f, b = int(r["head_dim"]), int(r["seq"]), float(r["fwd_tflops"]), float(
                r["bwd_tflops"])
        except (KeyError, TypeError, ValueError):
            continue
        if f > 0 and b > 0:
            fwd.setdefault(d, []).append((s, math.log(f * 1e12)))
            bwd.setdefault(d, []).append((s, math.log(b * 1e12)))
    if not fwd:
        return None
    return AttentionGrid({d: tuple(sorted(v)) for d, v in fwd.items()},
                         {d: tuple(sorted(v)) for d, v in bwd.items()})


# ---------------------------------------------------------------------------------------------
# The GEMMs of one layer


def layer_gemms(spec: ModelSpec, layer: int, tokens: int,
                tp: int = 1) -> list[tuple[float, float, float, float]]:
    """Forward GEMMs of one decoder layer on one GPU as (M, N, K, count): separate q, k, v, o and
    gate, up, down projections (as Hugging Face Transformers and torchtitan run them; Megatron's
    fused QKV / gate-up GEMMs would be a little faster), column-parallel ones split on N and
    row-parallel ones on K by ``tp``. MoE experts: each expert sees tokens x top_k / experts rows.
    At tp = 1, sum(2 M N K count) is the matmul part of ``attention_flops`` + ``mlp_flops``."""
    h, t = spec.hidden, float(tokens)
    out: list[tuple[float, float, float, float]] = []
    if spec.mla is not None:
        m, n = spec.mla, spec.heads
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank is None:
            out.append((t, n * qk / tp, h, 1))
        else:
            out += [(t, m.q_lora_rank, h, 1), (t, n * qk / tp, m.q_lora_rank, 1)]
        out += [(t, m.kv_lora_rank + m.qk_rope_head_dim, h, 1),
                (t, n * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank, 1),
                (t, h, n * m.v_head_dim / tp, 1)]
    else:
        d = spec.head_dim
        kv = max(spec.kv_heads * d / tp, d)  # fewer KV heads than TP ranks: one head replicated
        out += [(t, spec.heads * d / tp, h, 1), (t, kv, h, 2), (t, h, spec.heads * d / tp, 1)]
    moe = spec.moe
    if moe is None or not moe.is_moe_layer(layer):
        out += _mlp(t, h, spec.intermediate, spec.gated_mlp, tp, 1)
        return out
    out.append((t, moe.experts, h, 1))  # router
    out += _mlp(t * moe.top_k / moe.experts, h, moe.intermediate, True, tp, moe.experts)
    shared = moe.shared_intermediate if moe.shared_intermediate is not None else moe.shared_experts * moe.intermediate
    if shared:
        out += _mlp(t, h, shared, spec.gated_mlp, tp, 1)
    return out


def _mlp(t: float, h: int, inter: int, gated: bool, tp: int,
         count: int) -> list[tuple[float, float, float, float]]:
    up = [(t, inter / tp, h, 2 * count)] if gated else [(t, inter / tp, h, count)]
    return up + [(t, h, inter / tp, count)]


def gemm_times(grid: GemmGrid,
               gemms: list[tuple[float, float, float, float]]) -> tuple[float, float]:
    """(forward, backward) seconds: Y[M,N] = X[M,K] W[K,N] forward; dX = dY W^T (M x K x N) and
    dW = X^T dY (K x N x M) backward."""
    fwd = sum(c * grid.seconds(m, n, k) for m, n, k, c in gemms)
    bwd = sum(c * (grid.seconds(m, k, n) + grid.seconds(k, n, m)) for m, n, k, c in gemms)
    return fwd, bwd


@dataclass(frozen=True)
class MicrobatchTimes:
    """Seconds of one micro-batch on one GPU of the last pipeline stage, at calibrated rates."""

    layers_fwd: float  # the stage's decoder layers: GEMMs + attention core, forward
    layers_bwd: float
    head_fwd: float  # LM head GEMM
    head_bwd: float
    attention_fwd: float  # of which the attention cores (QK^T, softmax, PV), forward: selective recompute
    attention_measured: bool  # False: the attention core at the assumed rate (no attention grid)


def microbatch_times(spec: ModelSpec, cal: Calibration, *, microbatch: int, seq: int,
                     tp: int, cp: int, layers: int, assumed_rate: float,
                     causal: bool = True) -> MicrobatchTimes:
    """GEMMs of every layer at their own shapes, attention core at the measured (seq, head_dim) rate
    (``assumed_rate`` FLOP/s when the bench has no attention grid), scaled to ``layers`` layers."""
    tokens = microbatch * seq // cp
    fwd = bwd = core = 0.0
    for i in range(spec.layers):
        f, b = gemm_times(cal.gemm, layer_gemms(spec, i, tokens, tp))
        af, ab = _attention_core(spec, cal, i, microbatch, seq, tp * cp, assumed_rate, causal)
        fwd, bwd, core = fwd + f + af, bwd + b + ab, core + af
    scale = layers / spec.layers
    hf, hb = gemm_times(cal.gemm, [(float(tokens), spec.vocab / tp, spec.hidden, 1.0)])
    return MicrobatchTimes(fwd * scale, bwd * scale, hf, hb, core * scale,
                           cal.attention is not None)


def _attention_core(spec: ModelSpec, cal: Calibration, layer: int, batch: int, seq: int, split: int,
                    assumed_rate: float, causal: bool) -> tuple[float, float]:
    from gpudoctor.core.flops import attention_core_flops

    qk_d = spec.mla.qk_nope_head_dim + spec.mla.qk_rope_head_dim if spec.mla is not None else spec.head_dim
    v_d = spec.mla.v_head_dim if spec.mla is not None else spec.head_dim
    flops = attention_core_flops(spec, batch, seq, layer, causal) / split
    if cal.attention is None:
        return flops / assumed_rate, 2 * flops / assumed_rate
    rate_f, rate_b = cal.attention.rates(seq, max(qk_d, v_d))
    return flops / rate_f, 2 * flops / rate_b


# Kernels an eager PyTorch step launches per decoder layer, forward + backward: 1958 GPU kernels in
# forward + backward of a 16-layer Hugging Face Llama (transformers 5.17, torch 2.11, SDPA; 1.10 B,
# 4 x 2048 tokens) on an H200, counted with torch.profiler
# (benchmarks/results/plan_single_h200_2026-11-22.json): 122 per layer, the embedding, head and
# loss spread over the layers. A count of that implementation, not fitted to any step time.
EAGER_KERNELS_PER_LAYER = 122


def launch_gap(cal: Calibration | None, m: int, layers: int, gpu_mb_s: float) -> float:
    """The host launches kernels one by one at the measured eager launch time; the GPU waits only
    when launching a micro-batch's kernels takes longer than running them: m x max(0, CPU - GPU).
    Needs a measured launch time (--bench): 0 without one."""
    if cal is None or not cal.launch_eager_s:
        return 0.0
    cpu_s = layers * EAGER_KERNELS_PER_LAYER * cal.launch_eager_s
    return m * max(0.0, cpu_s - gpu_mb_s)
