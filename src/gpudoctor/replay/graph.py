"""The step's dependency graph, built from a trace: what the replay (replay/simulate.py) runs.

The launching threads (the main and the autograd thread) are one chain of host work: their
runtime and driver calls ("calls": launches, copies, syncs) in time order, with the host time
between consecutive calls ("gaps": Python, operator dispatch, the DataLoader's fetch, the
profiler's own work). Each call launches its device events (correlation id); device events run
in launch order on their stream, after their launch plus the launch latency, and after the event
on another stream they were seen to wait for. A call that blocked (a sync, a read of a GPU value,
a pageable copy, a launch into a full queue, a free that synchronizes) waits for the device event
it was seen to wait for, then returns after the time it took to return in the trace; a stream or
device sync waits for the latest work launched before it even where the profiled host reached it
after the GPU had finished (the host the replay speeds up would not).

Each step's start is a mark in the chain (a gap split at the step's host edge), so the replay
times every step. The profiler's own time is not subtracted here: the graph counts the events
it recorded in each gap and call (``ProfilerLoad``) and replay/observer.py prices them.

Where the trace lacks what the graph needs, the graph keeps the profiled times: a device event
with no launch in the window starts where it started; a trace with no launches has no host chain
(``coverage`` says so, and the pricing falls back to the rules' formulas).
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpudoctor.analysis.host_events import launch_threads, sync_calls
from gpudoctor.analysis.intervals import WINDOW
from gpudoctor.analysis.observer import (
    BLOCKED_CALL_NS,  # a call this long waited (a full queue, a syncing free)
    step_edge_stretches,
)
from gpudoctor.analysis.steps import Steps
from gpudoctor.core.arrays import distinct, median
from gpudoctor.trace.kernels import DRIVER_LAUNCHES, GRAPH_LAUNCHES, RUNTIME_LAUNCHES
from gpudoctor.trace.model import HostCat, Trace, queued_before_window

# A launch with fewer device events queued ahead of it than this did not find the launch queue full
# (it holds about a thousand; benchmarks/BENCHMARKS-replay.md "A long launch is no wait").
QUEUE_FULL_MIN = 64
# Calls that queue device work and return before it runs.
ASYNC_LAUNCHES = RUNTIME_LAUNCHES | DRIVER_LAUNCHES | GRAPH_LAUNCHES


def launches_async(trace: Trace) -> np.ndarray:
    """Per string id: the name is an asynchronous launch (ASYNC_LAUNCHES)."""
    return trace.names_matching(lambda s: s in ASYNC_LAUNCHES)


# A blocked call that returned within this long after a device event ended was waiting for it.
RETURN_AFTER_NS = 30_000
# A device event that started this long after both its launch and its stream's previous event
# was held back by something else: an event on another stream that ended just before it.
HELD_SLACK_NS = 5_000
# How long before a held-back event the event it waited for on another stream may have ended: a DDP
# all-reduce started 2.8-5.2 us after the gradient kernel it waited for (tests/data/ddp4_h200_batch;
# benchmarks/BENCHMARKS-replay.md "Replay").
WAIT_SLACK_NS = 20_000

# Calls that wait for all the work launched before them, whether or not they waited in the trace
# (an event sync waits only for its event; a read of a GPU value waits where it copies, as seen)
BARRIERS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cuStreamSynchronize",
                      "cuCtxSynchronize"})
EMPTY_EDGES = np.empty(0, np.int64)
EMPTY_FLAGS = np.zeros(0, bool)
# A call that did not wait, at least this share of the profiled step, whose name the window holds
# in one step only (of at least ONE_OFF_MIN_STEPS): a one-off (the caching host allocator's first
# pinned block for a read of a GPU value, a module loaded on first use). The unprofiled step is a
# median over many steps, which leaves it out (benchmarks/BENCHMARKS-replay.md "One-off calls").
ONE_OFF_SHARE = 0.02
ONE_OFF_MIN_STEPS = 3

# Kinds of host-chain entries.
CALL = 0  # a runtime / driver call
MARK = 1  # a step's host start (no duration)

# The profiler's recorded-event classes, counted per gap (replay/observer.py prices them).
EVENT_CLASSES = ("op", "runtime", "python", "annotation", "memory")


class StepGraph(msgspec.Struct, frozen=True, eq=False):
    """The host chain and the device events of a trace's steps (arrays, one row per entry).

    Host chain, in time order (``n`` entries):
      kind: CALL or MARK; host: the host event index of a call (-1 for a mark);
      gap_ns: host time between the previous entry's end and this entry's start;
      own_ns: a call's time when it does not wait (its whole time when it never waited);
      wait_on: the device event (row in the device arrays) a blocked call waited for, -1 none;
      return_ns: time from that device event's end to the call's return;
      load: recorded events per entry's gap and call, one column per EVENT_CLASSES (one row
      more: the tail's).
    tail_ns: host time after the last entry to the window's end.

    Device events (``m`` rows, in launch order): index (into trace.device), launched_by (chain
    entry, -1 when not launched by the chain), dur_ns, stream (a small int), after (the row on
    another stream it waited for, -1 none), ts_ns (profiled start), backlog (launched before the
    window: queued at its start and run in order, however long the edited work takes; other rows
    the chain did not launch start where they started).
    latency_ns: launch call start to device start on an idle stream; switch_ns: the gap between
    back-to-back events on a stream.
    """

    kind: np.ndarray
    host: np.ndarray
    ts_ns: np.ndarray  # profiled start and end of each entry
    end_ns: np.ndarray
    gap_ns: np.ndarray
    own_ns: np.ndarray
    wait_on: np.ndarray
    return_ns: np.ndarray
    load: np.ndarray  # (n + 1, len(EVENT_CLASSES)) int: the last row is the tail's
    tail_ns: int
    window: tuple[int, int]
    steps: int
    dev_index: np.ndarray
    dev_launched_by: np.ndarray
    dev_dur_ns: np.ndarray
    dev_stream: np.ndarray
    dev_after: np.ndarray
    dev_ts_ns: np.ndarray
    dev_backlog: np.ndarray  # bool: launched before the window, queued at its start
    latency_ns: int
    switch_ns: int
    profiled_ns: int  # the profiled mean step after the first (analysis/steps.py: GPU-aligned)
    coverage: str  # "full", or what the graph could not build
    edge_s: np.ndarray = EMPTY_EDGES  # the profiler's own work at each
    edge_e: np.ndarray = EMPTY_EDGES  # step's edges (step_edges)
    one_off: np.ndarray = EMPTY_FLAGS  # bool per entry: a one-off call (``one_off_calls``)

    @property
    def calls(self) -> int:
        return int((self.kind == CALL).sum())

    def gap_windows(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Each entry's gap as [previous entries' end, its start), and where the tail starts."""
        running = np.maximum.accumulate(self.end_ns) if self.end_ns.size else self.end_ns
        prev_end = np.concatenate([[self.window[0]], running[:-1]])
        return prev_end, self.ts_ns, int(running[-1]) if running.size else self.window[0]


