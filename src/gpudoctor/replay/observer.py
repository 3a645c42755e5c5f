"""The profiler's own time, taken out where it happens: per recorded event, by event class.

The profiler adds host time to every event it records (RL-Scope, MLSys 2021, calibrates it per event
class and subtracts it where it happens; so does this). Each gap and call of the host chain loses
its recorded events' cost (replay/graph.py counts them by class); the replay then says what the step
is without the profiler. The per-class costs are ``DEFAULT_COST_NS`` (the analysis' per-event
estimate, analysis/observer.py), or what ``gpudoctor bench`` measured on the card (hardware/probe.py
``profiler_probes``, through the machine profile), scaled by one factor fitted on the user's own run
when its unprofiled step was timed (``unprofiled``); benchmarks/BENCHMARKS-replay.md "Replay" holds
how close both come.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import numpy as np

from gpudoctor.analysis.intervals import overlap_per_window, union
from gpudoctor.analysis.observer import PROFILER_OVERHEAD_NS_PER_EVENT
from gpudoctor.replay.graph import CALL, EVENT_CLASSES, StepGraph
from gpudoctor.replay.simulate import Changes, Replayed, replay

# ns of host time the profiler adds per recorded event: operator and annotation ranges pay the
# RecordFunction callbacks, runtime calls the CUPTI callback (analysis/observer.py's estimate).
# A Python frame costs less (with_stack added 0.16 us an op: tests/data/manifest.json
# profiler_overhead); 1 us is an upper figure no recorded trace here separates from the rest.
_PER_EVENT = float(PROFILER_OVERHEAD_NS_PER_EVENT)
DEFAULT_COST_NS = {"op": _PER_EVENT, "runtime": _PER_EVENT, "python": 1_000.0,
                   "annotation": _PER_EVENT, "memory": 0.0}
# A call keeps at least this much of its time: a launch costs the host a few microseconds
# unprofiled.
MIN_CALL_NS = 1_500.0
# The fitted scale's range: beyond it the timing of the unprofiled step, not the profiler, differs.
SCALE_RANGE = (0.0, 8.0)
# The profiled step replayed with nothing taken out, within this share of the measured one: the
# GPU's work sets both and the profiler's cost is hidden, so the step cannot tell it: a fit runs to
# the range's end and leaves the host too little time (benchmarks/BENCHMARKS-replay.md "The lab on
# the H200, with its fixed twins' traces").
GPU_SET_SHARE = 0.02
# Where the step cannot tell the profiler's cost, the scale taken on DEFAULT_COST_NS: the scales
# fitted where it could sit above 1 and move about 2x between machines; 1.3 priced the most
# recorded traps, variants and knob trials within 1.25x (benchmarks/BENCHMARKS-replay.md "The prior").
PRIOR_SCALE = 1.3
# Where the window records enough view operators (analysis/observer.py ``view_operator_ns``): the
# prior is this many per microsecond of their median recorded time, which do nothing but the
# profiler's work and the host's. The scale fitted on runs whose step tells it tracks that time
# (log correlation 0.60, power 0.99); the prior from it comes within 1.5x of the fitted scale on
# 65% of them, PRIOR_SCALE on 51% (benchmarks/bench_view_pace.py; benchmarks/BENCHMARKS-replay.md
# "The host's pace from its view operators"). Fitted on this tool's own captures: rules/whatif.py
# takes it for a trace that comes with its run's timing.
PRIOR_SCALE_PER_VIEW_US = 0.72
PRIOR_SCALE_RANGE = (0.3, 4.0)
# The profiled step replayed with nothing taken out agrees with the measured one within this share
# below it; further below, the measured step holds time the window did not see, a loader's stalls
# (tests/test_variant_prices.py, tests/test_outlier_steps.py).
AGREE_SHARE = 0.05
# Within this share of the GPU-set floor, a replayed step has reached it.
FLOOR_SHARE = 0.01
# The prior's replayed step within this share of the measured one, its GPU busier than its host:
# the step is on the GPU's floor and the prior stands (``unprofiled``).
PLATEAU_SHARE = 0.02
# A lead at the unprofiled steps' boundaries under this share of the step is a GPU that waited for
# the host (a launch's latency, an event's own time): it sets no scale, but a fit to the step
# whose replay leaves the GPU a backlog there is taken with it (``_with_the_lead``;
# benchmarks/BENCHMARKS-replay.md "A GPU that waited at the marks"; tests/test_host_lead.py).
LEAD_MIN_SHARE = 0.02
# The replayed leads after the first mark within this share of the step of each other: the host
# syncs with the GPU every step (tests/data's GPU-set traces that do not, healthy_train among them,
# grow by half a step a step; the synced fp32 programs of tests/test_host_lead.py by under 6%).
LEAD_STEADY_SHARE = 0.15
# A scale fitted to the step whose replay leads the GPU by more than this share of the step away
# from the lead timed with it has put the host's time where the step allows but the lead does
# not: the scale within JOINT_SPAN of it missing both least is taken (JOINT_POINTS replays, then
# as many again over a grid step either side of the best)
# (benchmarks/BENCHMARKS-replay.md "The host's lead beside the step"; tests/test_host_lead.py).
LEAD_MISS_SHARE = 0.05
JOINT_SPAN = 0.5
JOINT_POINTS = 11
BOUND_ITERATIONS = 24
FIT_ITERATIONS = 40
FIT_TOLERANCE = 1e-5  # of the measured step

# what set the scale (Unprofiled.source; rules/whatif.py says it beside each replayed price)
FROM_STEP = "the step timed without the profiler"
FROM_LEAD = "the host's lead over the GPU, timed without the profiler"
FROM_PRIOR = "the prior: no timing without the profiler shows the host's pace"
FROM_STEP_AND_LEAD = "the step and the host's lead over the GPU, both timed without the profiler"
ScaleReplay = tuple[float, Changes, Replayed]  # a scale, its changes and their replay


class Unprofiled(msgspec.Struct, frozen=True, eq=False):
    """The graph's changes that remove the profiler, and how they were chosen."""

    changes: Changes
    scale: float  # on DEFAULT_COST_NS (or the costs given)
    replayed: Replayed
    fitted: bool  # scale fitted to a measured unprofiled step
    residual_ns: float  # measured minus replayed unprofiled step (0 when not fitted, or fitted exactly)
    # what set the scale: FROM_STEP (the measured step), FROM_LEAD (the host's lead over the GPU),
    # FROM_PRIOR (PRIOR_SCALE: no step measured, or one the GPU's work sets and no lead),
    # FROM_STEP_AND_LEAD (the step fitted, its replayed lead far from the measured one)
    source: str = FROM_STEP


