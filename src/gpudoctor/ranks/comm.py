"""Exposed communication per rank and step, split by cause. A collective's time is exposed where no
compute kernel runs beside it on that rank; its exposed part is split three ways:

- wait: the start of the kernel, until the last rank arrives (aligned clocks): the straggler's cost;
- overlap not taken: exposed transfer that could have run under compute. Every collective but the
  last of its step could have been issued earlier (DDP buckets ready sooner, FSDP all-gathers
  prefetched); of the last one, all but one default DDP bucket (25 MiB) could have been split off
  and overlapped with the backward pass that precedes it;
- transfer: the rest, the data moved at the achieved bus bandwidth with nothing left to hide it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpudoctor.ranks.aligned import Aligned

# DDP's default bucket_cap_mb=25 (torch.nn.parallel.DistributedDataParallel): the smallest tail a
# bucketed all-reduce leaves exposed after the last backward kernel
BUCKET_BYTES = 25 * 2**20


@dataclass(frozen=True)
class CommSplit:
    """ms per step, per rank ([R] arrays, in the order of ``Aligned.summaries``)."""

    exposed: np.ndarray
    wait: np.ndarray
    transfer: np.ndarray
    not_overlapped: np.ndarray
    comm: np.ndarray  # every collective's kernel time, hidden or not

    def mean(self, field: str) -> float:
        values = getattr(self, field)
        return float(values.mean()) if len(values) else 0.0


def split(al: Aligned) -> CommSplit:
    rows = al.in_steps()
    n = max(al.steps, 1)
    wait = al.exposed_wait[rows]
    transfer = al.exposed[rows] - wait
    share = np.where(al.last[rows], _splittable(al.nbytes[rows]), 1.0)[:, None]  # [M, 1]
    not_overlapped = transfer * share
    comm = (al.end - al.start)[rows]

    def per_step(x: np.ndarray) -> np.ndarray:
        return x.sum(axis=0) / n / 1e6 if len(x) else np.zeros(len(al.summaries))

    return CommSplit(per_step(al.exposed[rows]), per_step(wait), per_step(transfer - not_overlapped),
                     per_step(not_overlapped), per_step(comm))


def _splittable(nbytes: np.ndarray) -> np.ndarray:
    """Share of a step's last collective that smaller buckets could have overlapped (0 when its size
    is unknown or within one bucket)."""
    safe = np.maximum(nbytes, 1)
    return np.where(nbytes > BUCKET_BYTES, 1.0 - BUCKET_BYTES / safe, 0.0)
