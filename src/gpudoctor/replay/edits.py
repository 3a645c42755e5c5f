"""Fixes as edits of the step's graph (Daydream, ATC 2020, models optimizations the same way).

An ``Edit`` says what a fix changes, in the trace's own terms: device events that take another
time (a GEMM at the bf16 rate, a copy at the pinned bandwidth, a chain fused into one kernel),
host time that goes away (the DataLoader's fetch moved to workers, the Python of a loop that is
vectorized, the launches a CUDA graph replaces), host time that is added (the casts autocast
puts in front of each matmul), and waits that are removed (a read of a GPU value taken out of
the step). ``changes`` turns it into the replay's ``Changes`` for one graph; edits combine with
``merge`` ("all fixes together" is one replay of every edit).
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpudoctor.analysis.intervals import overlap_per_window, union
from gpudoctor.core.arrays import distinct
from gpudoctor.replay.graph import StepGraph, chain_rows
from gpudoctor.replay.simulate import Changes, host_times

EMPTY_I = np.empty(0, np.int64)
EMPTY_F = np.empty(0, float)


class Edit(msgspec.Struct, frozen=True, eq=False):
    """What one fix changes. Device events and host events are trace indices.

    device / device_ns: device events and their time after the fix (ns);
    device_removed: device events that no longer run (merged into another: a batched GEMM);
    host_removed_s / _e: host intervals whose time the fix takes out of the chain (ns, any
      thread of the chain; overlaps count once), ``host_share`` of it (one share, or one per
      interval; a negative share adds that much: compiled code launching more kernels);
    unwait: host calls that no longer wait (their own time stays);
    calls_removed: host calls that no longer happen (their time goes, their device events stay:
      a CUDA graph replays them); calls_timed / calls_timed_ns: calls that take another time
      (the one launch of a graph: its nodes' upload);
    calls_slower / calls_slower_ns: calls that take that much longer (a compiled call's entry);
    added_launches: operators (each at ``added_op_ns``) added before each chain call that
      launches one of ``added_at`` (device events): one count for all, or one per event (a call
      that launches several takes the largest);
    latency_ns: the launch latency after the fix (a graph's kernels follow each other closely);
    paced: whether the host left after the fix runs at the pace of its smaller work;
    note: how the edit was made, for the report."""

    device: np.ndarray = EMPTY_I
    device_ns: np.ndarray = EMPTY_F
    device_removed: np.ndarray = EMPTY_I
    host_removed_s: np.ndarray = EMPTY_I
    host_removed_e: np.ndarray = EMPTY_I
    unwait: np.ndarray = EMPTY_I
    calls_removed: np.ndarray = EMPTY_I
    calls_graphed: np.ndarray = EMPTY_I
    # host calls that take calls_timed_ns
    calls_timed: np.ndarray = EMPTY_I
    calls_timed_ns: np.ndarray = EMPTY_F
    # host calls that take calls_slower_ns more time (a compiled call's entry)
    calls_slower: np.ndarray = EMPTY_I
    calls_slower_ns: np.ndarray = EMPTY_F
    added_at: np.ndarray = EMPTY_I
    # host launches added before each call that launches one of added_at (one, or one per event)
    added_launches: float | np.ndarray = 0.0
    latency_ns: float | None = None
    switch_ns: float | None = None  # the gap between back-to-back device events after the fix
    host_share: float | np.ndarray = 1.0  # the share of each removed interval's time that goes
    min_step_ns: float = 0.0  # what the step cannot go below after the fix (a loader's throughput)
    min_step_share: float = 0.0  # the same, as a share of the step the program runs now
    # the host left after the fix runs at the pace of its smaller work (replay/pace.py); False where
    # the fix takes a phase of its own off the thread (the loader's fetch, the optimizer's loop)
    paced: bool = True
    note: str = ""

    @property
    def runs_paced(self) -> bool:
        """The host left after the fix runs at the pace of its smaller work (replay/pace.py):
        ``paced``, and no CUDA graph in the fix: the host a graph leaves is the code it does not
        capture, at that code's own pace (benchmarks/BENCHMARKS-replay.md "The host a CUDA graph
        leaves")."""
        return self.paced and self.calls_graphed.size == 0

    def is_empty(self) -> bool:
        return (self.device.size == 0 and self.device_removed.size == 0
                and self.host_removed_s.size == 0 and self.unwait.size == 0
                and self.calls_timed.size == 0 and self.switch_ns is None
                and self.calls_slower.size == 0
                and self.calls_removed.size == 0 and self.added_at.size == 0
                and self.latency_ns is None)


def merge(edits: list[Edit]) -> Edit:
    """Every edit at once; a device event two edits retime takes the shorter time."""
    if not edits:
        return Edit()
    dev = np.concatenate([e.device for e in edits]).astype(np.int64)
    ns = np.concatenate([e.device_ns for e in edits]).astype(float)
    if dev.size:
        order = np.lexsort((ns, dev))
        dev, ns = dev[order], ns[order]
        first = np.concatenate([[True], dev[1:] != dev[:-1]])
        dev, ns = dev[first], ns[first]
    latencies = [e.latency_ns for e in edits if e.latency_ns is not None]
    shares = np.concatenate([np.broadcast_to(np.asarray(e.host_share, float),
                                             e.host_removed_s.shape)
                             for e in edits]) if edits else EMPTY_F
    added = [e for e in edits if e.added_at.size]
    return Edit(
        device=dev, device_ns=ns,
        device_removed=distinct(np.concatenate([e.device_removed
                                                 for e in edits]).astype(np.int64)),
        host_removed_s=np.concatenate([e.host_removed_s for e in edits]).astype(np.int64),
        host_removed_e=np.concatenate([e.host_removed_e for e in edits]).astype(np.int64),
        unwait=distinct(np.concatenate([e.unwait for e in edits]).astype(np.int64)),
        calls_removed=distinct(np.concatenate([e.calls_removed for e in edits]).astype(np.int64)),
        calls_graphed=distinct(np.concatenate([e.calls_graphed for e in edits]).astype(np.int64)),
        calls_timed=np.concatenate([e.calls_timed for e in edits]).astype(np.int64),
        calls_timed_ns=np.concatenate([e.calls_timed_ns for e in edits]).astype(float),
        calls_slower=np.concatenate([e.calls_slower for e in edits]).astype(np.int64),
        calls_slower_ns=np.concatenate([e.calls_slower_ns for e in edits]).astype(float),
        added_at=np.concatenate([e.added_at for e in added]).astype(np.int64) if added else EMPTY_I,
        added_launches=np.concatenate([_per_event(e.added_launches, e.added_at)
                                       for e in added]) if added else 0.0,
        latency_ns=min(latencies) if latencies else None,
        switch_ns=min((e.switch_ns for e in edits if e.switch_ns is not None), default=None),
        host_share=shares,
        min_step_ns=max(e.min_step_ns for e in edits),
        min_step_share=max(e.min_step_share for e in edits),
        paced=any(e.paced for e in edits),
        note="; ".join(e.note for e in edits if e.note),
    )


def changes(graph: StepGraph, edit: Edit, base: Changes | None = None) -> Changes:
    """The replay's changes for ``edit`` on ``graph``. With ``base`` (the graph without the
    profiler, replay/observer.py) each gap and call loses the share of its profiled time the edit
    removes: removed host time took its recorded events' profiler cost with it."""
    gap = graph.gap_ns.astype(float)
    own = graph.own_ns.astype(float)
    tail = float(graph.tail_ns)
    n = gap.size
    ret = None
    if edit.host_removed_s.size:
        own_before = own.copy()
        entry_end = graph.end_ns
        prev_end, entry_start, last = graph.gap_windows()
        shares = np.broadcast_to(np.asarray(edit.host_share, float), edit.host_removed_s.shape)
        for share in distinct(shares).tolist():  # each share on the union of its intervals
            pick = shares == share
            s, e = union(edit.host_removed_s[pick], edit.host_removed_e[pick])
            # each gap loses the removed host time inside it; a call inside a removed range too
            gap = np.maximum(gap - share * overlap_per_window(s, e, prev_end, entry_start), 0.0)
            own = np.maximum(own - share * overlap_per_window(s, e, entry_start, entry_end), 0.0)
            in_tail = overlap_per_window(s, e, np.array([last]),
                                         np.array([last + graph.tail_ns]))[0]
            tail = max(tail - share * float(in_tail), 0.0)
        # a call that waited returns its return time after the event: host work removed from the
        # call (a pageable download's staging after the transfer) leaves that return too
        cut = np.where(graph.wait_on >= 0, own_before - own, 0.0)
        if (cut > 0).any():
            ret = np.maximum(graph.return_ns - cut, 0.0)
    waits = None
    rows = _rows_of_hosts(graph, edit.unwait)
    if rows.size:
        waits = np.ones(n, bool)
        waits[rows] = False
    rows = _rows_of_hosts(graph, edit.calls_removed)
    if rows.size:
        own[rows] = 0.0
        waits = np.ones(n, bool) if waits is None else waits
        waits[rows] = False
    if base is not None:
        gap = _rescaled(gap, graph.gap_ns, base.gap_ns)
        own = _rescaled(own, graph.own_ns, base.own_ns)
        tail = float(_rescaled(np.array([tail]), np.array([graph.tail_ns]),
                               np.array([graph.tail_ns
                                         if base.tail_ns is None else base.tail_ns]))[0])
    if edit.calls_timed.size or edit.calls_slower.size:
        for row, ns in zip(chain_rows(graph.host, edit.calls_timed).tolist(),
                           edit.calls_timed_ns.tolist()):
            if row >= 0:
                own[row] = ns
        for row, ns in zip(chain_rows(graph.host, edit.calls_slower).tolist(),
                           edit.calls_slower_ns.tolist()):
            if row >= 0:
                own[row] += ns
    if edit.added_at.size:
        added = _added_per_call(graph, edit)
        # a call a CUDA graph replays (another edit's) launches the operators added before it in
        # the graph too: no host time for them (benchmarks/BENCHMARKS-replay.md "Casts inside a
        # CUDA graph")
        added[_rows_of_hosts(graph, edit.calls_graphed)] = 0.0
        gap += added * added_op_ns(graph, base)
    dur = None
    if edit.device.size:
        dur = graph.dev_dur_ns.astype(float)
        order = np.argsort(edit.device, kind="stable")
        device, device_ns = edit.device[order], np.asarray(edit.device_ns, float)[order]
        pos = np.minimum(np.searchsorted(device, graph.dev_index), device.size - 1)
        hit = device[pos] == graph.dev_index
        dur[hit] = np.maximum(device_ns[pos[hit]], 0.0)
    removed = np.isin(graph.dev_index, edit.device_removed) if edit.device_removed.size else None
    if base is not None and base.waits is not None:
        waits = base.waits if waits is None else waits & base.waits
    return Changes(gap_ns=gap, own_ns=own, tail_ns=tail, waits=waits, dev_dur_ns=dur,
                   dev_removed=removed, latency_ns=edit.latency_ns, switch_ns=edit.switch_ns,
                   ret_ns=ret)


# An operator an edit adds (a cast, a fused kernel's call) costs the host this share of the
# program's mean host time per launching call: autocast's casts cost 0.76 of it, the median over
# 56 traces that run them (benchmarks/BENCHMARKS-replay.md "What a cast costs the host").
ADDED_OP_SHARE = 0.76


def added_op_ns(graph: StepGraph, base: Changes | None = None) -> float:
    """The host time an operator an edit adds costs: ADDED_OP_SHARE of the mean, over the calls
    that launch GPU work, of the gap before the call and the call. A median would be a launch's
    own cost; most launching calls are an operator's second or third kernel, with no dispatch or
    allocation before them, and an added operator has its own."""
    launching = distinct(graph.dev_launched_by[graph.dev_launched_by >= 0])
    if launching.size == 0:
        return 0.0
    gap, own = host_times(graph, base)
    per_call = np.asarray(gap, float)[launching] + np.asarray(own, float)[launching]
    return ADDED_OP_SHARE * float(per_call.mean())


def _per_event(counts: float | np.ndarray, events: np.ndarray) -> np.ndarray:
    return np.broadcast_to(np.asarray(counts, float), events.shape).astype(float)


def _added_per_call(graph: StepGraph, edit: Edit) -> np.ndarray:
    """The operators ``edit`` adds before each chain call: the largest count of the ``added_at``
    events it launches."""
    out = np.zeros(graph.gap_ns.size)
    if graph.dev_index.size == 0:
        return out
    order = np.argsort(graph.dev_index, kind="stable")
    rows = order[np.minimum(np.searchsorted(graph.dev_index, edit.added_at, sorter=order),
                            order.size - 1)]
    found = graph.dev_index[rows] == edit.added_at
    calls = graph.dev_launched_by[rows[found]]
    counts = _per_event(edit.added_launches, edit.added_at)[found]
    keep = (calls >= 0) & (counts > 0)
    np.maximum.at(out, calls[keep], counts[keep])
    return out


def _rescaled(edited: np.ndarray, profiled: np.ndarray, free: np.ndarray | None) -> np.ndarray:
    """``free`` (the profiler-free times) times the share of ``profiled`` that ``edited`` kept
    (more than all of it where an edit added host time)."""
    if free is None:
        return edited
    kept = np.divide(edited, profiled, out=np.ones_like(edited, dtype=float), where=profiled > 0)
    return np.asarray(free, float) * np.maximum(kept, 0.0)


def _rows_of_hosts(graph: StepGraph, hosts: np.ndarray) -> np.ndarray:
    """The chain's calls among ``hosts``, in chain order."""
    rows = chain_rows(graph.host, hosts)
    return distinct(rows[rows >= 0]) if rows.size else EMPTY_I
