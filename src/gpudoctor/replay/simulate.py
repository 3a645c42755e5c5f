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

from itertools import pairwise

import msgspec
import numpy as np

from gpudoctor.core.arrays import distinct
from gpudoctor.replay.graph import MARK, StepGraph


class Changes(msgspec.Struct, frozen=True, eq=False):
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
    # per entry: a waiting call's time from the event it waited for to its return (host work the
    # fix took out of that return: a pageable download's staging)
    ret_ns: np.ndarray | None = None


def host_times(graph: StepGraph, changes: Changes | None) -> tuple[np.ndarray, np.ndarray]:
    """Each chain entry's gap before it and own time (ns) as ``changes`` leave them; the graph's
    where they (or their field) are None."""
    c = changes or Changes()
    return (graph.gap_ns if c.gap_ns is None else c.gap_ns,
            graph.own_ns if c.own_ns is None else c.own_ns)


class Replayed(msgspec.Struct, frozen=True, eq=False):
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
    # at each mark, how far the GPU work launched before it trailed the host (0 where the GPU
    # waited): what capture/marks.py leads_ms measures without the profiler
    leads_ns: np.ndarray = msgspec.field(default_factory=lambda: np.zeros(0))

    @property
    def window_step_ns(self) -> float:
        """The timeline's mean step over the window after its first (which starts behind work
        queued before the window, or ahead of it), as graph.StepGraph.profiled_ns measures it."""
        if self.marks_ns.size == 0:
            return self.total_ns
        first = 1 if self.marks_ns.size >= 2 else 0
        return (self.total_ns - float(self.marks_ns[first])) / (self.marks_ns.size - first)

    @property
    def step_ns(self) -> float:
        """The steady state's step: ``window_step_ns``, and at least the host's own time per step.
        A host that ran ahead during the work queued before the window shows a step of GPU work
        alone while its lead shrinks; in the steady state its own time bounds the step too."""
        if self.marks_ns.size == 0:
            return self.total_ns
        counted = self.marks_ns.size - (1 if self.marks_ns.size >= 2 else 0)
        return max(self.window_step_ns, self.host_work_ns / counted)

    @property
    def step_durations_ns(self) -> np.ndarray:
        return np.diff(np.append(self.marks_ns, self.total_ns))


# A stretch of the chain between two waits with at least this many device rows is replayed with
# array operations (``_vector_stretch``); shorter ones, one entry at a time. Both give the same
# timeline (tests/test_replay_vector.py); the arrays cost a few calls per stretch, the loop one
# pass per row.
VECTOR_MIN_ROWS = 48
# The loop reads its entries and rows as Python lists, made this many entries at a time: a float
# in a list costs 32 bytes where an array holds it in 8, and a 4 GB trace's million-entry chain
# as whole lists raised the pricing's peak by about 0.1 GB (benchmarks/BENCHMARKS-loading.md,
# "the step's graph in bounded memory again").
LOOP_CHUNK = 1 << 16


def replay(graph: StepGraph, changes: Changes | None = None) -> Replayed:
    return _replay(graph, changes, VECTOR_MIN_ROWS)


def _replay(graph: StepGraph, changes: Changes | None, vector_min_rows: int) -> Replayed:
    c = changes or Changes()
    gap, own = (np.asarray(t, float) for t in host_times(graph, c))
    waits = graph.wait_on.copy()
    if c.waits is not None:
        waits[~c.waits] = -1
    dur = (graph.dev_dur_ns if c.dev_dur_ns is None else c.dev_dur_ns).astype(float)
    s = _State(
        gap=gap, own=own, wait_on=waits,
        ret=graph.return_ns if c.ret_ns is None else np.asarray(c.ret_ns, float), kind=graph.kind,
        dur=dur, stream=graph.dev_stream, after=graph.dev_after,
        removed=(np.zeros(dur.size, bool) if c.dev_removed is None
                 else np.asarray(c.dev_removed, bool)),
        # device rows are sorted by launching entry (-1 first): each entry's rows are one slice
        bounds=np.searchsorted(graph.dev_launched_by, np.arange(-1, gap.size + 1), side="left"),
        dev_ts=graph.dev_ts_ns, window_start=int(graph.window[0]),
        latency=float(graph.latency_ns if c.latency_ns is None else c.latency_ns),
        switch=float(graph.switch_ns if c.switch_ns is None else c.switch_ns),
        start=np.zeros(dur.size), end=np.zeros(dur.size),
    )
    _backlog(s, graph.dev_backlog)
    # the chain in stretches, each ending at a call that waits (a mark never waits)
    waiting = np.flatnonzero((waits >= 0) & (graph.kind != MARK))
    cuts = distinct(np.concatenate([[0], waiting + 1, [gap.size]]).astype(np.int64)).tolist()
    bounds = s.bounds
    looped = 0  # the entries from here up to the stretch at hand go through the loop, at once
    for a, b in pairwise(cuts):
        if bounds[b + 1] - bounds[a + 1] < vector_min_rows:
            continue
        _loop_stretch(s, looped, a)
        if not _vector_stretch(s, a, b):
            _loop_stretch(s, a, b)
        looped = b
    _loop_stretch(s, looped, gap.size)
    tail = float(graph.tail_ns if c.tail_ns is None else c.tail_ns)
    host_end = s.t + tail
    mark_rows = np.flatnonzero(graph.kind == MARK)
    from_row = int(mark_rows[1] if mark_rows.size >= 2 else (mark_rows[0] if mark_rows.size else 0))
    # the calls' own time, a mark's as 0.0: the same sum, in the same order, as leaving marks out
    own_work = np.where(graph.kind[from_row:] == MARK, 0.0, own[from_row:])
    host_work = _sum_in_order(gap[from_row + 1:]) + _sum_in_order(own_work) + tail
    total = max(host_end, float(s.end.max()) if s.end.size else 0.0)
    return Replayed(total_ns=total, marks_ns=np.asarray(s.marks), host_end_ns=host_end,
                    gpu_busy_ns=_busy(s.start, s.end), dev_start_ns=s.start,
                    dev_end_ns=s.end, host_work_ns=float(host_work),
                    leads_ns=np.asarray(s.leads))


