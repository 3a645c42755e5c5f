"""The noise model of gpudoctor diff: t quantiles, outliers, intervals and verdicts, fuzzed."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runs import MANIFEST

from gpudoctor.diff.samples import (
    FASTER,
    SAME,
    SLOWER,
    UNKNOWN,
    bootstrap_interval,
    compare_samples,
    split_outliers,
    usable,
)
from gpudoctor.diff.stats import t_cdf, t_quantile


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423), (1e6, 1.9600)],
)
def test_t_quantile_matches_the_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=1e-4)


def test_t_quantile_matches_scipy_for_fractional_df():
    stats = pytest.importorskip("scipy.stats")
    for df in (1.3, 2.7, 5.5, 17.2, 240.0):
        for p in (0.9, 0.975, 0.995):
            assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-6)
            assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)


def test_warm_up_steps_are_outliers_and_a_rhythm_is_not():
    fixed = MANIFEST["input_pipeline"][
        "fixed_times_ms"
    ]  # 52 and 50 ms while DataLoader workers start
    kept, dropped = split_outliers(fixed)
    assert sorted(dropped) == [49.527, 52.392] and len(kept) == 18
    rhythm = [10.0, 10.1, 9.9, 30.0] * 5  # a slow step every fourth: 25% of the samples
    assert split_outliers(rhythm) == (tuple(rhythm), ())
    assert (
        split_outliers([1.0, 1.0, 1.0, 9.0])[1] == ()
    )  # fewer than 10 samples: nothing is dropped


def test_identical_samples_are_no_difference():
    times = MANIFEST["healthy_train"]["sick_times_ms"]
    c = compare_samples(times, times)
    assert c.verdict == SAME and c.change_pct == 0.0 and c.speedup == 1.0
    assert c.ci_low_pct < 0 < c.ci_high_pct
    assert c.method == "welch-log+bootstrap" and c.n_before == c.n_after == 20


def test_a_planted_three_percent_slowdown_is_detected_on_a_gpu_bound_step():
    times = MANIFEST["healthy_train"]["sick_times_ms"]  # sd 0.8% of the step
    c = compare_samples(times, [t * 1.03 for t in times])
    assert c.verdict == SLOWER and c.change_pct == pytest.approx(3.0, abs=1e-9)
    assert 1.0 < c.ci_low_pct < 3.0 < c.ci_high_pct


def test_a_change_within_the_floor_is_noise_and_says_so():
    times = MANIFEST["fp32_matmul"]["sick_times_ms"]  # very tight: sd 0.1%
    c = compare_samples(times, [t * 1.005 for t in times])
    assert c.verdict == SAME and c.ci_low_pct > 0
    assert any("run-to-run floor" in n for n in c.notes)
    assert compare_samples(times, [t * 1.005 for t in times], floor_pct=0.0).verdict == SLOWER


def test_faster_and_too_few():
    assert compare_samples([10.0, 10.2, 9.9], [5.0, 5.1, 4.9]).verdict == FASTER
    assert compare_samples([10.0], [5.0, 5.1]).verdict == UNKNOWN
    with pytest.raises(ValueError):
        compare_samples([], [1.0])


def test_usable_drops_what_is_not_a_positive_number():
    assert usable([1, 2.5, 0, -1, float("nan"), float("inf"), True, "3", None]) == (1.0, 2.5)
    # JSON's integers have no length limit: one no float holds is no step either
    assert usable([10**400, 3]) == (3.0,)


def test_bootstrap_is_deterministic():
    a, b = [10.0, 10.5, 9.8, 10.1] * 3, [9.0, 9.4, 9.1, 9.2] * 3
    assert bootstrap_interval(a, b) == bootstrap_interval(a, b)


step_times = st.lists(
    st.floats(min_value=0.01, max_value=1e4, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(step_times, step_times, st.floats(min_value=0, max_value=20))
def test_fuzz_interval_and_verdict_are_consistent(a, b, floor):
    c = compare_samples(a, b, floor_pct=floor)
    assert math.isfinite(c.change_pct) and c.before_ms > 0 and c.after_ms > 0
    assert c.n_before + len(c.dropped_before) == len(a) and c.n_after + len(c.dropped_after) == len(
        b
    )
    if c.ci_low_pct is None:
        assert c.verdict == UNKNOWN
        return
    tol = 1e-6 * max(1.0, abs(c.change_pct))
    assert c.ci_low_pct <= c.change_pct + tol and c.change_pct <= c.ci_high_pct + tol
    assert c.ci_low_pct >= -100.0
    expected = SLOWER if c.ci_low_pct > floor else FASTER if c.ci_high_pct < -floor else SAME
    assert c.verdict == expected
    assert compare_samples(a, b, floor_pct=floor) == c  # deterministic


@settings(max_examples=200, deadline=None)
@given(step_times, step_times, st.floats(min_value=1e-3, max_value=1e3))
def test_fuzz_scale_free_and_symmetric(a, b, k):
    c = compare_samples(a, b)
    scaled = compare_samples([x * k for x in a], [x * k for x in b])
    assert scaled.change_pct == pytest.approx(c.change_pct, rel=1e-6, abs=1e-6)
    swapped = compare_samples(b, a)
    assert swapped.speedup == pytest.approx(1 / c.speedup, rel=1e-9)
    if c.verdict in (SLOWER, FASTER) and c.method == "welch-log":
        assert swapped.verdict == (FASTER if c.verdict == SLOWER else SLOWER)


# -- processes as the observations (gpudoctor run --trial-repeats) ------------------------------------


def _process(mean: float) -> list[float]:
    return [mean * 0.99, mean * 1.01, mean] * 4  # 12 steps whose mean is ``mean``


def test_compare_processes_is_pooled_t_on_the_logs_of_the_process_means() -> None:
    from gpudoctor.diff.samples import compare_processes

    # three controls that drifted 25 -> 28 -> 26 ms, a knob's two processes at 14 and 15 ms
    # (worked by hand: log means 3.26973 and 2.67356, pooled variance 0.0030014 on 3 degrees of
    # freedom, standard error 0.050012, t 3.1824)
    change = compare_processes(
        [_process(25), _process(28), _process(26)], [_process(14), _process(15)]
    )
    assert change.before_ms == pytest.approx(
        26.3041, abs=1e-4
    ) and change.after_ms == pytest.approx(14.4914, abs=1e-4)
    assert change.speedup == pytest.approx(1.8152, abs=1e-4)
    assert change.ci_low_pct == pytest.approx(
        -53.015, abs=1e-3
    ) and change.ci_high_pct == pytest.approx(-35.403, abs=1e-3)
    assert change.verdict == FASTER and change.n_before == 36 and change.n_after == 24
    assert change.method == "processes (3 vs 2), pooled t on log means"
    # a knob within the processes' spread is no difference, however tight each process's steps
    same = compare_processes([_process(25), _process(25.5)], [_process(25.2)])
    assert same.verdict == SAME and same.ci_low_pct < 0 < same.ci_high_pct


def test_compare_processes_needs_two_processes_on_one_side_to_draw_an_interval() -> None:
    from gpudoctor.diff.samples import compare_processes

    one = compare_processes([_process(25)], [_process(14)])
    assert one.verdict == UNKNOWN and one.ci_low_pct is None and "--trial-repeats" in one.notes[0]
    assert one.speedup == pytest.approx(25 / 14)
    # a process that timed nothing is left out; no process at all on a side is an error
    assert compare_processes([_process(25), [], _process(26)], [_process(14)]).method.startswith(
        "processes (2 vs 1)"
    )
    with pytest.raises(ValueError, match="at least one process"):
        compare_processes([[]], [_process(14)])
    with pytest.raises(ValueError, match="floor_pct"):
        compare_processes([_process(25)], [_process(14)], floor_pct=-1)


def test_a_process_mean_leaves_its_outliers_out() -> None:
    from gpudoctor.diff.samples import process_mean

    steady = [9.8, 10.0, 10.2, 10.1, 9.9] * 2
    assert process_mean([*steady, 90.0]) == pytest.approx(10.0)  # one stall in 11: dropped
    assert process_mean([10.0, 90.0]) == pytest.approx(50.0)  # too few to call one an outlier
