"""Iterations seen in a trace that has no step markers (the fallbacks of ``steps.segment``).

- **module-forward**: a range that encloses a whole forward and recurs once per iteration: the
  outermost ``nn.Module: NAME_k`` call (recorded with ``with_modules`` or ``with_stack``) or a
  ``record_function`` range the program opens (``## forward ##``, DDP's forward), when no other
  such range encloses it. Of those called at least 3 times with about as many host events between
  each call and the next (a model called per sample is not: its last gap holds the backward), the
  one called most often, then the earliest, wins. A step runs from one call's start to the next.
- **kernel-period**: the GPU launches, in launch order, repeat with the iteration
  (analysis/period.py). One launch is one symbol (a CUDA graph replay is one, whatever it runs);
  GPU work with no launch record was queued before the window and is left out. A step starts at
  the host op that launched the first kernel of a period.

Both keep whole iterations only: the host work before the first boundary and after the last one
belongs to iterations the window cut, and is left out of every step (an edge period stretched to
3x the median by the profiler starting or stopping is left out too).
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis.period import find_period
from gpudoctor.core.arrays import median
from gpudoctor.trace.model import HostCat, Trace
from gpudoctor.trace.nesting import nearest_ancestor

# record_function ranges torch opens itself, or that mark steps already (steps.py reads those)
NOT_A_FORWARD = ("ProfilerStep#", "Optimizer.", "enumerate(DataLoader)", "gpudoctor.",
                 "nccl:", "aten::")
MODULE_PREFIX = "nn.Module: "
MIN_CALLS = 3  # two whole iterations between three calls
CONSISTENT_SHARE = 0.8
# an edge period this many times the median long is cut by the window  # of the gaps between calls
# that must hold about the same number of host events
EDGE_STRETCH = 3.0


def module_forward_starts(trace: Trace) -> tuple[np.ndarray, str] | None:
    """Host start (ns) of each call of the outermost range that recurs once per iteration, and
    its name."""
    host = trace.host
    if len(host) == 0:
        return None
    module = trace.names_matching(lambda s: s.startswith(MODULE_PREFIX))[host.name]
    annotation = trace.names_matching(lambda s: not s.startswith(NOT_A_FORWARD))[host.name]
    candidate = module | (annotation & (host.cat == HostCat.ANNOTATION))
    outermost = candidate & (nearest_ancestor(host.parent, candidate) < 0)
    idx = np.flatnonzero(outermost)
    if idx.size < MIN_CALLS:
        return None
    best: tuple[int, int, np.ndarray, str] | None = None
    groups = np.lexsort((host.ts[idx], host.name[idx], host.thread[idx]))
    idx = idx[groups]
    key = host.thread[idx].astype(np.int64) << 32 | host.name[idx].astype(np.int64)
    cuts = np.flatnonzero(np.diff(key)) + 1
    for calls in np.split(idx, cuts):
        if len(calls) < MIN_CALLS or not _alike(trace, calls):
            continue
        # most calls, then the earliest: an iteration's start
        rank = (len(calls), -int(host.ts[calls[0]]))
        if best is None or rank > best[:2]:
            best = (*rank, host.ts[calls].copy(), trace.strings[host.name[calls[0]]])
    return (best[2], best[3]) if best else None


def _alike(trace: Trace, calls: np.ndarray) -> bool:
    """Whether about as many host events happen between each call and the next (an iteration
    each), unlike a model called per sample, whose last gap holds the backward and optimizer."""
    host = trace.host
    th = host.thread[calls[0]]
    lo, hi = np.searchsorted(host.thread, [th, th + 1])
    counts = np.diff(np.searchsorted(host.ts[lo:hi], host.ts[calls]))
    typical = float(median(counts))
    if typical <= 0:
        return False
    close = np.abs(counts - typical) <= max(2.0, 0.1 * typical)
    return bool(close.mean() >= CONSISTENT_SHARE)


def kernel_period_starts(trace: Trace) -> tuple[np.ndarray, int] | None:
    """Host time (ns) where each whole period of the kernel sequence was launched, and the period
    (kernels per iteration). The sequence is one symbol per host launch: a kernel, or a whole CUDA
    graph replay (its kernels' names together), so an iteration can only start at a launch."""
    dev, host = trace.device, trace.host
    launched = np.flatnonzero(dev.launch >= 0)
    if launched.size:
        # GPU work with no launch record was queued before the window opened: a cut iteration
        keep = launched
        at = host.ts[dev.launch[keep]]
    else:  # no runtime events at all: the GPU's own order, one launch per event
        keep = np.arange(len(dev))
        at = dev.ts.copy()
    if keep.size < 6:
        return None
    order = np.lexsort((dev.ts[keep], at))
    keep, at = keep[order], at[order]
    launch = dev.launch[keep] if launched.size else np.arange(len(keep))
    # each launch's first kernel
    first = np.flatnonzero(np.concatenate(([True], launch[1:] != launch[:-1])))
    symbols = _launch_symbols(dev.name[keep], first)
    gap_before = np.diff(at[first], prepend=at[0])
    period = find_period(symbols, gap_before)
    if period is not None:
        units = period.starts
    elif len(first) >= MIN_CALLS and len(first) < len(keep) and np.all(symbols == symbols[0]):
        # the same CUDA graph replayed, and nothing else: a replay each
        units = np.arange(len(first))
    else:
        return None
    kernels = first[units]
    starts = at[kernels]
    # the host op that launched it (an embedding's aten op, a copy_) starts the iteration, not the
    # cudaLaunchKernel call inside it
    top = dev.top_op[keep[kernels]]
    if len(host):
        starts = np.where(top >= 0, host.ts[np.maximum(top, 0)], starts)
    per = int(median(np.diff(kernels))) if len(kernels) > 1 else 0
    return _trim(np.maximum.accumulate(starts).astype(np.int64)), per


def _launch_symbols(names: np.ndarray, first: np.ndarray) -> np.ndarray:
    """One int per launch: its kernel's name id, or for a launch of several kernels (a CUDA graph)
    an id of their names together, numbered after every name id."""
    sizes = np.diff(np.append(first, len(names)))
    symbols = names[first].astype(np.int64)
    multi = np.flatnonzero(sizes > 1)
    if multi.size:
        base = int(names.max()) + 1
        ids: dict[bytes, int] = {}
        for u in multi.tolist():
            key = names[first[u]: first[u] + sizes[u]].tobytes()
            symbols[u] = base + ids.setdefault(key, len(ids))
    return symbols


def _trim(starts: np.ndarray) -> np.ndarray:
    """Boundaries without the edge periods that took several times the median: an iteration the
    window's start or stop (the profiler's own work) stretched."""
    while len(starts) > 3:
        spans = np.diff(starts)
        limit = EDGE_STRETCH * float(median(spans))
        if spans[0] > limit:
            starts = starts[1:]
        elif spans[-1] > limit:
            starts = starts[:-1]
        else:
            break
    return starts
