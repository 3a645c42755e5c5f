"""The ranks' collectives on one clock: each matched instance's start, end and wait on every rank,
and what of it compute did not hide. Built once from the summaries; the multi-rank rules read it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpudoctor.core.arrays import distinct
from gpudoctor.ranks.align import Clock, estimate, match
from gpudoctor.ranks.summary import Collective, RankSummary


@dataclass(frozen=True, eq=False)
class Aligned:
    """Matched collectives, [M, R] arrays on rank 0's clock (ns)."""

    summaries: tuple[RankSummary, ...]
    offsets: np.ndarray  # [R] each rank's clock minus rank 0's
    ops: tuple[str, ...]  # [M]
    nbytes: np.ndarray  # [M]
    step: np.ndarray  # [M] the step (of rank 0) each starts in, -1 outside
    last: np.ndarray  # [M] bool: the last collective of its step
    start: np.ndarray  # [M, R]
    end: np.ndarray  # [M, R]
    wait: np.ndarray  # [M, R] latest start of the instance minus this rank's start
    exposed: np.ndarray  # [M, R] time not hidden by compute on that rank
    exposed_wait: np.ndarray  # [M, R] the exposed part spent waiting (at the kernel's start)
    clock: Clock | None = None  # how each offset was found, and how sure it is
    micro: np.ndarray | None = None  # [M] the backward pass of its step that launched it (rank 0's), -1 unknown

    @property
    def ranks(self) -> list[int]:
        return [s.rank for s in self.summaries]

    @property
    def steps(self) -> int:
        return min((s.steps for s in self.summaries), default=0)

    @property
    def step_ms(self) -> float:
        return float(np.mean([s.step_ms for s in self.summaries])) if self.summaries else 0.0

    @property
    def transfer(self) -> np.ndarray:
        """[M] the collective's own time: the latest arriver's kernel (it waits for no one)."""
        if not len(self.start):
            return np.empty(0, np.int64)
        return (self.end - self.start).min(axis=1)

    def in_steps(self) -> np.ndarray:
        return self.step >= 0


def align(summaries: Sequence[RankSummary]) -> Aligned:
    summaries = tuple(summaries)
    m = match(summaries)
    clock = estimate(summaries, m)
    off = clock.offsets
    cols = [[s.collectives[i] for i in m[:, r]] for r, s in enumerate(summaries)]
    shape = (len(m), len(summaries))

    def grid(values: list[list[int]]) -> np.ndarray:  # [R][M] lists -> [M, R]
        return np.array(values, np.int64).reshape(shape[::-1]).T.reshape(shape)

    start = grid([[c.start for c in col] for col in cols]) - off
    end = grid([[c.end for c in col] for col in cols]) - off
    wait = start.max(axis=1, keepdims=True) - start if len(m) else np.zeros(shape, np.int64)
    exposed = grid([[_hidden_free(c, c.dur) for c in col] for col in cols])
    exposed_wait = grid([[_hidden_free(c, int(wait[i, r])) for i, c in enumerate(col)]
                         for r, col in enumerate(cols)])
    ref = cols[0] if cols else []
    step = np.array([c.step for c in ref], np.int64)
    return Aligned(summaries, off, tuple(c.op for c in ref),
                   np.array([c.nbytes for c in ref], np.int64), step,
                   _last_of_step(step), start, end, wait, exposed, exposed_wait, clock,
                   np.array([c.micro for c in ref], np.int64))


def _hidden_free(c: Collective, upto: int) -> int:
    """Length of [0, upto) of the collective (offsets from its start) that no compute covers."""
    upto = min(max(upto, 0), c.dur)
    covered = sum(max(0, min(e, upto) - max(s, 0)) for s, e in c.overlap)
    return upto - covered


def _last_of_step(step: np.ndarray) -> np.ndarray:
    last = np.zeros(len(step), bool)
    for k in distinct(step[step >= 0]).tolist():
        last[np.flatnonzero(step == k)[-1]] = True
    return last
