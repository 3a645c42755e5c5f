"""Inflating a .json.gz (trace/read.py gunzip): ISA-L for the one-member files torch.profiler
writes when the optional ``isal`` package is there, gzip.decompress for everything else, with the
same bytes and the same one-line error either way."""

from __future__ import annotations

import gzip
import sys

import pytest

from gpudoctor.errors import TraceFormatError
from gpudoctor.trace.read import gunzip

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
