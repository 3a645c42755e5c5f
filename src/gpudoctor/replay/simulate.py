"""Replay a StepGraph: the host chain and the GPU streams as resources, one pass in launch order.

The host runs its chain: each gap, then each call; a call that waited in the trace waits again
for the same device event (at its replayed end) and returns after its return time. Each device
event starts at the latest of its launch plus the launch latency, its stream's previous event's
end plus the switch time, and the end of the event on another stream it waited for. The step
ends when both the host and every stream are done. Timings are relative to the window's start.
Between two calls that wait, the host's times are running sums and each stream's ends a running
maximum, so a long stretch of the chain is replayed as array operations (``_vector_stretch``),
the rest one entry at a time (``_loop_stretch``): the same timeline either way.

``Changes`` is what a fix edits (replay/edits.py builds them): gap and call times, device event
durations, waits removed. Replaying the graph unchanged reproduces the profiled window
(benchmarks/bench_replay.py measures how closely).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from gpudoctor.core.arrays import distinct
from gpudoctor.replay.graph import MARK, StepGraph


@dataclass(frozen=True, eq=False)
class Changes:
    """Per-entry and per-device-row values replacing the graph's; None keeps the graph's."""

    gap_ns: np.ndarray | None = None
    own_ns: np.ndarray | None = None
    tail_ns: float | None = None
    waits: np.ndarray | None = None  # bool per entry: False removes the entry's wait
    dev_dur_ns: np.ndarray | None = None
    # bool per device row: the event no longer runs (merged into another)
    dev_removed: np.ndarray | None = None
    latency_ns: float | None = None
    switch_ns: float | None = None


@dataclass(frozen=True, eq=False)
class Replayed:
    """A replay's timeline: ``total_ns`` the window's end, ``marks_ns`` each step's start: where
    its host starts and the GPU work launched before it is done (analysis/steps.py align_to_gpu)."""

    total_ns: float
    marks_ns: np.ndarray
    host_end_ns: float
    gpu_busy_ns: float
    dev_start_ns: np.ndarray
    dev_end_ns: np.ndarray
    # the host's own time (gaps and calls, no waits) over the steps step_ns counts
    host_work_ns: float = 0.0

    @property
    def step_ns(self) -> float:
        """The mean step of the window after its first (which starts behind work queued before
        the window, or ahead of it), as graph.StepGraph.profiled_ns."""
        if self.marks_ns.size == 0:
            return self.total_ns
        first = 1 if self.marks_ns.size >= 2 else 0
        counted = self.marks_ns.size - first
        # a host that ran ahead during the work queued before the window shows a step of GPU work
        # alone; in the steady state the host's own time per step bounds it too
        return max((self.total_ns - float(self.marks_ns[first])) / counted,
                   self.host_work_ns / counted)

    @property
    def step_durations_ns(self) -> np.ndarray:
        return np.diff(np.append(self.marks_ns, self.total_ns))


# A stretch of the chain between two waits with at least this many device rows is replayed with
# array operations (``_vector_stretch``); shorter ones, one entry at a time. Both give the same
# timeline (tests/test_replay_vector.py); the arrays cost a few calls per stretch, the loop one
# pass per row.
VECTOR_MIN_ROWS = 48


def replay(graph: StepGraph, changes: Changes | None = None) -> Replayed:
    return _replay(graph, changes, VECTOR_MIN_ROWS)


def _replay(graph: StepGraph, changes: Changes | None, vector_min_rows: int) -> Replayed:
    c = changes or Changes()
    gap_a = np.asarray(graph.gap_ns if c.gap_ns is None else c.gap_ns, float)
    own_ns = np.asarray(graph.own_ns if c.own_ns is None else c.own_ns, float)
    waits = graph.wait_on.copy()
    if c.waits is not None:
        waits[~c.waits] = -1
    dur_a = (graph.dev_dur_ns if c.dev_dur_ns is None else c.dev_dur_ns).astype(float)
    removed_a = (np.zeros(dur_a.size, bool) if c.dev_removed is None
                 else np.asarray(c.dev_removed, bool))
    s = _State(
        gap=gap_a.tolist(), own=own_ns.tolist(), wait_on=waits.tolist(),
        ret=graph.return_ns.tolist(), kind=graph.kind.tolist(), dur=dur_a.tolist(),
        latency=float(graph.latency_ns if c.latency_ns is None else c.latency_ns),
        switch=float(graph.switch_ns if c.switch_ns is None else c.switch_ns),
        stream=graph.dev_stream.tolist(), after=graph.dev_after.tolist(),
        removed=removed_a.tolist(),
        # device rows are sorted by launching entry (-1 first): each entry's rows are one slice
        bounds=np.searchsorted(graph.dev_launched_by, np.arange(-1, gap_a.size + 1),
                               side="left").tolist(),
        profiled_ts=(graph.dev_ts_ns - graph.window[0]).astype(float).tolist(),
    )
    _backlog(s, graph.dev_backlog.tolist())
    # the chain in stretches, each ending at a call that waits (a mark never waits)
    waiting = np.flatnonzero((waits >= 0) & (graph.kind != MARK))
    cuts = distinct(np.concatenate([[0], waiting + 1, [gap_a.size]]).astype(np.int64)).tolist()
    arrays = _Arrays(gap_a, own_ns, graph.kind, dur_a, graph.dev_stream, graph.dev_after, removed_a,
                     np.asarray(s.bounds))
    looped = 0  # the entries from here up to the stretch at hand go through the loop, at once
    for a, b in pairwise(cuts):
        if s.bounds[b + 1] - s.bounds[a + 1] < vector_min_rows:
            continue
        _loop_stretch(s, looped, a)
        if not _vector_stretch(s, arrays, a, b):
            _loop_stretch(s, a, b)
        looped = b
    _loop_stretch(s, looped, gap_a.size)
    tail = float(graph.tail_ns if c.tail_ns is None else c.tail_ns)
    host_end = s.t + tail
    mark_rows = np.flatnonzero(graph.kind == MARK)
    from_row = int(mark_rows[1] if mark_rows.size >= 2 else (mark_rows[0] if mark_rows.size else 0))
    # the calls' own time, a mark's as 0.0: the same sum, in the same order, as leaving marks out
    own_work = np.where(graph.kind[from_row:] == MARK, 0.0, own_ns[from_row:]).tolist()
    host_work = sum(s.gap[from_row + 1:]) + sum(own_work) + tail
    dev_start, dev_end = np.asarray(s.start, float), np.asarray(s.end, float)
    m = len(s.dur)
    total = max(host_end, float(dev_end.max()) if m else 0.0)
    return Replayed(total_ns=total, marks_ns=np.asarray(s.marks), host_end_ns=host_end,
                    gpu_busy_ns=_busy(dev_start, dev_end), dev_start_ns=dev_start,
                    dev_end_ns=dev_end, host_work_ns=float(host_work))


@dataclass(eq=False)
class _State:
    """The replay's inputs as lists and its running state: the host's time ``t``, each stream's
    end (``free``), the end of all GPU work launched so far, the rows' times and the marks."""

    gap: list
    own: list
    wait_on: list
    ret: list
    kind: list
    dur: list
    latency: float
    switch: float
    stream: list
    after: list
    removed: list
    bounds: list
    profiled_ts: list
    t: float = 0.0
    launched_end: float = 0.0
    free: dict = field(default_factory=dict)
    start: list = field(default_factory=list)
    end: list = field(default_factory=list)
    marks: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.start = [0.0] * len(self.dur)
        self.end = [0.0] * len(self.dur)


