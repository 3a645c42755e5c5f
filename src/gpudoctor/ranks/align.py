"""Clock alignment: every rank's profiler clock is its host's, and hosts (even the GPUs of one host,
read through CUPTI) disagree by microseconds to seconds. A collective cannot end on one rank before
the last rank's data has arrived, so its kernels end at (nearly) the same instant everywhere while
their starts differ by each rank's wait: the ends are the common reference. Rank r's offset is the
median over the matched collectives of ``end_r - end_0`` (the median shrugs off the few instances
where one rank's kernel retires late); it is removed before any skew is computed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpudoctor.ranks.summary import RankSummary


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


def offsets(summaries: Sequence[RankSummary], matched: np.ndarray) -> np.ndarray:
    """Each rank's clock minus rank 0's (ns, [R]); zeros where nothing matched."""
    if len(matched) == 0:
        return np.zeros(len(summaries), np.int64)
    ends = np.array([[s.collectives[i].end for i in matched[:, r]] for r, s in enumerate(summaries)], np.int64)
    return np.round(np.median(ends - ends[0], axis=1)).astype(np.int64)
