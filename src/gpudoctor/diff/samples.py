"""Per-step samples and the noise model: is the step-time change between two runs real?

The estimate is the ratio of mean step times, AFTER / BEFORE (the mean, as a program's own
ms/iter is: a median would miss a DataLoader's bursts). Its 95% interval:

- **Welch's t on the log of the ratio of means** (delta method: the variance of log(mean) is
  s^2 / (n mean^2); Welch-Satterthwaite degrees of freedom). Exact enough for 3-20 samples of
  roughly normal step times, and it never assumes the two sides have the same spread.
- **A percentile bootstrap of the same ratio** (4000 resamples, fixed seed: the output is the
  same on every run) when both sides have 10+ samples. Step times have heavy right tails (a GC
  pause, a late batch) that the t interval understates; the wider of the two intervals is kept.

Before either, each side loses its **outliers**: samples further than 3.5 robust standard deviations
(1.4826 x MAD) from their median (Iglewicz & Hoaglin's modified z-score), when they are at most one
sample in ten (more: none is dropped, they are the workload's rhythm). That drops a warm-up step
(the lab's fixed input-pipeline twin: 52 and 50 ms before DataLoader workers were up, then 15-17 ms)
and keeps a rhythm (a slow step every fourth: 25% of the samples, never dropped).

The verdict allows for a **run-to-run floor** (default 1%): two launches of one program differ by
a little even when each one's steps agree closely (clocks, memory layout, the allocator), which
samples from within one run cannot show. A change counts only when its whole interval lies beyond
the floor: ``slower`` when the interval's lower end is above +floor, ``faster`` when its upper
end is below -floor, else ``no difference beyond noise``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpudoctor.core.numbers import finite_float
from gpudoctor.diff.stats import t_quantile

CONFIDENCE = 0.95
DEFAULT_FLOOR_PCT = 1.0  # run-to-run floor, % of the step (benchmarks/bench_diff_noise.py measures it)
OUTLIER_Z = 3.5  # modified z-score beyond which a sample is an outlier (Iglewicz & Hoaglin 1993)
MAX_OUTLIER_FRACTION = 0.1  # at most one sample in ten is dropped per side
BOOTSTRAP_MIN_N = 10
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 20261125

FASTER, SLOWER, SAME, UNKNOWN = "faster", "slower", "no difference beyond noise", "too few samples"


# unprofiled samples each side needs for the diff to compare them (else the profiled steps)
MIN_SIDE_SAMPLES = 2


@dataclass(frozen=True)
class Samples:
    """One side's per-step times (ms) and where they come from."""

    values: tuple[float, ...]
    kind: str  # "unprofiled" (env.json: timed without the profiler) or "profiled" (the trace's steps)
    source: str  # where exactly, in words

    def __post_init__(self) -> None:
        if self.kind not in ("unprofiled", "profiled"):
            raise ValueError(f"Samples.kind must be 'unprofiled' or 'profiled', got {self.kind!r}")


def usable(values: Sequence[Any]) -> tuple[float, ...]:
    """The finite, positive numbers of a list read from a file (anything else is dropped)."""
    numbers = (finite_float(v) for v in values)
    return tuple(x for x in numbers if x is not None and x > 0)


def unprofiled_samples(env: dict[str, Any]) -> tuple[float, ...]:
    """The unprofiled step samples ``gpudoctor run`` timed (env.json
    capture.unprofiled_step_ms_samples)."""
    capture = env.get("capture")
    if not isinstance(capture, dict):
        return ()
    values = capture.get("unprofiled_step_ms_samples")
    return usable(values) if isinstance(values, list) else ()


