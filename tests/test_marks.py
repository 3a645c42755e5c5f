"""capture/marks.py: the times between step marks (host stamps here, CUDA events' stand-ins where
the GPU has not reached them all)."""

from __future__ import annotations

import sys
import types

import pytest

from gpudoctor.capture.marks import CompileWatch, FinishedIntervals, intervals_ms, token_times


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
