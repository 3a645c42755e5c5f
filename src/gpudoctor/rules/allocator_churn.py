"""allocator-churn: cudaMalloc / cudaFree inside the steady-state step.

The caching allocator should serve every allocation after the first steps; device allocations
inside the step mean ``empty_cache()`` calls, ever-changing shapes, or a cache that cannot keep
up. When the card is nearly full this is memory pressure, and that finding owns it.

Priced by the step the fix leaves: the profiled step without the idle behind the allocator and
without the dispatch idle that is the profiler's own launch time. The allocator's calls also slow
Priced by the step the fix leaves: the profiled step without the idle behind the allocator and
without the dispatch idle that is the profiler's own launch time (the allocator's calls slow every
launch around them, so the idle they cause is split between "allocator" and "dispatch"). On a
host-bound step what that step keeps shrinks with the profiler gone as the whole step does, so it
is calibrated like the step (``calibration="step-share"``, rules/calibrate.py).
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import allocator_calls
from gpudoctor.core.finding import ALL_IDLE, Evidence, Finding, Fix, make_finding
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import sources_of_host, top_names
from gpudoctor.rules.shared import PRESSURE_FRACTION

ID = "allocator-churn"


def check(a: Analysis) -> Finding | None:
    mem = a.memory
    if mem.malloc_calls_per_step < 1 or mem.peak_reserved_fraction >= PRESSURE_FRACTION:
        return None
    trace, host = a.trace, a.trace.host
    idle = a.idle.ms("allocator")
    culprits = a.idle.culprits.get("allocator", np.empty(0, np.int64))
    named = host.outermost(culprits)
    # launches slowed by the profiler are not the program's; those slowed by the allocator's
    # calls are, and go with them (the dispatch idle left is the part above the profiler's cost)
    dispatch = a.idle.ms("dispatch")
    after_ms = max(a.step_ms - idle - min(dispatch, a.profiler_overhead_ms), 0.0)
    saving = a.step_ms - after_ms
    return make_finding(
        ID,
        "Device memory is allocated and freed inside every step",
        a.step_ms,
        saving,
        f"{mem.malloc_calls_per_step:.0f} cudaMalloc/cudaFree calls per step take "
        f"{mem.malloc_ms_per_step:.2f} ms of host time; the GPU idles {idle:.2f} ms per step "
        "behind them.",
        Evidence(
            numbers={
                "allocator_calls_per_step": round(mem.malloc_calls_per_step, 1),
                "allocator_host_ms_per_step": round(mem.malloc_ms_per_step, 3),
                "gpu_idle_behind_allocator_ms_per_step": round(idle, 3),
                "peak_reserved_GB": round(mem.peak_reserved_bytes / 1e9, 2),
                "step_after_fix_in_profiled_trace_ms": round(after_ms, 3),
            },
            ops=top_names(trace, host.name[named]) if culprits.size else (),
            sources=sources_of_host(trace, culprits) if culprits.size else (),
        ),
        (
            Fix("Do not call torch.cuda.empty_cache() in the training loop",
                "# delete: torch.cuda.empty_cache()"),
            Fix("Keep shapes stable (pad or bucket variable lengths) so cached blocks are reused",
                "x = F.pad(x, (0, bucket_len - x.shape[-1]))"),
            Fix("Let the allocator grow segments instead of new allocations",
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py"),
        ),
        idle_ms=ALL_IDLE,
    )



def edit(a: Analysis, finding: Finding) -> Edit | None:
    """The allocator's calls leave the step (cached blocks are reused), waits included."""
    s, e = a.idle.labels.get("allocator", (np.empty(0, np.int64), np.empty(0, np.int64)))
    calls = np.flatnonzero(allocator_calls(a.trace))
    if s.size == 0 and calls.size == 0:
        return None
    host = a.trace.host
    s = np.concatenate([s, host.ts[calls]])
    e = np.concatenate([e, host.end[calls]])
    return Edit(host_removed_s=s, host_removed_e=e, unwait=calls.astype(np.int64),
                note="allocator calls removed")


RULE = Rule(
    ID, "Allocator churn inside the step", check, __doc__ or "", needs=("launch_links",),
    order=70, idle_cause="allocator", owns_idle=("allocator",), calibration="step-share", edit=edit,
)
