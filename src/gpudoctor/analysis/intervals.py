"""Interval arithmetic on numpy arrays (half-open [start, end) in ns)."""

from __future__ import annotations

import numpy as np

from gpudoctor.core.arrays import distinct

# Times looked at a time where each takes a few int64 temporaries: a big trace's millions of host
# events are not copied several times over at once (peak memory)
WINDOW = 1 << 20


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping intervals; returns sorted disjoint (starts, ends)."""
    if len(starts) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    reach = ends[order]
    del order
    np.maximum.accumulate(reach, out=reach)
    new_block = np.empty(len(s), dtype=bool)
    new_block[0] = True
    np.greater(s[1:], reach[:-1], out=new_block[1:])
    first = np.flatnonzero(new_block)
    del new_block
    # the running reach only grows: a block ends where it stands at the block's last interval
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = len(s) - 1
    return s[first], reach[last].astype(np.int64, copy=False)


def complement(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray,
                                                                                np.ndarray]:
    """Gaps of disjoint sorted intervals inside [lo, hi)."""
    s = np.clip(starts, lo, hi)
    e = np.clip(ends, lo, hi)
    gap_s = np.concatenate(([lo], e))
    gap_e = np.concatenate((s, [hi]))
    keep = gap_e > gap_s
    return gap_s[keep], gap_e[keep]


def overlap_per_window(
    starts: np.ndarray, ends: np.ndarray, win_s: np.ndarray, win_e: np.ndarray
) -> np.ndarray:
    """Total length of disjoint sorted intervals inside each window (windows may be unsorted)."""
    if len(starts) == 0:
        return np.zeros(len(win_s), dtype=np.int64)
    lengths = ends - starts
    cum = np.concatenate(([0], np.cumsum(lengths)))
    return _covered_before(starts, ends, cum, win_e) - _covered_before(starts, ends, cum, win_s)


def _covered_before(starts: np.ndarray, ends: np.ndarray, cum: np.ndarray,
                    t: np.ndarray) -> np.ndarray:
    """Covered length in (-inf, t) for each t."""
    k = np.searchsorted(starts, t, side="right")  # intervals starting at or before t
    full = cum[np.maximum(k - 1, 0)] * (k > 0)
    last = np.maximum(k - 1, 0)
    partial = np.where(k > 0, np.clip(t - starts[last], 0, ends[last] - starts[last]), 0)
    return full + partial


def clip_total(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> int:
    """Summed length of (possibly overlapping) intervals clipped to [lo, hi)."""
    return int(np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0, None).sum())


def contains(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time in ``t``, whether it lies in one of the sorted disjoint intervals."""
    out = np.zeros(len(t), dtype=bool)
    if len(starts) == 0:
        return out
    for a in range(0, len(t), WINDOW):
        times = t[a:a + WINDOW]
        k = np.searchsorted(starts, times, side="right")
        k -= 1
        inside = k >= 0
        np.maximum(k, 0, out=k)
        out[a:a + WINDOW] = inside & (times < ends[k])
    return out


def any_inside(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per interval [starts, ends): whether any of the times ``t`` (in any order) falls inside."""
    t = np.sort(t)
    return np.searchsorted(t, ends, side="left") > np.searchsorted(t, starts, side="left")


def subtract(s: np.ndarray, e: np.ndarray, ks: np.ndarray, ke: np.ndarray) -> tuple[np.ndarray,
                                                                                    np.ndarray]:
    """Disjoint sorted intervals (s, e) less the disjoint sorted intervals (ks, ke), as
    intervals."""
    out_s, out_e = [], []
    j = 0
    for lo, hi in zip(s.tolist(), e.tolist()):
        while j < ks.size and ke[j] <= lo:
            j += 1
        k, cur = j, lo
        while k < ks.size and ks[k] < hi:
            if ks[k] > cur:
                out_s.append(cur)
                out_e.append(int(ks[k]))
            cur = max(cur, int(ke[k]))
            k += 1
        if cur < hi:
            out_s.append(cur)
            out_e.append(hi)
    return np.asarray(out_s, np.int64), np.asarray(out_e, np.int64)


def inside_stretches(at: np.ndarray, thread: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                     threads: np.ndarray) -> np.ndarray:
    """Per host time ``at`` on ``thread``: whether it falls inside one of the stretches
    [starts, ends) of that same thread."""
    inside = np.zeros(at.size, bool)
    for th in distinct(threads).tolist():
        s, e = union(starts[threads == th], ends[threads == th])
        mine = thread == th
        inside[mine] = contains(s, e, at[mine])
    return inside