class _State(msgspec.Struct, eq=False):
    """The replay's inputs (chain entries, then device rows) and its running state: the host's
    time ``t``, each stream's end (``free``), the end of all GPU work launched so far, the rows'
    times and the marks."""

    gap: np.ndarray
    own: np.ndarray
    wait_on: np.ndarray
    ret: np.ndarray
    kind: np.ndarray
    dur: np.ndarray
    stream: np.ndarray
    after: np.ndarray
    removed: np.ndarray
    bounds: np.ndarray
    dev_ts: np.ndarray  # int ns: where each row started in the trace
    window_start: int
    latency: float
    switch: float
    start: np.ndarray
    end: np.ndarray
    t: float = 0.0
    launched_end: float = 0.0
    free: dict = msgspec.field(default_factory=dict)
    marks: list = msgspec.field(default_factory=list)
    leads: list = msgspec.field(default_factory=list)

    def profiled_end(self, row: int) -> float:
        """Where ``row`` would end starting where it started in the trace, from the window's
        start."""
        return float(self.dev_ts[row] - self.window_start) + float(self.dur[row])


def _sum_in_order(values: np.ndarray) -> float:
    """sum() of the values as Python floats, left to right, LOOP_CHUNK at a time: the same
    float as one sum over one list, without the list of the whole."""
    total = 0
    for lo in range(0, values.size, LOOP_CHUNK):
        total = sum(values[lo:lo + LOOP_CHUNK].tolist(), total)
    return float(total)


def _backlog(s: _State, backlog: np.ndarray) -> None:
    """The device rows no chain call launched: queued before the window, in order on their stream
    from the window's start; else where they ran."""
    lo, hi = int(s.bounds[0]), int(s.bounds[1])
    stream, dur, queued = s.stream[lo:hi].tolist(), s.dur[lo:hi].tolist(), backlog[lo:hi].tolist()
    profiled, free = (s.dev_ts[lo:hi] - s.window_start).astype(float).tolist(), s.free
    start, end = [0.0] * (hi - lo), [0.0] * (hi - lo)
    for r in range(hi - lo):
        st = stream[r]
        begin = (free[st] + s.switch if st in free else 0.0) if queued[r] else profiled[r]
        start[r], end[r] = begin, begin + dur[r]
        free[st] = max(free.get(st, 0.0), end[r])
    s.start[lo:hi], s.end[lo:hi] = start, end
    s.launched_end = max(end, default=0.0)


def _loop_stretch(s: _State, a: int, b: int) -> None:
    """Entries ``a`` to ``b`` (exclusive) one at a time, LOOP_CHUNK entries at a time. Each device
    event starts at the latest of its launch plus the latency, its stream's previous event's end
    plus the switch time, and the end of the event on another stream it waited for; a call that
    waited returns after that event's end plus its return time."""
    for lo_entry in range(a, b, LOOP_CHUNK):
        _loop_chunk(s, lo_entry, min(lo_entry + LOOP_CHUNK, b))


