"""The unprofiled step (capture/timing.py): which steps it comes from, the estimator, its
uncertainty and when it is not trusted; and, in a real loop, that only the step hook is left once
the window closes (capture/hooks.py keep_only).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import msgspec
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from gpudoctor.capture.session import CaptureConfig, CaptureSession
from gpudoctor.capture.timing import (
    LOADER_REST_MEDIAN,
    TRIAL_SETTLE_HALF,
    TRIAL_TIMED_STEPS,
    choose,
    fetch_in_step,
    settled,
    summarize,
    unprofiled_step,
)
from gpudoctor.core.clock import ManualClock
from gpudoctor.report.model import Report
from gpudoctor.report.sections import (
    BreakdownSection,
    CeilingsSection,
    GpuSection,
    MemorySection,
    RooflineSection,
    StepsSection,
    UnprofiledSection,
)

# -- the estimator, on given samples ---------------------------------------------------------------


def test_the_median_of_a_few_steps_ignores_one_warm_up_step() -> None:
    # lazy_import_sdpa's three steps before the window on an H200 (gallery call 7): the mean, 9.62,
    # was 7% over its true 9.02 ms; the median is the steady step
    ms, spread, estimator = summarize([10.8768, 8.9948, 8.9987])
    assert estimator == "median" and ms == 8.9987
    # MAD 0.0039 -> 1.2533 x 1.4826 x 0.0039 / sqrt(3)
    assert spread == pytest.approx(1.2533 * 1.4826 * 0.0039 / math.sqrt(3), abs=1e-9)


def test_fewer_than_three_steps_give_their_mean_and_half_their_range() -> None:
    assert summarize([2.0, 3.0]) == (2.5, 0.5, "mean")
    assert summarize([2.0]) == (2.0, 0.0, "mean")


def test_behind_a_dataloader_the_mean_over_whole_rounds_of_its_queue() -> None:
    # a queue of 4 batches: three served at once, then a wait; 10 samples hold 2 whole rounds,
    # the latest 8 (the first 2 are dropped, not a whole round)
    samples = [9.0, 9.0, 1.0, 1.0, 1.0, 13.0, 1.0, 1.0, 1.0, 17.0]
    ms, spread, estimator = summarize(samples, loader_depth=4)
    assert estimator == "loader-mean" and ms == 4.5  # (16 + 20) / 8
    assert spread == pytest.approx(0.5)  # round means 4 and 5: stdev 0.7071, over sqrt(2) rounds


def test_behind_a_dataloader_with_its_fetch_timed_the_rest_of_the_step_is_a_median() -> None:
    # the loader's waits are in the fetch (every 4th step waits 12 ms) and count at their mean; a
    # pause that is not the loader's (a 40 ms step whose fetch was 0.1 ms) moves only a median
    samples = [9.0, 9.0, 1.0, 1.0, 1.0, 13.0, 1.0, 41.0, 1.0, 13.0]
    fetch = [8.0, 8.0, 0.1, 0.1, 0.1, 12.1, 0.1, 0.1, 0.1, 12.1]
    ms, spread, estimator = summarize(samples, loader_depth=4, fetch=fetch)
    assert estimator == LOADER_REST_MEDIAN
    # whole rounds: the latest 8; the rest 0.9 x 7 and 40.9, median 0.9; fetch mean 24.8 / 8
    assert ms == pytest.approx(0.9 + 3.1)
    assert spread == pytest.approx(0.0)  # the rest has no spread but its pause; rounds' fetch equal
    # without the fetch, the mean takes the pause in: 72 / 8
    assert summarize(samples, loader_depth=4)[0] == pytest.approx(9.0)
    # the fetch goes with its set: only the one chosen is read
    u = unprofiled_step([5.0] * 3, samples, loader_depth=4, fetch_before=None, fetch_after=fetch)
    assert u is not None and u.estimator == LOADER_REST_MEDIAN and u.ms == pytest.approx(4.0)
    u = unprofiled_step([5.0] * 3, samples, loader_depth=4, fetch_before=[0.1] * 3)
    assert u is not None and u.estimator == "loader-mean"
    # the loader's share of that step: its fetch's mean
    assert fetch_in_step(ms, samples, fetch, loader_depth=4) == pytest.approx(3.1)


def test_behind_a_dataloader_a_set_needs_a_whole_round_of_the_queue() -> None:
    # three steps served at once before the window: never the estimate against two whole rounds
    before, after = [3.0, 3.1, 2.9], [3.0, 3.0, 3.0, 31.0, 3.0, 3.0, 3.0, 29.0]
    assert choose(before, after, loader_depth=4) == (after, "after")
    u = unprofiled_step(before, after, loader_depth=4)
    assert u is not None and (u.ms, u.estimator, u.trusted) == (9.75, "loader-mean", True)  # 78 / 8
    # neither has a round: pooled, their mean, not trusted
    u = unprofiled_step([2.0], [2.0, 14.0], loader_depth=8)
    assert u is not None and (u.ms, u.estimator, u.trusted) == (6.0, "mean", False)
    assert u.why.startswith(
        "only 3 steps could be timed without the profiler, fewer than one round"
    )


def test_both_sets_are_pooled_when_each_has_enough_steps() -> None:
    # a DCGAN on an H100 (gallery call 9): 3 fast steps before the window, 8 after it, 9.25 ms
    # plainly (median of its printed ms): the lower set read 6.53 (0.71), the pooled median 7.88
    before, after = [7.16, 6.53, 6.52], [8.18, 7.91, 7.84, 7.88, 7.84, 7.8, 7.92, 8.57]
    assert choose(before, after) == (before + after, "both")
    u = unprofiled_step(before, after)
    assert u is not None and (u.ms, u.samples_from, u.estimator) == (7.84, "both", "median")
    # neither has 3: pooled too
    assert choose([1.0], [2.0, 3.0]) == ([1.0, 2.0, 3.0], "both")
    # only one has enough: that one
    assert choose([1.0, 2.0, 3.0], [5.0]) == ([1.0, 2.0, 3.0], "before")
    assert choose([5.0], [1.0, 2.0, 3.0]) == ([1.0, 2.0, 3.0], "after")


def test_steps_timed_only_among_the_first_ten_of_a_program_that_ended_are_not_trusted() -> None:
    # early_exit on an H200 (gallery call 7): steps 3-5 before a window at --skip 5, sys.exit inside it
    u = unprofiled_step([2.6321, 3.4782, 1.8932], [], last_step_before=5)
    assert u is not None and (u.ms, u.steps, u.samples_from, u.trusted) == (
        2.6321,
        3,
        "before",
        False,
    )
    assert u.why.startswith("the steps timed without the profiler are steps 3-5 of the program")
    # the same steps with steps after the window to compare: trusted
    assert unprofiled_step([2.6321, 3.4782, 1.8932], [1.8, 1.7, 1.9], last_step_before=5).trusted
    # or far enough into the program
    assert unprofiled_step([1.8, 1.7, 1.9], [], last_step_before=12).trusted


def test_two_steps_are_not_trusted_and_none_give_no_estimate() -> None:
    u = unprofiled_step([2.0, 3.0], [])
    assert u is not None and not u.trusted and u.why.startswith("only 2 steps could be timed")
    assert unprofiled_step([], []) is None


def test_the_report_shows_the_uncertainty_beside_the_step() -> None:
    u = unprofiled_step([4.1, 4.0, 4.06, 4.3, 3.9], [])
    # MAD 0.06 -> 1.2533 x 1.4826 x 0.06 / sqrt(5) = 0.0499
    assert u is not None and u.text() == "4.060 ms ± 0.050 (5 steps)"
    report = Report(
        schema_version="1",
        tool_version="0",
        source="t",
        gpu=GpuSection("", 0, 0, ""),
        ceilings=CeilingsSection("", "", {}, 0.0, 0.0, 0.0),
        steps=StepsSection("profiler-step", 0, 0.0, ()),
        step_ms=5.0,
        gpu_busy_pct=0.0,
        mfu=0.0,
        breakdown=BreakdownSection(0.0, 0.0, {}, 0.0, 0.0, 0.0, 0.0),
        idle={},
        roofline=RooflineSection(0.0, 0.0),
        memory=MemorySection(applicable=False, reason=""),
        findings=(),
        unprofiled_step_ms=u.ms,
        unprofiled=UnprofiledSection.from_dict(u.to_dict()),
    )
    assert report.unprofiled_text() == "4.060 ms ± 0.050 (5 steps)"
    thin = unprofiled_step([2.0, 3.0], [])
    assert thin is not None
    report = msgspec.structs.replace(
        report,
        unprofiled_step_ms=thin.ms,
        unprofiled=UnprofiledSection.from_dict(thin.to_dict()),
    )
    assert report.unprofiled_text() == "2.500 ms ± 0.500 (2 steps; uncertain)"
    assert report.to_dict()["unprofiled"]["trusted"] is False


# -- a real loop: what stays attached after the window ---------------------------------------------


@pytest.fixture
def no_compiled_code_on_the_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Earlier tests in this process may have run torch.compile while the global module hooks were
    installed; then the hooks rightly stay (removing them would force a recompilation). These
    tests are about what is removed when nothing guards on them."""
    from gpudoctor.capture import hooks as hooks_mod

    monkeypatch.setattr(hooks_mod.Hooks, "_compiled_with_hooks", staticmethod(lambda: False))