def build(trace: Trace, steps: Steps) -> StepGraph:
    """The graph of ``steps`` of ``trace`` (all of its steps, as one window)."""
    host, dev = trace.host, trace.device
    starts = steps.host_start if steps.host_start is not None and len(steps.host_start) else steps.start
    ends = steps.host_end if steps.host_end is not None and len(steps.host_end) else steps.end
    w0, w1 = int(starts[0]), int(max(ends[-1], steps.end[-1]))
    threads = launch_threads(trace)
    on_threads = host.on_threads(threads)
    is_call = (host.cat >= HostCat.RUNTIME) & (host.cat <= HostCat.DRIVER) & on_threads
    # outermost calls only: a driver call inside a runtime call is part of it
    parent = host.parent
    nested = np.zeros(len(host), bool)
    has_parent = parent >= 0
    nested[has_parent] = (host.cat[parent[has_parent]] >= HostCat.RUNTIME) & (
        host.cat[parent[has_parent]] <= HostCat.DRIVER)
    # the steps' host time, not what follows them
    in_window = (host.ts >= w0) & (host.ts < int(ends[-1]))
    call_idx = np.flatnonzero(is_call & ~nested & in_window)
    call_idx = call_idx[np.argsort(host.ts[call_idx], kind="stable")]
    del is_call, nested, has_parent, in_window  # a mask each of every host event: freed early
    coverage = "full" if call_idx.size else "no runtime calls on the launching threads: host time not modelled"

    # the chain: calls and step marks, in time order
    marks = np.asarray(starts, np.int64)
    entry_ts = np.concatenate([host.ts[call_idx], marks])
    entry_end = np.concatenate([host.end[call_idx], marks])
    entry_kind = np.concatenate([np.full(call_idx.size, CALL, np.int8),
                                 np.full(marks.size, MARK, np.int8)])
    entry_host = np.concatenate([call_idx, np.full(marks.size, -1, np.int64)])
    order = np.lexsort((entry_kind == CALL, entry_ts))  # a mark before a call at the same ns
    entry_ts, entry_end, entry_kind, entry_host = entry_ts[order], entry_end[order], entry_kind[
        order], entry_host[order]
    # merged threads: an entry that starts inside the previous one (another thread) has no gap
    running_end = np.maximum.accumulate(entry_end)
    prev_end = np.concatenate([[w0], running_end[:-1]])
    gap = np.maximum(entry_ts - prev_end, 0)
    tail = int(max(ends[-1] - running_end[-1], 0)) if running_end.size else int(ends[-1] - w0)
    n = entry_ts.size

    # device events: launched by a chain call, or running in the window without one
    launched = chain_rows(entry_host, dev.launch)
    keep = (launched >= 0) | ((dev.end > w0) & (dev.ts < w1))
    dev_idx = np.flatnonzero(keep)
    dev_idx = dev_idx[np.lexsort((dev.ts[dev_idx],
                                  np.where(launched[dev_idx] >= 0, launched[dev_idx], -1)))]
    launched_by = launched[dev_idx]
    if dev_idx.size == 0 and coverage == "full":
        coverage = "no GPU work in the steps' window: the step's time is not the GPU's"
    ts, end = dev.ts[dev_idx], dev.end[dev_idx]
    _, stream = np.unique(np.stack([dev.device[dev_idx].astype(np.int64), dev.stream[dev_idx]]),
                          axis=1, return_inverse=True)
    stream = stream.reshape(-1).astype(np.int64)
    prev_on_stream = _previous_on_stream(ts, stream)
    prev_end_on_stream = np.where(prev_on_stream >= 0, end[np.maximum(prev_on_stream, 0)],
                                  np.iinfo(np.int64).min)
    ready = np.where(launched_by >= 0, entry_ts[np.maximum(launched_by, 0)], ts)
    free_since = ts - np.maximum(ready, prev_end_on_stream)
    stream_bound = (prev_on_stream >= 0) & (ts - prev_end_on_stream <= HELD_SLACK_NS) & (
        prev_end_on_stream >= ready)
    idle_start = (launched_by >= 0) & ~stream_bound & (ts >= ready)
    latency = int(median(ts[idle_start] - ready[idle_start])) if idle_start.any() else 0
    switch = int(median(ts[stream_bound] - prev_end_on_stream[stream_bound])) if stream_bound.any() else 0
    latency = min(latency, 50_000)
    held = (free_since > HELD_SLACK_NS + latency) & (launched_by >= 0)
    after = _waited_for(ts, end, stream, held)

    # calls that waited: syncs (and reads of GPU values) wait for all the work launched before
    # them; other long calls wait for the device event that ended just before they returned
    wait_on = np.full(n, -1, np.int64)
    ret = np.zeros(n, np.int64)
    # a call that starts inside the previous entry (another thread's) adds only what outlasts it:
    # the chain then holds the union of the threads' time, as the trace does
    own = np.where(entry_kind == CALL, entry_end - np.maximum(entry_ts, prev_end),
                   0).clip(0).astype(np.int64)
    if call_idx.size and dev_idx.size:
        is_sync = sync_calls(trace)
        row_sync = np.zeros(n, bool)
        row_sync[entry_kind == CALL] = is_sync[entry_host[entry_kind == CALL]]
        last_row = _latest_launched(launched_by, end, n)
        last_end = np.where(last_row >= 0, end[np.maximum(last_row, 0)], np.iinfo(np.int64).min)
        waited_sync = row_sync & (last_end > entry_ts) & (last_row >= 0)
        # a stream or device sync waits for the work before it wherever the host gets there
        # first, though the profiled host (slower) got there after the GPU had finished
        barrier = np.zeros(n, bool)
        barrier[entry_kind == CALL] = trace.names_matching(lambda s: s in BARRIERS)[
            host.name[entry_host[entry_kind == CALL]]]
        waited_sync |= barrier & (last_row >= 0)
        wait_on[waited_sync] = last_row[waited_sync]
        # long calls that returned right after a device event ended
        long_call = (entry_kind == CALL) & ~row_sync & (own >= BLOCKED_CALL_NS)
        if long_call.any():
            by_end = np.argsort(end, kind="stable")
            sorted_end = end[by_end]
            pos = np.searchsorted(sorted_end, entry_end[long_call], side="right") - 1
            ok = pos >= 0
            cand = np.where(ok, by_end[np.maximum(pos, 0)], -1)
            cand_end = np.where(ok, sorted_end[np.maximum(pos, 0)], np.iinfo(np.int64).min)
            good = ok & (entry_end[long_call] - cand_end <= RETURN_AFTER_NS) & (
                cand_end > entry_ts[long_call])
            rows = np.flatnonzero(long_call)
            # a kernel launch blocks only on a full launch queue: a long one with few launches
            # queued ahead of it was the host busy (the first launch after the backward, a module
            # loaded, the profiler's buffers) while the GPU ran on, and is no wait; waited for, it
            # would hold the unprofiled host behind a GPU the profiled one never waited for
            # (benchmarks/BENCHMARKS-replay.md "A long launch is no wait")
            queued = _queued_at(entry_ts[rows], entry_ts, launched_by, ts)
            not_full = launches_async(trace)[host.name[entry_host[rows]]] & (
                queued < QUEUE_FULL_MIN)
            good &= ~not_full
            wait_on[rows[good]] = cand[good]
        waited = wait_on >= 0
        ret[waited] = np.clip(entry_end[waited] - end[wait_on[waited]], 0, own[waited])
        own[waited] = ret[waited]  # had it not waited, it would have taken its return time

    load = _recorded_load(trace, on_threads, entry_ts, entry_end, entry_kind, prev_end, w0, w1)
    edge_s, edge_e = step_edges(trace, on_threads)
    first = 1 if len(steps) >= 2 else 0  # as simulate.Replayed.step_ns
    profiled = int((steps.end[-1] - steps.start[first]) / (len(steps) - first))
    one_off = one_off_calls(entry_kind, np.where(entry_host >= 0, host.name[np.maximum(entry_host, 0)], -1),
                            own, wait_on, row_sync if call_idx.size and dev_idx.size else None,
                            profiled)
    return StepGraph(
        kind=entry_kind, host=entry_host, ts_ns=entry_ts.astype(np.int64),
        end_ns=entry_end.astype(np.int64), gap_ns=gap.astype(np.int64), own_ns=own, wait_on=wait_on,
        return_ns=ret, load=load, tail_ns=tail, window=(w0, w1), steps=len(marks),
        dev_index=dev_idx, dev_launched_by=launched_by, dev_dur_ns=(end - ts).astype(np.int64),
        dev_stream=stream, dev_after=after, dev_ts_ns=ts.astype(np.int64),
        dev_backlog=(launched_by < 0) & ((
            (dev.launch[dev_idx] >= 0) & (host.ts[np.maximum(dev.launch[dev_idx], 0)] < w0))
                                         | queued_before_window(trace)[dev_idx]),
        latency_ns=latency, switch_ns=max(switch, 0),
        profiled_ns=profiled, coverage=coverage, edge_s=edge_s, edge_e=edge_e, one_off=one_off,
    )


