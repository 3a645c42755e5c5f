"""Clock alignment: every rank's profiler clock is its host's, and hosts (even the GPUs of one host,
read through CUPTI) disagree by microseconds to seconds. A collective cannot end on one rank before
the last rank's data has arrived, so its kernels end at (nearly) the same instant everywhere while
their starts differ by each rank's wait: the ends are the common reference. Rank r's offset is the
median over the matched collectives of ``end_r - end_0`` (the median shrugs off the few instances
where one rank's kernel retires late), its uncertainty half the interquartile range of those
differences; it is removed before any skew is computed.

Ranks that share no collective (a pipeline's stages) are placed by their send/recv messages
(ranks/p2p_clock.py: hard causal bounds, an interval). Where both exist the collectives' interval
(median +- half the IQR) is intersected with the messages' bounds: causality cannot be wrong, the
median can be pulled by a late kernel, so the intersection keeps what both allow; where the two
do not overlap the messages' interval is used and the report says so."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpudoctor.ranks.p2p_clock import Bound, Reach, reach
from gpudoctor.ranks.summary import RankSummary

# how each rank's offset was found (report ranks[] clock_method)
REFERENCE, COLLECTIVES, P2P, P2P_CHAIN, BOTH, ONE_SIDED, NONE = (
    "reference", "collectives", "p2p", "p2p-chain", "collectives+p2p", "p2p-one-sided", "none")


@dataclass(frozen=True)
class Clock:
    """Each rank's clock minus rank 0's, [R] each."""

    offsets: np.ndarray  # ns
    methods: tuple[str, ...]
    uncertainty: tuple[float | None, ...]  # ns, half-width; None where one side is unbounded
    bounds: tuple[tuple[float | None, float | None], ...]  # ns, the messages' interval (None: open side)
    notes: tuple[str, ...] = ()  # for the report's warnings


def match(summaries: Sequence[RankSummary]) -> np.ndarray:
    """[M, R] indices into each rank's collectives of the instances matched across ranks. Every rank
    of a process group issues its collectives in the same order, and the ranks profiled the same
    steps, so an instance is known by its step and its place in the step (collectives outside
    every step by their place among those); it is kept where every rank has it with the same op
    and size. A rank with one extra collective (a barrier before the window) shifts nothing."""
    keyed = [_keys(s) for s in summaries]
    common = set(keyed[0]) if keyed else set()
    for k in keyed[1:]:
        common &= set(k)
    rows = []
    for key in sorted(common, key=lambda k: keyed[0][k]):
        idx = [k[key] for k in keyed]
        if len({(s.collectives[i].op, s.collectives[i].nbytes) for s, i in zip(summaries, idx)}) == 1:
            rows.append(idx)
    return np.array(rows, np.int64).reshape(len(rows), len(summaries))


def _keys(s: RankSummary) -> dict[tuple[int, int], int]:
    seen: dict[int, int] = {}
    out = {}
    for i, c in enumerate(s.collectives):
        if c.op == "p2p":  # send/recv pair two ranks, not all of them: not a common reference
            continue
        j = seen.get(c.step, 0)
        seen[c.step] = j + 1
        out[(c.step, j)] = i
    return out


def estimate(summaries: Sequence[RankSummary], matched: np.ndarray) -> Clock:
    """Every rank's offset, how it was found and how sure it is."""
    coll = offsets(summaries, matched)
    spread = _spread(summaries, matched)
    by_msg = reach(summaries)
    rows: list[tuple[int, str, float | None]] = [(0, REFERENCE, 0.0)]
    bounds: list[tuple[float | None, float | None]] = [(0.0, 0.0)]
    notes: list[str] = []
    for i in range(1, len(summaries)):
        r = by_msg.get(i)
        b = r.bound if r else Bound(-math.inf, math.inf, 0)
        bounds.append((b.lo if math.isfinite(b.lo) else None,
                       b.hi if math.isfinite(b.hi) else None))
        interval = (float(coll[i]) - spread[i], float(coll[i]) + spread[i]) if len(matched) else None
        rows.append(_one(summaries, r, interval, notes))
    return Clock(np.array([o for o, _, _ in rows], np.int64), tuple(m for _, m, _ in rows),
                 tuple(u for _, _, u in rows), tuple(bounds), tuple(notes))


def _one(summaries: Sequence[RankSummary], r: Reach | None, coll: tuple[float, float] | None,
         notes: list[str]) -> tuple[int, str, float | None]:
    """(offset ns, method, uncertainty ns) of one rank from its messages' reach and its collectives'
    interval (median +- half the IQR, None without collectives); what is odd goes to ``notes``."""
    if r is None:
        if coll is None:
            return 0, NONE, None
        return round((coll[0] + coll[1]) / 2), COLLECTIVES, (coll[1] - coll[0]) / 2
    rank, b = summaries[r.path[-1]].rank, r.bound
    if not b.consistent:
        notes.append(f"rank {rank}: its send/recv bounds cross ({_us(b.lo)} > {_us(b.hi)} us): "
                     "messages matched out of order, or the clocks drifted within the window")
    lo, hi = min(b.lo, b.hi), max(b.lo, b.hi)
    method = P2P if len(r.path) == 2 else P2P_CHAIN
    if coll is not None:
        if max(lo, coll[0]) <= min(hi, coll[1]):
            lo, hi, method = max(lo, coll[0]), min(hi, coll[1]), BOTH
        else:
            notes.append(f"rank {rank}: the collectives' offset ({_us(sum(coll) / 2)} us) lies "
                         f"outside its send/recv bounds ({_us(lo)}..{_us(hi)} us); the bounds "
                         "are used")
    if math.isinf(hi - lo):  # one side open: the offset nearest 0 the bound allows
        side = f"<= {_us(hi)}" if math.isfinite(hi) else f">= {_us(lo)}"
        notes.append(f"rank {rank}: send/recv on its path from rank 0 ({_path(summaries, r.path)}) "
                     f"go one way only, so its clock offset is bounded on one side ({side} us), "
                     "not estimated")
        return round(min(max(0.0, lo), hi)), ONE_SIDED, None
    return round((lo + hi) / 2), method, (hi - lo) / 2


def _us(ns: float) -> str:
    return f"{ns / 1e3:.1f}" if math.isfinite(ns) else ("-inf" if ns < 0 else "inf")


def _path(summaries: Sequence[RankSummary], path: tuple[int, ...]) -> str:
    return " - ".join(str(summaries[i].rank) for i in path)


def _spread(summaries: Sequence[RankSummary], matched: np.ndarray) -> np.ndarray:
    """[R] half the interquartile range of each rank's collective end minus rank 0's (ns)."""
    if len(matched) == 0:
        return np.zeros(len(summaries))
    ends = np.array([[s.collectives[i].end for i in matched[:, r]]
                     for r, s in enumerate(summaries)], np.int64)
    q1, q3 = np.percentile(ends - ends[0], [25, 75], axis=1)
    return (q3 - q1) / 2


def offsets(summaries: Sequence[RankSummary], matched: np.ndarray) -> np.ndarray:
    """Each rank's clock minus rank 0's (ns, [R]); zeros where nothing matched."""
    if len(matched) == 0:
        return np.zeros(len(summaries), np.int64)
    ends = np.array([[s.collectives[i].end for i in matched[:, r]]
                     for r, s in enumerate(summaries)], np.int64)
    return np.round(np.median(ends - ends[0], axis=1)).astype(np.int64)
