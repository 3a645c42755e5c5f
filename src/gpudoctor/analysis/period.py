"""The period of a symbol sequence (the GPU launches in launch order): where each iteration of
a loop starts when nothing in the trace marks it.

A loop launches the same kernels in the same order every iteration, so the name sequence repeats.
``find_period`` finds that repetition in O(n log n):

1. **Anchors propose periods.** A kernel launched once per iteration recurs every p kernels:
   symbols whose gaps between occurrences are nearly all one value p (within max(1, p/50), for a
   few extra kernels) propose p. A kernel launched r times per iteration (a burst of 4 optimizer
   kernels, the two micro-batches of gradient accumulation) has the same gap p between its
   occurrence j and j + r: the r (1..8) whose lag-r gaps agree best is its count per period, and
   its occurrences k, k + r, k + 2r... anchor periods. A layer's kernels propose the layer's
   period q; symbols that recur at irregular gaps (noise) propose nothing.
2. **Segments verify them.** The anchor's occurrences cut the sequence into segments; each is
   compared with a template (the first segment of the most common length) from both ends (common
   prefix + common suffix, so one extra kernel costs one kernel, not the rest of the period as a
   fixed-lag k[i] == k[i + p] count would). The score, the fraction of kernels that match, must
   reach ``min_match`` (0.9).
3. **The best score wins**, the smaller period on a tie. Why this picks the iteration and not a
   layer inside it: cut at a layer kernel, the segment that spans the iteration boundary also
   holds the embedding, head, loss and optimizer kernels, so the layer period scores about
   1 - extras / iteration, below the iteration's 1.0. And where fewer than three iterations were
   recorded (no anchor for the iteration), those extras are kernels that skip most layer
   segments: more than RARE_LIMIT (3%) of such kernels means a longer structure, and the layer
   period is refused. A multiple of the true period is never proposed (no symbol of a p-periodic
   sequence recurs only every 2p). Limits: an iteration made of nothing but identical layers is
   its layer's period (kernel names cannot tell them apart); a model whose extras are under 3% of
   its kernels, recorded for under three iterations, may be cut at its layers.
4. **Safety.** p must be at least 2 (one symbol repeated says nothing about where an iteration
   ends), at least ``min_periods`` whole segments must exist, and the anchors must span half the
   sequence. A random or drifting sequence has no symbol at regular gaps, or segments that do not
   match: ``None``.

The phase (which kernel starts an iteration) is free in a periodic sequence: among the anchors of
the winning period that score as well, the one launched after the longest host pause (the data
loading, the logging, the ``.item()`` between iterations) starts it.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpudoctor.core.arrays import median

MAX_PERIODS_TRIED = 24  # distinct candidate periods verified, most-proposed first
MAX_ANCHORS_TRIED = 12  # anchor phases of the winning period tried for the phase
MAX_PER_PERIOD = 8  # occurrences of one symbol per period that still make it an anchor
REGULAR = 0.75  # share of an anchor's gaps that must equal its period
RARE_LIMIT = 0.03  # share of kernels that may skip most periods (stray kernels, not a longer structure)


class Period(msgspec.Struct, frozen=True, eq=False):
    """Whole periods of a sequence: period j is ``seq[starts[j]:starts[j + 1]]``."""

    length: int  # the anchor's usual gap, in symbols
    starts: np.ndarray  # int64 indices into the sequence, len = whole periods + 1
    match: float  # fraction of symbols matching the next period (0..1)
    anchor: int  # the symbol that starts each period

    @property
    def count(self) -> int:
        return len(self.starts) - 1


class _Anchor(msgspec.Struct, frozen=True):
    symbol: int
    per_period: int  # r: occurrences per period
    count: int  # occurrences in the sequence


def find_period(seq: np.ndarray, gap_before: np.ndarray | None = None, min_match: float = 0.9,
                min_periods: int = 2) -> Period | None:
    """The iteration period of ``seq`` (ints), or None when it does not repeat (see module doc).

    ``gap_before[i]``: how long the host paused before launching symbol i (any unit); it only
    picks the phase.
    """
    seq = np.asarray(seq)
    n = len(seq)
    if n < 2 * (min_periods + 1):
        return None
    _, sym = np.unique(seq, return_inverse=True)
    sym = sym.astype(np.int64).ravel()
    proposals = _proposals(sym, min_periods)
    if not proposals:
        return None
    scored = []
    for p, anchors in proposals[:MAX_PERIODS_TRIED]:
        positions = _positions(sym, anchors[0])[0]
        scored.append((_score(sym, positions), -p, p, anchors))
    score, _, p, anchors = max(scored, key=lambda s: (round(s[0], 9), s[1]))
    if score < min_match:
        return None
    return _phase(sym, seq, p, anchors, gap_before, min_match, min_periods)


def _proposals(sym: np.ndarray, min_periods: int) -> list[tuple[int, list[_Anchor]]]:
    """[(period, its anchors, most occurrences first)], the periods most anchors propose first."""
    n = len(sym)
    order = np.argsort(sym, kind="stable")  # positions grouped by symbol, ascending within
    s = sym[order]
    count = np.bincount(sym)
    best_share = np.zeros(len(count))
    period = np.zeros(len(count), np.int64)
    per = np.zeros(len(count), np.int64)
    for r in range(1, MAX_PER_PERIOD + 1):
        mode, share = _lag_mode(order, s, r, len(count))
        better = share > best_share + 1e-9  # ties keep the smaller r: not a multiple of the period
        best_share[better], period[better], per[better] = share[better], mode[better], r
    ok = (best_share >= REGULAR) & (period >= 2) & (n >= min_periods * period)
    ok &= count >= per * (min_periods + 1)
    by_period: dict[int, list[_Anchor]] = {}
    for a in np.flatnonzero(ok)[np.argsort(-count[ok], kind="stable")].tolist():
        by_period.setdefault(int(period[a]), []).append(_Anchor(a, int(per[a]), int(count[a])))
    return sorted(by_period.items(), key=lambda kv: (-len(kv[1]), -kv[0]))


def _lag_mode(order: np.ndarray, s: np.ndarray, r: int, symbols: int) -> tuple[np.ndarray,
                                                                               np.ndarray]:
    """Per symbol: the most common gap between its occurrences j and j + r, and the share of its
    lag-r gaps within max(1, gap / 50) of it."""
    mode = np.zeros(symbols, np.int64)
    share = np.zeros(symbols)
    if len(s) <= r:
        return mode, share
    same = s[r:] == s[:-r]
    gaps = (order[r:] - order[:-r])[same]
    owner = s[r:][same]
    if gaps.size == 0:
        return mode, share
    n = int(order.max()) + 1
    key = owner * (n + 1) + gaps
    pairs, freq = np.unique(key, return_counts=True)
    psym, pgap = pairs // (n + 1), pairs % (n + 1)
    top = np.lexsort((freq, psym))  # by symbol, then frequency ascending: the last of each wins
    last = top[np.flatnonzero(np.append(psym[top][1:] != psym[top][:-1], True))]
    mode[psym[last]] = pgap[last]
    tol = np.maximum(1, mode // 50)
    near = np.abs(gaps - mode[owner]) <= tol[owner]
    lags = np.bincount(owner, minlength=symbols)
    share = np.bincount(owner, weights=near, minlength=symbols) / np.maximum(lags, 1)
    return mode, share


def _positions(sym: np.ndarray, anchor: _Anchor) -> list[np.ndarray]:
    """The anchor's occurrences at each of its r phases: k, k + r, k + 2r..."""
    where = np.flatnonzero(sym == anchor.symbol)
    return [where[k :: anchor.per_period] for k in range(anchor.per_period)]


