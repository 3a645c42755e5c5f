"""fp32-matmul: matrix multiplies on CUDA cores in fp32 while the tensor cores sit idle.

Priced as the kernels' time minus the same FLOPs at the 16-bit tensor-core roof times a
realistic efficiency (or the halved bytes at the memory roof, whichever is slower), plus the
casts that autocast adds in front of each matmul.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.roofline import DTYPES
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import (
    GEMM_EFFICIENCY,
    kernel_names_of_events,
    op_names_of_events,
    sources_of_events,
)
from gpudoctor.rules.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.trace.kernels import Kind

ID = "fp32-matmul"
CAST_BYTES_FACTOR = 1.0


def check(a: Analysis) -> Finding | None:
    dev, rf = a.trace.device, a.roofline
    fp32 = DTYPES.index("fp32")
    idx = np.flatnonzero((rf.event_in_steps_ns > 0) & (dev.kind == Kind.GEMM_SIMT) & (rf.event_dtype == fp32))
    if idx.size == 0:
        return None
    n = max(len(a.steps), 1)
    time_ns = rf.event_in_steps_ns[idx].astype(float)
    flops = rf.event_flops[idx]
    nbytes = rf.event_bytes[idx]
    roof = a.ceilings.best_matrix_flops * GEMM_EFFICIENCY
    hbm = a.ceilings.hbm_bytes_per_s
    # Autocast adds a cast per fp32 operand: read 4 bytes, write 2, per element of the inputs
    # (about two thirds of the op's bytes): ~1.0x the op's fp32 bytes through HBM.
    after = (np.maximum(flops / roof, nbytes / 2 / hbm) + CAST_BYTES_FACTOR * nbytes / hbm) * 1e9
    after = np.where(flops > 0, after, time_ns)  # no FLOPs known: claim nothing
    time_ms = time_ns.sum() / 1e6 / n
    saving = float(np.clip(time_ns - after, 0, None).sum()) / 1e6 / n
    achieved = flops.sum() / (time_ns.sum() / 1e9) if time_ns.sum() else 0.0
    return make_finding(
        ID,
        "FP32 matmuls run on CUDA cores, not tensor cores",
        a.step_ms,
        saving,
        f"{time_ms:.2f} ms per step of fp32 GEMMs at {achieved / 1e12:.3g} TFLOP/s on CUDA cores; the "
        f"16-bit tensor-core roof is {a.ceilings.best_matrix_flops / 1e12:.0f} TFLOP/s.",
        Evidence(
            numbers={
                "fp32_gemm_ms_per_step": round(time_ms, 3),
                "achieved_tflops": round(achieved / 1e12, 2),
                "bf16_roof_tflops": round(a.ceilings.best_matrix_flops / 1e12, 1),
                "gemm_efficiency_assumed": GEMM_EFFICIENCY,
                "share_of_step_pct": round(100 * time_ms / a.step_ms, 1),
            },
            ops=op_names_of_events(a.trace, idx),
            kernels=kernel_names_of_events(a.trace, idx),
            sources=sources_of_events(a.trace, idx),
        ),
        (
            Fix("Run the model under bf16 autocast",
                "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = model(x)"),
            Fix("Or at least let fp32 matmuls use TF32 tensor cores",
                "torch.set_float32_matmul_precision('high')"),
            Fix("Keep weights in bf16 where training is stable in it", "model = model.to(torch.bfloat16)"),
        ),
        wrong_fix="A bigger batch will not help: fp32 GEMMs are capped by the CUDA cores' FMA rate.",
    )


RULE = Rule(ID, "FP32 GEMMs on CUDA cores", check, __doc__ or "")
