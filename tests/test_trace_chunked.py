"""The chunked loader (trace/stream.py): a file read a chunk at a time builds the Trace that
reading it whole builds, wherever the chunks are cut and whatever the layout; broken files fail
in one line that says at which byte reading stopped, and are never written to."""

from __future__ import annotations

import gzip
import importlib
import json
import os
import subprocess
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synth import TraceBuilder
from synth import trace_columns as columns

from gpudoctor.errors import TraceFormatError
from gpudoctor.trace import load
from gpudoctor.trace.rawargs import RawArgs
from gpudoctor.trace.schema import TraceFile
from gpudoctor.trace.stream import Chunks

stream_module = importlib.import_module("gpudoctor.trace.stream")
loader = importlib.import_module("gpudoctor.trace.load")
DATA = Path(__file__).parent / "data"
SRC = Path(__file__).resolve().parent.parent / "src"
TRACES = sorted(p for p in DATA.rglob("*") if p.name.endswith((".json", ".json.gz")))


def outcome(path: Path, chunked: bool) -> Any:
    try:
        return columns(load(path, chunked=chunked))
    except TraceFormatError as exc:  # a trace under tests/data that is meant to fail fails alike
        return type(exc).__name__


def test_every_trace_under_tests_data_reads_the_same_chunked_and_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert len(TRACES) >= 100
    monkeypatch.setattr(stream_module, "CHUNK_BYTES", 1 << 20)  # several chunks for the larger ones
    differ = [
        p.relative_to(DATA).as_posix() for p in TRACES if outcome(p, True) != outcome(p, False)
    ]
    assert differ == []


def test_findings_are_the_same_chunked_and_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpudoctor.pipeline import analyze_loaded

    monkeypatch.setattr(stream_module, "CHUNK_BYTES", 1 << 18)
    path = DATA / "healthy_train" / "trace.json.gz"
    reports = [analyze_loaded(load(path, chunked=c)) for c in (False, True)]
    found = [[(f.id, f.title, f.saving_ms) for f in r.findings] for r in reports]
    assert found[0] == found[1] and found[0]


# -- the chunk splitter -------------------------------------------------------------------------


def _events(n: int, tricky: bool = True) -> list[dict[str, Any]]:
    t = TraceBuilder()
    t.step(0, 0, 20 * n + 10)
    for i in range(n):
        t.launch(
            f"kernel_{i % 3}" + ('}, {"x' if tricky and i % 5 == 0 else ""),
            20 * i + 1,
            20 * i + 12,
            3.0,
            op=f"aten::op_{i % 4}",
            dims=[[i + 1, 2]],
        )
        t.memory(20 * i + 2, 512, 512 * (i + 1), 4096)
    events = t.events
    if tricky:  # objects inside arrays inside args: '},{' that is no boundary of the events
        events[3]["args"] = {"nested": [{"a": 1}, {"b": [{"c": "},{"}]}]}
    return events


def kineto(
    events: list[dict[str, Any]],
    before: str = '"deviceProperties": [{"id": 0, "name": "H100"}]',
    after: str = '"traceName": "t.json"',
) -> bytes:
    """Laid out as Kineto's ChromeTraceLogger writes a trace: one event per block, indented by two."""
    blocks = ",\n  ".join("{\n    " + json.dumps(e)[1:-1] + "\n  }" for e in events)
    tail = (
        f",\n  {after}" if after else ""
    )  # nothing after the events: the file ends '  }\n  ]\n}\n'
    return f'{{\n  {before},\n  "traceEvents": [\n  {blocks}\n  ]{tail}\n}}\n'.encode()


def one_line(events: list[dict[str, Any]]) -> bytes:
    return json.dumps(
        {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "H100"}]},
        separators=(",", ":"),
    ).encode()


def _read(data: bytes, cuts: list[int]) -> tuple[list[bytes], Chunks]:
    """Every event the chunked reader decodes, fed the text in pieces cut at ``cuts``."""
    bounds = [0, *sorted({min(c, len(data)) for c in cuts}), len(data)]
    chunks = Chunks(iter([data[a:b] for a, b in pairwise(bounds) if b > a]), "t.json")
    chunks.start()
    decoded = [msgspec.json.encode(e) for part in chunks.events() for e in part]
    return decoded, chunks