def split_outliers(values: Sequence[float]) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(kept, dropped): see the module docstring. Order of the kept samples is preserved."""
    n = len(values)
    budget = int(n * MAX_OUTLIER_FRACTION)
    if budget == 0:
        return tuple(values), ()
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    if mad <= 0:
        return tuple(values), ()
    scale = 1.4826 * mad
    drop = {i for i, v in enumerate(values) if abs(v - median) / scale > OUTLIER_Z}
    if len(drop) > budget:  # more than one in ten: a rhythm of the workload, not an accident
        return tuple(values), ()
    return (tuple(v for i, v in enumerate(values) if i not in drop),
            tuple(v for i, v in enumerate(values) if i in drop))


@dataclass(frozen=True)
class StepChange:
    """The step-time change AFTER vs BEFORE with its interval and verdict (all times in ms)."""

    before_ms: float  # mean of the kept samples
    after_ms: float
    n_before: int  # samples kept
    n_after: int
    dropped_before: tuple[float, ...]  # outliers left out
    dropped_after: tuple[float, ...]
    change_pct: float  # 100 * (after / before - 1): > 0 is slower
    ci_low_pct: float | None  # the 95% interval of change_pct (None: fewer than 2 samples a side)
    ci_high_pct: float | None
    method: str  # "welch-log", "welch-log+bootstrap"
    floor_pct: float
    verdict: str  # FASTER, SLOWER, SAME or UNKNOWN
    confidence: float = CONFIDENCE
    sd_before_ms: float = 0.0
    sd_after_ms: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def speedup(self) -> float:
        """BEFORE / AFTER: 2.0 means the step takes half the time."""
        return self.before_ms / self.after_ms if self.after_ms > 0 else math.inf

    @property
    def delta_ms(self) -> float:
        return self.after_ms - self.before_ms


def _log_ratio_parts(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """log(mean b / mean a), its standard error and Welch-Satterthwaite degrees of freedom."""
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    va = statistics.variance(a) / (len(a) * ma * ma)
    vb = statistics.variance(b) / (len(b) * mb * mb)
    se2 = va + vb
    denom = va * va / (len(a) - 1) + vb * vb / (len(b) - 1)
    df = se2 * se2 / denom if denom > 0 else math.inf
    return math.log(mb / ma), math.sqrt(se2), df


def welch_log_interval(a: Sequence[float], b: Sequence[float],
                       confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The interval of mean(b) / mean(a) from Welch's t on the log ratio (both sides need 2+
    samples)."""
    center, se, df = _log_ratio_parts(a, b)
    if se == 0:
        return math.exp(center), math.exp(center)
    t = t_quantile(0.5 + confidence / 2, df) if math.isfinite(df) else statistics.NormalDist().inv_cdf(
        0.5 + confidence / 2)
    return math.exp(center - t * se), math.exp(center + t * se)


