"""Backward passes per step, and which one launched each collective: what tells gradient
accumulation without ``no_sync`` (K backward passes a step, each followed by an all-reduce of every
gradient) from accumulation done right (one all-reduce set, after the last pass).

The autograd engine records every node it runs as "autograd::engine::evaluate_function: ...", on
the thread running the backward (the calling thread for CPU tensors, an autograd device thread on a
GPU). A backward pass is a run of those ranges that the step's own thread interrupts with no
operator of its own: the next micro-batch's forward runs operators on the step's thread between
two passes, while within one pass that thread is blocked in ``loss.backward()`` (GPU) or runs
nothing but the engine's nodes and what they call (CPU).
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis.host_events import autograd_nodes
from gpudoctor.analysis.intervals import contains, union
from gpudoctor.trace.model import HostCat, Trace


def pass_starts(trace: Trace, step_thread: int) -> np.ndarray:
    """Sorted start times (ns, the trace's clock) of the backward passes in the trace."""
    host = trace.host
    if not len(host):
        return np.empty(0, np.int64)
    is_eval = autograd_nodes(trace)
    ev = np.flatnonzero(is_eval)
    if not ev.size:
        return np.empty(0, np.int64)
    es, ee = union(host.ts[ev], host.end[ev])
    ops = np.flatnonzero(
        (host.cat == HostCat.OP) & (host.thread == step_thread) & ~is_eval)
    up = np.maximum(host.parent[ops], 0)
    ops = ops[(host.parent[ops] < 0) | (host.cat[up] != HostCat.OP)]  # the outermost operators
    ts = np.sort(host.ts[ops])
    ts = ts[~contains(es, ee, ts)]
    # a pass begins at the first range, and at every range that an operator of the step's thread
    # precedes since the previous range ended
    between = np.searchsorted(ts, es[1:], side="left") > np.searchsorted(ts, ee[:-1], side="left")
    return es[np.concatenate(([True], between))].astype(np.int64)


def per_step(starts: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[int, ...]:
    """Backward passes starting in each step [lo, hi)."""
    return tuple(int(n)
                 for n in (np.searchsorted(starts, hi, side="left") - np.searchsorted(starts, lo,
                                                                                      side="left")))


def micro_of(starts: np.ndarray, lo: np.ndarray, hi: np.ndarray, t: int) -> int:
    """Index, within its step, of the backward pass running or last run at host time ``t``: the
    micro-batch whose backward launched a collective at ``t``; -1 outside the steps or before the
    step's first pass."""
    k = int(np.searchsorted(lo, t, side="right")) - 1
    if k < 0 or t >= hi[k]:
        return -1
    first = int(np.searchsorted(starts, lo[k], side="left"))
    upto = int(np.searchsorted(starts, t, side="right"))
    return upto - first - 1 if upto > first else -1
