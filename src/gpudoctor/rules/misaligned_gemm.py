"""misaligned-gemm: matmul dimensions that are not multiples of 8 (16-bit) keep cuBLAS off its fast tiles.

Tensor-core kernels want every leading dimension 16-byte aligned (a multiple of 8 elements in
bf16/fp16, 16 in fp8); odd sizes (vocab 50257, hidden 4095) fall back to slower kernels.
Priced against the efficiency that the aligned GEMMs of the same trace reach, else the
tensor-core roof times a realistic efficiency.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.roofline import DTYPES, roof_for
from gpudoctor.core.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import (
    GEMM_EFFICIENCY,
    kernel_names_of_events,
    op_names_of_events,
    sources_of_events,
)
from gpudoctor.trace.kernels import Kind

ID = "misaligned-gemm"
_ALIGN = {"bf16": 8, "fp16": 8, "fp8": 16, "int8": 16, "tf32": 4}
MIN_FLOPS_PER_CALL = 1e8  # tiny GEMMs are small-gemm's business


def _misaligned(a: Analysis) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[int, int, int]]]:
    dev, rf = a.trace.device, a.roofline
    live = np.flatnonzero((rf.event_in_steps_ns > 0) & (dev.kind == Kind.GEMM_TC) & (dev.op >= 0))
    bad: list[int] = []
    good: list[int] = []
    dims: dict[int, tuple[int, int, int]] = {}
    for i in live.tolist():
        cost = rf.op_costs.get(int(dev.op[i]))
        if cost is None or cost.gemm_shape is None or cost.flops < MIN_FLOPS_PER_CALL:
            continue
        align = _ALIGN.get(DTYPES[int(rf.event_dtype[i])], 8)
        _, m, n, k = cost.gemm_shape
        off = tuple(d for d in (m, n, k) if d % align)
        (bad if off else good).append(i)
        if off:
            dims[i] = (m, n, k)
    return np.array(bad, np.int64), np.array(good, np.int64), dims


def check(a: Analysis) -> Finding | None:
    bad, good, dims = _misaligned(a)
    if bad.size == 0:
        return None
    rf = a.roofline
    n = max(len(a.steps), 1)
    t_bad = rf.event_in_steps_ns[bad].astype(float)
    f_bad = rf.event_flops[bad]
    dtype = DTYPES[int(np.bincount(rf.event_dtype[bad]).argmax())]
    roof = roof_for(Kind.GEMM_TC, dtype, a.ceilings)
    curve = a.ceilings.extra.get("gemm_curve") or {}
    rate, reference = roof * GEMM_EFFICIENCY, f"roof x {GEMM_EFFICIENCY}"
    if curve.get(f"gemm.{dtype}"):
        rate, reference = float(curve[f"gemm.{dtype}"]) * GEMM_EFFICIENCY / MEASURED_LARGE_SHAPE, "measured curve"
    if good.size and rf.event_in_steps_ns[good].sum() > 0:
        rate = float(rf.event_flops[good].sum()) / (rf.event_in_steps_ns[good].sum() / 1e9)
        reference = "aligned GEMMs in this trace"
    achieved = f_bad.sum() / (t_bad.sum() / 1e9)
    saving = max(t_bad.sum() - f_bad.sum() / rate * 1e9, 0.0) / 1e6 / n
    shapes = sorted({dims[i] for i in bad.tolist()}, key=lambda s: -s[0] * s[1] * s[2])[:4]
    return make_finding(
        ID,
        "Matmul dimensions are not multiples of 8",
        a.step_ms,
        saving,
        f"{t_bad.sum() / 1e6 / n:.2f} ms per step of {dtype} GEMMs with misaligned shapes "
        f"({', '.join('x'.join(map(str, s)) for s in shapes)}) run at {achieved / 1e12:.0f} TFLOP/s "
        f"against {rate / 1e12:.0f} for aligned ones.",
        Evidence(
            numbers={
                "misaligned_gemm_ms_per_step": round(t_bad.sum() / 1e6 / n, 3),
                "achieved_tflops": round(achieved / 1e12, 1),
                "aligned_reference_tflops": round(rate / 1e12, 1),
                "reference": reference,
                **_measured_penalty(curve),
                "shapes_MxNxK": ["x".join(map(str, s)) for s in shapes],
            },
            ops=op_names_of_events(a.trace, bad),
            kernels=kernel_names_of_events(a.trace, bad),
            sources=sources_of_events(a.trace, bad),
        ),
        (
            Fix("Pad the odd dimension to a multiple of 64 (vocabulary, hidden, heads x head_dim)",
                "vocab_size = (vocab_size + 63) // 64 * 64   # 50257 -> 50304"),
            Fix("Pad the batch/sequence side when it is the odd one",
                "x = F.pad(x, (0, 0, 0, (-x.shape[-2]) % 8))"),
        ),
    )


# GEMM_EFFICIENCY is a share of the datasheet roof; a measured 8192^3 GEMM already sits at about
# 0.81 of it (H100 bf16: 800 of 989 TFLOP/s, benchmarks/BENCHMARKS-bench.md), so against a measured
# large-shape rate the same expectation is GEMM_EFFICIENCY / 0.81.
MEASURED_LARGE_SHAPE = 0.81


def _measured_penalty(curve: dict[str, float]) -> dict[str, float]:
    """What this card measured for an odd shape vs an aligned one (gpudoctor bench), if it did."""
    odd, even = curve.get("gemm.bf16.misaligned"), curve.get("gemm.bf16")
    if not odd or not even:
        return {}
    return {"measured_bf16_8191_cubed_tflops": round(odd / 1e12, 1), "measured_bf16_8192_cubed_tflops": round(even / 1e12, 1)}


RULE = Rule(
    ID, "Misaligned GEMM dimensions", check, __doc__ or "", needs=("launch_links", "cpu_ops"),
    order=110, calibration="same-ops",
)