@settings(max_examples=60, deadline=None)
@given(
    layout=st.sampled_from(["kineto", "kineto, events last", "one line"]),
    chunk=st.integers(1, 3000),
    cuts=st.lists(st.integers(0, 40_000), max_size=12),
)
def test_any_chunk_size_and_any_cut_decode_the_events_one_decode_does(
    layout: str, chunk: int, cuts: list[int]
) -> None:
    events = _events(25)
    data = {
        "kineto": kineto(events),
        "kineto, events last": kineto(events, after=""),
        "one line": one_line(events),
    }[layout]
    whole = [msgspec.json.encode(e) for e in msgspec.json.decode(data, type=TraceFile).traceEvents]
    saved = stream_module.CHUNK_BYTES
    stream_module.CHUNK_BYTES = chunk  # hypothesis runs the examples in one test: no fixture here
    try:
        decoded, chunks = _read(data, cuts)
    finally:
        stream_module.CHUNK_BYTES = saved
    assert decoded == whole
    assert chunks.outline is not None and [p.name for p in chunks.outline.deviceProperties] == [
        "H100"
    ]


@pytest.mark.parametrize(
    "layout",
    [kineto, lambda events: kineto(events, after=""), one_line],
    ids=["kineto", "kineto, events last", "one line"],
)
def test_a_file_larger_than_a_chunk_loads_as_it_loads_whole(
    layout: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(layout(_events(300)))
    monkeypatch.setattr(stream_module, "CHUNK_BYTES", 2000)
    chunked = load(path, chunked=True)
    assert columns(chunked) == columns(load(path, chunked=False))
    assert len(chunked.device) == 300 and chunked.gpus[0].name == "H100"
    assert chunked.input_dims(int(chunked.device.op[299])) == [[300, 2]]


def test_the_fields_after_the_events_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(
        kineto(
            _events(20),
            before='"schemaVersion": 1, "note": "traceEvents: ["',
            after='"deviceProperties": [{"id": 0, "name": "A]100"}], "traceName": "x]y]"',
        )
    )
    monkeypatch.setattr(stream_module, "CHUNK_BYTES", 500)
    trace = load(path, chunked=True)
    assert [g.name for g in trace.gpus] == ["A]100"]
    assert len(trace.device) == 20


def test_gzip_is_inflated_a_piece_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(kineto(_events(200))))
    monkeypatch.setattr(stream_module, "CHUNK_BYTES", 3000)
    assert columns(load(path, chunked=True)) == columns(load(path, chunked=False))


def test_raw_args_compressed_read_as_stored() -> None:
    blobs = [
        (b'{"a":1}{"b":[2]}', np.array([7, 0, 9])),
        (b"", np.array([0])),
        (b'{"c":3}', np.array([7])),
    ]
    for compressed in (False, True):
        args = RawArgs.build(blobs, compressed).reordered(np.array([4, 0, 1, 3, 2]))
        assert list(args) == [b'{"c":3}', b'{"a":1}', b"", b"", b'{"b":[2]}']
        assert args.take([4, 4, 1]) == [b'{"b":[2]}', b'{"b":[2]}', b'{"a":1}']
        assert args[-1] == b'{"b":[2]}'


# -- bad input ----------------------------------------------------------------------------------


def _fails(path: Path, message: str, chunked: bool | None = True) -> str:
    """``chunked`` None: as a file this small is read by default, whole."""
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    with pytest.raises(TraceFormatError) as err:
        load(path, chunked=chunked)
    text = str(err.value)
    assert "\n" not in text and text.startswith(str(path)), text
    assert message in text, text
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before  # the input is never touched
    return text


def _both(path: Path, message: str) -> None:
    """The same error whether the file is read a chunk at a time or whole."""
    assert _fails(path, message, chunked=True) == _fails(path, message, chunked=None)


def test_a_trace_cut_mid_write_says_where_reading_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = kineto(_events(100))
    path = tmp_path / "t.json"
    cut = len(data) // 2
    path.write_bytes(data[:cut])
    monkeypatch.setattr(stream_module, "CHUNK_BYTES", 1000)
    last = data.rfind(b"\n  },\n  {", 0, cut) + len(b"\n  },")
    whole = data[:last].count(b"\n  }")
    _fails(
        path,
        f"is not valid JSON (it ends inside traceEvents, at byte {cut:,}; {whole:,} whole events before "
        f"byte {last:,})",
    )


def test_a_trace_cut_inside_a_number_is_truncated_not_malformed(tmp_path: Path) -> None:
    data = kineto(_events(5))
    path = tmp_path / "t.json"
    cut = data.rindex(b'"ts": ') + len(b'"ts": 1')
    path.write_bytes(data[:cut])
    _fails(path, f"ends inside traceEvents, at byte {cut:,}")