def one_off_calls(kind: np.ndarray, name: np.ndarray, own: np.ndarray, wait_on: np.ndarray,
                  is_sync: np.ndarray | None, profiled_ns: int) -> np.ndarray:
    """Per chain entry: a call that did not wait (nor syncs), takes at least ONE_OFF_SHARE of the
    profiled step, and whose name the window holds in one of its steps only."""
    out = np.zeros(kind.size, bool)
    step_of = np.cumsum(kind == MARK) - 1
    if step_of.size == 0 or step_of[-1] + 1 < ONE_OFF_MIN_STEPS or profiled_ns <= 0:
        return out
    big = (kind == CALL) & (wait_on < 0) & (own >= ONE_OFF_SHARE * profiled_ns)
    if is_sync is not None:
        big &= ~is_sync
    for n in distinct(name[big]):
        steps_with = distinct(step_of[(kind == CALL) & (name == n)])
        if steps_with.size == 1:
            out[big & (name == n)] = True
    return out


def step_edges(trace: Trace, on_threads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Host time between the edges of each ProfilerStep range and the first and last event the
    program itself recorded in it (an operator, a runtime call, an annotation of its own): the
    profiler closing one step and opening the next, 0.07-0.25 ms a step on the lab's fixed twins
    (analysis/observer.py step_edge_stretches, capped alike). A per-event cost misses it: it holds
    no events of the program's. Steps found another way (a module's forward, an optimizer step)
    have no such edges: the host time around them is the program's."""
    host = trace.host
    step_ranges = trace.names_matching(lambda s: s.startswith("ProfilerStep#"))[host.name]
    ranges = np.flatnonzero(step_ranges & (host.cat == HostCat.ANNOTATION))
    own = ((host.cat == HostCat.OP) | (host.cat == HostCat.RUNTIME) | (host.cat == HostCat.DRIVER)
           | ((host.cat == HostCat.ANNOTATION) & ~step_ranges))
    lo, head_e, tail_s, hi = step_edge_stretches(trace, own & on_threads, host.ts[ranges],
                                                 host.end[ranges])
    s, e = np.concatenate([lo, tail_s]), np.concatenate([head_e, hi])
    keep = e > s
    return s[keep], e[keep]


