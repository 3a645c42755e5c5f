"""The unprofiled step: one number, its uncertainty and whether to trust it, from the step times
timed outside the profiler's window (capture/session.py times them; this module only decides).

Two sets of samples exist: the steps before the window (their second half: the first are warm-up)
and the steps after it (the first ``SETTLE_STEPS`` left out). Each can be slowed: the steps before
the window may still be warming up, and the steps after it run behind the profiler's leftovers
(pytorch/pytorch#144455 names CUPTI, which Kineto leaves attached after profiling unless
TEARDOWN_CUPTI=1). Taking the lower of the two sets was wrong more often than pooling them, against
the programs' own timing (benchmarks/BENCHMARKS-capture.md "Evidence moved from the source:
capture"). So both sets are pooled whenever both have enough steps (the median is robust to a
warm-up or a leftover step either way), unless their medians are more than ``SETS_DISAGREE`` apart:
then the faster set alone; a set alone when only it has.

The estimator: the median of the chosen steps (a single warm-up or collection outlier among 3-8
steps cannot move it), except behind a DataLoader with worker processes, whose steps are bursty by
nature (batches handed over in bursts, a wait every ``workers x prefetch`` steps): there the mean
over whole rounds of the loader's queue, the long-run throughput the program's own ms/iter gives.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_SAMPLES = 3
"""Fewer timed steps than this: the number is shown but not trusted."""
# the estimator behind a DataLoader with workers whose fetch was timed: the fetch's mean, the rest's
# median
LOADER_REST_MEDIAN = "loader-fetch-mean"
SETTLE_STEPS = 1
"""Steps after the window left untimed beyond the one that wrote the trace: the first step after it
runs slower than the next ones while the caches and the allocator refill after the export
(benchmarks/BENCHMARKS-capture.md "Evidence moved from the source: capture")."""
SETS_DISAGREE = 1.25
"""Medians of the two sets further apart than this: the faster set alone. Both slowdowns only add
time (warm-up before the window, the profiler's leftovers after it), so the faster set is the one
neither reached; 1.25 separates a generate() loop (1.39x apart) from a DCGAN whose pooled
median was right (1.21x apart). Pinned by tests/test_unprofiled_timing.py::
test_two_sets_far_apart_give_the_faster_one; the runs: benchmarks/BENCHMARKS-capture.md "Evidence moved from the
source: capture"."""
WARM_STEPS = 10
"""Steps a program needs to reach its steady state: timed steps that all end before this step
are likely warm-up (benchmarks/BENCHMARKS-capture.md "Evidence moved from the source: capture")."""


TRIAL_SETTLE_HALF = 6
"""A trial's steps have settled when the median of its last this-many steps is within
``TRIAL_SETTLE_RATIO`` of the median of the this-many before them (``settled``)."""
TRIAL_SETTLE_RATIO = 1.25
TRIAL_SETTLE_NOISE_MS = 0.25
"""Closer than this (ms) is settled whatever the ratio: the host's scheduling noise on steps of a
millisecond or less (a shared 2-core CPU), not a transient."""
TRIAL_SETTLE_MAX_STEPS = 48
"""At most this many steps past the trial's ``skip`` are run waiting for them to settle."""
TRIAL_SETTLE_MAX_S = 30.0
"""Nor more than this many seconds past it."""
TRIAL_TIMED_STEPS = 30
"""Once settled, a trial times at least this many steps (after the ones judged settled). Twelve
were too few for two invocations to agree, each mean moved by one or two stalls (benchmarks/BENCHMARKS-capture.md
"Evidence moved from the source: capture"); at 25 ms a step the 18 more steps cost half a second."""
TRIAL_TIMED_SE = 0.01
"""Past TRIAL_TIMED_STEPS, a trial times on until the standard error of its mean step (every step:
a trial's comparison keeps them all, tryfix/trial.py) is within this share of the mean
(``timed_enough``). Thirty steps are still too few where the host stalls (benchmarks/BENCHMARKS-capture.md "Evidence
moved from the source: capture"). Stalls that come at random average out as one over the root of
the steps; a clean step (spread 1-2%) stops at 30."""
TRIAL_TIMED_MIN_S = 3.0
"""Nor fewer seconds than this (unless TRIAL_TIMED_MAX_STEPS come first): a host-bound step's speed
moves with the host's, in spells of seconds that the steps of one spell cannot show (2-4% over 3 s
windows against 6-8% over 0.3 s: benchmarks/probes/probe_host_noise.py, benchmarks/probes/probe_cpu_map.py;
benchmarks/BENCHMARKS-capture.md "Evidence moved from the source: capture"). The cost: a trial of a 25 ms step times
2 s more."""
TRIAL_TIMED_MAX_STEPS = 600
TRIAL_TIMED_MAX_S = 5.0
"""Nor more steps than TRIAL_TIMED_MAX_STEPS, nor longer than this many seconds past the settled
steps (a slow step times fewer than TRIAL_TIMED_STEPS), once TRIAL_JUDGED_MIN_STEPS steps over
TRIAL_JUDGED_MIN_S are timed."""
TRIAL_JUDGED_MIN_STEPS = 10
TRIAL_JUDGED_MIN_S = 1.0
"""The least a trial's verdict stands on, on each side (tryfix/trial.py ``verdict``): a few steps, or a
fraction of a second of them, are one spell of the host's speed (see TRIAL_TIMED_MIN_S). On a loaded
2-core CPU a bf16 trial read x33.77 faster where, timed directly, bf16 ran 3.5x slower."""
TRIAL_TIMED_CHECK_GROWTH = 1.25
"""The standard error is computed again only when the steps timed have grown by this factor (30,
38, 48, ... : a dozen times up to 600): each computation is a pass over the samples inside the
step being timed, so not at every step."""


def next_timed_check(n: int) -> int:
    """The count of timed steps at which ``timed_enough`` is asked next, after asking at ``n``."""
    return min(max(n + 1, math.ceil(n * TRIAL_TIMED_CHECK_GROWTH)), TRIAL_TIMED_MAX_STEPS)


def timed_enough(samples: Sequence[float], elapsed_s: float, check_error: bool = True) -> bool:
    """Whether a settled trial has timed enough steps (``samples``, ms), ``elapsed_s`` seconds
    after the first: its time or step bound, or (asked with ``check_error``: see
    TRIAL_TIMED_CHECK_GROWTH) at least TRIAL_TIMED_STEPS over at least TRIAL_TIMED_MIN_S whose mean
    has a standard error within TRIAL_TIMED_SE of it."""
    judged = len(samples) >= TRIAL_JUDGED_MIN_STEPS and elapsed_s >= TRIAL_JUDGED_MIN_S
    if judged and (elapsed_s >= TRIAL_TIMED_MAX_S or len(samples) >= TRIAL_TIMED_MAX_STEPS):
        return True
    if not check_error or len(samples) < TRIAL_TIMED_STEPS or elapsed_s < TRIAL_TIMED_MIN_S:
        return False
    mean = statistics.fmean(samples)
    return mean > 0 and statistics.stdev(samples) / math.sqrt(len(samples)) <= TRIAL_TIMED_SE * mean


@dataclass(frozen=True)
class UnprofiledStep:
    """The unprofiled step time and how far to trust it."""

    ms: float
    spread_ms: float  # the standard error of ``ms`` (0 when it cannot be estimated: one step)
    steps: int  # timed steps it comes from
    # "median", "mean" (one or two steps), "loader-mean" (whole rounds of the queue) or
    # LOADER_REST_MEDIAN (the same rounds, their fetch timed: ``summarize``)
    estimator: str
    samples_from: str  # "before" / "after" the window, or "both"
    trusted: bool
    why: str = ""  # why it is not trusted ("" when it is)

    def to_dict(self) -> dict[str, object]:
        return {"ms": round(self.ms, 4), "spread_ms": round(self.spread_ms, 4), "steps": self.steps,
                "estimator": self.estimator, "samples_from": self.samples_from,
                "trusted": self.trusted, "why": self.why}

    def text(self) -> str:
        """``4.060 ms ± 0.200 (5 steps)``."""
        return f"{self.ms:.3f} ms ± {self.spread_ms:.3f} ({self.steps} step{'s' * (self.steps != 1)})"


def summarize(samples: list[float], loader_depth: int = 0,
              fetch: Sequence[float] | None = None) -> tuple[float, float, str]:
    """(estimate, its standard error, estimator) of a non-empty list of step times; ``fetch``: each
    step's DataLoader fetch on the program's thread (ms), where the capture timed it."""
    n = len(samples)
    if loader_depth > 0 and n >= loader_depth and fetch is not None and len(fetch) == n:
        return _loader_rest_median(samples, loader_depth, fetch)
    if loader_depth > 0 and n < loader_depth:
        # less than one round of the queue: a median would be a served-at-once batch; the mean at
        # least counts the waits it saw (not trusted: unprofiled_step says so)
        spread = statistics.stdev(samples) / math.sqrt(n) if n > 1 else 0.0
        return statistics.fmean(samples), spread, "mean"
    if loader_depth > 0:
        return (*_mean_over_rounds(_whole_rounds(samples, loader_depth), loader_depth),
                "loader-mean")
    if n < MIN_SAMPLES:
        return statistics.fmean(samples), (max(samples) - min(samples)) / 2, "mean"
    return (*_median_and_se(samples), "median")


def _loader_rest_median(samples: list[float], loader_depth: int,
                        fetch: Sequence[float]) -> tuple[float, float, str]:
    """Behind a DataLoader with workers whose fetch was timed: the fetch's mean over whole rounds
    of the queue (its waits come in bursts) plus the median of the rest of each step, as a step
    with no loader is estimated. A step slowed by something other than the loader (a pause with
    none of it in the fetch) then moves the estimate as little as it moves a median
    (benchmarks/BENCHMARKS-replay.md "Knob set l"; tests/test_mingpt_adder.py)."""
    fetched = [max(f, 0.0) for f in _whole_rounds(list(fetch), loader_depth)]
    kept = _whole_rounds(samples, loader_depth)
    rest, rest_se = _median_and_se([max(s - f, 0.0) for s, f in zip(kept, fetched, strict=True)])
    fetch_ms, fetch_se = _mean_over_rounds(fetched, loader_depth)
    return rest + fetch_ms, math.hypot(rest_se, fetch_se), LOADER_REST_MEDIAN


def _whole_rounds(values: list[float], loader_depth: int) -> list[float]:
    """The latest whole rounds of the loader's queue (``loader_depth`` steps each) in ``values``."""
    return values[len(values) - len(values) // loader_depth * loader_depth:]


def _mean_over_rounds(kept: list[float], loader_depth: int) -> tuple[float, float]:
    """The mean of whole rounds of the queue, and its standard error over the rounds' means (over
    the steps where there is one round)."""
    rounds = len(kept) // loader_depth
    means = [statistics.fmean(kept[i * loader_depth:(i + 1) * loader_depth])
             for i in range(rounds)]
    if rounds > 1:
        return statistics.fmean(kept), statistics.stdev(means) / math.sqrt(rounds)
    spread = statistics.stdev(kept) / math.sqrt(len(kept)) if len(kept) > 1 else 0.0
    return statistics.fmean(kept), spread


def _median_and_se(values: list[float]) -> tuple[float, float]:
    """The median and its standard error for normal noise: sqrt(pi / 2) x sigma / sqrt(n), sigma =
    1.4826 MAD."""
    median = statistics.median(values)
    mad = statistics.median(abs(x - median) for x in values)
    return median, 1.2533 * 1.4826 * mad / math.sqrt(len(values))


def enough(samples: list[float], loader_depth: int = 0) -> bool:
    """Enough steps to estimate from: 3, and behind a DataLoader with workers one whole round of
    its queue (a few steps of it may see no wait at all)."""
    return len(samples) >= max(MIN_SAMPLES, loader_depth)


def choose(before: list[float], after: list[float],
           loader_depth: int = 0) -> tuple[list[float], str]:
    """The samples to estimate from, and where they come from (see the module docstring)."""
    enough_before, enough_after = enough(before, loader_depth), enough(after, loader_depth)
    if enough_before and enough_after:
        if not loader_depth:
            mb, ma = statistics.median(before), statistics.median(after)
            if min(mb, ma) > 0 and max(mb, ma) / min(mb, ma) > SETS_DISAGREE:  # one set was slowed: warm-up or
                return (before, "before") if mb < ma else (after, "after")  # leftovers only add time
        return before + after, "both"
    if enough_before:
        return before, "before"
    if enough_after:
        return after, "after"
    return before + after, "both" if before and after else "before" if before else "after"


def unprofiled_step(before: list[float], after: list[float], loader_depth: int = 0,
                    last_step_before: int | None = None,
                    fetch_before: Sequence[float] | None = None,
                    fetch_after: Sequence[float] | None = None) -> UnprofiledStep | None:
    """The unprofiled step from the steps timed ``before`` and ``after`` the window (ms each).

    ``last_step_before``: the program's step at which the last step before the window ended (the
    window's first step): when no step after the window was timed and it is below ``WARM_STEPS``,
    every timed step was among the program's first, and the result is not trusted.
    ``fetch_before`` / ``fetch_after``: each of those steps' DataLoader fetch (ms), where every one
    was timed (``summarize``).
    """
    samples, where = choose(before, after, loader_depth)
    if not samples:
        return None
    fetch = {"before": fetch_before, "after": fetch_after}.get(where) if where != "both" else (
        None if fetch_before is None or fetch_after is None else [*fetch_before, *fetch_after])
    ms, spread, estimator = summarize(samples, loader_depth, fetch)
    n = len(samples)
    why = ""
    if n < MIN_SAMPLES:
        why = f"only {n} step{'s' * (n != 1)} could be timed without the profiler (fewer than {MIN_SAMPLES})"
    elif not enough(samples, loader_depth):
        why = (f"only {n} steps could be timed without the profiler, fewer than one round of the "
               f"DataLoader's queue ({loader_depth} batches: workers x prefetch), whose steps come "
               "in bursts")
    elif where == "before" and not after and last_step_before is not None and last_step_before < WARM_STEPS:
        why = ("the steps timed without the profiler are steps "
               f"{last_step_before - n + 1}-{last_step_before} of the program, likely still "
               "warming up, and none could be timed after the window (the program ended)")
    return UnprofiledStep(ms, spread, n, estimator, where, not why, why)


def settled(intervals: list[float], loader_depth: int = 0) -> bool:
    """Have a trial's step times (ms, oldest first) settled? The last ``TRIAL_SETTLE_HALF`` steps
    against the ones before them: their medians within ``TRIAL_SETTLE_RATIO`` of each other, and
    the latest no slower than that ratio over the fastest such run of steps so far (a slow plateau
    is not the steady step when the same program already ran faster). Behind a DataLoader with
    workers, means over runs of at least one round of its queue, whose steps come in bursts. Fewer
    steps than two runs: not settled.

    Why a trial waits for it: torch.compile's background work outlives the compile, by how much
    depends on whether Inductor's cache already held the graph (benchmarks/BENCHMARKS-capture.md
    "Evidence moved from the source: capture"). A fixed number of warm-up steps cannot cover both; a
    settled series can."""
    half = max(TRIAL_SETTLE_HALF, loader_depth)
    if len(intervals) < 2 * half:
        return False
    center = statistics.fmean if loader_depth > 0 else statistics.median
    older, recent = center(intervals[-2 * half:-half]), center(intervals[-half:])
    fastest = min(center(intervals[i:i + half]) for i in range(len(intervals) - half + 1))
    if min(older, recent, fastest) <= 0:
        return True  # a clock that did not move: nothing to wait for
    def close(a: float, b: float) -> bool:  # b no slower than a by the ratio or the noise
        return b <= TRIAL_SETTLE_RATIO * a or b - a <= TRIAL_SETTLE_NOISE_MS

    return close(older, recent) and close(recent, older) and close(fastest, recent)


def fetch_in_step(step_ms: float, samples: Sequence[float], fetch_ms: Sequence[float],
                  loader_depth: int = 0) -> float:
    """The DataLoader's share of the unprofiled step ``step_ms`` (made of ``samples``): the step
    less the same estimate of each step without its fetch (``fetch_ms``, one per sample), so that
    what is left is the rest of the step as the same estimator sees it. The loader's run-to-run
    spread (its decode on a busy host) is then the loader's, not the profiler's cost
    (replay/observer.py)."""
    rest = [max(s - f, 0.0) for s, f in zip(samples, fetch_ms, strict=True)]
    if not rest:
        return 0.0
    # the rest as the step's own estimator saw it (``_loader_rest_median`` behind workers)
    return min(max(step_ms - summarize(rest, loader_depth, [0.0] * len(rest))[0], 0.0), step_ms)