def bootstrap_interval(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE,
                       resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(b) / mean(a), with a fixed seed (deterministic)."""
    rng = np.random.default_rng(seed)
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ma = xa[rng.integers(0, len(xa), size=(resamples, len(xa)))].mean(axis=1)
    mb = xb[rng.integers(0, len(xb), size=(resamples, len(xb)))].mean(axis=1)
    ratios = mb / ma
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(lo), float(hi)


def _kept(values: Sequence[float], drop_outliers: bool) -> tuple[tuple[float, ...],
                                                                 tuple[float, ...]]:
    """(kept, dropped): ``split_outliers``, or every sample kept."""
    return split_outliers(values) if drop_outliers else (tuple(values), ())


def interval_verdict(lo_pct: float, hi_pct: float, floor_pct: float) -> str:
    """SLOWER when the change's whole interval is above +floor, FASTER when below -floor, else
    SAME."""
    if lo_pct > floor_pct:
        return SLOWER
    if hi_pct < -floor_pct:
        return FASTER
    return SAME


def compare_samples(before: Sequence[float], after: Sequence[float],
                    floor_pct: float = DEFAULT_FLOOR_PCT, confidence: float = CONFIDENCE,
                    drop_outliers: bool = True) -> StepChange:
    """The change from BEFORE's step times to AFTER's (each a list of positive ms); with
    ``drop_outliers`` False every sample counts (``--try-fixes``' trials: tryfix/trial.py)."""
    if not before or not after:
        raise ValueError("compare_samples needs at least one sample on each side")
    if floor_pct < 0 or not math.isfinite(floor_pct):
        raise ValueError(f"floor_pct must be a finite number >= 0, got {floor_pct!r}")
    a, dropped_a = _kept(before, drop_outliers)
    b, dropped_b = _kept(after, drop_outliers)
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    change = 100.0 * (mb / ma - 1.0)
    notes = []
    if len(a) < 2 or len(b) < 2:
        why = "one side has a single step sample: no interval can be drawn; record more steps (--steps, --skip)"
        return StepChange(ma, mb, len(a), len(b), dropped_a, dropped_b, change, None, None,
                          "none", floor_pct, UNKNOWN, confidence, notes=(why,))
    lo, hi = welch_log_interval(a, b, confidence)
    method = "welch-log"
    if len(a) >= BOOTSTRAP_MIN_N and len(b) >= BOOTSTRAP_MIN_N:
        blo, bhi = bootstrap_interval(a, b, confidence)
        lo, hi, method = min(lo, blo), max(hi, bhi), "welch-log+bootstrap"
    lo_pct, hi_pct = 100.0 * (lo - 1.0), 100.0 * (hi - 1.0)
    verdict = interval_verdict(lo_pct, hi_pct, floor_pct)
    if verdict == SAME and (lo_pct > 0 or hi_pct < 0):
        notes.append(f"the {abs(change):.1f}% change is outside this pair's step-to-step noise but "
                     f"within the {floor_pct:g}% run-to-run floor")
    return StepChange(ma, mb, len(a), len(b), dropped_a, dropped_b, change, lo_pct, hi_pct,
                      method, floor_pct, verdict, confidence, statistics.stdev(a),
                      statistics.stdev(b), tuple(notes))


def process_mean(values: Sequence[float], drop_outliers: bool = True) -> float:
    """One process's mean step time (ms), its outliers left out as ``compare_samples`` leaves them
    (unless ``drop_outliers`` is False)."""
    return statistics.fmean(_kept(values, drop_outliers)[0])


def compare_processes(before: Sequence[Sequence[float]], after: Sequence[Sequence[float]],
                      floor_pct: float = DEFAULT_FLOOR_PCT, confidence: float = CONFIDENCE,
                      drop_outliers: bool = True) -> StepChange:
    """The change from BEFORE's processes to AFTER's, each side a list of processes' step samples.

    Where a program's speed moves from one process to the next (a host-bound loop on a shared CPU:
    benchmarks/BENCHMARKS-lab.md "Evidence moved from the source: lab, diff and report"), the steps
    of one process cannot say how far the next will differ. Each process's mean (``process_mean``)
    is then one observation: the estimate is the ratio of the geometric means of the two sides'
    process means, its interval Student's t on their logs with the variance pooled over both sides
    (n_before
    + n_after - 2 degrees of freedom: with 4 and 3 processes, 5). The process-to-process spread is
    the noise, measured, so the floor stays diff's 1%. Pooled, not Welch: with 2-3 processes a side
    Welch's degrees of freedom fall to 1-2 and the interval to nothing useful; the price is assuming
    both sides move alike between processes."""
    if floor_pct < 0 or not math.isfinite(floor_pct):
        raise ValueError(f"floor_pct must be a finite number >= 0, got {floor_pct!r}")
    runs_b = [tuple(r) for r in before if len(r) > 0]
    runs_a = [tuple(r) for r in after if len(r) > 0]
    if not runs_b or not runs_a:
        raise ValueError("compare_processes needs at least one process with samples on each side")
    kept_b, kept_a = [_kept(r, drop_outliers) for r in runs_b], [_kept(r, drop_outliers)
                                                                 for r in runs_a]
    means_b, means_a = [statistics.fmean(k) for k, _ in kept_b], [statistics.fmean(k)
                                                                  for k, _ in kept_a]
    logs_b, logs_a = [math.log(m) for m in means_b], [math.log(m) for m in means_a]
    mb, ma = statistics.fmean(logs_b), statistics.fmean(logs_a)
    before_ms, after_ms = math.exp(mb), math.exp(ma)
    change = 100.0 * (after_ms / before_ms - 1.0)
    dropped_b = tuple(v for _, d in kept_b for v in d)
    dropped_a = tuple(v for _, d in kept_a for v in d)
    n_b, n_a = sum(len(k) for k, _ in kept_b), sum(len(k) for k, _ in kept_a)
    sd_b = statistics.stdev(means_b) if len(means_b) > 1 else 0.0
    sd_a = statistics.stdev(means_a) if len(means_a) > 1 else 0.0
    df = len(logs_b) + len(logs_a) - 2
    method = f"processes ({len(logs_b)} vs {len(logs_a)}), pooled t on log means"
    if df < 1:
        why = "one process a side: the spread between processes cannot be measured; run more (--trial-repeats)"
        return StepChange(before_ms, after_ms, n_b, n_a, dropped_b, dropped_a, change, None,
                          None, "none", floor_pct, UNKNOWN, confidence, sd_b, sd_a, (why,))
    ss = sum((v - mb) ** 2 for v in logs_b) + sum((v - ma) ** 2 for v in logs_a)
    se = math.sqrt(ss / df * (1 / len(logs_b) + 1 / len(logs_a)))
    t = t_quantile(0.5 + confidence / 2, df)
    lo_pct, hi_pct = 100.0 * (math.exp(ma - mb - t * se) - 1.0), 100.0 * (
        math.exp(ma - mb + t * se) - 1.0)
    return StepChange(before_ms, after_ms, n_b, n_a, dropped_b, dropped_a, change, lo_pct,
                      hi_pct, method, floor_pct, interval_verdict(lo_pct, hi_pct, floor_pct),
                      confidence, sd_b, sd_a)
