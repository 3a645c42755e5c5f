"""Inflating a .json.gz (trace/read.py gunzip, core/inflate.py): ISA-L for the one-member files
torch.profiler writes when the optional ``isal`` package is there, gzip.decompress for everything
else, with the same bytes and the same one-line error either way; and the command line's inflating
ahead, on a thread, taken by the loader for that file alone."""

from __future__ import annotations

import gzip
import importlib
import os
import sys
from pathlib import Path

import pytest
from synth import trace_columns as columns

from gpudoctor.core.inflate import inflate_ahead, take_inflated
from gpudoctor.errors import TraceFormatError
from gpudoctor.trace import load
from gpudoctor.trace.read import gunzip

inflate_module = importlib.import_module("gpudoctor.core.inflate")

ONE = gzip.compress(b'{"traceEvents": []}', mtime=0)


@pytest.fixture(params=["isal", "zlib"])
def inflater(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "isal":
        pytest.importorskip("isal")
    else:
        monkeypatch.setitem(sys.modules, "isal", None)  # `from isal import ...` raises ImportError
    return str(request.param)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (ONE, b'{"traceEvents": []}'),
        (gzip.compress(b"", mtime=0), b""),
        (ONE + ONE, b'{"traceEvents": []}{"traceEvents": []}'),  # two identical members: both read
        (gzip.compress(b"ab", mtime=0) + gzip.compress(b"cd", mtime=0), b"abcd"),
        (ONE + b"\x00\x00\x00", b'{"traceEvents": []}'),  # zero padding after the member
    ],
    ids=["one-member", "empty", "two-members", "two-different-members", "zero-padding"],
)
def test_inflates_what_gzip_decompress_inflates(
    inflater: str, data: bytes, expected: bytes
) -> None:
    assert gunzip(data, "t.json.gz") == expected == gzip.decompress(data)


@pytest.mark.parametrize(
    "data",
    [
        ONE[:-3],  # truncated trailer
        ONE[:12],  # truncated stream
        ONE + b"junk",  # garbage after the member
        ONE[:-8] + b"\x00" * 8,  # a zeroed CRC and size
        b"\x1f\x8b" + b"not deflate" * 4,
    ],
    ids=["truncated-trailer", "truncated-stream", "garbage-after", "zeroed-crc", "not-deflate"],
)
def test_a_corrupt_file_fails_in_one_line(inflater: str, data: bytes) -> None:
    with pytest.raises(
        TraceFormatError, match=r"^t\.json\.gz is a truncated or corrupt gzip file; re-export"
    ):
        gunzip(data, "t.json.gz")


RECORDED = Path(__file__).parent / "data" / "healthy_train" / "trace.json.gz"


def test_inflated_ahead_is_what_gunzip_inflates_and_the_loader_reads_the_same(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(RECORDED.read_bytes())
    inflate_ahead(str(trace))
    with trace.open("rb") as stream:
        ahead = take_inflated(stream.fileno())
    assert ahead == gunzip(RECORDED.read_bytes(), "t") == gzip.decompress(RECORDED.read_bytes())
    inflate_ahead(str(trace))
    assert columns(load(trace)) == columns(load(RECORDED))  # the loader took it
    assert not inflate_module._AHEAD


def _take(path: Path) -> bytes | None:
    with path.open("rb") as stream:
        return take_inflated(stream.fileno())


def test_nothing_is_taken_for_another_file_a_changed_one_or_one_read_in_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one, other = tmp_path / "one.json.gz", tmp_path / "other.json.gz"
    one.write_bytes(ONE)
    other.write_bytes(ONE)
    inflate_ahead(str(one))
    assert _take(other) is None
    inflate_ahead(str(one))
    inflate_module._AHEAD[-1].thread.join()
    one.write_bytes(gzip.compress(b'{"traceEvents": [1]}', mtime=0))  # changed since
    assert _take(one) is None
    plain = tmp_path / "plain.json"
    plain.write_bytes(b'{"traceEvents": []}')
    inflate_ahead(str(plain))
    assert _take(plain) is None
    inflate_ahead(str(tmp_path))  # a directory
    folder = os.open(tmp_path, os.O_RDONLY)
    assert take_inflated(folder) is None
    os.close(folder)
    # a file the loader reads in chunks
    monkeypatch.setattr(inflate_module, "CHUNKED_FROM_GZ", len(ONE))
    other.write_bytes(ONE)
    inflate_ahead(str(other))
    assert _take(other) is None
    assert _take(other) is None  # nothing started
    assert not inflate_module._AHEAD


def test_a_gzip_file_inside_a_gzip_file_is_inflated_once(tmp_path: Path) -> None:
    twice = tmp_path / "twice.json.gz"
    twice.write_bytes(gzip.compress(ONE, mtime=0))
    with pytest.raises(TraceFormatError) as read:
        load(twice)
    inflate_ahead(str(twice))
    with pytest.raises(TraceFormatError) as ahead:
        load(twice)
    assert str(ahead.value) == str(read.value)