@pytest.mark.usefixtures("no_compiled_code_on_the_hooks")
def test_only_the_optimizer_hook_is_left_while_the_steps_after_the_window_are_timed(
    tmp_path: Path,
) -> None:
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    s = CaptureSession(
        CaptureConfig(steps=2, skip=3, calibration_steps=3, nvml_interval_s=0), tmp_path
    )
    backward, next_batch = (
        torch.autograd.backward,
        torch.utils.data.dataloader._BaseDataLoaderIter.__next__,
    )
    s.start()
    attached: list[tuple[str, list[str]]] = []
    while not s.done:
        model(torch.randn(8, 16)).sum().backward()
        opt.step()
        if s._hooks is not None:
            attached.append((s.phase.value, s._hooks.installed()))
    s.close()
    phases = dict(attached)  # the last list seen in each phase
    # ("generate" too, when an earlier test imported transformers: its generate() is wrapped)
    assert [n for n in phases["before"] if n != "generate"] == [
        "optimizer-hook",
        "replay",
        "backward",
        "__next__",
        "prepare_trace",
        "stop_trace",
        "export_chrome_trace",
    ]
    assert phases["after"] == ["optimizer-hook"]
    # from the step that closed the window to the last one timed (the step that settles, then 3
    # timed: 4 boundaries, the last of which ends the session): the optimizer hook alone
    assert [names for phase, names in attached if phase == "after"] == [["optimizer-hook"]] * 5
    # the wrappers are the originals again once the window is over
    assert torch.autograd.backward is backward
    assert torch.utils.data.dataloader._BaseDataLoaderIter.__next__ is next_batch
    # 3 calibration steps (4 boundaries) after the step that settles
    assert len(s.result.unprofiled_after_ms) == 3 and s.result.unprofiled is not None


