"""The observer effect: host time the profiler itself adds to every event it records.

On a GPU-bound step that overhead is hidden; on a host-bound one it widens exactly the gaps the
doctor prices (launch-bound, per-sample loops). Measured as profiled minus unprofiled step time
over recorded ops + runtime calls per step: about 3 us an event on the lab's host-bound traps
(benchmarks/BENCHMARKS-twins.md "Evidence moved from the source: analysis").
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis.host_events import launch_threads, sync_calls
from gpudoctor.analysis.intervals import WINDOW, overlap_per_window, union
from gpudoctor.analysis.steps import Steps
from gpudoctor.core.arrays import median
from gpudoctor.trace.model import HostCat, Trace

PROFILER_OVERHEAD_NS_PER_EVENT = 3_000


def recorded_events_per_step(trace: Trace, steps: Steps) -> float:
    """Ops and runtime / driver calls the launching threads recorded, per step."""
    host = trace.host
    if len(host) == 0:
        return 0.0
    recorded = (host.cat == HostCat.OP) | (host.cat == HostCat.RUNTIME) | (
        host.cat == HostCat.DRIVER)
    return float((recorded & host.on_threads(launch_threads(trace))).sum()) / max(len(steps), 1)


def profiler_overhead_ms(trace: Trace, steps: Steps) -> float:
    """Estimated host time per step that the profiler added."""
    return recorded_events_per_step(trace, steps) * PROFILER_OVERHEAD_NS_PER_EVENT / 1e6


# Operators that only re-describe a tensor (no allocation, no kernel): their recorded time is the
# profiler's own work around them and the host's pace, nothing of the program's
VIEW_OPERATORS = frozenset({
    "aten::view", "aten::t", "aten::as_strided", "aten::transpose", "aten::expand",
    "aten::detach", "aten::permute", "aten::select", "aten::slice", "aten::unsqueeze",
    "aten::squeeze", "aten::alias", "aten::_reshape_alias", "aten::unsafe_view",
    "aten::_unsafe_view"})
# Fewer view operators than this in the window: their median says too little
MIN_VIEW_OPERATORS = 50


def view_operator_ns(trace: Trace, lo: int, hi: int) -> float | None:
    """The median recorded time of the view operators starting in [lo, hi) (ns), None where the
    window holds fewer than MIN_VIEW_OPERATORS."""
    views = trace.names_matching(VIEW_OPERATORS.__contains__)
    return _median_recorded(trace, HostCat.OP, views, lo, hi, MIN_VIEW_OPERATORS)


def _median_recorded(trace: Trace, cat: HostCat, named: np.ndarray, lo: int, hi: int,
                     minimum: int) -> float | None:
    """The median recorded time of the host events of ``cat`` whose name id ``named`` marks,
    starting in [lo, hi) (ns); None where fewer than ``minimum`` did."""
    host = trace.host
    if len(host) == 0:
        return None
    pick = (host.cat == cat) & (host.ts >= lo) & (host.ts < hi) & named[host.name]
    if int(pick.sum()) < minimum:
        return None
    return float(np.median(host.dur[pick]))


# The profiler's own work at each step boundary (closing one ProfilerStep range, opening the next)
# shows as host time before the step's first recorded event and after its last: 0.07-0.25 ms a step
# on the lab's fixed twins (benchmarks/BENCHMARKS-twins.md "Evidence moved from the source:
# analysis"). Capped: a longer stretch is the program's own work (Python, I/O) rather than the
# profiler's.
MAX_STEP_BOUNDARY_NS = 300_000


def step_boundary_ms(trace: Trace, steps: Steps) -> float:
    """Median host time per step between the step's edges and its first / last recorded event."""
    if steps.host_start is None or steps.host_end is None or len(steps.host_start) == 0:
        return 0.0
    host = trace.host
    recorded = (host.cat == HostCat.OP) | (host.cat == HostCat.RUNTIME) | (
        host.cat == HostCat.DRIVER)
    lo, head_e, tail_s, hi = step_edge_stretches(trace,
                                                 recorded & host.on_threads(launch_threads(trace)),
                                                 steps.host_start, steps.host_end)
    return float(median((head_e - lo) + (hi - tail_s))) / 1e6 if lo.size else 0.0


