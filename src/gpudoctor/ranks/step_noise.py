"""Is a rank late every step, or only on average? The ranks' own step-to-step variation.

Ranks sharing CPU cores (gloo on a busy host) or a profiler's stalls arrive late by turns: one rank
held up by the scheduler in one step, the other in the next. Summed over the window, one of them
has made the other wait more, by chance. A straggler is late in every step by about the same
amount; so per step its lateness, its collectives' start less the other ranks' mean start (aligned
clocks), summed over the step's collectives (as the imposed wait is), and the lower one-sided 95%
confidence bound of its mean over the steps (Student's t) must be above zero. With one step there
is no spread to judge and the rank is not judged. A rank late in one step of the window only (work
it does every N steps, caught once) cannot be told from a hiccup this way: it is within the noise.

A healthy run's latest rank can be late by more than a planted straggler in single steps, and still
within this bound over the window (tests/test_ranks_planted.py::
test_ranks_late_by_turns_have_no_straggler; the runs: benchmarks/BENCHMARKS-multi-gpu.md "Evidence
moved from the source: ranks").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpudoctor.core.arrays import distinct
from gpudoctor.ranks.aligned import Aligned

# one-sided 95% quantiles of Student's t by degrees of freedom (any statistics table); past the
# last entry, the normal distribution's 1.645
T95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860,
       9: 1.833, 10: 1.812, 12: 1.782, 15: 1.753, 20: 1.725, 30: 1.697}


@dataclass(frozen=True)
class Lateness:
    per_step_ms: tuple[float, ...]
    mean_ms: float
    lower_ms: float  # the one-sided 95% lower confidence bound of the mean; the mean with one step

    @property
    def within_noise(self) -> bool:
        return len(self.per_step_ms) > 1 and self.lower_ms <= 0.0


def t95(df: int) -> float:
    """The quantile for ``df`` degrees of freedom, or for the largest tabled df below it."""
    return T95[max(k for k in T95 if k <= df)] if df < 30 else 1.645


def lateness(al: Aligned, i: int) -> Lateness:
    """Rank ``i``'s lateness per step (ms), and whether it is within the ranks' step-to-step
    noise."""
    rows = np.flatnonzero(al.in_steps())
    r = len(al.summaries)
    if not len(rows) or r < 2:
        return Lateness((), 0.0, 0.0)
    start = al.start[rows].astype(np.float64)  # [M, R]
    others = (start.sum(axis=1) - start[:, i]) / (r - 1)
    late = start[:, i] - others
    steps = al.step[rows]
    per = np.array([late[steps == k].sum() for k in distinct(steps)]) / 1e6
    mean = float(per.mean())
    if len(per) < 2:
        return Lateness(tuple(per.round(4).tolist()), mean, mean)
    lower = mean - t95(len(per) - 1) * float(per.std(ddof=1)) / float(np.sqrt(len(per)))
    return Lateness(tuple(per.round(4).tolist()), mean, lower)