def costs_vector(costs: dict[str, float] | None = None) -> np.ndarray:
    c = {**DEFAULT_COST_NS, **(costs or {})}
    return np.array([c[name] for name in EVENT_CLASSES], float)


def without_profiler(graph: StepGraph, scale: float = 1.0, costs: dict[str, float] | None = None,
                     base: Changes | None = None) -> Changes:
    """``base`` (a fix's changes, or none) with the profiler's cost taken out of every gap and
    call."""
    base = base or Changes()
    per_entry = graph.load @ (costs_vector(costs) * scale)
    gap = (graph.gap_ns if base.gap_ns is None else base.gap_ns).astype(float)
    own = (graph.own_ns if base.own_ns is None else base.own_ns).astype(float)
    tail = float(graph.tail_ns if base.tail_ns is None else base.tail_ns)
    n = gap.size
    gap, tail = _without_step_edges(graph, gap, tail)
    overhead = per_entry[:n]
    from_gap = np.minimum(overhead, gap)
    is_call = graph.kind == CALL
    room = np.where(is_call, np.maximum(own - MIN_CALL_NS, 0.0), 0.0)
    from_own = np.minimum(overhead - from_gap, room)
    # a call that waited keeps its return time: the wait, not the profiler, set its length
    from_own = np.where(graph.wait_on >= 0, 0.0, from_own)
    # a one-off call is not part of the steady state the unprofiled step's median times
    if graph.one_off.size:
        from_own = np.where(graph.one_off, np.maximum(own - MIN_CALL_NS, 0.0), from_own)
    return Changes(
        gap_ns=gap - from_gap, own_ns=own - from_own, tail_ns=max(tail - float(per_entry[n]), 0.0),
        waits=base.waits, dev_dur_ns=base.dev_dur_ns, dev_removed=base.dev_removed,
        latency_ns=base.latency_ns, switch_ns=base.switch_ns, ret_ns=base.ret_ns,
    )


