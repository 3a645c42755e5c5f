"""A trace file's bytes as the loader reads them: gzip inflated into one buffer the loader owns,
and the ``traceEvents`` array decoded a slice at a time, in place (trace/load.py builds the
columns slice by slice)."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator

import msgspec

from gpudoctor.errors import TraceFormatError
from gpudoctor.trace.schema import TraceEvent, TraceOutline


class NotSliced(Exception):
    """A slice of the events did not decode: the whole file is decoded instead, and fails as it
    fails."""


# Between two events as Kineto's ChromeTraceLogger writes them (libkineto/src/output_json.cpp).
# JSON strings hold no raw newline, so this never stands inside a name.
_EVENT_GAP = b"\n  },\n  {"
SLICE_BYTES = 1 << 20
_SPACE = b" \t\r\n"


class Slices:
    """The ``traceEvents`` array decoded ~1 MB at a time, so that the decoded events of one slice at
    a time are alive, not all of them: on bench_170k (150k events) the whole ``gpudoctor analyze``
    peaked at 141 MB RSS against 168 MB, and decoding plus reading the columns took 0.17-0.19 s
    either way. Each slice is bracketed in place, ``}, {`` becoming ``}][{`` (so the args the events
    keep as msgspec.Raw still point into the one buffer), and decoded alone. A slice that does not
    decode, a file laid out otherwise, or anything unexpected: the whole file is decoded as one
    (``restore`` first puts its bytes back).

    Why the slices are the events and nothing else: each slice starts at the array's top level
    and decodes only if it is whole JSON values, so it ends there too, and the part of the file
    around the array decodes with ``0`` in the array's place as the top-level ``traceEvents``."""

    def __init__(self, data: bytearray, spans: list[tuple[int, int]], outline: TraceOutline,
                 key: int = -1, opening: int = -1, closing: int = -1) -> None:
        self.data, self.spans, self.outline = data, spans, outline
        # of "traceEvents", its '[' and ']'
        self.key, self.opening, self.closing = key, opening, closing
        self.done = 0

    @classmethod
    def find(cls, data: bytearray) -> Slices | None:
        key = data.find(b'"traceEvents"')
        while key >= 0:  # the key, not a value that spells it
            colon = _skip_space(data, key + len(b'"traceEvents"'))
            opening = _skip_space(data, colon + 1)
            if data[colon : colon + 1] == b":" and data[opening : opening + 1] == b"[":
                break
            key = data.find(b'"traceEvents"', key + 1)
        if key < 0:
            return None
        closing, outline = _array_end(data, opening)
        if outline is None:
            return None
        spans = []
        start = opening + 1
        while (cut := data.find(_EVENT_GAP, start + SLICE_BYTES, closing)) >= 0:
            spans.append((start, cut + 4))  # up to the '}' that ends the last event of the slice
            start = cut + len(_EVENT_GAP) - 1  # from the '{' that starts the next
        spans.append((start, closing))
        return cls(data, spans, outline, key, opening, closing)

    def events(self) -> Iterator[list[TraceEvent]]:
        """Each slice's events, decoded as they are asked for; raises NotSliced."""
        decoder = msgspec.json.Decoder(list[TraceEvent])
        view = memoryview(self.data)
        for start, stop in self.spans:
            self.data[start - 1] = ord("[")  # a space before the first event's '{' (the '[' itself first)
            self.data[stop] = ord("]")  # the ',' after the last event's '}' (the ']' itself last)
            self.done += 1
            try:
                yield decoder.decode(view[start - 1 : stop + 1])
            except (msgspec.ValidationError, msgspec.DecodeError):
                raise NotSliced from None

    def restore(self) -> None:
        for start, stop in self.spans[: self.done]:
            self.data[start - 1] = ord(" ")
            self.data[stop] = ord(",")
        self.data[self.spans[0][0] - 1] = ord("[")
        self.data[self.spans[-1][1]] = ord("]")


def _skip_space(data: bytearray, at: int) -> int:
    while data[at : at + 1] and data[at] in _SPACE:
        at += 1
    return at


# How Kineto closes the array: the last event's '}' and the ']' on lines of their own.
_EVENTS_END = b"\n  }\n  ]"


def _array_end(data: bytearray, opening: int) -> tuple[int, TraceOutline | None]:
    """The index of the ']' that closes the events, and the rest of the file decoded: where the
    file, with ``0`` for the array, decodes. Kineto's closing first, then the last few ']' (a ']' in
    a later field may pass too: its slice then fails to decode, and the file is decoded whole)."""
    kineto = data.rfind(_EVENTS_END, opening)
    candidates = [kineto + len(_EVENTS_END) - 1] if kineto >= 0 else []
    closing = len(data)
    while len(candidates) < 9 and (closing := data.rfind(b"]", opening, closing)) >= 0:
        candidates.append(closing)
    for closing in candidates:
        try:
            rest = b"".join((data[:opening], b"0", data[closing + 1 :]))
            return closing, msgspec.json.decode(rest, type=TraceOutline)
        except (msgspec.ValidationError, msgspec.DecodeError):
            continue
    return -1, None


def gunzip(data: bytes | bytearray, source: str) -> bytearray:
    try:
        return _inflate(data)
    except (EOFError, OSError, zlib.error):
        raise TraceFormatError(
            f"{source} is a truncated or corrupt gzip file; re-export or re-copy the trace"
        ) from None


# fed 16 kB at a time: each piece inflates to a few hundred kB, a buffer the allocator reuses
# (pieces of MBs were fresh memory each, 0.025 s more for a 48 MB trace)
_PIECE = 1 << 14


def _inflate(data: bytes | bytearray) -> bytearray:
    """gzip.decompress's bytes, inflated a piece at a time into one buffer of the size the gzip
    trailer states, which the loader may write to (``Slices``): gzip.decompress joins what it
    inflates into a second copy (inflating a 48 MB trace peaked at 113 MB RSS that way, 63 MB into
    one buffer). ISA-L (the optional ``isal`` package) where installed: 0.049 s against zlib's 0.075
    s for that trace (benchmarks/bench_load.py phases, 2-core x86_64, isal 1.9.1). Taken only for
    what torch.profiler writes, one gzip member and nothing after it; anything else, and any
    failure, goes to gzip.decompress, which reads every member and raises what it raises."""
    try:
        from isal import isal_zlib as inflater
    except ImportError:
        inflater = zlib  # type: ignore[assignment]
    # ISIZE, the last 4 bytes: the size mod 2**32. A corrupt file may state any size: deflate
    # inflates at most 1032-fold, so no larger buffer is asked for.
    size = min(int.from_bytes(data[-4:], "little"), 1032 * len(data))
    out = bytearray(size)
    filled = 0
    try:
        stream = inflater.decompressobj(31)  # 31: gzip; checks the member's CRC and size at its end
        compressed = memoryview(data)
        for at in range(0, len(data), _PIECE):
            piece = stream.decompress(compressed[at : at + _PIECE])
            # past the end (a size beyond 4 GiB): appended
            out[filled : filled + len(piece)] = piece
            filled += len(piece)
        whole = stream.eof and not stream.unused_data
    except Exception:  # noqa: BLE001 - any failure: the standard reader decides, and says why
        whole = False
    if not whole:  # truncated, corrupt, or more after the first member
        del out
        return bytearray(gzip.decompress(data))
    del out[filled:]
    return out