@pytest.mark.usefixtures("no_compiled_code_on_the_hooks")
def test_a_forward_stepped_loop_keeps_one_hook_on_its_model_after_the_window(
    tmp_path: Path,
) -> None:
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
    s = CaptureSession(
        CaptureConfig(steps=2, skip=3, calibration_steps=3, nvml_interval_s=0), tmp_path
    )
    s.start()
    after: list[list[str]] = []
    with torch.no_grad():
        while not s.done:
            model(torch.randn(8, 16))
            if s._hooks is not None and s.phase.value == "after":
                after.append(s._hooks.installed())
    s.close()
    assert s.result.step_source == "module-forward"
    assert after and all(names == ["root-hook"] for names in after)


def test_a_program_that_never_starts_cuda_gets_no_cuda_from_the_capture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a GPU machine (is_available) a CPU-only program's steps are timed on the host clock and
    gpudoctor creates no CUDA event, context or profiler activity for it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert not torch.cuda.is_initialized()

    def no_event(*args: object, **kwargs: object) -> None:
        raise AssertionError("a CUDA event was created for a program that never started CUDA")

    monkeypatch.setattr(torch.cuda, "Event", no_event)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    s = CaptureSession(
        CaptureConfig(steps=2, skip=5, calibration_steps=3, nvml_interval_s=0.2), tmp_path
    )
    s.start()
    while not s.done:
        model(torch.randn(8, 16)).sum().backward()
        opt.step()
    s.close()
    r = s.result
    assert r.device == "cpu" and r.trace_path is not None and not torch.cuda.is_initialized()
    assert (len(r.unprofiled_before_ms), len(r.unprofiled_after_ms)) == (3, 3) and r.nvml == {}


