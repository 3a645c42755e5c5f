"""capture/trial_timing.py: a trial settles, then times, its steps; driven step by step with the
times it is given (no session, no clock: ``now`` is the sum of the steps so far)."""

from __future__ import annotations

from gpudoctor.capture.timing import (
    TRIAL_SETTLE_HALF,
    TRIAL_SETTLE_MAX_S,
    TRIAL_SETTLE_MAX_STEPS,
    TRIAL_TIMED_STEPS,
)
from gpudoctor.capture.trial_timing import TrialTiming


def _trial() -> TrialTiming:
    return TrialTiming(TRIAL_SETTLE_MAX_STEPS, TRIAL_SETTLE_MAX_S)


def _run(trial: TrialTiming, steps_ms: list[float], start_s: float = 100.0) -> int:
    """Ask the trial at each step (its time appended to one growing series) until it stops;
    the number of steps asked."""
    intervals: list[float] = []
    now = start_s
    for past_skip, ms in enumerate(steps_ms, start=1):
        intervals.append(ms)
        now += ms / 1e3
        if not trial.on_step(intervals, past_skip, 0, now):
            return past_skip
    return len(steps_ms)


def test_a_steady_trial_judges_twelve_steps_then_times_thirty() -> None:
    """125 ms steps: settled at the 12th (6 against 6), then 30 more over 3.75 s, past the least
    time (3 s), with no spread: timed enough at the first check."""
    trial = _trial()
    assert _run(trial, [125.0] * 100) == 2 * TRIAL_SETTLE_HALF + TRIAL_TIMED_STEPS == 42
    assert trial.has_settled and trial.note == ""
    assert trial.timed_ms == [125.0] * 30


def test_a_trial_that_ends_early_is_timed_over_its_judged_steps_too() -> None:
    """The program ends 5 steps after the 12 judged settled: fewer timed than judged, so the
    judged ones count as well (in their order, first)."""
    trial = _trial()
    steps = [100.0 + i for i in range(12)]  # within 1.25x: settled at the 12th
    assert _run(trial, steps + [90.0] * 5) == 17
    assert trial.timed_ms == steps + [90.0] * 5


def test_the_timed_steps_carry_their_step_indices() -> None:
    """The steps given beside the intervals (here the program's steps 31 on) follow the timed ones:
    the 30 after the 12 judged, or judged and timed together when the program ended early; none
    where none were given."""
    for tail, first in ((100, 31 + 12), (5, 31)):
        trial = _trial()
        intervals: list[float] = []
        steps: list[int] = []
        series = [125.0] * 12 + [125.0] * tail
        for past_skip, ms in enumerate(series, start=1):
            intervals.append(ms)
            steps.append(30 + past_skip)
            if not trial.on_step(intervals, past_skip, 0, 100.0 + past_skip * 0.125, steps=steps):
                break
        assert trial.timed_ms is not None
        assert trial.timed_steps == list(range(first, first + len(trial.timed_ms)))
    trial = _trial()
    _run(trial, [125.0] * 100)
    assert trial.timed_ms and trial.timed_steps == []


def test_a_trial_that_never_settles_stops_at_its_step_bound_and_says_why() -> None:
    trial = TrialTiming(max_steps=10, max_s=1e9)
    assert _run(trial, [2.0 * 1.5**i for i in range(40)]) == 10
    assert not trial.has_settled and trial.timed_ms is None
    assert trial.note == (
        "the steps had not settled 10 steps past --skip (their last 6 against the 6 before them, "
        "or the fastest 6, differ by more than 1.25x): the timing mixes a transient"
    )


def test_the_time_bound_counts_from_the_first_question() -> None:
    """0.5 s from the first call (not from the clock's zero): the 5th step of 125 ms reaches it
    (4 x 125 ms after the first)."""
    trial = TrialTiming(max_steps=1000, max_s=0.5)
    growing = [
        125.0,
        250.0,
        500.0,
        1000.0,
        2000.0,
        4000.0,
    ]  # never settled; the bound is in seconds
    intervals: list[float] = []
    answers = []
    for i, ms in enumerate(growing):
        intervals.append(ms)
        answers.append(trial.on_step(intervals, i, 0, 5000.0 + 0.125 * i))
        if not answers[-1]:
            break
    assert answers == [True, True, True, True, False]
    assert "had not settled 4 steps past --skip" in trial.note


def test_a_new_series_ends_the_timing_where_it_was() -> None:
    trial = _trial()
    first = [50.0] * 12
    assert trial.on_step(first, 1, 0, 10.0)  # settled: the 12 judged
    first += [40.0] * 3
    assert trial.on_step(first, 2, 0, 10.2)
    assert not trial.on_step([40.0], 3, 0, 10.3)  # another series: a new step source
    assert trial.timed_ms == [50.0] * 12 + [40.0] * 3


def test_behind_a_loader_a_round_of_its_queue_is_judged_on_each_side() -> None:
    """A queue of 8 batches: two runs of 8 (their means) are judged, not two of 6."""
    trial = _trial()
    burst = [2.0] * 7 + [58.0]  # 7 served at once, one wait: 9 ms a step on average
    series = burst * 2
    assert trial.on_step(series, 1, 8, 1.0)
    assert trial.has_settled
    series += [9.0] * 3
    assert trial.on_step(series, 2, 8, 1.1)
    assert trial.timed_ms == burst * 2 + [9.0] * 3  # 3 timed, fewer than the 16 judged


def test_abandoned_timing_keeps_no_step() -> None:
    trial = _trial()
    assert trial.on_step([10.0] * 12 + [10.0] * 3, 1, 0, 1.0)
    trial.abandon()
    assert trial.timed_ms is None and trial.has_settled
