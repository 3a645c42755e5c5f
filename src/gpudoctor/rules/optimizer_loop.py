"""optimizer-loop: the optimizer updates parameters one tensor at a time.

``foreach=False`` (or a hand-written loop) issues several tiny kernels per parameter, each paid
a launch; ``fused=True`` / ``foreach=True`` update all parameters in a few multi-tensor kernels.
Priced as the optimizer step's span per step minus one pass over its bytes at memory bandwidth.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.intervals import contains, union
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import kernel_names_of_events
from gpudoctor.rules.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.trace.kernels import Kind
from gpudoctor.trace.model import HostCat

ID = "optimizer-loop"
MIN_KERNELS_PER_STEP = 64
# a for-loop AdamW streams each parameter's state through HBM about three times more than the
# single fused pass (four separate in-place updates, each a read and a write)
LOOP_TRAFFIC_FACTOR = 3.0


def check(a: Analysis) -> Finding | None:
    trace, host, dev = a.trace, a.trace.host, a.trace.device
    names = trace.names_matching(lambda s: s.startswith("Optimizer.step#"))
    regions = np.flatnonzero(names[host.name] & (host.cat == HostCat.ANNOTATION)) if len(host) else np.empty(0, int)
    if regions.size == 0:
        return None
    n = max(len(a.steps), 1)
    r_s, r_e = union(host.ts[regions], host.end[regions])
    launched = dev.launch >= 0
    launch_ts = np.where(launched, host.ts[np.maximum(dev.launch, 0)], -1)
    inside = launched & contains(r_s, r_e, launch_ts)
    inside &= a.roofline.event_in_steps_ns > 0
    idx = np.flatnonzero(inside)
    if idx.size / n < MIN_KERNELS_PER_STEP or (dev.kind[idx] == Kind.OPTIMIZER).mean() > 0.5:
        return None
    region_ns = float(np.clip(np.minimum(r_e, a.steps.end.max()) - np.maximum(r_s, a.steps.start.min()), 0, None).sum())
    gpu_end = float(dev.end[idx].max()) if idx.size else 0.0
    span_ns = max(region_ns, 0.0) + max(gpu_end - float(r_e.max()), 0.0)
    nbytes = float(a.roofline.event_bytes[idx].sum())
    fused_ns = nbytes / LOOP_TRAFFIC_FACTOR / a.ceilings.hbm_bytes_per_s * 1e9
    saving = max(span_ns - fused_ns, 0.0) / 1e6 / n
    return make_finding(
        ID,
        "The optimizer steps through parameters in a Python loop",
        a.step_ms,
        saving,
        f"The optimizer step launches {idx.size / n:.0f} kernels per step and spans "
        f"{span_ns / 1e6 / n:.2f} ms; a fused multi-tensor step moves the same bytes in about "
        f"{fused_ns / 1e6 / n:.2f} ms.",
        Evidence(
            numbers={
                "optimizer_kernels_per_step": round(idx.size / n, 1),
                "optimizer_span_ms_per_step": round(span_ns / 1e6 / n, 3),
                "optimizer_kernel_ms_per_step": round(float(dev.dur[idx].sum()) / 1e6 / n, 3),
                "fused_estimate_ms_per_step": round(fused_ns / 1e6 / n, 3),
            },
            ops=tuple(dict.fromkeys(trace.strings[host.name[i]] for i in regions.tolist()))[:3],
            kernels=kernel_names_of_events(trace, idx),
        ),
        (
            Fix("Use the fused optimizer kernel", "opt = torch.optim.AdamW(params, lr=lr, fused=True)"),
            Fix("Or the multi-tensor (foreach) implementation", "opt = torch.optim.AdamW(params, lr=lr, foreach=True)"),
            Fix("Compile the optimizer step", "@torch.compile(fullgraph=False)\ndef opt_step():\n    opt.step()"),
        ),
        idle_ms=max(span_ns - float(dev.dur[idx].sum()), 0.0) / 1e6 / n,
    )


RULE = Rule(ID, "Per-parameter optimizer loop", check, __doc__ or "")