def _without_step_edges(graph: StepGraph, gap: np.ndarray, tail: float) -> tuple[np.ndarray, float]:
    """The gaps and tail less the profiler's work at the steps' edges (graph.step_edges), the share
    of each gap they fill: a fix's changes already took out what it removed of that gap."""
    if graph.edge_s.size == 0 or gap.size == 0:
        return gap, tail
    s, e = union(graph.edge_s, graph.edge_e)
    prev_end, entry_start, last = graph.gap_windows()
    edges = overlap_per_window(s, e, prev_end, entry_start)
    edges_tail = overlap_per_window(s, e, np.array([last]), np.array([last + graph.tail_ns]))[0]
    kept = np.divide(gap, graph.gap_ns, out=np.ones_like(gap), where=graph.gap_ns > 0)
    kept_tail = tail / graph.tail_ns if graph.tail_ns > 0 else 1.0
    return np.maximum(gap - edges * np.clip(kept, 0, 1),
                      0.0), max(tail - float(edges_tail) * min(kept_tail, 1.0), 0.0)


def prior_scale(view_ns: float | None) -> float:
    """The scale taken where the step cannot tell the profiler's cost: from the median recorded
    time of the window's view operators where it has enough (``view_ns``), else PRIOR_SCALE."""
    if view_ns is None or not view_ns > 0:
        return PRIOR_SCALE
    lo, hi = PRIOR_SCALE_RANGE
    return float(min(max(PRIOR_SCALE_PER_VIEW_US * view_ns / 1e3, lo), hi))