def _score(sym: np.ndarray, b: np.ndarray) -> float:
    """Fraction of the symbols of segments b[j]:b[j+1] that match the template segment (the first
    of the most common length) from either end; 0 when the segments do not cover half the sequence
    or when kernels that skip most segments weigh more than RARE_LIMIT (a longer structure)."""
    m = len(b) - 1  # segments
    if m < 2 or (b[-1] - b[0]) * 2 < len(sym):
        return 0.0
    lens = np.diff(b)
    values, freq = np.unique(lens, return_counts=True)
    t_len = int(values[np.argmax(freq)])
    t0 = int(b[np.flatnonzero(lens == t_len)[0]])
    idx = np.arange(b[0], b[-1])
    if _rare_share(sym[idx], m) > RARE_LIMIT:
        return 0.0
    seg = np.searchsorted(b, idx, side="right") - 1
    off = idx - b[seg]
    big = np.iinfo(np.int64).max
    fwd_ok = off < t_len
    fwd = fwd_ok & (sym[idx] == sym[np.where(fwd_ok, t0 + off, 0)])
    back = b[seg + 1] - idx  # 1 = the segment's last symbol
    back_ok = back <= t_len
    bwd = back_ok & (sym[idx] == sym[np.where(back_ok, t0 + t_len - back, 0)])
    firsts = b[:-1] - b[0]
    prefix = np.minimum.reduceat(np.where(fwd, big, off), firsts)
    suffix = np.minimum.reduceat(np.where(bwd, big, back), firsts) - 1
    shorter = np.minimum(lens, t_len)
    matched = np.minimum(np.minimum(prefix, shorter) + np.minimum(suffix, shorter), shorter)
    return float(matched.sum() / np.maximum(lens, t_len).sum())


def _rare_share(region: np.ndarray, segments: int) -> float:
    """Share of the symbols whose kind occurs less than once per two segments."""
    occurrences = np.bincount(region)
    rare = (occurrences > 0) & (occurrences * 2 < segments)
    return float(occurrences[rare].sum() / max(len(region), 1))


def _phase(sym: np.ndarray, seq: np.ndarray, p: int, anchors: list[_Anchor],
           gap_before: np.ndarray | None, min_match: float, min_periods: int) -> Period | None:
    """The anchor of period p that starts iterations: as good a score as the best, then the longest
    pause before it, then the earliest."""
    tried = []
    for anchor in anchors:
        for positions in _positions(sym, anchor):
            if len(positions) - 1 >= min_periods and len(tried) < MAX_ANCHORS_TRIED:
                tried.append((_score(sym, positions), positions))
    good = [t for t in tried if t[0] >= min_match]
    if not good:
        return None
    top = max(t[0] for t in good)
    good = [t for t in good if t[0] >= top - 0.02]  # as good as the best, up to noise

    def pause(t: tuple[float, np.ndarray]) -> tuple[float, int]:
        positions = t[1]
        if gap_before is None:
            return 0.0, -int(positions[0])
        return float(median(gap_before[positions])), -int(positions[0])

    score, positions = max(good, key=pause)
    return Period(p, positions.astype(np.int64), score, int(seq[positions[0]]))