def _loop_chunk(s: _State, a: int, b: int) -> None:
    lo, hi = int(s.bounds[a + 1]), int(s.bounds[b + 1])
    gap, own, kind = s.gap[a:b].tolist(), s.own[a:b].tolist(), s.kind[a:b].tolist()
    wait_on, ret = s.wait_on[a:b].tolist(), s.ret[a:b].tolist()
    # entry a + k launches the rows bounds[k] to bounds[k + 1], less lo: this chunk's own rows
    bounds = (s.bounds[a + 1:b + 2] - lo).tolist()
    stream, after = s.stream[lo:hi].tolist(), s.after[lo:hi].tolist()
    removed, dur = s.removed[lo:hi].tolist(), s.dur[lo:hi].tolist()
    start, end = [0.0] * (hi - lo), [0.0] * (hi - lo)
    done_end = s.end  # the rows before this chunk's, replayed already
    free, marks, leads, latency, switch = s.free, s.marks, s.leads, s.latency, s.switch
    t, launched_end = s.t, s.launched_end
    for k in range(b - a):
        t += gap[k]
        # a step starts where its host starts and the GPU work before it is done
        if kind[k] == MARK:
            marks.append(max(t, launched_end))
            leads.append(max(launched_end - t, 0.0))
            continue
        call_start = t
        ready = call_start + latency
        for r in range(bounds[k], bounds[k + 1]):
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
            if 0 <= w < r + lo:
                w_end = end[w - lo] if w >= lo else float(done_end[w])
                if w_end > begin:
                    begin = w_end
            start[r] = begin
            end[r] = free[st] = begin + dur[r]
            if end[r] > launched_end:
                launched_end = end[r]
        t = call_start + own[k]
        w = wait_on[k]
        if w >= 0:
            if w < lo:
                w_end = float(done_end[w])
            elif w < bounds[k + 1] + lo:
                w_end = end[w - lo]
            else:  # launched later: not replayed yet, where it ended in the trace
                w_end = s.profiled_end(w)
            if w_end + ret[k] > t:
                t = w_end + ret[k]
    s.start[lo:hi], s.end[lo:hi] = start, end
    s.t, s.launched_end = t, launched_end


def _vector_stretch(s: _State, a: int, b: int) -> bool:
    """Entries ``a`` to ``b`` (exclusive; only the last may wait) with array operations, as
    ``_loop_stretch`` replays them; False (nothing done) where a device event waits for another
    launched in the same stretch, which only the loop orders.

    On a stream, an event ends at e_r = max(ready_r, e_prev + switch) + dur_r. With D_r the
    running sum of (dur + switch) over the stream's events, v_r = e_r - D_r + switch obeys
    v_r = max(ready_r - D_prev, v_prev): a running maximum."""
    lo, hi = int(s.bounds[a + 1]), int(s.bounds[b + 1])
    after = s.after[lo:hi]
    if ((after >= lo) & (after < np.arange(lo, hi))).any():
        return False
    # the host's times: gap and own time added in turn (a mark's own time 0), as the loop does
    calls = s.kind[a:b] != MARK
    steps = np.empty(2 * (b - a) + 1)
    steps[0] = s.t
    steps[1::2] = s.gap[a:b]
    steps[2::2] = np.where(calls, s.own[a:b], 0.0)
    times = np.add.accumulate(steps)
    entry_start = times[1::2]
    # each row's launching entry, then its earliest start
    entry_of = np.repeat(np.arange(a, b), np.diff(s.bounds[a + 1:b + 2])) - a
    launch_ready = entry_start[entry_of] + s.latency
    ready = launch_ready
    # a row that waits for one launched before this stretch (on another stream): its end is known;
    # one launched after it is not done when it starts, and holds nothing (as in the loop)
    waited = np.flatnonzero((after >= 0) & (after < lo))
    if waited.size:
        ready = ready.copy()
        ready[waited] = np.maximum(ready[waited], s.end[after[waited]])
    dur, removed, stream = s.dur[lo:hi], s.removed[lo:hi], s.stream[lo:hi]
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
    s.start[lo:hi], s.end[lo:hi] = start, end
    # the end of all GPU work launched before each entry: the running maximum at its first row
    running = np.maximum.accumulate(np.maximum(kept_end, s.launched_end)) if hi > lo else kept_end
    marks = np.flatnonzero(~calls)
    if marks.size:
        upto = s.bounds[a + 1 + marks] - lo - 1  # the last row launched before the mark
        launched = np.where(upto >= 0, running[np.maximum(upto, 0)], s.launched_end)
        s.marks.extend(np.maximum(entry_start[marks], launched).tolist())
        s.leads.extend(np.maximum(launched - entry_start[marks], 0.0).tolist())
    if hi > lo:
        s.launched_end = float(running[-1])
    t = float(times[-1])
    last = b - 1
    w = int(s.wait_on[last])
    if w >= 0 and s.kind[last] != MARK:
        w_end = float(s.end[w]) if w < s.bounds[last + 2] else s.profiled_end(w)
        if w_end + float(s.ret[last]) > t:
            t = w_end + float(s.ret[last])
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
