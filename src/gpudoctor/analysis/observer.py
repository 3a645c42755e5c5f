"""The observer effect: host time the profiler itself adds to every event it records.

On a GPU-bound step that overhead is hidden; on a host-bound one it widens exactly the gaps the
doctor prices (launch-bound, per-sample loops). Measured as profiled minus unprofiled step time
over recorded ops + runtime calls per step: about 3 us an event on the lab's host-bound traps
(benchmarks/BENCHMARKS-twins.md "Evidence moved from the source: analysis").
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis.host_events import launch_threads
from gpudoctor.analysis.steps import Steps
from gpudoctor.trace.model import HostCat, Trace

PROFILER_OVERHEAD_NS_PER_EVENT = 3_000


def recorded_events_per_step(trace: Trace, steps: Steps) -> float:
    """Ops and runtime / driver calls the launching threads recorded, per step."""
    host = trace.host
    if len(host) == 0:
        return 0.0
    recorded = (host.cat == HostCat.OP) | (host.cat == HostCat.RUNTIME) | (host.cat == HostCat.DRIVER)
    return float((recorded & host.on_threads(launch_threads(trace))).sum()) / max(len(steps), 1)


def profiler_overhead_ms(trace: Trace, steps: Steps) -> float:
    """Estimated host time per step that the profiler added."""
    return recorded_events_per_step(trace, steps) * PROFILER_OVERHEAD_NS_PER_EVENT / 1e6


# The profiler's own work at each step boundary (closing one ProfilerStep range, opening the next)
# shows as host time before the step's first recorded event and after its last: 0.07-0.25 ms a
# step on the lab's fixed twins (benchmarks/BENCHMARKS-twins.md "Evidence moved from the source: analysis").
# Capped: a longer stretch is the program's own work (Python, I/O) rather than the profiler's.
MAX_STEP_BOUNDARY_NS = 300_000


def step_boundary_ms(trace: Trace, steps: Steps) -> float:
    """Median host time per step between the step's edges and its first / last recorded event."""
    if steps.host_start is None or steps.host_end is None or len(steps.host_start) == 0:
        return 0.0
    host = trace.host
    recorded = (host.cat == HostCat.OP) | (host.cat == HostCat.RUNTIME) | (host.cat == HostCat.DRIVER)
    idx = np.flatnonzero(recorded & host.on_threads(launch_threads(trace)))
    if idx.size == 0:
        return 0.0
    order = np.argsort(host.ts[idx], kind="stable")
    starts, ends = host.ts[idx][order], np.maximum.accumulate(host.end[idx][order])
    edges = []
    for lo, hi in zip(steps.host_start.tolist(), steps.host_end.tolist()):
        first = np.searchsorted(starts, lo, side="left")
        last = np.searchsorted(starts, hi, side="left") - 1
        if last < first:
            continue
        edges.append(min(starts[first] - lo, MAX_STEP_BOUNDARY_NS) + min(max(hi - ends[last], 0), MAX_STEP_BOUNDARY_NS))
    return float(np.median(edges)) / 1e6 if edges else 0.0


# A runtime call this long is the host waiting (a full launch queue, an implicit sync), not working.
BLOCKED_CALL_NS = 50_000


def host_step_ms(trace: Trace, steps: Steps) -> float | None:
    """The host's working time per step: its ProfilerStep range minus the time it spent blocked
    (sync calls, and runtime calls long enough to be waits). None without ProfilerStep ranges."""
    if steps.host_start is None or steps.host_end is None or len(steps.host_start) == 0:
        return None
    from gpudoctor.analysis.host_events import sync_calls
    from gpudoctor.analysis.intervals import overlap_per_window, union

    host = trace.host
    waiting = sync_calls(trace) | ((host.cat >= HostCat.RUNTIME) & (host.dur >= BLOCKED_CALL_NS))
    waiting &= host.on_threads(launch_threads(trace))
    s, e = union(host.ts[waiting], host.end[waiting])
    blocked = overlap_per_window(s, e, steps.host_start, steps.host_end)
    return float(np.median(steps.host_end - steps.host_start - blocked)) / 1e6
