"""small-gemm: matmuls too small to fill the tensor cores (few tiles, short kernels).

A GEMM needs thousands of output tiles in flight to keep 132 SMs of tensor cores busy; at
batch 16 and width 256 each kernel is a few microseconds at a few percent of the roof.
Priced as the kernels' time minus the same FLOPs at the roof times a realistic efficiency:
what batching the work (larger batch, fused QKV / gate-up projections, grouped GEMM) would reach.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.roofline import DTYPES, roof_for
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import GEMM_EFFICIENCY, kernel_names_of_events, op_names_of_events, sources_of_events
from gpudoctor.rules.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.rules.per_sample_loop import loop_groups
from gpudoctor.trace.kernels import Kind

ID = "small-gemm"
MAX_FLOPS_PER_CALL = 2e9
MAX_EFFICIENCY = 0.25


def check(a: Analysis) -> Finding | None:
    dev, rf = a.trace.device, a.roofline
    live = (rf.event_in_steps_ns > 0) & (dev.kind == Kind.GEMM_TC) & (rf.event_flops > 0)
    groups = loop_groups(a)
    if groups:
        live[np.concatenate(groups)] = False
    idx = np.flatnonzero(live)
    if idx.size == 0:
        return None
    t = rf.event_in_steps_ns[idx].astype(float)
    f = rf.event_flops[idx]
    roofs = np.array([roof_for(Kind.GEMM_TC, DTYPES[int(d)], a.ceilings) for d in rf.event_dtype[idx]])
    eff = f / (t / 1e9) / roofs
    small = (f < MAX_FLOPS_PER_CALL) & (eff < MAX_EFFICIENCY)
    if not small.any():
        return None
    idx, t, f, roofs = idx[small], t[small], f[small], roofs[small]
    n = max(len(a.steps), 1)
    saving = float(np.clip(t - f / (roofs * GEMM_EFFICIENCY) * 1e9, 0, None).sum()) / 1e6 / n
    achieved = f.sum() / (t.sum() / 1e9)
    return make_finding(
        ID,
        "Matmuls too small to feed the tensor cores",
        a.step_ms,
        saving,
        f"{idx.size / n:.0f} small GEMMs per step ({f.mean() / 1e6:.1f} MFLOP each) take "
        f"{t.sum() / 1e6 / n:.2f} ms at {achieved / 1e12:.1f} TFLOP/s, "
        f"{100 * achieved / roofs.mean():.1f}% of the tensor-core roof.",
        Evidence(
            numbers={
                "small_gemm_ms_per_step": round(t.sum() / 1e6 / n, 3),
                "small_gemms_per_step": round(idx.size / n, 1),
                "mean_mflop_per_gemm": round(f.mean() / 1e6, 2),
                "mean_kernel_us": round(t.mean() / 1e3, 2),
                "achieved_tflops": round(achieved / 1e12, 2),
                "share_of_roof_pct": round(100 * achieved / roofs.mean(), 2),
            },
            ops=op_names_of_events(a.trace, idx),
            kernels=kernel_names_of_events(a.trace, idx),
            sources=sources_of_events(a.trace, idx),
        ),
        (
            Fix("Give each matmul more rows: a larger batch (or gradient accumulation the other way round)",
                "loader = DataLoader(ds, batch_size=256)   # was 16"),
            Fix("Merge parallel projections into one GEMM (QKV, gate+up)",
                "qkv = x @ w_qkv.T; q, k, v = qkv.split([dq, dk, dv], dim=-1)"),
            Fix("Group many independent small GEMMs into one batched call", "out = torch.bmm(A_stack, B_stack)"),
        ),
        wrong_fix="CUDA graphs remove launch gaps but not this: each kernel itself leaves most SMs idle.",
    )


RULE = Rule(ID, "Small GEMMs starving the tensor cores", check, __doc__ or "")