def step_edge_stretches(trace: Trace, recorded: np.ndarray, lo: np.ndarray,
                        hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each step [lo, hi) holding a ``recorded`` host event: (lo, the first one's start, the
    last one's end, hi), each stretch capped at MAX_STEP_BOUNDARY_NS; steps holding none are left
    out. "The last one's end" is the latest end of the recorded events that start before hi."""
    host = trace.host
    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    first_start = np.full(lo.size, np.iinfo(np.int64).max)  # earliest recorded start in [lo, hi)
    last_end = np.full(lo.size, np.iinfo(np.int64).min)  # latest end of those starting before hi
    # a window of host events at a time, for peak memory
    # (benchmarks/BENCHMARKS-loading.md "the step's graph in bounded memory again")
    for b0 in range(0, len(host), WINDOW):
        b1 = min(b0 + WINDOW, len(host))
        mine = np.flatnonzero(recorded[b0:b1]) + b0
        if mine.size == 0:
            continue
        order = np.argsort(host.ts[mine], kind="stable")
        starts, ends = host.ts[mine][order], np.maximum.accumulate(host.end[mine][order])
        first = np.searchsorted(starts, lo, side="left")
        inside = (first < starts.size) & (starts[np.minimum(first, starts.size - 1)] < hi)
        first_start[inside] = np.minimum(first_start[inside], starts[first[inside]])
        last = np.searchsorted(starts, hi, side="left") - 1
        before = last >= 0
        last_end[before] = np.maximum(last_end[before], ends[last[before]])
    ok = first_start < np.iinfo(np.int64).max
    lo, hi, first_start, last_end = lo[ok], hi[ok], first_start[ok], last_end[ok]
    head_e = np.minimum(first_start, lo + MAX_STEP_BOUNDARY_NS)
    tail_s = np.minimum(np.maximum(last_end, hi - MAX_STEP_BOUNDARY_NS), hi)
    return lo, head_e.astype(np.int64), tail_s.astype(np.int64), hi



# A runtime call this long is the host waiting (a full launch queue, an implicit sync), not working.
BLOCKED_CALL_NS = 50_000


def host_step_ms(trace: Trace, steps: Steps) -> float | None:
    """The host's working time per step: its ProfilerStep range minus the time it spent blocked
    (sync calls, and runtime calls long enough to be waits). None without ProfilerStep ranges."""
    if steps.host_start is None or steps.host_end is None or len(steps.host_start) == 0:
        return None
    host = trace.host
    waiting = sync_calls(trace) | ((host.cat >= HostCat.RUNTIME) & (host.dur >= BLOCKED_CALL_NS))
    waiting &= host.on_threads(launch_threads(trace))
    s, e = union(host.ts[waiting], host.end[waiting])
    blocked = overlap_per_window(s, e, steps.host_start, steps.host_end)
    return float(median(steps.host_end - steps.host_start - blocked)) / 1e6


# The runtime call that launches an eager kernel: the same work whatever the kernel, so its recorded
# time is the host's pace (and the profiler's cost per call) alone
LAUNCH_CALL = "cudaLaunchKernel"
# Fewer launch calls than this in the window: their median says too little
MIN_LAUNCH_CALLS = 50


def launch_call_ns(trace: Trace, steps: Steps) -> float | None:
    """The median recorded time of ``LAUNCH_CALL`` in the steps (ns), None where they hold fewer
    than MIN_LAUNCH_CALLS: the host's pace, which moves between processes of one program
    (benchmarks/BENCHMARKS-try-fixes.md "The host's pace, trial by trial")."""
    if len(steps) == 0:
        return None
    lo = steps.host_start[0] if steps.host_start is not None else steps.start[0]
    hi = steps.host_end[-1] if steps.host_end is not None else steps.end[-1]
    launches = trace.names_matching(LAUNCH_CALL.__eq__)
    return _median_recorded(trace, HostCat.RUNTIME, launches, int(lo), int(hi), MIN_LAUNCH_CALLS)
