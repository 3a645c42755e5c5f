"""The loader decodes ``traceEvents`` a slice at a time, in place (trace/read.py ``Slices``), and
interns names and threads slice by slice (trace/columns.py): the Trace is the one a single decode of the whole file
builds, whatever the slices, and a file laid out otherwise or broken anywhere takes the single
decode and fails as it fails."""

from __future__ import annotations

import gzip
import importlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from synth import PID, TraceBuilder
from synth import trace_columns as columns

from gpudoctor.errors import TraceFormatError
from gpudoctor.trace import load, parse
from gpudoctor.trace.columns import first_seen
from gpudoctor.trace.nesting import levels, nearest_ancestor, nest
from gpudoctor.trace.read import Slices

loader = importlib.import_module("gpudoctor.trace.load")
reader = importlib.import_module("gpudoctor.trace.read")
RECORDED = Path(__file__).parent / "data" / "healthy_train" / "trace.json.gz"


def kineto(
    events: list[dict[str, Any]],
    before: str = '"deviceProperties": [{"id": 0, "name": "H100"}]',
    after: str = '"traceName": "t.json"',
) -> bytes:
    """A file laid out as Kineto's ChromeTraceLogger writes it: one event per block, ``},`` and
    ``{`` on lines of their own, indented by two."""
    blocks = ",\n  ".join("{\n    " + json.dumps(e)[1:-1] + "\n  }" for e in events)
    return f'{{\n  {before},\n  "traceEvents": [\n  {blocks}\n  ],\n  {after}\n}}'.encode()


def _events(n: int) -> list[dict[str, Any]]:
    t = TraceBuilder()
    t.step(0, 0, 20 * n + 10)
    for i in range(n):
        t.launch(
            f"kernel_{i % 3}",
            20 * i + 1,
            20 * i + 12,
            3.0,
            op=f"aten::op_{i % 4}",
            dims=[[i + 1, 2]],
        )
        t.memory(20 * i + 2, 512, 512 * (i + 1), 4096)
    return t.events


def test_a_recorded_trace_reads_the_same_in_slices_of_1_mb_of_one_event_and_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = bytearray(gzip.decompress(RECORDED.read_bytes()))
    assert len(Slices.find(data).spans) == 6  # 5.6 MB of JSON
    sliced = columns(load(RECORDED))
    monkeypatch.setattr(reader, "SLICE_BYTES", 1)
    assert len(Slices.find(data).spans) == 17_469  # every event a slice
    tiny = columns(load(RECORDED))
    monkeypatch.setattr(Slices, "find", classmethod(lambda cls, data: None))
    whole = columns(load(RECORDED))
    assert sliced == whole
    assert tiny == whole
    assert whole["event_count"] == 17_469


def test_slices_of_a_kineto_layout_read_what_one_decode_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = kineto(_events(40))
    monkeypatch.setattr(reader, "SLICE_BYTES", 300)
    assert len(Slices.find(bytearray(data)).spans) == 81  # 161 events, two to a slice of 300+ bytes
    with monkeypatch.context() as patch:
        patch.setattr(loader, "_decode", _whole_decode_refused)
        sliced = parse(data)
    monkeypatch.setattr(Slices, "find", classmethod(lambda cls, data: None))
    assert columns(sliced) == columns(parse(data))
    assert len(sliced.device) == 40 and len(sliced.memory) == 40
    assert sliced.input_dims(int(sliced.device.op[39])) == [[40, 2]]


def _whole_decode_refused(data: bytes, source: str) -> Any:
    raise AssertionError("the file was decoded whole")


def test_brackets_after_the_events_and_the_gpus_after_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "SLICE_BYTES", 100)
    monkeypatch.setattr(loader, "_decode", _whole_decode_refused)
    data = kineto(
        _events(5),
        before='"schemaVersion": 1, "note": "traceEvents"',
        after='"deviceProperties": [{"id": 0, "name": "A]100"}], "traceName": "x]y]"',
    )
    trace = parse(data)
    assert [g.name for g in trace.gpus] == ["A]100"]
    assert len(trace.device) == 5