def chain_rows(entry_host: np.ndarray, hosts: np.ndarray) -> np.ndarray:
    """The chain entry of each host event in ``hosts`` (-1 where none is): a sorted lookup, not a
    dict of every call: a big trace's peak memory (benchmarks/BENCHMARKS-loading.md "the step's graph in bounded memory again")."""
    rows = np.flatnonzero(entry_host >= 0)
    keys = entry_host[rows]
    out = np.full(np.shape(hosts), -1, np.int64)
    if keys.size == 0 or np.size(hosts) == 0:
        return out
    order = np.argsort(keys, kind="stable")
    keys, rows = keys[order], rows[order]
    pos = np.minimum(np.searchsorted(keys, hosts), keys.size - 1)
    hit = keys[pos] == hosts
    out[hit] = rows[pos[hit]]
    return out


def _latest_launched(launched_by: np.ndarray, end: np.ndarray, n: int) -> np.ndarray:
    """For each chain entry, the device row with the latest end among those launched at or before
    it (-1 when none): what a device-wide sync at that entry waits for."""
    rows = np.flatnonzero(launched_by >= 0)
    best_row = np.full(n, -1, np.int64)
    if rows.size == 0:
        return best_row
    order = np.lexsort((end[rows], launched_by[rows]))
    rows = rows[order]
    # latest end per entry
    last = np.concatenate([launched_by[rows][1:] != launched_by[rows][:-1], [True]])
    best_row[launched_by[rows[last]]] = rows[last]
    best = np.where(best_row >= 0, end[np.maximum(best_row, 0)], np.iinfo(np.int64).min)
    running = np.maximum.accumulate(best)
    holder = (best_row >= 0) & (best == running)
    carried = np.maximum.accumulate(np.where(holder, np.arange(n), -1))
    return np.where(carried >= 0, best_row[np.maximum(carried, 0)], -1)