def _sleepy_loop(
    s: CaptureSession, clock: ManualClock, stop_at: int, warm: int, warm_s: float, steady_s: float
) -> int:
    """Optimizer steps that take ``warm_s`` for the first ``warm`` iterations, then ``steady_s``, on
    the session's manual clock: a warm-up whose length the test knows, on any machine's load."""
    param = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=0.0)
    it = 0
    while not s.done and it < stop_at:
        it += 1
        clock.advance(warm_s if it <= warm else steady_s)
        param.grad = torch.zeros(1)
        opt.step()
    s.close()
    return it


def test_a_warm_up_longer_than_the_skip_is_not_taken_for_the_step(tmp_path: Path) -> None:
    """Steps 1-7 take 30 ms, the rest 10 ms; the window opens after --skip 5: the steps before it
    are warm-up, the 8 after it are the steady step, three times faster: those alone (the mean of
    the steps before the window, as gpudoctor reported it before, was 30 ms)."""
    clock = ManualClock()
    s = CaptureSession(
        CaptureConfig(steps=2, skip=5, calibration_steps=8, nvml_interval_s=0),
        tmp_path,
        clock=clock,
    )
    s.start()
    _sleepy_loop(s, clock, stop_at=100, warm=7, warm_s=0.030, steady_s=0.010)
    u = s.result.unprofiled
    assert u is not None and (u.samples_from, u.steps, u.estimator, u.trusted) == (
        "after",
        8,
        "median",
        True,
    )
    assert s.result.unprofiled_before_ms == pytest.approx([30.0] * 3) and u.ms == pytest.approx(
        10.0
    )


def test_a_program_that_ends_inside_the_window_gets_an_uncertain_step(tmp_path: Path) -> None:
    clock = ManualClock()
    s = CaptureSession(CaptureConfig(steps=5, skip=5, nvml_interval_s=0), tmp_path, clock=clock)
    s.start()
    assert _sleepy_loop(s, clock, stop_at=9, warm=0, warm_s=0.0, steady_s=0.002) == 9
    r = s.result
    assert r.unprofiled is not None and (r.unprofiled.steps, r.unprofiled.trusted) == (3, False)
    assert r.unprofiled_after_ms == [] and r.notes == [
        (
            "the unprofiled step is uncertain: the steps timed without the profiler are steps 3-5 of the program, likely "
            "still warming up, and none could be timed after the window (the program ended); the observer-effect "
            "calibration is weak (raise --skip or --calibrate, or let the program run longer)"
        )
    ]


def test_a_run_directory_read_again_keeps_the_uncertainty() -> None:
    from gpudoctor.capture.bundle import facts_of

    good = {
        "ms": 4.06,
        "spread_ms": 0.05,
        "steps": 5,
        "estimator": "median",
        "samples_from": "after",
        "trusted": True,
        "why": "",
    }
    assert (
        facts_of({"capture": {"unprofiled_step_ms": 4.06, "unprofiled": good}}).unprofiled == good
    )
    for bad in (
        {**good, "steps": -1},
        {**good, "trusted": "yes"},
        {**good, "spread_ms": None},
        [4.06],
        None,
    ):
        assert (
            facts_of({"capture": {"unprofiled_step_ms": 4.06, "unprofiled": bad}}).unprofiled
            is None
        )


# -- a trial waits for its steps to settle ----------------------------------------------------------


