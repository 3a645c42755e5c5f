"""A trace file's bytes as the loader reads them: gzip inflated in one call (core/inflate.py), and
the ``traceEvents`` array decoded a slice at a time (trace/load.py builds the columns slice by
slice)."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator

import msgspec

from gpudoctor.core.inflate import inflate
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
    either way. Each slice is bracketed, ``}, {`` becoming ``}][{``, and decoded alone: in place in
    a buffer the loader owns (a bytearray: the args the events keep as msgspec.Raw still point into
    it), else in a copy of the slice (inflated bytes). A slice that does not decode, a file laid
    out otherwise, or anything unexpected: the whole file is decoded as one (``restore`` first puts
    its bytes back).

    Why the slices are the events and nothing else: each slice starts at the array's top level
    and decodes only if it is whole JSON values, so it ends there too, and the part of the file
    around the array decodes with ``0`` in the array's place as the top-level ``traceEvents``."""

    def __init__(self, data: bytes | bytearray, spans: list[tuple[int, int]], outline: TraceOutline,
                 key: int = -1, opening: int = -1, closing: int = -1) -> None:
        self.data, self.spans, self.outline = data, spans, outline
        # of "traceEvents", its '[' and ']'
        self.key, self.opening, self.closing = key, opening, closing
        self.done = 0

    @classmethod
    def find(cls, data: bytes | bytearray) -> Slices | None:
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
        in_place = isinstance(self.data, bytearray)
        for start, stop in self.spans:
            if in_place:
                # a space before the first event's '{' (the '[' itself first), and the ',' after
                # the last event's '}' (the ']' itself last)
                self.data[start - 1] = ord("[")
                self.data[stop] = ord("]")
                text = view[start - 1 : stop + 1]
            else:  # inflated JSON (bytes, ``gunzip``): the slice bracketed in a copy
                text = b"".join((b"[", view[start:stop], b"]"))
            self.done += 1
            try:
                yield decoder.decode(text)
            except (msgspec.ValidationError, msgspec.DecodeError):
                raise NotSliced from None

    def restore(self) -> None:
        if not isinstance(self.data, bytearray):
            return
        for start, stop in self.spans[: self.done]:
            self.data[start - 1] = ord(" ")
            self.data[stop] = ord(",")
        self.data[self.spans[0][0] - 1] = ord("[")
        self.data[self.spans[-1][1]] = ord("]")


def _skip_space(data: bytes | bytearray, at: int) -> int:
    while data[at : at + 1] and data[at] in _SPACE:
        at += 1
    return at


# How Kineto closes the array: the last event's '}' and the ']' on lines of their own.
_EVENTS_END = b"\n  }\n  ]"


def _array_end(data: bytes | bytearray, opening: int) -> tuple[int, TraceOutline | None]:
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


def gunzip(data: bytes | bytearray, source: str) -> bytes:
    try:
        text = inflate(data)  # one member, as torch.profiler writes
        return text if text is not None else gzip.decompress(data)
    except (EOFError, OSError, zlib.error):
        raise TraceFormatError(
            f"{source} is a truncated or corrupt gzip file; re-export or re-copy the trace"
        ) from None
