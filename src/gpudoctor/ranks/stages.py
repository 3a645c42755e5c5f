"""A pipeline-parallel job read from its ranks' point-to-point pattern. Rank order is stage order
(torch.distributed.pipelining and Megatron place stage s on pipeline rank s), and stage s receives
from s-1 and sends to s+1: per step the first stage receives the m gradients of its m micro-batches
and the last stage their m activations, a middle stage both (2m), and every stage sends. That
count gives m; a job whose counts break the pattern (interleaved virtual stages, pipeline mixed
with data parallelism) is not read as one pipeline.

Each stage's wait is the time it sat blocked receiving (ranks/summary.py ``recv_wait_ms``): a
duration on the rank's own clock, so no clock offset enters it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpudoctor.ranks.summary import RankSummary


@dataclass(frozen=True, eq=False)
class Stages:
    """[P] arrays in stage (rank) order, ms per step."""

    ranks: tuple[int, ...]
    microbatches: int
    wait_ms: np.ndarray
    compute_ms: np.ndarray
    step_ms: np.ndarray
    wait_by_step: tuple[tuple[float, ...], ...] = ()  # [P][steps]

    @property
    def p(self) -> int:
        return len(self.ranks)

    @property
    def slowest(self) -> int:
        """Index of the stage with the most compute: it sets the pace."""
        return int(np.argmax(self.compute_ms))


def read_stages(summaries: Sequence[RankSummary]) -> Stages | None:
    ss = sorted(summaries, key=lambda s: s.rank)
    if len(ss) < 2 or any(not s.recv_wait_ms or not s.p2p_sends or not s.steps for s in ss):
        return None
    recvs = [s.p2p_recvs / s.steps for s in ss]
    m = recvs[0]
    if m < 1 or m != int(m) or recvs[-1] != m or any(r != 2 * m for r in recvs[1:-1]):
        return None
    return Stages(tuple(s.rank for s in ss), int(m),
                  np.array([float(np.mean(s.recv_wait_ms)) for s in ss]),
                  np.array([s.compute_ms for s in ss]), np.array([s.step_ms for s in ss]),
                  tuple(s.recv_wait_ms for s in ss))