def test_settled_compares_the_last_steps_with_the_ones_before_them() -> None:
    # the compile trial with a warm Inductor cache (H100, 2026-11-26): half a second a step, then 15 ms
    warm_cache = [523.0, 9.3, 728.6, 533.9, 472.7, 522.3, 520.3, 520.7, 204.1, 281.1, 90.1, 15.5]
    assert not settled(warm_cache)
    assert settled(
        warm_cache + [13.0, 14.1, 12.9, 13.5, 13.2, 30.0, 13.1, 12.8, 13.4, 13.0, 13.3, 13.6]
    )
    assert not settled([13.0] * (2 * TRIAL_SETTLE_HALF - 1))  # too few to tell
    # 6 steps at 20 ms against 6 at 16: 1.25x, the edge; 21 ms: not settled
    assert settled([20.0] * 6 + [16.0] * 6) and not settled([21.0] * 6 + [16.0] * 6)
    # behind a loader of 8 batches a round: halves of 8 steps and their means. A burst of 7 served
    # steps and one wait per round is steady; by medians it would look steady even with no wait
    burst = [2.0] * 7 + [60.0]
    assert settled(burst * 2, loader_depth=8)
    assert not settled([2.0] * 8 + burst, loader_depth=8) and settled([2.0] * 8 + burst)


def _trial_loop(
    tmp_path: Path, step_s, skip: int = 16, steps: int = 200, window: bool = False
) -> tuple:
    """A trial's session (no window, or with ``window`` one recorded after its timed steps) over a
    loop whose step ``i`` takes ``step_s(i)`` seconds on the session's manual clock."""
    clock = ManualClock()
    s = CaptureSession(
        CaptureConfig(
            steps=1, skip=skip, calibration_steps=0, nvml_interval_s=0, profile=window, trial=True
        ),
        tmp_path,
        clock=clock,
    )
    s.start()
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ran = 0
    for i in range(steps):
        clock.advance(step_s(i))
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        ran += 1
        if s.done:
            break
    s.close()
    return s.result, ran


def test_a_trial_runs_on_until_its_steps_settle_and_times_the_steps_after_them(
    tmp_path: Path,
) -> None:
    """Steps 10-25 take 30 ms (a transient across --skip 16), the others 3 ms: the trial runs past
    the transient and times the steps after the 12 it judged settled. (A transient that has stopped
    moving by --skip, a slow plateau, cannot be told from a steady step: the compile trials'
    warm-up steps are there for that.)"""
    result, ran = _trial_loop(tmp_path, lambda i: 0.030 if 10 <= i < 26 else 0.003)
    samples = result.unprofiled_before_ms
    # the 12 judged are steps 24-35: their first 6 hold the transient's last two (30, 30, 3, 3, 3, 3;
    # median 3), as settled as the 6 after them, since the test compares medians. The steps after
    # them are timed until the program ends (164 steps of 3 ms: 0.49 s, short of TRIAL_TIMED_MIN_S)
    assert (ran, ran - len(samples)) == (200, 36)
    assert samples == pytest.approx([3.0] * 164)
    assert not result.notes
    # each sample's step, the boundary that closed it: the program's steps 37-200
    assert result.unprofiled_step_index == list(range(37, 201))


def test_a_trial_that_records_a_window_times_its_settled_steps_first(tmp_path: Path) -> None:
    """With a window to record (run --try-fixes' default), the trial still settles and times the
    30 steps after those it judged before the window opens: enough for a verdict."""
    result, _ = _trial_loop(tmp_path, lambda i: 0.110, window=True)
    assert len(result.unprofiled_before_ms) == TRIAL_TIMED_STEPS
    # the steps after the 16 judged, up to the window: how a control without a window is matched
    assert result.unprofiled_step_index == list(range(17, 17 + TRIAL_TIMED_STEPS))
    assert (
        result.window_opened_at_step == 16 + TRIAL_TIMED_STEPS
    )  # at --skip it had 8 steps: no verdict


def test_a_steady_trial_times_thirty_steps_after_those_it_judged(tmp_path: Path) -> None:
    """Settled at its --skip (16 steps: two runs of 6 judged), the trial times the next 30 when
    they take TRIAL_TIMED_MIN_S or more (30 x 110 ms) and their mean is known to 1%."""
    result, ran = _trial_loop(tmp_path, lambda i: 0.110)
    assert (ran, len(result.unprofiled_before_ms)) == (16 + TRIAL_TIMED_STEPS, TRIAL_TIMED_STEPS)
    assert result.unprofiled_before_ms == pytest.approx([110.0] * TRIAL_TIMED_STEPS)


