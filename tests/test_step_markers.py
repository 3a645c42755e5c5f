"""ProfilerStep ranges as the profiler and hand-made traces write them (analysis/steps.py
``_clean_ranges``): the profiler's closing range, a step recorded twice, ranges that overlap, bare
boundaries, a range closed long after the trace's last event, one number written for every step.
Each is mended, and the report says how; the real traces under tests/data are not touched
(benchmarks/report_snapshot.py compares their reports)."""

from __future__ import annotations

import pytest
from synth import TraceBuilder

from gpudoctor.analysis.steps import describe, segment
from gpudoctor.trace import parse

STEP_US = 10_000.0


def _steps(
    markers: list[tuple[str, float, float]], steps: int = 4
) -> tuple[list[float], str | None]:
    """``steps`` steps of 10 ms, each launching four 1 ms kernels from its first 2 ms, under the
    markers given as (name, ts, dur); the segmented steps' durations (ms) and the report's note."""
    b = TraceBuilder()
    for s in range(steps):
        t0 = s * STEP_US
        for k in range(4):
            b.launch(
                "ampere_sgemm_128x64_nn",
                t0 + 100 + k * 400,
                t0 + 200 + k * 1_100,
                1_000,
                op="aten::mm",
            )
        b.op("aten::add", t0 + 9_000, 500)  # the step's Python ends with its last operator
    for name, ts, dur in markers:
        b.annotation(name, ts, dur)
    found = segment(parse(b.to_bytes()))
    return [round(float(d), 3) for d in found.durations_ms], describe(found)


def _plain(steps: int = 4) -> list[tuple[str, float, float]]:
    return [(f"ProfilerStep#{s}", s * STEP_US, STEP_US) for s in range(steps)]


def test_plain_markers_are_the_steps_and_need_no_note() -> None:
    assert _steps(_plain()) == ([10.0, 10.0, 10.0, 10.0], None)


def test_the_profilers_closing_range_is_not_a_step() -> None:
    """prof.step() after the last step opens ProfilerStep#4, closed when the profiler stops a few
    microseconds later, with no GPU work in it."""
    durations, note = _steps(_plain() + [("ProfilerStep#4", 4 * STEP_US, 40.0)])
    assert durations == [10.0, 10.0, 10.0, 10.0]
    assert note == (
        "step markers: the last (0.040 ms, no GPU work) is the profiler's closing range, not a "
        "step: left out"
    )


def test_a_short_last_step_that_launches_gpu_work_stays() -> None:
    """An epoch's last, smaller batch is short, but it is a step."""
    markers = _plain(3) + [("ProfilerStep#3", 3 * STEP_US, 2_000.0)]
    durations, note = _steps(markers)
    assert len(durations) == 4 and note is None


def test_a_step_recorded_twice_or_nested_in_a_copy_counts_once() -> None:
    copies = [(f"ProfilerStep#{s}0", s * STEP_US + 10, STEP_US - 20) for s in range(4)]
    durations, note = _steps(_plain() + copies)
    assert durations == [10.0, 10.0, 10.0, 10.0]
    assert note == "step markers: 4 recorded twice: each step counted once"


def test_overlapping_ranges_end_where_the_next_starts() -> None:
    longer = [(name, ts, dur * 1.3) for name, ts, dur in _plain()]
    durations, note = _steps(longer)
    assert durations[:3] == [10.0, 10.0, 10.0]
    assert note is not None and note.startswith("step markers: 3 overlapped the next")


def test_one_range_holding_all_the_others_is_cut_where_the_second_starts() -> None:
    markers = _plain()
    markers[0] = ("ProfilerStep#0", 0.0, 4 * STEP_US + 10)
    durations, _ = _steps(markers)
    assert durations[:3] == [10.0, 10.0, 10.0] and len(durations) == 4


def test_the_same_number_on_every_step_still_makes_four_steps() -> None:
    markers = [("ProfilerStep#7", ts, dur) for _, ts, dur in _plain()]
    assert _steps(markers) == ([10.0, 10.0, 10.0, 10.0], None)


@pytest.mark.parametrize("dur", [0.0, -5.0])
def test_ranges_without_length_are_boundaries(dur: float) -> None:
    markers = [(name, ts, dur) for name, ts, _ in _plain()]
    durations, note = _steps(markers)
    assert durations == [10.0, 10.0, 10.0]
    assert note == (
        "step markers: 3 had no length: each step runs to the next one's start; the last has no "
        "length (a bare boundary): left out"
    )


def test_a_last_range_far_past_the_traces_last_event_ends_there() -> None:
    markers = _plain()
    markers[-1] = ("ProfilerStep#3", 3 * STEP_US, 1e9)
    durations, note = _steps(markers)
    assert durations == [10.0, 10.0, 10.0, 9.5]  # the last operator ends 9.5 ms into it
    assert note is not None and "ms past the trace's last event: it ends there" in note


def test_a_last_step_with_python_after_its_last_operator_keeps_it() -> None:
    """The step's range closes 2.5 ms after its last operator: the loop's own Python, not a
    marker gone wrong."""
    markers = _plain(3) + [("ProfilerStep#3", 3 * STEP_US, 12_000.0)]
    durations, note = _steps(markers)
    assert durations[-1] == 12.0 and note is None


def test_a_missing_number_is_said() -> None:
    """ProfilerStep#1 lost: #0's step runs to #2's start (steps end where the next one starts), so
    it holds two steps' time, and the report says why."""
    markers = [m for m in _plain() if m[0] != "ProfilerStep#1"]
    durations, note = _steps(markers)
    assert durations[0] == 20.0
    assert note == (
        "step markers: #1 is missing between #0 and #2: the step before each gap holds the "
        "missing one's time too"
    )


def test_markers_written_as_operators_count_where_no_annotation_is() -> None:
    """PyTorch 1.8 wrote ProfilerStep# and Optimizer.step# as operators ("Operator"); read as
    markers when no annotation of that name is in the trace (public ResNet50 samples read as one
    5.3 s step)."""
    b = TraceBuilder()
    for s in range(4):
        t0 = s * STEP_US
        b.launch("ampere_sgemm_128x64_nn", t0 + 100, t0 + 200, 1_000, op="aten::mm")
        b.op("Optimizer.step#SGD.step", t0 + 8_000, 1_000)
    found = segment(parse(b.to_bytes()))
    assert found.method == "optimizer-step" and len(found) == 4


def test_a_step_written_twice_under_its_own_name_counts_once_unsaid() -> None:
    """Some PyTorch versions write each ProfilerStep as a cpu_op and a user_annotation: counted
    once, and not said (it is what those versions write)."""
    twice = _plain() + [(name, ts + 1, dur - 2) for name, ts, dur in _plain()]
    assert _steps(twice) == ([10.0, 10.0, 10.0, 10.0], None)
