"""The GPU's idle gaps cut into spans, each named by its cause: where idle_causes' sums lie in time.

``idle_causes`` (analysis/idle.py) sums each cause's idle per step; a timeline needs the places.
Each gap of the steps (``IdleResult.gaps``) is cut where the host's labelled intervals
(``IdleResult.labels``) begin and end, and each span takes the cause idle_causes gives it:

- a gap whose next GPU event was launched before the gap began is one ``gpu-wait`` span;
- up to the end of the launch of the event that ends the gap, the first cause (``CAUSES`` order)
  whose intervals cover the moment, else ``dispatch``; after it, ``dispatch`` (launch latency);
- in a gap that holds a blocking cause, the dispatch spans go to its largest blocking cause
  (``refill``: the host refilling the queue the blocking call let drain);
- a trace without launch links: every gap ``unattributed``; with no launching thread: ``dispatch``.

Summed per cause they give ``by_cause_ms``, except the catch-up idle_causes moves from dispatch to
host-sync and pageable-copy over the whole window (the host still behind after a sync): a sum, not
a place, so those spans stay ``dispatch``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpudoctor.analysis.idle import (
    BLOCKING,
    CAUSES,
    GPU_WAIT,
    UNATTRIBUTED,
    IdleResult,
    next_launch_end,
)
from gpudoctor.analysis.intervals import contains
from gpudoctor.analysis.steps import Steps
from gpudoctor.core.arrays import distinct
from gpudoctor.trace.model import Trace

NAMES = (*CAUSES, GPU_WAIT, UNATTRIBUTED)  # IdleSpans.cause indexes this
_DISPATCH = NAMES.index("dispatch")
_EMPTY = np.empty(0, np.int64)


@dataclass(frozen=True, eq=False)
class IdleSpans:
    """Disjoint idle spans in time order (ns, the trace's shifted clock)."""

    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    cause: np.ndarray  # int index into NAMES
    refill: np.ndarray  # bool: dispatch given to the gap's blocking cause
    step: np.ndarray  # int index of the step holding it

    def __len__(self) -> int:
        return len(self.start)

    def name(self, i: int) -> str:
        return NAMES[int(self.cause[i])]

    def of(self, cause: str) -> np.ndarray:
        """Indices of the spans of ``cause``, in time order."""
        return np.flatnonzero(self.cause == NAMES.index(cause)) if cause in NAMES else _EMPTY

    def ms_by_cause(self, n_steps: int) -> dict[str, float]:
        """ms per step of each cause, as ``IdleResult.by_cause_ms`` counts it (before the
        catch-up)."""
        ns = np.bincount(self.cause, weights=(self.end - self.start).astype(np.float64),
                         minlength=len(NAMES))
        return {name: float(ns[i]) / 1e6 / max(n_steps, 1) for i, name in enumerate(NAMES)}


def idle_spans(trace: Trace, steps: Steps, idle: IdleResult) -> IdleSpans:
    """Where each cause's idle lies (see the module docstring)."""
    gap_s, gap_e = idle.gaps
    if len(gap_s) == 0:
        return IdleSpans(_EMPTY, _EMPTY, _EMPTY, np.zeros(0, bool), _EMPTY)
    if not trace.capabilities.launch_links or idle.launch_thread < 0:
        whole = NAMES.index(UNATTRIBUTED if not trace.capabilities.launch_links else "dispatch")
        return _spans(gap_s, gap_e, np.full(len(gap_s), whole), np.zeros(len(gap_s), bool), steps)
    launched_at = next_launch_end(trace, gap_e)
    waiting = launched_at <= gap_s
    cut = np.clip(launched_at, gap_s, gap_e)
    labels = [idle.labels.get(c, (_EMPTY, _EMPTY)) for c in CAUSES[:-1]]
    edges = distinct(np.concatenate([gap_s, gap_e, cut, *(s for s, _ in labels),
                                      *(e for _, e in labels)]))
    s, e = edges[:-1], edges[1:]
    gap = np.searchsorted(gap_s, s, side="right") - 1
    inside = (gap >= 0) & (e <= gap_e[np.maximum(gap, 0)])
    s, e, gap = s[inside], e[inside], gap[inside]
    cause = np.full(len(s), _DISPATCH)
    before_cut = s < cut[gap]
    for k in range(len(CAUSES) - 2, -1, -1):  # the first cause in CAUSES order wins: written last
        ls, le = labels[k]
        cause[before_cut & contains(ls, le, s)] = k
    cause[waiting[gap]] = NAMES.index(GPU_WAIT)
    s, e, gap, cause = _merged(s, e, gap, cause)
    refill = _give_dispatch_to_blocking(s, e, gap, cause, len(gap_s))
    return _spans(s, e, cause, refill, steps)


def _merged(s: np.ndarray, e: np.ndarray, gap: np.ndarray,
            cause: np.ndarray) -> tuple[np.ndarray, ...]:
    """Touching spans of one gap and one cause joined."""
    if len(s) == 0:
        return s, e, gap, cause
    new = np.ones(len(s), bool)
    new[1:] = (gap[1:] != gap[:-1]) | (cause[1:] != cause[:-1]) | (s[1:] != e[:-1])
    first = np.flatnonzero(new)
    last = np.concatenate((first[1:], [len(s)])) - 1
    return s[first], e[last], gap[first], cause[first]


def _give_dispatch_to_blocking(s: np.ndarray, e: np.ndarray, gap: np.ndarray, cause: np.ndarray,
                               n_gaps: int) -> np.ndarray:
    """In place: dispatch spans of a gap holding a blocking cause become its largest one (ties: the
    first in CAUSES order, as idle_causes breaks them). Returns which spans changed."""
    blocking = [k for k, c in enumerate(CAUSES) if c in BLOCKING]
    per_gap = np.zeros((len(blocking), n_gaps), np.int64)
    for row, k in enumerate(blocking):
        mine = cause == k
        np.add.at(per_gap[row], gap[mine], (e - s)[mine])
    holds = per_gap.sum(axis=0) > 0
    dominant = np.asarray(blocking)[per_gap.argmax(axis=0)]
    refill = (cause == _DISPATCH) & holds[gap]
    cause[refill] = dominant[gap[refill]]
    return refill


def _spans(s: np.ndarray, e: np.ndarray, cause: np.ndarray, refill: np.ndarray,
           steps: Steps) -> IdleSpans:
    step = np.searchsorted(steps.start, s, side="right") - 1
    return IdleSpans(s.astype(np.int64), e.astype(np.int64), cause.astype(np.int64), refill,
                     step.astype(np.int64))


def blocking_calls(trace: Trace, idle: IdleResult, spans: IdleSpans,
                   cause: str) -> tuple[np.ndarray, np.ndarray]:
    """(host event, span) pairs: each blocking call of ``cause`` that idle_causes found over idle
    (``IdleResult.culprits``), its innermost one where such calls nest (``aten::item`` holds
    ``cudaStreamSynchronize``: the call that waits), and the first span of ``cause`` between the
    call's start and the end of the gap it ends in (the idle it leaves, refill included)."""
    calls = idle.culprits.get(cause, _EMPTY)
    mine = spans.of(cause)
    if calls.size == 0 or mine.size == 0:
        return _EMPTY, _EMPTY
    calls = _innermost(trace, calls)
    host = trace.host
    gap_s, gap_e = idle.gaps
    k = np.searchsorted(gap_s, host.end[calls], side="right") - 1
    in_gap = (k >= 0) & (host.end[calls] < gap_e[np.maximum(k, 0)])
    until = np.where(in_gap, gap_e[np.maximum(k, 0)], host.end[calls])
    # the first span ending after the start
    first = np.searchsorted(spans.end[mine], host.ts[calls], side="right")
    found = first < mine.size
    found[found] = spans.start[mine[first[found]]] < until[found]
    return calls[found], mine[first[found]]


def _innermost(trace: Trace, calls: np.ndarray) -> np.ndarray:
    """``calls`` less those that hold another of them (their ancestors on the host's nesting)."""
    parent = trace.host.parent
    chosen = set(calls.tolist())
    holders: set[int] = set()
    for i in chosen:
        p = int(parent[i])
        while p >= 0 and p not in holders:
            if p in chosen:
                holders.add(p)
            p = int(parent[p])
    return np.asarray(sorted(chosen - holders), np.int64)
