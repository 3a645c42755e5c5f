"""The observer effect: host time the profiler itself adds to every event it records.

On a GPU-bound step that overhead is hidden; on a host-bound one it widens exactly the gaps the
doctor prices (launch-bound, per-sample loops). Measured on the lent H100 (torch 2.11,
2026-11-22) as profiled minus unprofiled step time over recorded ops + runtime calls per step:
2.9 us (tests/data/host_sync), 3.3 us (per_sample_loop), 3.1 us (optimizer_loop); and 3.2 us per
``x.add_(1)`` in a loop (record_shapes + with_flops + profile_memory; manifest.json).
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis.idle import launch_threads
from gpudoctor.analysis.steps import Steps
from gpudoctor.trace.model import HostCat, Trace

PROFILER_OVERHEAD_NS_PER_EVENT = 3_000


def recorded_events_per_step(trace: Trace, steps: Steps) -> float:
    """Ops and runtime / driver calls the launching threads recorded, per step."""
    host = trace.host
    if len(host) == 0:
        return 0.0
    recorded = (host.cat == HostCat.OP) | (host.cat == HostCat.RUNTIME) | (host.cat == HostCat.DRIVER)
    return float((recorded & np.isin(host.thread, launch_threads(trace))).sum()) / max(len(steps), 1)


def profiler_overhead_ms(trace: Trace, steps: Steps) -> float:
    """Estimated host time per step that the profiler added."""
    return recorded_events_per_step(trace, steps) * PROFILER_OVERHEAD_NS_PER_EVENT / 1e6