def _queued_at(at: np.ndarray, entry_ts: np.ndarray, launched_by: np.ndarray,
               ts: np.ndarray) -> np.ndarray:
    """How many device events the chain had launched before each time of ``at`` that had not yet
    started on the GPU then."""
    rows = launched_by >= 0
    launch_ts = np.sort(entry_ts[launched_by[rows]])
    started = np.sort(ts[rows])
    return (np.searchsorted(launch_ts, at, side="left")
            - np.searchsorted(started, at, side="right")).clip(0)


def _previous_on_stream(ts: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Row of the previous event (by start) on the same stream, -1 for a stream's first."""
    order = np.lexsort((ts, stream))
    prev = np.full(ts.size, -1, np.int64)
    same = np.zeros(ts.size, bool)
    same[1:] = stream[order][1:] == stream[order][:-1]
    prev[order[same]] = order[np.flatnonzero(same) - 1]
    return prev


def _waited_for(ts: np.ndarray, end: np.ndarray, stream: np.ndarray,
                held: np.ndarray) -> np.ndarray:
    """For each held-back event, the event on another stream that ended last before it started
    (within WAIT_SLACK_NS): the cross-stream wait (an event record and wait) it was seen to obey."""
    after = np.full(ts.size, -1, np.int64)
    rows = np.flatnonzero(held)
    if rows.size == 0:
        return after
    by_end = np.argsort(end, kind="stable")
    sorted_end = end[by_end]
    for r in rows.tolist():
        pos = int(np.searchsorted(sorted_end, ts[r], side="right")) - 1
        while pos >= 0 and ts[r] - sorted_end[pos] <= WAIT_SLACK_NS:
            cand = int(by_end[pos])
            if stream[cand] != stream[r]:
                after[r] = cand
                break
            pos -= 1
    return after


def _recorded_load(trace: Trace, on_threads: np.ndarray, entry_ts: np.ndarray,
                   entry_end: np.ndarray, entry_kind: np.ndarray, prev_end: np.ndarray, w0: int,
                   w1: int) -> np.ndarray:
    """Recorded events per chain entry, by class: those that start in the entry's gap or inside
    the call itself (the call counts as one runtime event)."""
    host = trace.host
    n = entry_ts.size
    load = np.zeros((n + 1, len(EVENT_CLASSES)), np.int64)  # the last row: the tail
    # the entry an event belongs to: the first entry ending at or after its start; a window of host
    # events at a time, for peak memory (benchmarks/BENCHMARKS-loading.md "the step's graph in bounded memory again")
    running_end = np.maximum.accumulate(entry_end)
    for lo in range(0, len(host), WINDOW):
        hi = min(lo + WINDOW, len(host))
        ts, cat = host.ts[lo:hi], host.cat[lo:hi]
        window = on_threads[lo:hi] & (ts >= w0) & (ts < w1)
        classes = {
            "op": cat == HostCat.OP,
            "runtime": (cat == HostCat.RUNTIME) | (cat == HostCat.DRIVER),
            "python": cat == HostCat.PYTHON,
            "annotation": cat == HostCat.ANNOTATION,
        }
        for col, name in enumerate(EVENT_CLASSES[:4]):
            pos = np.searchsorted(running_end, ts[classes[name] & window], side="left")
            load[:, col] += np.bincount(np.minimum(pos, n), minlength=n + 1)
    # [memory] instant events (profile_memory): the allocator's, on the thread that allocates
    mem = trace.memory
    if len(mem):
        ts = mem.ts[(mem.ts >= w0) & (mem.ts < w1)]
        np.add.at(load[:, EVENT_CLASSES.index("memory")],
                  np.minimum(np.searchsorted(running_end, ts, side="left"), n), 1)
    return load
