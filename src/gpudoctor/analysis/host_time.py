"""What the host did with its own step, by cause: the time a rank's launching threads spent inside
their ProfilerStep ranges, each moment given one label (first wins):

    input-pipeline   DataLoader ``__next__``
    collective-wait  blocked (a sync, or a runtime call long enough to be a wait) while the GPU
                     runs a collective kernel: the host waits, through its GPU, for another rank
    host-sync        blocked while the GPU computes: the host waits for its own GPU
    op-setup, pageable-copy, allocator, optimizer, host-work   as in analysis/idle.py
    dispatch         the rest: issuing operators and kernels, Python between them

GPU idle (analysis/idle.py) says why one GPU starved; this says where one host's step went, which
is what decides when a rank reaches its collectives. With every event it records, the profiler
adds its own host time (analysis/observer.py): ``events`` counts them per cause, so a cause can be
de-inflated before it is compared with one the profiler does not stretch (a sleep, a file write).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpudoctor.analysis.host_events import launch_threads, sync_calls
from gpudoctor.analysis.idle import BLOCKING, CAUSES, IdleResult
from gpudoctor.analysis.intervals import contains, overlap_per_window, union
from gpudoctor.analysis.observer import BLOCKED_CALL_NS
from gpudoctor.analysis.steps import Steps
from gpudoctor.trace.kernels import Kind
from gpudoctor.trace.model import HostCat, Trace

COLLECTIVE_WAIT = "collective-wait"
# label order: first wins; a wait is a wait whatever the code around it was doing
ORDER = ("input-pipeline", COLLECTIVE_WAIT, "host-sync",
         *(c for c in CAUSES if c in BLOCKING and c not in ("input-pipeline",
                                                            "host-sync")), "dispatch")
WAITS = frozenset({COLLECTIVE_WAIT})  # time spent because of another rank, not this host's own work


@dataclass(frozen=True)
class HostTime:
    """ms and recorded events per host step, by cause (ORDER); empty without ProfilerStep ranges."""

    ms: dict[str, float] = field(default_factory=dict)
    events: dict[str, float] = field(default_factory=dict)

    @property
    def step_ms(self) -> float:
        return sum(self.ms.values())


def host_time(trace: Trace, steps: Steps, idle: IdleResult) -> HostTime:
    """The host's step split by cause (see the module docstring); ``idle`` gives the blocking
    causes' host intervals (``IdleResult.labels``), found once by analysis/idle.py."""
    if steps.host_start is None or steps.host_end is None or not len(steps.host_start):
        return HostTime()
    host, dev = trace.host, trace.device
    lo, hi = steps.host_start.astype(np.int64), steps.host_end.astype(np.int64)
    on = host.on_threads(launch_threads(trace))
    blocked = (sync_calls(trace) | ((host.cat >= HostCat.RUNTIME) & (host.dur >= BLOCKED_CALL_NS))) & on
    bs, be = union(host.ts[blocked], host.end[blocked])
    nccl = dev.kind == Kind.NCCL
    ns, ne = union(dev.ts[nccl], dev.end[nccl])
    sets = dict(idle.labels)
    sets[COLLECTIVE_WAIT] = _intersect(bs, be, ns, ne)
    sets["host-sync"] = (bs, be)  # the collective part is taken first
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    n = len(lo)
    ms: dict[str, float] = {}
    taken = np.zeros(n, np.int64)
    higher = empty
    recorded = on & ((host.cat == HostCat.OP) | (host.cat >= HostCat.RUNTIME))
    ts = host.ts[recorded]
    ts = ts[contains(*union(lo, hi), ts)]
    free = np.ones(len(ts), bool)
    events: dict[str, float] = {}
    for cause in ORDER[:-1]:
        s, e = sets.get(cause, empty)
        higher = union(np.concatenate((higher[0], s)), np.concatenate((higher[1], e)))
        covered = overlap_per_window(*higher, lo, hi)
        ms[cause] = float((covered - taken).sum()) / n / 1e6
        taken = covered
        inside = contains(*union(s, e), ts) & free
        events[cause] = float(inside.sum()) / n
        free &= ~inside
    ms["dispatch"] = float((hi - lo - taken).sum()) / n / 1e6
    events["dispatch"] = float(free.sum()) / n
    return HostTime({k: round(v, 6) for k, v in ms.items() if v > 0},
                    {k: v for k, v in events.items() if v > 0})


def _intersect(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray,
               b_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The intersection of two sorted disjoint interval sets."""
    if not len(a_s) or not len(b_s):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    lo = np.searchsorted(b_e, a_s, side="right")  # first b ending after each a starts
    hi = np.searchsorted(b_s, a_e, side="left")  # b's starting before each a ends
    rep = hi - lo
    a = np.repeat(np.arange(len(a_s)), np.maximum(rep, 0))
    b = np.concatenate([np.arange(x, y) for x, y in zip(lo.tolist(), hi.tolist()) if y > x]
                       or [np.empty(0, np.int64)])
    s, e = np.maximum(a_s[a], b_s[b]), np.minimum(a_e[a], b_e[b])
    keep = e > s
    return s[keep].astype(np.int64), e[keep].astype(np.int64)