@dataclass(frozen=True, eq=False)
class _Arrays:
    """The same inputs as arrays, for the stretches replayed with array operations."""

    gap: np.ndarray
    own: np.ndarray
    kind: np.ndarray
    dur: np.ndarray
    stream: np.ndarray
    after: np.ndarray
    removed: np.ndarray
    bounds: np.ndarray


def _backlog(s: _State, backlog: list) -> None:
    """The device rows no chain call launched: queued before the window, in order on their stream
    from the window's start; else where they ran."""
    stream, dur, start, end, free = s.stream, s.dur, s.start, s.end, s.free
    for r in range(s.bounds[0], s.bounds[1]):
        st = stream[r]
        begin = (free[st] + s.switch if st in free else 0.0) if backlog[r] else s.profiled_ts[r]
        start[r], end[r] = begin, begin + dur[r]
        free[st] = max(free.get(st, 0.0), end[r])
    s.launched_end = max(end[s.bounds[0]:s.bounds[1]], default=0.0)


def _loop_stretch(s: _State, a: int, b: int) -> None:
    """Entries ``a`` to ``b`` (exclusive) one at a time. Each device event starts at the latest
    of its launch plus the latency, its stream's previous event's end plus the switch time, and
    the end of the event on another stream it waited for; a call that waited returns after that
    event's end plus its return time."""
    gap, own, kind, bounds, stream, after = s.gap, s.own, s.kind, s.bounds, s.stream, s.after
    removed, dur, start, end, free = s.removed, s.dur, s.start, s.end, s.free
    wait_on, ret, marks = s.wait_on, s.ret, s.marks
    latency, switch = s.latency, s.switch
    t, launched_end = s.t, s.launched_end
    for i in range(a, b):
        t += gap[i]
        # a step starts where its host starts and the GPU work before it is done
        if kind[i] == MARK:
            marks.append(max(t, launched_end))
            continue
        call_start = t
        ready = call_start + latency
        for r in range(bounds[i + 1], bounds[i + 2]):
            st = stream[r]
            if removed[r]:  # no kernel, no switch: it ends where its stream's work does
                start[r] = end[r] = max(ready, free.get(st, 0.0))
                continue
            begin = ready
            prev = free.get(st)
            if prev is not None and prev + switch > begin:
                begin = prev + switch
            w = after[r]
            # rows run in their order: one before this one is done
            if 0 <= w < r and end[w] > begin:
                begin = end[w]
            start[r] = begin
            end[r] = free[st] = begin + dur[r]
            if end[r] > launched_end:
                launched_end = end[r]
        t = call_start + own[i]
        w = wait_on[i]
        if w >= 0:
            w_end = end[w] if w < bounds[i + 2] else s.profiled_ts[w] + dur[w]
            if w_end + ret[i] > t:
                t = w_end + ret[i]
    s.t, s.launched_end = t, launched_end