def test_a_fast_steady_trial_times_on_for_the_least_time(tmp_path: Path) -> None:
    """30 steps of 3 ms are one spell of the host's speed (0.09 s): the trial times on, here until
    the program ends at its 200th step (184 steps, 0.55 s, still short of TRIAL_TIMED_MIN_S)."""
    result, ran = _trial_loop(tmp_path, lambda i: 0.003)
    assert (ran, len(result.unprofiled_before_ms)) == (200, 200 - 16)


def test_a_slow_settled_trial_times_for_its_time_bound_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpudoctor.capture import timing as timing_mod

    monkeypatch.setattr(
        timing_mod, "TRIAL_TIMED_MAX_S", 0.045
    )  # reached by the 5th 10 ms step past the judged 12
    # (the bounds wait for the steps a verdict needs: here none, to reach the bound's own case)
    monkeypatch.setattr(timing_mod, "TRIAL_JUDGED_MIN_STEPS", 0)
    monkeypatch.setattr(timing_mod, "TRIAL_JUDGED_MIN_S", 0.0)
    result, ran = _trial_loop(tmp_path, lambda i: 0.010)
    # fewer timed than judged: the judged 12 are kept with the 5 timed (as a trial that ends early)
    assert (ran, len(result.unprofiled_before_ms)) == (16 + 5, 2 * TRIAL_SETTLE_HALF + 5)


def test_timed_enough_stops_a_steady_mean_at_thirty_steps_and_a_stalling_one_later() -> None:
    from gpudoctor.capture.timing import (
        TRIAL_TIMED_MAX_S,
        TRIAL_TIMED_MAX_STEPS,
        TRIAL_TIMED_MIN_S,
        next_timed_check,
        timed_enough,
    )

    steady = [10.0, 10.2, 9.9, 10.1] * 10  # spread 1%: its mean is known to 0.2%
    assert not timed_enough(steady[: TRIAL_TIMED_STEPS - 1], TRIAL_TIMED_MIN_S)
    assert timed_enough(steady[:TRIAL_TIMED_STEPS], TRIAL_TIMED_MIN_S)
    assert not timed_enough(
        steady[:TRIAL_TIMED_STEPS], TRIAL_TIMED_MIN_S, check_error=False
    )  # only the bounds
    # 30 steady steps over less than the least time: one spell of the host's speed, time on
    assert not timed_enough(steady[:TRIAL_TIMED_STEPS], TRIAL_TIMED_MIN_S - 0.5)
    assert not timed_enough(steady, 0.4)
    # ... unless the step bound comes first (steps of a fraction of a millisecond)
    assert timed_enough([0.5] * TRIAL_TIMED_MAX_STEPS, 1.0, check_error=False)
    # the step bound waits for the second a verdict needs (tryfix/trial.py verdict)
    assert not timed_enough([0.5] * TRIAL_TIMED_MAX_STEPS, 0.3, check_error=False)
    # and the time bound for the steps: 8 steps of 0.7 s time on to 10
    assert not timed_enough([700.0] * 8, TRIAL_TIMED_MAX_S + 0.6, check_error=False)
    assert timed_enough([700.0] * 10, TRIAL_TIMED_MAX_S + 2.0, check_error=False)
    # the accelerate loop's control on the H100 (2026-11-26 11:46 UTC): 25-30 ms steps with stalls of
    # 47-83 ms in 7 of 30: the standard error of the mean is 8% of it
    control = [
        26.7,
        29.0,
        32.0,
        77.7,
        23.6,
        27.1,
        25.5,
        29.7,
        27.2,
        26.2,
        38.0,
        32.8,
        56.2,
        28.3,
        25.7,
        28.8,
        27.1,
        30.4,
        26.1,
        59.4,
        23.5,
        25.7,
        28.7,
        47.3,
        33.9,
        56.8,
        34.7,
        82.9,
        38.9,
        54.2,
    ]
    assert not timed_enough(control, TRIAL_TIMED_MIN_S)
    assert timed_enough(control, TRIAL_TIMED_MAX_S, check_error=False)  # the time bound ends it
    assert timed_enough([30.0] * TRIAL_TIMED_MAX_STEPS, 1.0, check_error=False)
    # one stall of 8x among 30 steady steps moves the mean by 23%: time on
    assert not timed_enough(steady[: TRIAL_TIMED_STEPS - 1] + [80.0], TRIAL_TIMED_MIN_S)
    # asked again at 30, 38, 48, ... and at the step bound
    assert [next_timed_check(n) for n in (30, 38, 48)] == [38, 48, 60]
    assert next_timed_check(TRIAL_TIMED_MAX_STEPS - 10) == TRIAL_TIMED_MAX_STEPS


