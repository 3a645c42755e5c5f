"""Clock bounds from point-to-point messages, for ranks that share no collective (a pipeline's
stages). A message cannot arrive before it is sent: for rank a's k-th send to rank b and b's k-th
recv from a, the true times obey recv_end_b >= send_start_a, and with each clock reading true time
plus its offset, ``off_b - off_a <= recv_end_b - send_start_a`` (both on their own clocks). Messages
from b to a bound it from below: ``off_b - off_a >= send_start_b - recv_end_a``. The tightest of
each side (a receiver that sat waiting for its data gives a bound within the transfer's time)
make an interval; its midpoint is the estimate and its half-width the uncertainty, the classic
two-way (NTP-style) exchange. The minimal latency is taken as 0: any real floor would only
tighten the bounds, and a floor guessed too high would make them lie.

Messages are matched by step and order per (sender, receiver): the k-th send to b in step j with
b's k-th recv from a in step j, kept when their element counts agree (where both are recorded).
A rank connected to rank 0 only through others (a 4-stage chain) adds the intervals along the
path of least total uncertainty; a path through a pair whose messages go one way only is bounded
on one side."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpudoctor.ranks.summary import RankSummary, Transfer


@dataclass(frozen=True)
class Bound:
    """``lo <= off_b - off_a <= hi`` (ns); -inf / inf on a side no message bounds."""

    lo: float
    hi: float
    messages: int  # matched pairs behind it, both directions

    @property
    def two_sided(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    @property
    def consistent(self) -> bool:
        return self.lo <= self.hi

    def width(self) -> float:
        return abs(self.hi - self.lo) if self.two_sided else math.inf


@dataclass(frozen=True)
class Reach:
    """A rank's clock relative to rank 0 from the messages: the interval and the ranks on the
    path."""

    bound: Bound
    path: tuple[int, ...]  # indices from rank 0's to this rank's


def pair_bounds(summaries: Sequence[RankSummary]) -> dict[tuple[int, int], Bound]:
    """(i, j) -> the bound on offset_j - offset_i (indices into ``summaries``, i < j), for every
    pair that exchanged at least one matched message."""
    index = {s.rank: i for i, s in enumerate(summaries)}
    upper: dict[tuple[int, int], list[float]] = {}  # (a, b): off_b - off_a <= each
    for a, s in enumerate(summaries):
        for peer, sends in _by_key(s.transfers, "send").items():
            b = index.get(peer)
            if b is None or b == a:
                continue
            recvs = _by_key(summaries[b].transfers, "recv").get(s.rank, {})
            for key, send in sends.items():
                recv = recvs.get(key)
                if recv is not None and (not send.nelems or not recv.nelems
                                         or send.nelems == recv.nelems):
                    upper.setdefault((a, b), []).append(float(recv.time - send.time))
    out = {}
    for a, b in {(min(k), max(k)) for k in upper}:
        fwd, back = upper.get((a, b), []), upper.get((b, a), [])
        # b -> a messages: off_a - off_b <= u, so off_b - off_a >= -u
        out[(a, b)] = Bound(-min(back) if back else -math.inf, min(fwd) if fwd else math.inf,
                            len(fwd) + len(back))
    return out


def _by_key(transfers: Sequence[Transfer], kind: str) -> dict[int, dict[tuple[int, int], Transfer]]:
    """peer -> (step, place among this step's messages with that peer) -> transfer, inside the
    steps."""
    out: dict[int, dict[tuple[int, int], Transfer]] = {}
    seen: dict[tuple[int, int], int] = {}
    for t in transfers:
        if t.kind != kind or t.step < 0:
            continue
        k = seen.get((t.peer, t.step), 0)
        seen[(t.peer, t.step)] = k + 1
        out.setdefault(t.peer, {})[(t.step, k)] = t
    return out


def reach(summaries: Sequence[RankSummary]) -> dict[int, Reach]:
    """Index -> its clock's interval relative to rank 0's (index 0), summed along the path of least
    total width (Dijkstra; a one-sided pair counts as infinitely wide, so it is taken only where
    nothing two-sided reaches the rank)."""
    edges: dict[int, list[tuple[int, Bound]]] = {}
    for (a, b), bd in pair_bounds(summaries).items():
        edges.setdefault(a, []).append((b, bd))
        edges.setdefault(b, []).append((a, Bound(-bd.hi, -bd.lo, bd.messages)))
    best: dict[int, Reach] = {0: Reach(Bound(0.0, 0.0, 0), (0,))}
    heap: list[tuple[tuple[int, float], int]] = [((0, 0.0), 0)]
    done: set[int] = set()
    while heap:
        _, a = heapq.heappop(heap)
        if a in done:
            continue
        done.add(a)
        here = best[a]
        for b, bd in edges.get(a, []):
            if b in done:
                continue
            lo, hi = here.bound.lo + bd.lo, here.bound.hi + bd.hi
            cand = Reach(Bound(lo, hi, here.bound.messages + bd.messages), (*here.path, b))
            if b not in best or _cost(cand) < _cost(best[b]):
                best[b] = cand
                heapq.heappush(heap, (_cost(cand), b))
    return {i: r for i, r in best.items() if i != 0}


def _cost(r: Reach) -> tuple[int, float]:
    """Two-sided before one-sided, then the narrower."""
    b = r.bound
    return (0, b.width()) if b.two_sided else (1, float(len(r.path)))
