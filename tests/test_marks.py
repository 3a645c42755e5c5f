"""capture/marks.py: the times between step marks (host stamps here, CUDA events' stand-ins where
the GPU has not reached them all)."""

from __future__ import annotations

import sys
import types

import pytest

from gpudoctor.capture.marks import (
    CompileWatch,
    FinishedIntervals,
    interval_steps,
    intervals_ms,
    leads_ms,
    token_times,
)


class _Event:
    """A CUDA event's stand-in: a time, and whether the GPU has reached it."""

    def __init__(self, t_s: float, done: bool) -> None:
        self.t_s, self.done = t_s, done

    def query(self) -> bool:
        return self.done

    def elapsed_time(self, other: _Event) -> float:
        return (other.t_s - self.t_s) * 1e3


def test_a_cut_or_the_switch_to_cuda_events_is_no_step() -> None:
    marks = [0.0, 0.25, None, 0.5, 0.625, _Event(0.0, True), _Event(0.125, True)]
    # 0 -> 0.25 s, (cut), 0.5 -> 0.625 s, (host stamp -> event), event -> event
    assert intervals_ms(marks) == [250.0, 125.0, 125.0]


def test_finished_intervals_read_each_step_once_and_restart_on_a_new_series() -> None:
    reader = FinishedIntervals()
    marks = [_Event(0.0, True), _Event(0.5, True), _Event(0.75, False)]
    got = reader.read(marks)
    assert got == [500.0]
    marks[2].done = True
    marks.append(_Event(1.0, False))
    assert reader.read(marks) is got and got == [500.0, 250.0]  # the same list, grown
    again = reader.read([0.0, 0.25])  # host stamps: all finished
    assert again == [250.0] and again is not got


def test_each_interval_is_the_step_its_closing_mark_counted() -> None:
    """Steps 7-12 marked, a cut before step 10 (a compiling step) and the switch to CUDA events at
    12: the intervals time steps 8, 9, 11 and 13; counts that do not pair with the marks are no
    steps at all."""
    marks = [0.0, 0.25, 0.5, None, 0.75, 1.0, _Event(0.0, True), _Event(0.125, True)]
    steps = [7, 8, 9, None, 10, 11, 12, 13]
    assert intervals_ms(marks) == [250.0, 250.0, 250.0, 125.0]
    assert interval_steps(marks, steps) == [8, 9, 11, 13]
    assert interval_steps(marks, steps[:-1]) == []


def test_finished_intervals_keep_their_steps_beside_them() -> None:
    reader = FinishedIntervals()
    marks = [_Event(0.0, True), _Event(0.5, True), _Event(0.75, False)]
    steps = [3, 4, 5]
    got = reader.read(marks, steps)
    assert got == [500.0] and reader.steps == [4]
    marks[2].done = True
    marks.append(_Event(1.0, True))
    steps.append(6)
    assert reader.read(marks, steps) == [500.0, 250.0, 250.0] and reader.steps == [4, 5, 6]
    # a new series, its counts not given (or not one per mark): no steps
    assert reader.read([0.0, 0.25], [1]) == [250.0] and reader.steps == []
    # counts missing from one read on: none known for the series, even where later reads have them
    marks, steps = [0.0, 0.25], [1, 2]
    assert reader.read(marks, steps) == [250.0] and reader.steps == [2]
    marks.append(0.5)
    assert reader.read(marks) == [250.0, 250.0] and reader.steps == []
    marks.append(0.75)
    steps.extend([3, 4])
    assert reader.read(marks, steps) == [250.0] * 3 and reader.steps == []


def test_token_times_of_a_generate_call() -> None:
    # start, three forwards, end: 250 + 125 ms prefill (start -> 2nd forward), then 125 and 250
    call = [0.0, 0.25, 0.375, 0.5, 0.75, None]
    assert token_times([call, [0.0, 0.25]]) == {
        "calls_timed": 1,
        "forwards_per_call": 3,
        "call_ms": 750.0,
        "prefill_ms": 375.0,
        "decode_ms_per_token": 187.5,
    }
    assert token_times([[0.0, 0.25, 0.5]]) == {}  # never closed: the program stopped inside it


def test_compile_watch_sees_new_compile_records_once(monkeypatch: pytest.MonkeyPatch) -> None:
    watch = CompileWatch()
    monkeypatch.delitem(sys.modules, "torch._dynamo.utils", raising=False)
    assert not watch.changed()  # dynamo not imported
    records: dict[str, list[float]] = {}
    monkeypatch.setitem(
        sys.modules, "torch._dynamo.utils", types.SimpleNamespace(compilation_time_metrics=records)
    )
    assert not watch.changed()
    records["_compile.compile_inner"] = [1.0, 0.5]
    assert watch.changed() and not watch.changed()


def test_leads_put_the_gpu_times_on_the_host_clock() -> None:
    # GPU clock = host clock + 2 s; the reference event reached 10 us after its host stamp (10.0 s)
    reference = _Event(12.00001, True)
    first, second, third = _Event(11.0005, True), _Event(11.3, True), _Event(11.6001, True)
    host_at = {id(first): 9.0, id(second): 9.3 - 0.004, id(third): 9.6}
    leads = leads_ms([first, second, third], host_at, reference, 10.0)
    # one lead per timed step, at its closing mark: the GPU 4 ms behind the host, then 0.1 ms, each
    # read 10 us short (the reference's own latency, which the host cannot see)
    assert leads == pytest.approx([3.99, 0.09])
    assert len(leads) == len(intervals_ms([first, second, third]))
    # a cut: the step it ends has no lead, as it has no interval
    assert leads_ms([first, None, second, third], host_at, reference, 10.0) == pytest.approx([0.09])


def test_leads_are_unknown_without_every_host_stamp_or_with_host_marks() -> None:
    reference = _Event(1.0, True)
    a, b = _Event(0.1, True), _Event(0.2, True)
    assert leads_ms([a, b], {id(a): 0.1}, reference, 1.0) == []
    assert leads_ms([0.1, 0.2], {}, reference, 1.0) == []
    assert leads_ms([a], {id(a): 0.1}, reference, 1.0) == []