def test_a_trial_whose_steps_stall_times_on_to_its_time_bound(tmp_path: Path) -> None:
    """One step in five stalls 5x (100 ms among 20 ms steps): past the least time (3 s, 84 steps)
    the mean is still uncertain to about 5%, so the trial times on until TRIAL_TIMED_MAX_S; a steady
    step of the same mean (36 ms) stops at the first check past the least time."""
    from gpudoctor.capture.timing import TRIAL_TIMED_MAX_S

    stalling, ran = _trial_loop(
        tmp_path / "stall", lambda i: 0.100 if i % 5 == 0 else 0.020, steps=400
    )
    # the time bound: 28 rounds of 100 + 4 x 20 ms (steps 16-155) are the first to reach 5 s
    assert (ran, len(stalling.unprofiled_before_ms)) == (156, 140) and TRIAL_TIMED_MAX_S == 5.0
    assert sum(stalling.unprofiled_before_ms) == pytest.approx(5040.0)
    steady, ran = _trial_loop(tmp_path / "steady", lambda i: 0.036, steps=400)
    # asked at 30, 38, 48, 60, 75, 94 timed steps: 94 x 36 ms is the first past 3 s
    assert (ran, len(steady.unprofiled_before_ms)) == (16 + 94, 94)


def test_a_trial_that_ends_while_timing_keeps_the_steps_it_judged_and_timed(tmp_path: Path) -> None:
    """4 steps timed after the 12 judged: fewer than those, so the judged ones are timed too."""
    result, ran = _trial_loop(tmp_path, lambda i: 0.003, steps=20)
    assert ran == 20 and len(result.unprofiled_before_ms) == 2 * TRIAL_SETTLE_HALF + 4


def test_a_trial_that_never_settles_stops_at_its_bound_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpudoctor.capture import session as session_mod

    monkeypatch.setattr(session_mod, "TRIAL_SETTLE_MAX_STEPS", 10)
    result, ran = _trial_loop(tmp_path, lambda i: 0.001 * 1.1**i)  # 1.77x from one half to the next
    assert ran == 26
    assert any("had not settled 10 steps past --skip" in n for n in result.notes)
    assert len(result.unprofiled_before_ms) == 25 - 25 // 2  # the usual later half


def test_a_trial_first_asked_past_its_skip_still_waits_for_its_steps(tmp_path: Path) -> None:
    """Behind a loader the trial's first question about settling comes rounds after --skip; the
    time bound counts from that question, not from the clock's zero."""
    s = CaptureSession(
        CaptureConfig(steps=1, skip=16, calibration_steps=0, nvml_interval_s=0, profile=False),
        tmp_path,
    )
    stamps, t = [], 100.0
    for i in range(27):  # a step of 30 ms, then of 3 ms from step 20 on: still moving at step 26
        stamps.append(t)
        t += 0.030 if i < 20 else 0.003
    s._before, s._count = stamps, 26
    assert s._trial_unsettled(16) is True and not s.result.notes


class _Event:
    """A CUDA event's stand-in: a time, and whether the GPU has reached it."""

    def __init__(self, t_s: float, done: bool) -> None:
        self.t_s, self.done = t_s, done

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, other: _Event) -> float:
        return (other.t_s - self.t_s) * 1e3


def test_a_trial_times_the_steps_it_judged_settled_not_the_ones_still_queued(
    tmp_path: Path,
) -> None:
    """The host runs ahead of the GPU: when the trial's finished steps have settled, the steps the GPU
    has not reached yet were not judged, and are not timed (two 72 ms steps there, H100 2026-11-26)."""
    s = CaptureSession(
        CaptureConfig(steps=1, skip=16, calibration_steps=0, nvml_interval_s=0, profile=False),
        tmp_path,
    )
    steps = (
        [30.0] * 10 + [13.0] * 18 + [72.0, 72.0]
    )  # a transient across --skip 16, then queued steps
    t, marks = 0.0, [_Event(0.0, True)]
    for i, ms in enumerate(steps):
        t += ms / 1e3
        marks.append(_Event(t, i < 28))
    s._before, s._count = marks[:17], 16
    assert s._trial_unsettled(16) is True  # the last 6 steps against the 6 before: moving
    s._before.extend(marks[17:])
    s._count = 30
    assert s._trial_unsettled(16) is True  # settled: timing on from the 12 judged, which are kept
    s._compute_unprofiled_times()
    assert s.result.unprofiled_before_ms == pytest.approx([13.0] * 12)


