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
    """[M, R] indices into each rank's collectives of the instances matched across ranks: the same
    place in each rank's order with the same op and size (every rank of a process group issues
    its collectives in the same order). Places where the ranks disagree are left out."""
    n = min((len(s.collectives) for s in summaries), default=0)
    if n == 0:
        return np.empty((0, len(summaries)), np.int64)
    keep = [i for i in range(n) if len({(s.collectives[i].op, s.collectives[i].nbytes) for s in summaries}) == 1]
    return np.array([[i] * len(summaries) for i in keep], np.int64).reshape(len(keep), len(summaries))


def offsets(summaries: Sequence[RankSummary], matched: np.ndarray) -> np.ndarray:
    """Each rank's clock minus rank 0's (ns, [R]); zeros where nothing matched."""
    if len(matched) == 0:
        return np.zeros(len(summaries), np.int64)
    ends = np.array([[s.collectives[i].end for i in matched[:, r]] for r, s in enumerate(summaries)], np.int64)
    return np.round(np.median(ends - ends[0], axis=1)).astype(np.int64)
