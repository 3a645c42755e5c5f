"""Replay a StepGraph: the host chain and the GPU streams as resources, one pass in launch order.

The host runs its chain: each gap, then each call; a call that waited in the trace waits again
for the same device event (at its replayed end) and returns after its return time. Each device
event starts at the latest of its launch plus the launch latency, its stream's previous event's
end plus the switch time, and the end of the event on another stream it waited for. The step
ends when both the host and every stream are done. Timings are relative to the window's start.

``Changes`` is what a fix edits (replay/edits.py builds them): gap and call times, device event
durations, waits removed. Replaying the graph unchanged reproduces the profiled window
(benchmarks/replay_fidelity.py measures how closely).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def replay(graph: StepGraph, changes: Changes | None = None) -> Replayed:
    c = changes or Changes()
    gap = (graph.gap_ns if c.gap_ns is None else c.gap_ns).tolist()
    own_ns = np.asarray(graph.own_ns if c.own_ns is None else c.own_ns, float)
    own = own_ns.tolist()
    waits = graph.wait_on.copy()
    if c.waits is not None:
        waits[~c.waits] = -1
    wait_on = waits.tolist()
    ret = graph.return_ns.tolist()
    kind = graph.kind.tolist()
    dur = (graph.dev_dur_ns if c.dev_dur_ns is None else c.dev_dur_ns).astype(float).tolist()
    latency = float(graph.latency_ns if c.latency_ns is None else c.latency_ns)
    switch = float(graph.switch_ns if c.switch_ns is None else c.switch_ns)
    stream = graph.dev_stream.tolist()
    after = graph.dev_after.tolist()
    removed = [False] * len(dur) if c.dev_removed is None else c.dev_removed.tolist()
    m = len(dur)
    start = [0.0] * m
    end = [0.0] * m
    done = [False] * m
    free: dict[int, float] = {}

    launched_by = graph.dev_launched_by
    # device rows are sorted by launching entry (-1 first): each entry's rows are one slice
    bounds = np.searchsorted(launched_by, np.arange(-1, len(gap) + 1), side="left").tolist()
    profiled_ts = (graph.dev_ts_ns - graph.window[0]).astype(float).tolist()
    backlog = graph.dev_backlog.tolist()
    for r in range(bounds[0], bounds[1]):  # not launched by the chain
        s = stream[r]
        # queued before the window: in order on its stream from the window's start; else where it
        # ran
        begin = (free[s] + switch if s in free else 0.0) if backlog[r] else profiled_ts[r]
        start[r], end[r], done[r] = begin, begin + dur[r], True
        free[s] = max(free.get(s, 0.0), end[r])

    t = 0.0
    marks = []
    launched_end = max(end[bounds[0]:bounds[1]], default=0.0)  # GPU work launched so far ends
    for i in range(len(gap)):
        t += gap[i]
        # a step starts where its host starts and the GPU work before it is done
        if kind[i] == MARK:
            marks.append(max(t, launched_end))
            continue
        call_start = t
        ready = call_start + latency
        for r in range(bounds[i + 1], bounds[i + 2]):
            s = stream[r]
            if removed[r]:  # no kernel, no switch: it ends where its stream's work does
                start[r] = end[r] = max(ready, free.get(s, 0.0))
                done[r] = True
                continue
            begin = ready
            prev = free.get(s)
            if prev is not None and prev + switch > begin:
                begin = prev + switch
            a = after[r]
            if a >= 0 and done[a] and end[a] > begin:
                begin = end[a]
            start[r], end[r], done[r] = begin, begin + dur[r], True
            free[s] = begin + dur[r]
            if end[r] > launched_end:
                launched_end = end[r]
        t = call_start + own[i]
        w = wait_on[i]
        if w >= 0:
            w_end = end[w] if done[w] else profiled_ts[w] + dur[w]
            if w_end + ret[i] > t:
                t = w_end + ret[i]
    tail = float(graph.tail_ns if c.tail_ns is None else c.tail_ns)
    host_end = t + tail
    mark_rows = np.flatnonzero(graph.kind == MARK)
    from_row = int(mark_rows[1] if mark_rows.size >= 2 else (mark_rows[0] if mark_rows.size else 0))
    # the calls' own time, a mark's as 0.0: the same sum, in the same order, as leaving marks out
    own_work = np.where(graph.kind[from_row:] == MARK, 0.0, own_ns[from_row:]).tolist()
    host_work = sum(gap[from_row + 1:]) + sum(own_work) + tail
    dev_start, dev_end = np.asarray(start), np.asarray(end)
    total = max(host_end, float(dev_end.max()) if m else 0.0)
    return Replayed(total_ns=total, marks_ns=np.asarray(marks), host_end_ns=host_end,
                    gpu_busy_ns=_busy(dev_start, dev_end), dev_start_ns=dev_start,
                    dev_end_ns=dev_end, host_work_ns=float(host_work))


def _busy(start: np.ndarray, end: np.ndarray) -> float:
    if start.size == 0:
        return 0.0
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    new = np.concatenate([[True], s[1:] > e[:-1]])
    first = np.flatnonzero(new)
    last = np.concatenate([first[1:] - 1, [s.size - 1]])
    return float((e[last] - s[first]).sum())
