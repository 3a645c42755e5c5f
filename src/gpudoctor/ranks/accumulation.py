"""Gradient accumulation without ``no_sync``: the same gradients reduced once per micro-batch.

With K micro-batches per optimizer step, DDP all-reduces (FSDP reduce-scatters) every gradient at
the end of each backward pass unless the first K-1 passes run under ``model.no_sync()`` (FSDP2:
``set_requires_gradient_sync(False)``). Only the last set's result is used by the optimizer: the
K-1 sets before it move the whole gradient for nothing.

Recognised in a step where two or more backward passes (ranks/backward.py) each launched gradient
reductions, and every pass's set is the same: the same ops of the same sizes, in any order (gloo
records no sizes: then the same ops, as many). Sets that differ are different gradients (a GAN's
two models) and are left alone. The repeated sets are every set but the step's last.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpudoctor.core.arrays import distinct
from gpudoctor.ranks.aligned import Aligned

GRADIENT_OPS = frozenset({"all-reduce", "reduce-scatter"})


@dataclass(frozen=True)
class Repeated:
    rows: np.ndarray  # [M] bool: collectives repeating a set a later backward pass of their step reduces again
    sets_per_step: float  # the micro-batches whose sets were reduced, mean over the steps where found
    steps: int  # steps where found

    @property
    def found(self) -> bool:
        return self.steps > 0


def repeated_sets(al: Aligned) -> Repeated:
    rows = np.zeros(len(al.ops), bool)
    if al.micro is None or not len(al.ops):
        return Repeated(rows, 0.0, 0)
    grad = np.array([op in GRADIENT_OPS for op in al.ops], bool) & (al.micro >= 0) & (al.step >= 0)
    sets = []
    for k in distinct(al.step[grad]).tolist():
        mine = np.flatnonzero(grad & (al.step == k))
        micros = distinct(al.micro[mine]).tolist()
        if len(micros) < 2:
            continue
        groups = [mine[al.micro[mine] == m] for m in micros]
        signature = {tuple(sorted((al.ops[i], int(al.nbytes[i])) for i in g.tolist()))
                     for g in groups}
        if len(signature) == 1:
            for g in groups[:-1]:
                rows[g] = True
            sets.append(len(groups))
    return Repeated(rows, float(np.mean(sets)) if sets else 0.0, len(sets))
