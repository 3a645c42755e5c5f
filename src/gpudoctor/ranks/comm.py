"""Exposed communication per rank and step, split by cause. A collective's time is exposed where no
compute kernel runs beside it on that rank; its exposed part is split three ways:

- wait: the start of the kernel, until the last rank arrives (aligned clocks): the straggler's cost;
- overlap not taken: exposed transfer that could have run under compute, or need not run at all,
  by cause:
  - ``accumulation``: a gradient set reduced again by a later micro-batch of the same step
    (gradient accumulation without ``no_sync``, ranks/accumulation.py): all of its exposed transfer;
  - ``bucket``: of a step's last collective, all but one default DDP bucket (25 MiB) could have
    been split off and overlapped with the backward pass before it (one huge bucket);
  - ``issued-late``: every other collective of the step could have been issued earlier (DDP
    buckets ready sooner, FSDP all-gathers prefetched);
  the last two together at most the rank's compute that runs with no collective beside it (there
  is nothing else to hide them under: a step whose communication outlasts its compute leaves the
  rest exposed however early it is issued);
- transfer: the rest, the data moved at the achieved bus bandwidth with nothing left to hide it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpudoctor.analysis.intervals import union
from gpudoctor.ranks.accumulation import repeated_sets
from gpudoctor.ranks.aligned import Aligned

# DDP's default bucket_cap_mb=25 (torch.nn.parallel.DistributedDataParallel): the smallest tail a
# bucketed all-reduce leaves exposed after the last backward kernel
BUCKET_BYTES = 25 * 2**20
CAUSES = ("accumulation", "bucket", "issued-late")


@dataclass(frozen=True)
class CommSplit:
    """ms per step, per rank ([R] arrays, in the order of ``Aligned.summaries``)."""

    exposed: np.ndarray
    wait: np.ndarray
    transfer: np.ndarray
    not_overlapped: np.ndarray  # the sum of the three causes below
    comm: np.ndarray  # every collective's kernel time, hidden or not
    accumulation: np.ndarray | None = None
    bucket: np.ndarray | None = None
    issued_late: np.ndarray | None = None
    accumulated_sets: float = 0.0  # micro-batches per step whose gradients were each reduced

    def mean(self, field: str) -> float:
        values = getattr(self, field)
        return float(values.mean()) if values is not None and len(values) else 0.0

    def by_cause(self) -> dict[str, float]:
        """The overlap not taken, ms per step (mean over ranks), by cause."""
        return {c: self.mean(c.replace("-", "_")) for c in CAUSES}


def split(al: Aligned) -> CommSplit:
    rows = al.in_steps()
    n = max(al.steps, 1)
    wait = al.exposed_wait[rows]
    transfer = al.exposed[rows] - wait
    repeated = repeated_sets(al)
    again = repeated.rows[rows][:, None]  # [M, 1]
    last = al.last[rows][:, None]
    bucket = np.where(~again & last, transfer * _splittable(al.nbytes[rows])[:, None], 0)
    late = np.where(~again & ~last, transfer, 0)
    accumulation = np.where(again, transfer, 0)
    comm = (al.end - al.start)[rows]

    def per_step(x: np.ndarray) -> np.ndarray:
        return x.sum(axis=0) / n / 1e6 if len(x) else np.zeros(len(al.summaries))

    # what can be moved under compute is at most the compute that runs with no collective beside it
    cap = hideable_ms(al) * n * 1e6  # [R] ns over the window
    movable = (bucket + late).sum(axis=0) if len(rows) else np.zeros(len(al.summaries))
    keep = np.divide(cap, movable, out=np.ones_like(cap), where=movable > cap)
    bucket, late = bucket * np.minimum(keep, 1.0), late * np.minimum(keep, 1.0)
    missed = bucket + late + accumulation
    return CommSplit(per_step(al.exposed[rows]), per_step(wait), per_step(transfer - missed),
                     per_step(missed), per_step(comm), per_step(accumulation), per_step(bucket),
                     per_step(late), repeated.sets_per_step)


def hideable_ms(al: Aligned) -> np.ndarray:
    """[R] ms per step of each rank's compute with no collective of the steps beside it."""
    out = []
    for s in al.summaries:
        inside = [c for c in s.collectives if c.step >= 0]
        starts = np.array([c.start + a for c in inside for a, _ in c.overlap], np.int64)
        ends = np.array([c.start + b for c in inside for _, b in c.overlap], np.int64)
        beside = float((np.subtract(*union(starts, ends)[::-1])).sum()) if len(starts) else 0.0
        out.append(max(s.compute_ms - beside / max(s.steps, 1) / 1e6, 0.0))
    return np.array(out)


def _splittable(nbytes: np.ndarray) -> np.ndarray:
    """Share of a step's last collective that smaller buckets could have overlapped (0 when its size
    is unknown or within one bucket)."""
    safe = np.maximum(nbytes, 1)
    return np.where(nbytes > BUCKET_BYTES, 1.0 - BUCKET_BYTES / safe, 0.0)