def _vector_stretch(s: _State, v: _Arrays, a: int, b: int) -> bool:
    """Entries ``a`` to ``b`` (exclusive; only the last may wait) with array operations, as
    ``_loop_stretch`` replays them; False (nothing done) where a device event waits for another
    launched in the same stretch, which only the loop orders.

    On a stream, an event ends at e_r = max(ready_r, e_prev + switch) + dur_r. With D_r the
    running sum of (dur + switch) over the stream's events, v_r = e_r - D_r + switch obeys
    v_r = max(ready_r - D_prev, v_prev): a running maximum."""
    lo, hi = int(v.bounds[a + 1]), int(v.bounds[b + 1])
    after = v.after[lo:hi]
    if ((after >= lo) & (after < np.arange(lo, hi))).any():
        return False
    # the host's times: gap and own time added in turn (a mark's own time 0), as the loop does
    calls = v.kind[a:b] != MARK
    steps = np.empty(2 * (b - a) + 1)
    steps[0] = s.t
    steps[1::2] = v.gap[a:b]
    steps[2::2] = np.where(calls, v.own[a:b], 0.0)
    times = np.add.accumulate(steps)
    entry_start = times[1::2]
    # each row's launching entry, then its earliest start
    entry_of = np.repeat(np.arange(a, b), np.diff(v.bounds[a + 1:b + 2])) - a
    launch_ready = entry_start[entry_of] + s.latency
    ready = launch_ready
    # a row that waits for one launched before this stretch (on another stream): its end is known;
    # one launched after it is not done when it starts, and holds nothing (as in the loop)
    waited = np.flatnonzero((after >= 0) & (after < lo))
    if waited.size:
        ready = ready.copy()
        ready[waited] = np.maximum(ready[waited], [s.end[w] for w in after[waited].tolist()])
    dur, removed, stream = v.dur[lo:hi], v.removed[lo:hi], v.stream[lo:hi]
    start, end = np.empty(hi - lo), np.empty(hi - lo)
    kept_end = np.full(hi - lo, -np.inf)
    for st in distinct(stream).tolist():
        on = stream == st
        rows = np.flatnonzero(on & ~removed)
        prev = s.free.get(st)
        if rows.size:
            r_ready, r_dur = ready[rows], dur[rows]
            total = np.add.accumulate(r_dur + s.switch)
            prev_total = total - r_dur - s.switch
            first = -np.inf if prev is None else prev + s.switch
            vmax = np.maximum.accumulate(np.maximum(r_ready - prev_total, first))
            e_approx = vmax + total - s.switch
            before = np.concatenate([[-np.inf if prev is None else prev], e_approx[:-1]])
            begin = np.maximum(r_ready, before + s.switch)
            start[rows], end[rows] = begin, begin + r_dur
            kept_end[rows] = begin + r_dur
            s.free[st] = float(end[rows[-1]])
        gone = np.flatnonzero(on & removed)
        if gone.size:  # no kernel, no switch: each ends where its stream's work does
            # the stream's last kept row before each removed one
            last_kept = np.maximum.accumulate(np.where(on & ~removed, np.arange(hi - lo), -1))[gone]
            stream_end = np.where(last_kept >= 0, kept_end[np.maximum(last_kept, 0)],
                                  0.0 if prev is None else prev)
            start[gone] = end[gone] = np.maximum(launch_ready[gone], stream_end)
    s.start[lo:hi] = start.tolist()
    s.end[lo:hi] = end.tolist()
    # the end of all GPU work launched before each entry: the running maximum at its first row
    running = np.maximum.accumulate(np.maximum(kept_end, s.launched_end)) if hi > lo else kept_end
    marks = np.flatnonzero(~calls)
    if marks.size:
        upto = v.bounds[a + 1 + marks] - lo - 1  # the last row launched before the mark
        launched = np.where(upto >= 0, running[np.maximum(upto, 0)], s.launched_end)
        s.marks.extend(np.maximum(entry_start[marks], launched).tolist())
    if hi > lo:
        s.launched_end = float(running[-1])
    t = float(times[-1])
    last = b - 1
    w = s.wait_on[last]
    if w >= 0 and s.kind[last] != MARK:
        w_end = s.end[w] if w < s.bounds[last + 2] else s.profiled_ts[w] + s.dur[w]
        if w_end + s.ret[last] > t:
            t = w_end + s.ret[last]
    s.t = t
    return True


def _busy(start: np.ndarray, end: np.ndarray) -> float:
    if start.size == 0:
        return 0.0
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    new = np.concatenate([[True], s[1:] > e[:-1]])
    first = np.flatnonzero(new)
    last = np.concatenate([first[1:] - 1, [s.size - 1]])
    return float((e[last] - s[first]).sum())