def unprofiled(graph: StepGraph, measured_step_ns: float | None = None,
               costs: dict[str, float] | None = None,
               measured_lead_ns: float | None = None, prior: float = PRIOR_SCALE) -> Unprofiled:
    """The profiler taken out: at the default costs, or with their scale fitted (the replayed step
    falls as the scale grows: regula falsi) so that the replayed step matches
    ``measured_step_ns``; where the host ran ahead of the GPU by ``measured_lead_ns`` at the
    unprofiled steps' boundaries, so that the replayed lead matches it (``_lead_fit``)."""
    if measured_step_ns is None or measured_step_ns <= 0:
        ch = without_profiler(graph, prior, costs)
        return Unprofiled(ch, prior, replay(graph, ch), fitted=False, residual_ns=0.0,
                          source=FROM_PRIOR)
    lo, hi = SCALE_RANGE
    lo_changes = without_profiler(graph, lo, costs)
    at_lo = replay(graph, lo_changes)
    at_hi: Replayed | None = None
    # a lead under LEAD_MIN_SHARE of the step is a GPU that waited for the host: it tells nothing
    lead_told = (measured_lead_ns is not None
                 and measured_lead_ns >= LEAD_MIN_SHARE * measured_step_ns)
    if lead_told:
        hi_changes = without_profiler(graph, hi, costs)
        at_hi = replay(graph, hi_changes)
        # the GPU's work sets the step (the most the profiler could have cost leaves it within
        # AGREE_SHARE of the measured one): the step cannot tell the host's pace, its lead can
        if measured_step_ns <= at_hi.step_ns * (1 + AGREE_SHARE):
            by_lead = _lead_fit(graph, costs, measured_lead_ns, (lo, lo_changes, at_lo),
                                (hi, hi_changes, at_hi))
            if by_lead is not None and abs(by_lead[2].step_ns / measured_step_ns - 1) <= AGREE_SHARE:
                scale, ch, r = by_lead
                return Unprofiled(ch, scale, r, True, measured_step_ns - r.step_ns, FROM_LEAD)
    if at_lo.step_ns <= measured_step_ns * (1 + GPU_SET_SHARE):
        # the profiled step is no longer than the measured one: where the GPU's work sets it, the
        # profiler's host time is hidden and the step says nothing of it: the prior stands. Where
        # the two agree and taking the prior out would shorten the step below the measured one,
        # the host is on the step's path and the profiler cost it less: the most the step allows.
        # A measured step longer still holds time the window did not see (a loader's stalls), which
        # bounds nothing
        agree = at_lo.step_ns >= measured_step_ns * (1 - AGREE_SHARE)
        floor = min(at_lo.step_ns, measured_step_ns) * (1 - GPU_SET_SHARE) if agree else 0.0
        scale, ch, r = _bounded_prior(graph, floor, costs, (lo, lo_changes, at_lo), prior)
        return Unprofiled(ch, scale, r, True, measured_step_ns - r.step_ns,
                          FROM_PRIOR if scale == prior else FROM_STEP)
    if at_hi is None:
        hi_changes = without_profiler(graph, hi, costs)
        at_hi = replay(graph, hi_changes)
    # even the most the profiler could have added leaves it longer, or within FLOOR_SHARE of it:
    # the GPU's work sets the floor. Within AGREE_SHARE below it or FLOOR_SHARE above it, the
    # measured step agrees with that floor, and every scale that brings the host under it replays
    # the same step: of those, the prior, or the least of them where the prior does not reach the
    # floor (the range's end would leave the host a fraction of what the measured step allows:
    # tests/test_replay.py). A fit to a step a hair above the floor would put the host on it and
    # price every GPU fix at nothing (benchmarks/BENCHMARKS-replay.md "A step just above the GPU's
    # floor"). Further below, the device's work itself ran slower under the profiler (a pageable
    # copy staged): the most the range takes out
    if at_hi.step_ns * (1 + FLOOR_SHARE) >= measured_step_ns:
        if measured_step_ns < at_hi.step_ns * (1 - AGREE_SHARE):
            return Unprofiled(hi_changes, hi, at_hi, True, measured_step_ns - at_hi.step_ns)
        target = at_hi.step_ns * (1 + FLOOR_SHARE)
        _, (scale, ch, r) = _bisect(graph, costs, (lo, lo_changes, at_lo), (hi, hi_changes, at_hi),
                                    lambda r: r.step_ns <= target)
        if scale < prior:
            scale, ch = prior, without_profiler(graph, prior, costs)
            r = replay(graph, ch)
        return Unprofiled(ch, scale, r, True, measured_step_ns - r.step_ns,
                          FROM_PRIOR if scale == prior else FROM_STEP)
    # the prior's replay within PLATEAU_SHARE of the measured step, its GPU busier than its host:
    # the step sits on the GPU's floor, which still slopes a little with the scale (the host's
    # lead fills the GPU's gaps), and a fit would follow the timing's spread along it, putting the
    # host anywhere from the GPU's length down (benchmarks/BENCHMARKS-replay.md "A long launch is
    # no wait")
    ch_prior = without_profiler(graph, prior, costs)
    at_prior = replay(graph, ch_prior)
    if (abs(at_prior.step_ns / measured_step_ns - 1) <= PLATEAU_SHARE
            and gpu_sets(graph, at_prior)):
        return Unprofiled(ch_prior, prior, at_prior, True, measured_step_ns - at_prior.step_ns,
                          FROM_PRIOR)
    # regula falsi (the Illinois variant) on f(scale) = replayed - measured, falling in the scale
    f_lo, f_hi = at_lo.step_ns - measured_step_ns, at_hi.step_ns - measured_step_ns
    best, side = at_hi, 0
    for _ in range(FIT_ITERATIONS):
        mid = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        r = replay(graph, without_profiler(graph, mid, costs))
        f_mid = r.step_ns - measured_step_ns
        if abs(f_mid) <= FIT_TOLERANCE * measured_step_ns or hi - lo <= 1e-9:
            hi, best = mid, r
            break
        if f_mid > 0:
            lo, f_lo = mid, f_mid
            if side == -1:
                f_hi /= 2
            side = -1
        else:
            hi, f_hi, best = mid, f_mid, r
            if side == 1:
                f_lo /= 2
            side = 1
    fitted = Unprofiled(without_profiler(graph, hi, costs), hi, best, True,
                        measured_step_ns - best.step_ns)
    if measured_lead_ns is None:
        return fitted
    # a lead too short to set the scale still bounds the replay's: a GPU the host waited for
    # at the marks is no GPU left a backlog there
    return _with_the_lead(graph, costs, measured_step_ns, max(measured_lead_ns, 0.0), fitted)


