"""A ``--try-fixes`` trial's steps past its ``skip``: wait for them to settle, then time them.

A trial's verdict compares the mean of its steps with the baseline's (tryfix/trial.py), so the steps
it times must be the program's steady state, and enough of them. Past ``skip`` the trial runs on
until its latest steps stop moving (capture/timing.py ``settled``), within a bound in steps and one
in seconds (the session passes timing.py's ``TRIAL_SETTLE_MAX_STEPS``, ``TRIAL_SETTLE_MAX_S``); then
it times the steps after those it judged settled until ``timed_enough``. The session asks at each
step boundary, with the step times the GPU has finished (capture/marks.py ``FinishedIntervals``),
and reads ``timed_ms`` at the end; a trial that records a window does all this before the window
opens.
"""

from __future__ import annotations

from gpudoctor.capture.timing import (
    TRIAL_SETTLE_HALF,
    TRIAL_SETTLE_RATIO,
    TRIAL_TIMED_STEPS,
    next_timed_check,
    settled,
    timed_enough,
)


class TrialTiming:
    """Settles, then times, one trial's steps: ``on_step`` says whether to run on, ``timed_ms`` what
    was timed, ``note`` why it stopped before the steps settled."""

    def __init__(self, max_steps: int, max_s: float) -> None:
        self.max_steps = max_steps  # steps past skip run waiting for the steps to settle (TRIAL_SETTLE_MAX_STEPS)
        self.max_s = max_s  # nor more seconds than this (TRIAL_SETTLE_MAX_S)
        self.note = ""  # why the last on_step stopped before the steps settled ("" when it did not)
        self._settle_started: float | None = None  # the first question past skip
        self._judged_ms: list[float] = []  # the steps judged settled, just before the timed ones
        self._timed_ms: list[float] | None = None  # the steps timed after them (None: not settled)
        self._timed_from: int | None = None  # where those start in the series
        self._timed_started = 0.0
        self._check_at = 0  # timed steps at which timing.timed_enough checks the mean's error next
        self._series: list[float] | None = None  # the series the timed steps come from
        self._series_steps: list[int] = []  # each of its intervals' step (grows with it)

    @property
    def has_settled(self) -> bool:
        """Have the steps settled (and is the trial timing them, or done timing them)?"""
        return self._timed_from is not None

    @property
    def timed_ms(self) -> list[float] | None:
        """The steps the trial is timed by: those after the ones judged settled, and the judged ones
        too when the program ended before as many were timed (``_with_judged``). None when no step
        was judged settled (or the timing was abandoned): the session times the later half of the
        steps instead."""
        timed = self._timed_ms
        return self._judged_ms + timed if self._with_judged() else timed

    @property
    def timed_steps(self) -> list[int]:
        """The step of each of ``timed_ms``; empty where the steps were not given or do not cover
        them."""
        timed = self._timed_ms
        if timed is None or self._timed_from is None:
            return []
        first = self._timed_from - (len(self._judged_ms) if self._with_judged() else 0)
        n = len(timed) + (len(self._judged_ms) if self._with_judged() else 0)
        steps = self._series_steps[first:first + n]
        return steps if len(steps) == n and first >= 0 else []

    def _with_judged(self) -> bool:
        """Were fewer steps timed than judged settled (the judged ones then count too)?"""
        return self._timed_ms is not None and len(self._timed_ms) < len(self._judged_ms)

    def on_step(self, intervals: list[float], past_skip: int, loader_depth: int,
                now: float, steps: list[int] | None = None) -> bool:
        """Run on (True) or stop (False), at a step boundary ``past_skip`` steps past the trial's
        skip, ``now`` on the session's clock. ``intervals``: the finished steps' times (ms, oldest
        first) of the current series, one list growing in place; another list is a new series
        (a new step source), which ends the timing there. ``steps``: each interval's step, a list
        growing beside it (capture/marks.py ``FinishedIntervals.steps``)."""
        self.note = ""
        # the first call may come later than skip (behind a loader's rounds)
        if self._settle_started is None:
            self._settle_started = now
        if self._timed_from is not None:
            return self._timing(intervals, now)
        if settled(intervals, loader_depth):
            # the steps timed are the ones after those judged settled: not earlier ones (a compile
            # trial's first steps after its --skip still compile), nor the judged ones themselves,
            # whose median passed the test with a transient's last steps among them (a trial's mean
            # keeps every step: tryfix/trial.py)
            judged = 2 * max(TRIAL_SETTLE_HALF, loader_depth)
            self._judged_ms = intervals[len(intervals) - judged:]
            self._timed_from = len(intervals)
            self._timed_started, self._series = now, intervals
            self._series_steps = steps if steps is not None else []
            return self._timing(intervals, now)
        if past_skip >= self.max_steps or now - self._settle_started >= self.max_s:
            half = max(TRIAL_SETTLE_HALF, loader_depth)
            self.note = (f"the steps had not settled {past_skip} steps past --skip (their "
                         f"last {half} against the {half} before them, or the fastest {half}, "
                         f"differ by more than {TRIAL_SETTLE_RATIO:g}x): the timing mixes a "
                         "transient")
            return False
        return True

    def abandon(self) -> None:
        """The steps could not be read: keep none of the timed ones."""
        self._timed_ms = None

    def _timing(self, intervals: list[float], now: float) -> bool:
        """Once settled, time on until timing.timed_enough (30 steps at least, more while their mean
        is uncertain, within a time bound); the steps timed so far are kept at every step, so a
        program that ends sooner is timed over those."""
        assert self._timed_from is not None
        if intervals is not self._series:
            return False
        if self._timed_ms is None:
            self._timed_ms, self._check_at = [], TRIAL_TIMED_STEPS
        timed = self._timed_ms
        # the steps read since the last call
        timed.extend(intervals[self._timed_from + len(timed):])
        check = len(timed) >= self._check_at
        if check:
            self._check_at = next_timed_check(len(timed))
        return not timed_enough(timed, now - self._timed_started, check)
