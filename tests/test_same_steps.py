"""tryfix/trial.py ``same_steps`` and ``common_steps`` on any samples and step indices a trial.json
can hold (duplicates, gaps, disorder, negative, a count short of the samples): never an error, both
sides cut alike or left whole."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpudoctor.tryfix.trial import MIN_JUDGED_STEPS, common_steps, same_steps

SAMPLES = st.lists(st.floats(0.01, 1e4, allow_nan=False), max_size=80)
STEPS = st.lists(st.integers(-5, 120), max_size=80)


@given(SAMPLES, STEPS, SAMPLES, STEPS)
def test_same_steps_cuts_both_sides_alike_or_leaves_them_whole(
    before: list[float], before_steps: list[int], after: list[float], after_steps: list[int]
) -> None:
    cut_before, cut_after = same_steps(before, before_steps, after, after_steps)
    whole = (tuple(before), tuple(after))
    if (cut_before, cut_after) != whole:
        assert len(cut_before) == len(cut_after) >= MIN_JUDGED_STEPS
        assert set(cut_before) <= set(before) and set(cut_after) <= set(after)
    if len(before_steps) != len(before) or len(after_steps) != len(after):
        assert (cut_before, cut_after) == whole


@given(st.lists(st.tuples(SAMPLES, STEPS), max_size=5))
def test_common_steps_cuts_every_process_alike_or_leaves_them_whole(
    processes: list[tuple[list[float], list[int]]],
) -> None:
    out = common_steps([(tuple(s), tuple(k)) for s, k in processes])
    assert len(out) == len(processes)
    whole = [tuple(s) for s, _ in processes]
    if out != whole:
        assert len({len(o) for o in out}) == 1 and len(out[0]) >= MIN_JUDGED_STEPS


def test_every_process_sharing_the_same_steps_keeps_them_in_step_order() -> None:
    steps = list(range(40, 10, -1))  # recorded out of order
    samples = [float(k) for k in steps]
    out = common_steps(
        [(tuple(samples), tuple(steps)), (tuple(sorted(samples)), tuple(sorted(steps)))]
    )
    assert out[0] == out[1] == tuple(float(k) for k in range(11, 41))