def _with_the_lead(graph: StepGraph, costs: dict[str, float] | None, measured_step_ns: float,
                   measured_lead_ns: float, fitted: Unprofiled) -> Unprofiled:
    """``fitted`` (the scale fitted to the step), or where its replayed lead over the GPU misses
    the measured one by more than LEAD_MISS_SHARE of the step, the scale within JOINT_SPAN of it
    whose replay misses the step and the lead least together (each as a share of the step)."""

    def miss(r: Replayed) -> float:
        return (abs(r.step_ns - measured_step_ns)
                + abs(replayed_lead_ns(r) - measured_lead_ns)) / measured_step_ns

    if abs(replayed_lead_ns(fitted.replayed) - measured_lead_ns) <= (
            LEAD_MISS_SHARE * measured_step_ns):
        return fitted
    lo, hi = SCALE_RANGE
    best = (miss(fitted.replayed), fitted.scale, fitted.changes, fitted.replayed)
    # the grid, then a grid as fine again around its best point
    width = 2 * JOINT_SPAN * fitted.scale / (JOINT_POINTS - 1)
    for centre, span in ((fitted.scale, JOINT_SPAN * fitted.scale), (None, width)):
        centre = best[1] if centre is None else centre
        for scale in np.linspace(centre - span, centre + span, JOINT_POINTS):
            scale = float(min(max(scale, lo), hi))
            ch = without_profiler(graph, scale, costs)
            r = replay(graph, ch)
            if miss(r) < best[0]:
                best = (miss(r), scale, ch, r)
    _, scale, ch, r = best
    if scale == fitted.scale:
        return fitted
    return Unprofiled(ch, scale, r, True, measured_step_ns - r.step_ns, FROM_STEP_AND_LEAD)


def gpu_sets(graph: StepGraph, r: Replayed) -> bool:
    """The replay's GPU busy longer a step than its host works (the host holds the step
    otherwise)."""
    return r.gpu_busy_ns / max(graph.steps, 1) > r.host_work_ns / max(graph.steps - 1, 1)


def _steady_leads(r: Replayed) -> np.ndarray:
    """A replay's leads at the marks after its first, whose step starts behind work queued before
    the window (as ``Replayed.step_ns`` counts steps); the one lead of a single mark."""
    return r.leads_ns[1:] if r.leads_ns.size >= 2 else r.leads_ns


def replayed_lead_ns(r: Replayed) -> float:
    """The median of ``_steady_leads``; 0 without marks."""
    leads = _steady_leads(r)
    return float(np.median(leads)) if leads.size else 0.0


def _lead_fit(graph: StepGraph, costs: dict[str, float] | None, measured_lead_ns: float,
              at_lo: ScaleReplay, at_hi: ScaleReplay) -> ScaleReplay | None:
    """The scale whose replay leads the GPU by ``measured_lead_ns`` at the step boundaries (the
    lead grows with the scale: bisection); None where no scale in the range reaches it or every
    scale does. Where the GPU's work sets the step, the step hardly moves with the scale while the
    host's lead over the GPU moves with every microsecond the profiler is said to have cost
    (benchmarks/BENCHMARKS-replay.md "The host's lead over the GPU")."""
    if (replayed_lead_ns(at_lo[2]) >= measured_lead_ns
            or replayed_lead_ns(at_hi[2]) < measured_lead_ns):
        return None
    _, high = _bisect(graph, costs, at_lo, at_hi,
                      lambda r: replayed_lead_ns(r) >= measured_lead_ns)
    # a lead that grows step after step is a host with no sync in its step, running ahead until
    # something outside the graph stops it (the launch queue, the allocator): its measured lead is
    # that bound, not the host's pace
    leads = _steady_leads(high[2])
    if leads.size >= 2 and np.ptp(leads) > LEAD_STEADY_SHARE * high[2].step_ns:
        return None
    return high


def _bisect(graph: StepGraph, costs: dict[str, float] | None, low: ScaleReplay, high: ScaleReplay,
            reached: Callable[[Replayed], bool]) -> tuple[ScaleReplay, ScaleReplay]:
    """BOUND_ITERATIONS halvings between two replayed scales, ``high`` where the replayed step has
    ``reached`` what is asked and ``low`` where not (the replayed step falls as the scale grows):
    both ends."""
    for _ in range(BOUND_ITERATIONS):
        mid = (low[0] + high[0]) / 2
        ch = without_profiler(graph, mid, costs)
        r = replay(graph, ch)
        if reached(r):
            high = mid, ch, r
        else:
            low = mid, ch, r
    return low, high


def _bounded_prior(graph: StepGraph, floor_ns: float, costs: dict[str, float] | None,
                   at_lo: ScaleReplay, prior: float = PRIOR_SCALE) -> ScaleReplay:
    """``prior``, or the largest scale below it whose replayed step stays at ``floor_ns`` or
    above (bisection from ``at_lo``, the lowest scale replayed); with its changes and replay."""
    ch = without_profiler(graph, prior, costs)
    r = replay(graph, ch)
    if r.step_ns >= floor_ns:
        return prior, ch, r
    low, _ = _bisect(graph, costs, at_lo, (prior, ch, r), lambda r: r.step_ns < floor_ns)
    return low