def test_malformed_json_inside_the_events_says_its_byte(tmp_path: Path) -> None:
    data = kineto(_events(50))
    at = data.index(b'"ph"', len(data) // 2)
    path = tmp_path / "t.json"
    path.write_bytes(data[:at] + b"@" + data[at + 1 :])
    _fails(
        path,
        f"is not valid JSON (JSON is malformed: object keys must be strings): reading stopped at byte {at:,} "
        "of its JSON, inside traceEvents",
    )


def test_a_gzip_stream_that_ends_early(tmp_path: Path) -> None:
    blob = gzip.compress(kineto(_events(300)))
    path = tmp_path / "t.json.gz"
    path.write_bytes(blob[: len(blob) // 2])
    _fails(
        path,
        f"is a truncated or corrupt gzip file (its stream ends early, at byte {len(blob) // 2:,} of the file",
    )


def test_a_corrupt_gzip_stream(tmp_path: Path) -> None:
    blob = bytearray(gzip.compress(kineto(_events(300))))
    blob[len(blob) // 2 : len(blob) // 2 + 40] = b"\xff" * 40
    path = tmp_path / "t.json.gz"
    path.write_bytes(bytes(blob))
    _fails(path, "is a truncated or corrupt gzip file (")


@pytest.mark.parametrize(
    "where", ["after the events", "before the events", "one long line", "a value first"]
)
def test_two_trace_events_keys(where: str, tmp_path: Path) -> None:
    """Read whole, a JSON decoder keeps the last of two equal keys: the events of one array would
    pass for the trace's, or none at all."""
    data = {
        "after the events": kineto(_events(3), after='"traceEvents": [], "traceName": "t.json"'),
        "before the events": kineto(_events(3), before='"traceEvents": [], "deviceProperties": []'),
        "one long line": one_line(_events(3))[:-1] + b',"traceEvents":[{"ph":"X"}]}',
        "a value first": kineto(_events(3), before='"traceEvents": 7, "deviceProperties": []'),
    }[where]
    path = tmp_path / "t.json"
    path.write_bytes(data)
    first, second = data.index(b'"traceEvents"'), data.rindex(b'"traceEvents"')
    _both(
        path,
        f"t.json has two traceEvents arrays (keys at bytes {first:,} and {second:,} of its JSON); a trace "
        "has one: pass each trace as a file of its own",
    )


def test_a_trace_on_one_line_cut_mid_write_says_where_reading_stopped(tmp_path: Path) -> None:
    data = one_line(_events(100))
    cut = len(data) // 2
    path = tmp_path / "t.json"
    path.write_bytes(data[:cut])
    last = data.rfind(b"},{", 0, cut)
    while data[: last + 1].count(b"{") != data[: last + 1].count(b"}") + 1:
        last = data.rfind(
            b"},{", 0, last
        )  # the last '},{' between two events, not inside one's args
    whole = len(msgspec.json.decode(data[data.index(b"[") : last + 1] + b"]"))
    _both(
        path,
        f"t.json is not valid JSON (it ends inside traceEvents, at byte {cut:,}; {whole:,} whole events before "
        f"byte {last + 2:,}): a crash while the trace was written?",
    )


def test_a_gzip_stream_that_ends_early_read_whole(tmp_path: Path) -> None:
    data = kineto(_events(300))
    blob = gzip.compress(data)
    path = tmp_path / "t.json.gz"
    path.write_bytes(
        blob[:-8]
    )  # all of the stream but its trailer: every byte of the JSON inflates
    _both(
        path,
        f"t.json.gz is a truncated or corrupt gzip file (its stream ends early, at byte {len(blob) - 8:,} of "
        f"the file, after {len(data):,} bytes of JSON)",
    )


def test_one_long_line_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(one_line(_events(200)))
    monkeypatch.setattr(stream_module, "CHUNK_BYTES", 777)
    assert b"\n" not in path.read_bytes()
    assert columns(load(path, chunked=True)) == columns(load(path, chunked=False))


def test_an_annotated_trace_fed_back_is_read_and_a_report_is_refused(tmp_path: Path) -> None:
    """A trace another tool added fields to (top level and per event) reads as the trace; a
    gpudoctor report given as a trace fails in one line."""
    events = _events(10)
    for e in events:
        e["gpudoctor"] = {"finding": "launch-bound", "traceEvents": [1]}
    path = tmp_path / "annotated.json"
    path.write_bytes(
        kineto(events, after='"annotations": {"traceEvents": ["x"]}, "traceName": "t.json"')
    )
    assert columns(load(path, chunked=True)) == columns(load(path, chunked=False))
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"schema_version": "1.0", "findings": [{"id": "x"}]}))
    _fails(report, "not a profiler trace")


def test_gpudoctors_own_annotated_trace_fed_back_reads_as_the_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its added events (category "gpudoctor") are read past, a chunk at a time as whole: the same
    tables as the trace it annotates, one count of events apart."""
    from gpudoctor.pipeline import analyze_inputs

    original = DATA / "host_sync" / "trace.json.gz"
    annotated = tmp_path / "annotated.trace.json.gz"
    analyze_inputs([original], annotate=annotated)
    monkeypatch.setattr(stream_module, "CHUNK_BYTES", 1 << 16)
    chunked, whole = columns(load(annotated, chunked=True)), columns(load(annotated, chunked=False))
    before = columns(load(original))
    assert chunked == whole
    assert chunked.pop("event_count") > before.pop("event_count")
    assert chunked == before


def test_fields_of_unexpected_types_are_skipped_as_the_whole_read_skips_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _events(30, tricky=False)
    events[70]["ts"] = "late"
    events[71]["ts"] = "3"  # a string a lenient read converts
    path = tmp_path / "t.json"
    path.write_bytes(kineto(events))
    monkeypatch.setattr(stream_module, "CHUNK_BYTES", 400)
    chunked, whole = load(path, chunked=True), load(path, chunked=False)
    assert chunked.skipped_events == whole.skipped_events == 1
    # the whole read re-encodes every event's args once one event is odd: the same values
    a, b = columns(chunked), columns(whole)
    assert [msgspec.json.decode(r) if r else None for r in a.pop("host.raw_args")] == [
        msgspec.json.decode(r) if r else None for r in b.pop("host.raw_args")
    ]
    assert a == b


def _bad_inputs() -> dict[str, tuple[str, bytes, str]]:
    """Each bad input of a trace: its file name, its bytes, what the one line says of it."""
    data, line = kineto(_events(50)), one_line(_events(50))
    packed = gzip.compress(data)
    twice = kineto(_events(3), after='"traceEvents": [], "traceName": "t.json"')
    first, second = twice.index(b'"traceEvents"'), twice.rindex(b'"traceEvents"')
    return {
        "cut mid-write": (
            "t.json",
            data[:-200],
            f"it ends inside traceEvents, at byte {len(data) - 200:,};",
        ),
        "one long line, cut": (
            "t.json",
            line[:-200],
            f"it ends inside traceEvents, at byte {len(line) - 200:,};",
        ),
        "gzip stream ends early": (
            "t.json.gz",
            packed[:-8],
            (
                f"its stream ends early, at byte {len(packed) - 8:,} "
                f"of the file, after {len(data):,} bytes of JSON"
            ),
        ),
        "two traceEvents keys": (
            "t.json",
            twice,
            (f"has two traceEvents arrays (keys at bytes {first:,} and {second:,} of its JSON)"),
        ),
    }


@pytest.mark.parametrize("case", list(_bad_inputs()))
def test_the_cli_says_it_in_one_line(case: str, tmp_path: Path) -> None:
    name, data, message = _bad_inputs()[case]
    path = tmp_path / name
    path.write_bytes(data)
    before = path.stat().st_mtime_ns
    env = dict(os.environ, PYTHONPATH=str(SRC))
    out = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "analyze", str(path), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert message in lines[0], lines[0]
    assert (path.read_bytes(), path.stat().st_mtime_ns) == (data, before)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing written beside it


def test_free_heap_pages_are_handed_back_for_a_big_trace_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trimmed: list[int] = []
    monkeypatch.setattr(stream_module, "_TRIM", lambda pad: trimmed.append(1))
    monkeypatch.setattr(stream_module, "_releasing", False)
    path = DATA / "healthy_train" / "trace.json.gz"
    small = columns(load(path))  # 0.4 MB: the pages freed would only fault in again
    assert trimmed == []
    monkeypatch.setattr(loader, "CHUNKED_FROM_GZ", 1 << 16)  # a big trace, read whole or in chunks
    assert columns(load(path, chunked=False)) == small
    assert trimmed
