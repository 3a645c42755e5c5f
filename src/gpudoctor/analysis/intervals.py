"""Interval arithmetic on numpy arrays (half-open [start, end) in ns)."""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping intervals; returns sorted disjoint (starts, ends)."""
    if len(starts) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new_block = np.empty(len(s), dtype=bool)
    new_block[0] = True
    new_block[1:] = s[1:] > reach[:-1]
    block = np.cumsum(new_block) - 1
    merged_s = s[new_block]
    merged_e = np.zeros(len(merged_s), dtype=np.int64)
    np.maximum.at(merged_e, block, reach)
    return merged_s, merged_e


def complement(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
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


def _covered_before(starts: np.ndarray, ends: np.ndarray, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
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
    if len(starts) == 0:
        return np.zeros(len(t), dtype=bool)
    k = np.searchsorted(starts, t, side="right") - 1
    return (k >= 0) & (t < ends[np.maximum(k, 0)])


def subtract(s: np.ndarray, e: np.ndarray, ks: np.ndarray, ke: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals (s, e) less the disjoint sorted intervals (ks, ke), as intervals."""
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
