"""misaligned-gemm: matmul dimensions that are not multiples of 8 (16-bit) keep cuBLAS off its fast tiles.

Tensor-core kernels want every leading dimension 16-byte aligned (a multiple of 8 elements in
bf16/fp16, 16 in fp8); odd sizes (vocab 50257, hidden 4095) fall back to slower kernels.
Priced as each GEMM padded to multiples of 64, at the rate the measured grid of shapes gives the
padded shape (hardware/gemm_rate.py), scaled by how the aligned GEMMs of the same trace ran
against that grid.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.roofline import DTYPES
from gpudoctor.core.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.hardware.gemm_rate import rate_source
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import (
    gemm_ns_of_events,
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
    for i, cost in zip(live.tolist(), rf.op_costs.lookup(dev.op[live])):
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
    after_ns, reference = _aligned_ns(a, bad, good, dtype)
    rate = f_bad.sum() / (after_ns.sum() / 1e9)
    achieved = f_bad.sum() / (t_bad.sum() / 1e9)
    saving = float(np.clip(t_bad - after_ns, 0, None).sum()) / 1e6 / n
    shapes = sorted({dims[i] for i in bad.tolist()}, key=lambda s: -s[0] * s[1] * s[2])[:4]
    return make_finding(
        ID,
        "Matmul dimensions are not multiples of 8",
        a.step_ms,
        saving,
        f"{t_bad.sum() / 1e6 / n:.2f} ms per step of {dtype} GEMMs with misaligned shapes "
        f"({', '.join('x'.join(map(str, s)) for s in shapes)}) run at {achieved / 1e12:.0f} "
        f"TFLOP/s against {rate / 1e12:.0f} for aligned ones.",
        Evidence(
            numbers={
                "misaligned_gemm_ms_per_step": round(t_bad.sum() / 1e6 / n, 3),
                "achieved_tflops": round(achieved / 1e12, 1),
                "aligned_reference_tflops": round(rate / 1e12, 1),
                "reference": reference,
                **_measured_penalty(a.ceilings.extra.get("gemm_curve") or {}),
                "shapes_MxNxK": ["x".join(map(str, s)) for s in shapes],
            },
            ops=op_names_of_events(a.trace, bad),
            kernels=kernel_names_of_events(a.trace, bad),
            sources=sources_of_events(a.trace, bad),
        ),
        (
            Fix("Pad the odd dimension to a multiple of 64 (vocabulary, hidden, heads x head_dim)",
                _pad_snippet(shapes[0], _ALIGN.get(dtype, 8))),
            Fix("Pad the batch/sequence side when it is the odd one",
                "x = F.pad(x, (0, 0, 0, (-x.shape[-2]) % 8))"),
        ),
    )


PAD_TO = 64  # the fix pads the odd dimensions to a multiple of 64 (its first Fix)


def _pad_snippet(shape: tuple[int, int, int], align: int) -> str:
    """The first fix's line, on the program's own odd dimension: the largest of its largest
    misaligned GEMM (M x N x K) that is not a multiple of ``align``."""
    odd = max([d for d in shape if d % align] or [d for d in shape if d % PAD_TO] or shape)
    padded = -(-odd // PAD_TO) * PAD_TO
    return f"size = (size + {PAD_TO - 1}) // {PAD_TO} * {PAD_TO}   # {odd} -> {padded}"
# How far the trace's own aligned GEMMs may set the grid's rates (they ran on this card, the grid
# on the reference card): a GEMM library differs by less than this between Hopper parts.
GRID_SCALE_BOUNDS = (0.5, 2.0)


def _padded(d: np.ndarray) -> np.ndarray:
    """Dimensions as the fix pads them: to a multiple of 64, or of 8 below 64 (a few channels)."""
    step = np.where(d >= PAD_TO, PAD_TO, 8)
    return np.ceil(d / step) * step


def _aligned_ns(a: Analysis, bad: np.ndarray, good: np.ndarray,
                dtype: str) -> tuple[np.ndarray, str]:
    """Each misaligned GEMM's time once padded: the padded shape at the measured grid's rate
    (hardware/gemm_rate.py), scaled by how the trace's aligned GEMMs ran against that grid."""
    rf = a.roofline
    after = gemm_ns_of_events(a, bad, dtype, pad=_padded)
    reference = rate_source(a.ceilings, dtype)
    if good.size:
        ran = rf.event_in_steps_ns[good].astype(float)
        grid = gemm_ns_of_events(a, good, dtype)
        if ran.sum() > 0 and grid.sum() > 0:
            scale = float(np.clip(ran.sum() / grid.sum(), *GRID_SCALE_BOUNDS))
            after = after * scale
            reference = f"{reference}, x{scale:.2f} as this trace's aligned GEMMs ran"
    return after, reference


def _measured_penalty(curve: dict[str, float]) -> dict[str, float]:
    """What this card measured for an odd shape vs an aligned one (gpudoctor bench), if it did."""
    odd, even = curve.get("gemm.bf16.misaligned"), curve.get("gemm.bf16")
    if not odd or not even:
        return {}
    return {"measured_bf16_8191_cubed_tflops": round(odd / 1e12, 1),
            "measured_bf16_8192_cubed_tflops": round(even / 1e12, 1)}


RULE = Rule(
    ID, "Misaligned GEMM dimensions", check, __doc__ or "", needs=("launch_links", "cpu_ops"),
    order=110, calibration="same-ops",
)