@pytest.mark.parametrize("sliced", [True, False])
def test_a_bad_event_in_a_later_slice_is_skipped_as_the_whole_decode_skips_it(
    sliced: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _events(30)
    events[70]["ts"] = "late"  # not a number: the lenient path drops this one event
    monkeypatch.setattr(reader, "SLICE_BYTES", 200)
    if not sliced:
        monkeypatch.setattr(Slices, "find", classmethod(lambda cls, data: None))
    trace = parse(kineto(events))  # the buffer's brackets are put back before the lenient decode
    assert trace.skipped_events == 1
    assert trace.event_count == len(events) - 1


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (
            '"traceName": "t.json"\n}x',
            r"is not valid JSON \(JSON is malformed: trailing characters",
        ),
        ('"traceName": "t.json"', r"is not valid JSON \(Input data was truncated"),
    ],
)
def test_a_file_broken_after_its_events_fails_as_the_whole_decode_fails(
    tail: str, message: str
) -> None:
    data = kineto(_events(3))
    data = data[: data.rindex(b'"traceName"')] + tail.encode()
    with pytest.raises(TraceFormatError, match=r"^<bytes> " + message):
        parse(data)


def test_names_and_threads_of_dropped_events_take_no_id() -> None:
    """An event dropped for its time (trace/columns.py usable_times) is the first with its name and its
    thread: the ids are those of the kept events, in the order they first appear."""

    def op(name: str, tid: int, ts: float) -> dict[str, Any]:
        return {
            "ph": "X",
            "cat": "cpu_op",
            "name": name,
            "pid": PID,
            "tid": tid,
            "ts": ts,
            "dur": 1.0,
        }

    events = [
        op("dropped", 9, 1e300),
        op("b", 2, 5.0),
        op("a", 1, 6.0),
        op("dropped", 9, 7.0),
        op("b", 1, 8.0),
        op("gone", 3, -1e300),
    ]
    trace = parse(json.dumps({"traceEvents": events}).encode())
    assert trace.bad_times == 2
    assert trace.strings == ["b", "a", "dropped"]
    assert trace.threads == [(str(PID), "2"), (str(PID), "1"), (str(PID), "9")]
    order = np.argsort(trace.host.ts, kind="stable")
    assert trace.host.name[order].tolist() == [0, 1, 2, 0]
    assert trace.host.thread[order].tolist() == [0, 1, 2, 1]


def test_the_first_seen_order_of_ids() -> None:
    assert [a.tolist() for a in first_seen(np.array([0, 1, 0, 2, 1]), 3)] == [
        [0, 1, 2],
        [0, 1, 0, 2, 1],
    ]
    # 1 no longer appears, 3 appears before 2
    assert [a.tolist() for a in first_seen(np.array([0, 3, 0, 2]), 4)] == [[0, 3, 2], [0, 1, 0, 2]]
    assert [a.tolist() for a in first_seen(np.array([], np.int32), 2)] == [[], []]


@pytest.mark.parametrize("seed", range(5))
def test_nearest_ancestor_level_by_level_finds_what_the_walk_up_finds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 3000
    thread = np.sort(rng.integers(0, 3, n))
    ts = rng.integers(0, 10_000, n)
    end = ts + rng.integers(0, 2_000, n)
    order = np.lexsort((-end, ts, thread))
    thread, ts, end = thread[order], ts[order], end[order]
    parent, depth = nest(thread, ts, end)
    assert depth.max() >= 5
    by_level = levels(depth)
    for target in (rng.random(n) < 0.3, rng.random(n) < 0.05, np.zeros(n, bool)):
        for outermost in (False, True):
            walked = nearest_ancestor(parent, target, outermost)
            assert (
                nearest_ancestor(parent, target, outermost, by_level=by_level).tolist()
                == walked.tolist()
            )