def test_two_sets_far_apart_give_the_faster_one() -> None:
    """generate() on an H100 with CUPTI detached (gallery call 12): before the window 214.6 ms a
    call, after it 290-365, plainly 212.65; the pooled median read 291.86."""
    before = [214.565, 210.6968, 218.146]
    after = [364.9655, 306.2746, 290.0942, 301.4654, 291.8611, 294.0715]
    assert choose(before, after) == (before, "before")
    u = unprofiled_step(before, after)
    assert u is not None and (u.ms, u.samples_from, u.trusted) == (214.565, "before", True)
    # the other way round (a slow warm-up before the window): the steps after it
    assert choose([30.0, 31.0, 29.0], [20.0, 20.5, 19.5]) == ([20.0, 20.5, 19.5], "after")
    # 1.25x apart or closer: pooled; behind a loader the sets are bursty, never compared
    assert choose([10.0] * 3, [12.5] * 3)[1] == "both"
    assert choose([1.0] * 4, [5.0] * 4, loader_depth=4)[1] == "both"


def test_a_cut_between_queued_steps_does_not_read_an_unfinished_one(tmp_path: Path) -> None:
    """A compiling step's cut (None) among steps the GPU has not reached: only finished marks are
    read (an unfinished event's elapsed_time raises)."""

    class Strict(_Event):
        def elapsed_time(self, other: _Event) -> float:
            assert self.done and other.done, "read an unfinished event"
            return super().elapsed_time(other)

    s = CaptureSession(
        CaptureConfig(steps=1, skip=4, calibration_steps=0, nvml_interval_s=0, profile=False),
        tmp_path,
    )
    marks = [Strict(i * 0.01, i < 6) for i in range(8)]
    marks[6:6] = [
        None
    ]  # cut before the unfinished ones: finished 0-5, None, unfinished, unfinished
    s._before, s._count = marks, 6
    assert s._finished_intervals(s._before) == pytest.approx([10.0] * 5)
    for m in marks[7:]:
        m.done = True
    assert s._finished_intervals(s._before) == pytest.approx(
        [10.0] * 6
    )  # 6-7 only: the cut stays cut


# -- properties of the two decisions, on any step times -------------------------------------------------

_MS = st.floats(min_value=0.01, max_value=1e4, allow_nan=False, allow_infinity=False)


@given(st.lists(_MS, min_size=1, max_size=40), st.integers(min_value=0, max_value=16))
def test_settled_never_fails_and_a_steady_series_is_settled(
    intervals: list[float], depth: int
) -> None:
    assert settled(intervals, depth) in (True, False)
    n = max(2 * max(TRIAL_SETTLE_HALF, depth), len(intervals))
    assert settled([intervals[0]] * n, depth)


@given(
    st.lists(_MS, min_size=2 * TRIAL_SETTLE_HALF, max_size=40),
    st.floats(min_value=1.3, max_value=100),
)
def test_a_series_that_just_slowed_down_is_not_settled(
    intervals: list[float], factor: float
) -> None:
    base = max(intervals)  # every earlier step faster than the last ones by the factor
    slowed = intervals + [base * factor + 1.0] * TRIAL_SETTLE_HALF
    assert not settled(slowed)


@given(st.lists(_MS, min_size=3, max_size=12), st.lists(_MS, min_size=3, max_size=12))
def test_choose_returns_one_set_or_both_and_the_faster_when_far_apart(
    before: list[float], after: list[float]
) -> None:
    samples, where = choose(before, after)
    assert (samples, where) in ((before + after, "both"), (before, "before"), (after, "after"))
    if where != "both":
        chosen, other = (before, after) if where == "before" else (after, before)
        assert statistics.median(chosen) * 1.25 < statistics.median(other)
