"""A trace file read a chunk at a time, from disk or through a streaming gzip inflater: the
``traceEvents`` array is cut between events and each chunk decoded alone, so that the loader
holds its columns and one chunk, never the whole JSON (trace/load.py ``load``).

Where a chunk is cut: at the last event boundary Kineto writes in it (``\\n  },\\n  {``, as
trace/read.py), else at the last ``}`` followed by ``,`` and ``{`` (any other layout, one long line
included). A cut is proven by decoding: the chunk starts at the array's top level, so ``[`` +
chunk + ``]`` decodes only if the chunk is whole events, and a cut inside an event leaves a
bracket open (msgspec: "truncated"), which sends the cut to the previous boundary."""

from __future__ import annotations

import ctypes
import re
import zlib
from collections.abc import Iterator
from typing import IO, Any

import msgspec

from gpudoctor.core.inflate import GZIP_MAGIC
from gpudoctor.errors import TraceFormatError
from gpudoctor.trace.schema import TraceEvent, TraceOutline

CHUNK_BYTES = 1 << 23  # JSON text decoded at a time: its events are ~3x this as Python objects
# What may stand outside the events (before or after the array) and what one event may take: a
# trace's other fields are kilobytes.
MAX_OUTSIDE = 1 << 26
_PIECE = 1 << 20  # compressed bytes read at a time
_KINETO_GAP = b"\n  },\n  {"
_ANY_GAP = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_SPACE = b" \t\r\n"
_BYTE = re.compile(r"\(byte (\d+)\)")
_HINT = "pass the file written by torch.profiler's export_chrome_trace() (.json or .json.gz)"


def _glibc(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):  # not glibc
        return None


_TRIM, _MALLOPT = _glibc("malloc_trim"), _glibc("mallopt")
_M_MMAP_THRESHOLD = -3
_releasing = False  # release_free_memory trims: set for a big trace (``keep_memory_low``)


def keep_memory_low() -> None:
    """From now on in this process, ``release_free_memory`` hands free heap pages back: what a big
    trace frees between its steps is hundreds of MB. A small trace's pages handed back would only
    fault in again (bench_170k: 5,000 more page faults, about 0.02 s, for 1 MB less peak RSS)."""
    global _releasing
    _releasing = True


def release_free_memory() -> None:
    """glibc's malloc_trim(0): free pages inside the heap handed back to the system, once
    ``keep_memory_low`` was called (elsewhere nothing)."""
    if _TRIM is not None and _releasing:
        _TRIM(ctypes.c_size_t(0))


def big_arrays_apart() -> None:
    """Allocations from 1 MB on (numpy's columns and their temporaries) mapped apart and unmapped
    when freed, for the rest of the process. glibc would otherwise raise that threshold to the
    largest block freed so far (up to 32 MB) and carve later ones from the heap, where the holes
    they leave stay counted in the RSS: a 0.8 GB trace analysed at 415 MB peak RSS without this,
    366 MB with it (benchmarks/BENCHMARKS-loading.md, "Traces of any size")."""
    if _MALLOPT is not None:
        _MALLOPT(ctypes.c_int(_M_MMAP_THRESHOLD), ctypes.c_int(1 << 20))


class NotStreamed(Exception):
    """The file is not a JSON object or array with a ``traceEvents`` array near its start: the
    loader reads it whole instead (small files only) and it fails as it fails there."""


def pieces(stream: IO[bytes], source: str) -> Iterator[bytes]:
    """The file's JSON text a piece at a time: inflated when it is gzip."""
    first = stream.read(_PIECE)
    if first[:2] != GZIP_MAGIC:
        while first:
            yield first
            first = stream.read(max(CHUNK_BYTES, _PIECE))
        return
    yield from _inflate(first, stream, source)


def _inflate(first: bytes, stream: IO[bytes], source: str) -> Iterator[bytes]:
    try:
        from isal import (
            isal_zlib as inflater,  # ~1.6x zlib's speed where installed (the `fast` extra)
        )
    except ImportError:
        inflater = zlib  # type: ignore[assignment]
    errors = (zlib.error, getattr(inflater, "error", zlib.error))
    inflate = inflater.decompressobj(31)  # 31: gzip; checks each member's CRC and size at its end
    data, read, inflated = first, len(first), 0
    while data:
        try:
            # a bounded piece out at a time: a gzip bomb inflates no further than it is read
            while data:
                out = inflate.decompress(data, CHUNK_BYTES)
                inflated += len(out)
                if out:
                    yield out
                data = inflate.unconsumed_tail
                # a member ends; torch writes one, gzip allows more (and zeros) after it
                if inflate.eof:
                    data = inflate.unused_data
                    if not data.strip(b"\0"):
                        data = b""
                    elif data:
                        inflate = inflater.decompressobj(31)
        except errors as exc:
            raise TraceFormatError(
                f"{source} is a truncated or corrupt gzip file ({exc}; reading stopped at byte "
                f"{read:,} of the file, after {inflated:,} bytes of JSON); re-export or re-copy "
                "the trace") from None
        data = stream.read(_PIECE)
        read += len(data)
    if not inflate.eof:
        raise TraceFormatError(
            f"{source} is a truncated or corrupt gzip file (its stream ends early, at byte "
            f"{read:,} of the file, after {inflated:,} bytes of JSON); re-copy the trace, or "
            f"re-export it if the run crashed while writing it")


class Chunks:
    """The events of a stream of JSON text, a chunk at a time (``events``); once they are all
    read, ``outline`` holds the rest of the file (deviceProperties, distributedInfo...) and
    ``skipped`` the events that are not trace events."""

    def __init__(self, text: Iterator[bytes], source: str) -> None:
        self.text, self.source = text, source
        self.buf = bytearray()
        self.base = 0  # where buf starts in the JSON text
        self.ended = False
        self.outline: TraceOutline | None = None
        self.skipped = 0
        self.count = 0  # events read
        self.lenient = False  # some chunk held events of unexpected types (decoded one by one)
        self.head = b""
        self.key_at = -1
        self.closed = False
        self.rest = b""  # the file with 0 for its events: read leniently where some field is odd

    def _fill(self, size: int) -> bool:
        """Read until buf holds ``size`` bytes or the text ends; whether it holds them."""
        while len(self.buf) < size and not self.ended:
            piece = next(self.text, None)
            if piece is None:
                self.ended = True
            else:
                self.buf += piece
        return len(self.buf) >= size

    def _drop(self, n: int) -> None:
        del self.buf[:n]
        self.base += n

    def start(self) -> None:
        """Read up to the '[' that opens the events; raises NotStreamed."""
        self._fill(_PIECE)
        at = 3 if self.buf[:3] == b"\xef\xbb\xbf" else 0  # a UTF-8 byte order mark
        while at < len(self.buf) and self.buf[at] in _SPACE:
            at += 1
        if self.buf[at:at + 1] == b"[":  # the Chrome "JSON Array" form: the file is the events
            self.head = b""
            self._drop(at + 1)
            return
        if self.buf[at:at + 1] != b"{":
            raise NotStreamed
        key = 0
        while True:
            key = self.buf.find(b'"traceEvents"', key)
            if key < 0:
                key = max(len(self.buf) - len(b'"traceEvents"'), 0)
                if len(self.buf) > MAX_OUTSIDE or not self._fill(len(self.buf) + _PIECE):
                    raise NotStreamed
                continue
            self._fill(key + 4096)
            after = re.compile(rb"[ \t\r\n]*:[ \t\r\n]*\[").match(self.buf,
                                                                  key + len(b'"traceEvents"'))
            if after is not None and _top_level_key(bytes(self.buf[:key])):
                break
            key += 1
        self.key_at = key
        self.head = bytes(self.buf[:after.end() - 1])
        self._drop(after.end())

    def events(self) -> Iterator[list[TraceEvent]]:
        """Each chunk's events, decoded as they are asked for; the outline once they end."""
        return self._chunks(msgspec.json.Decoder(list[TraceEvent]), release=True)

    def raw_events(self) -> Iterator[list[msgspec.Raw]]:
        """As ``events``, each event left as its JSON text: what a merge rewrites
        (report/perfetto_merge.py)."""
        return self._chunks(msgspec.json.Decoder(list[msgspec.Raw]), release=False)

    def _chunks(self, decoder: msgspec.json.Decoder[Any], release: bool) -> Iterator[list[Any]]:
        while not self.closed:
            self._fill(CHUNK_BYTES)
            events, used = self._chunk(decoder)
            self._drop(used)
            self.count += len(events)
            if events:
                yield events
                if release:
                    # the chunk's objects are freed by now; the allocator keeps their pages,
                    # scattered between the columns: given back, the RSS is the columns' (a 0.8 GB
                    # trace: 548 MB -> 219 MB)
                    release_free_memory()
        self._read_outline()

    def _chunk(self, decoder: msgspec.json.Decoder[Any]) -> tuple[list[TraceEvent], int]:
        """The events of the next chunk and how many bytes of buf they took (the ',' after them,
        or the array's ']', included)."""
        while True:
            if self.ended:  # the last events and the array's end, all in buf
                outcome = self._decode(decoder, b"".join((b"[", self.buf)))
                if isinstance(outcome, tuple):
                    return self._closing(outcome)
                if isinstance(outcome, list):  # '[' + buf decoded: buf ends with the array's ']'
                    return self._closing((outcome, len(self.buf.rstrip(_SPACE)) - 1))
                # the file ends inside the array: its whole events are read, then it fails
            cut = self._last_gap(min(len(self.buf), CHUNK_BYTES)) or self._last_gap(len(self.buf))
            while cut is not None:
                with memoryview(self.buf) as view:
                    text = b"".join((b"[", view[:cut + 1], b"]"))
                outcome = self._decode(decoder, text)
                if outcome == "cut":  # not a boundary of the array: the one before it
                    cut = self._last_gap(cut)
                    continue
                if isinstance(outcome, tuple):  # the array ends in this chunk
                    return self._closing(outcome)
                return outcome, self.buf.index(b",", cut + 1) + 1
            if self.ended:
                self._truncated()
            # no boundary in buf: the array's end, or an event longer than buf
            outcome = self._decode(decoder, b"".join((b"[", self.buf)))
            if isinstance(outcome, tuple):
                return self._closing(outcome)
            if isinstance(outcome, list):
                return self._closing((outcome, len(self.buf.rstrip(_SPACE)) - 1))
            if len(self.buf) > MAX_OUTSIDE + CHUNK_BYTES:
                raise TraceFormatError(
                    f"{self.source}: no end of an event within {len(self.buf):,} bytes from byte "
                    f"{self.base:,} of its JSON; an event that long is not one a profiler "
                    f"writes: {_HINT}")
            self._fill(len(self.buf) + CHUNK_BYTES)

    def _closing(self, outcome: tuple[list[TraceEvent], int]) -> tuple[list[TraceEvent], int]:
        """The events before the array's ']' (at buf index ``end``): buf is read up to after it."""
        self.closed = True
        return outcome[0], outcome[1] + 1

    def _last_gap(self, before: int) -> int | None:
        """The index of the '}' of the last event boundary before ``before``."""
        at = self.buf.rfind(_KINETO_GAP, 0, before)
        if at >= 0:
            return at + 3
        window = max(before - (1 << 16), 0)
        while True:
            found = next(reversed(list(_ANY_GAP.finditer(self.buf, window, before))), None)
            if found is not None:
                return found.start()
            if window == 0:
                return None
            window = max(window - (1 << 20), 0)

    def _decode(self, decoder: msgspec.json.Decoder[Any], text: bytes) -> Any:
        """The events of ``text`` ('[' + buf's start + ']'); "cut" when it stops inside an event;
        (events, index in buf of the array's ']') when the array ends inside it."""
        try:
            return decoder.decode(text)
        except msgspec.ValidationError:
            pass
        except msgspec.DecodeError as exc:
            return self._broken(decoder, text, str(exc))
        try:  # whole JSON values, some not of the types a trace event has: each decoded leniently
            raws = msgspec.json.decode(text, type=list[msgspec.Raw])
        except msgspec.DecodeError as exc:
            return self._broken(decoder, text, str(exc))
        return self._lenient(raws)

    def _broken(self, decoder: msgspec.json.Decoder[Any], text: bytes, message: str) -> Any:
        at = _BYTE.search(message)
        # a number cut short is "invalid" at the end rather than "truncated"
        if message.startswith("Input data was truncated") or (
                "invalid number" in message and at and int(at.group(1)) >= len(text) - 1):
            return "cut"
        if "trailing characters" in message and at:
            # the array closed before: its ']' is the last one before the trailing text
            end = text.rfind(b"]", 0, int(at.group(1)) + 1)
            while end > 0:
                try:
                    events = self._decode_whole(decoder, text[:end + 1])
                    return events, end - 1  # text has the '[' in front of buf
                except msgspec.DecodeError:
                    end = text.rfind(b"]", 0, end)
        where = self.base + (int(at.group(1)) - 1 if at else len(text) - 1)
        raise TraceFormatError(
            f"{self.source} is not valid JSON ({message.split(' (byte')[0]}): reading stopped at "
            f"byte {where:,} of its JSON, inside traceEvents; {_HINT}")

    def _decode_whole(self, decoder: msgspec.json.Decoder[Any], text: bytes) -> list[TraceEvent]:
        try:
            return decoder.decode(text)
        except msgspec.ValidationError:
            return self._lenient(msgspec.json.decode(text, type=list[msgspec.Raw]))

    def _lenient(self, raws: list[msgspec.Raw]) -> list[TraceEvent]:
        """As trace/load.py's whole-file lenient path: each event converted alone, one that does not
        convert skipped."""
        self.lenient = True
        event_decoder = msgspec.json.Decoder(TraceEvent, strict=False)
        events = []
        for raw in raws:
            try:
                events.append(event_decoder.decode(msgspec.json.encode(msgspec.json.decode(raw))))
            except (msgspec.ValidationError, msgspec.DecodeError, TypeError):
                self.skipped += 1
        return events

    def _truncated(self) -> None:
        raise TraceFormatError(
            f"{self.source} is not valid JSON (it ends inside traceEvents, at byte "
            f"{self.base + len(self.buf):,}; {self.count:,} whole events before byte "
            f"{self.base:,}): a crash while the trace was written? re-export the trace, or let the "
            "profiler finish writing it")

    def _read_outline(self) -> None:
        """The file's other fields: what follows the array, read to the end."""
        while not self.ended:
            if len(self.buf) > MAX_OUTSIDE:
                raise TraceFormatError(
                    f"{self.source}: more than {MAX_OUTSIDE >> 20} MB follow its traceEvents array "
                    f"(from byte {self.base:,} of its JSON); a trace's other fields are "
                    f"small: {_HINT}")
            self._fill(len(self.buf) + _PIECE)
        tail = bytes(self.buf)
        if not self.head:  # the array form: nothing may follow
            if tail.strip(_SPACE):
                raise TraceFormatError(f"{self.source} is not valid JSON (trailing characters "
                                       f"after its events, at byte {self.base:,} of its "
                                       f"JSON); {_HINT}")
            self.outline = TraceOutline(traceEvents=0)
            return
        zero = len(self.head)
        rest = b"".join((self.head, b"0", tail))

        def where(at: int) -> int:  # an index of rest, as a byte of the file's JSON
            return at if at < zero else self.base + at - zero - 1

        twice = events_keys(rest, own=self.key_at)
        if twice:
            raise two_arrays(self.source, self.key_at, where(twice[0]))
        self.rest = rest
        try:
            self.outline = msgspec.json.decode(rest, type=TraceOutline)
        except msgspec.ValidationError:
            self.outline = None  # read leniently by the loader (trace/load.py)
        except msgspec.DecodeError as exc:
            at = _BYTE.search(str(exc))
            raise TraceFormatError(
                f"{self.source} is not valid JSON ({str(exc).split(' (byte')[0]}): reading stopped "
                f"at byte {where(int(at.group(1))) if at else self.base + len(tail):,} of its "
                f"JSON, outside traceEvents; {_HINT}") from None


def _top_level_key(head: bytes) -> bool:
    """Whether ``head`` (the file up to a key) is '{' and whole members: the key is the object's
    own."""
    try:
        return isinstance(msgspec.json.decode(head + b'"k": 0}'), dict)
    except msgspec.DecodeError:
        return False


def events_keys(text: bytes | bytearray, own: int = -1) -> list[int]:
    """Where the top-level "traceEvents" keys of ``text`` (a JSON object, whole or with 0 for its
    events) stand, but for the one at ``own``."""
    found = []
    at = text.find(b'"traceEvents"')
    while at >= 0:
        if at != own and _KEY.match(text, at + len(b'"traceEvents"')) and _top_level_key(
            bytes(text[:at])):
            found.append(at)
        at = text.find(b'"traceEvents"', at + 1)
    return found


def two_arrays(source: str, one: int, other: int) -> TraceFormatError:
    first, second = sorted((one, other))
    return TraceFormatError(f"{source} has two traceEvents arrays (keys at bytes {first:,} and "
                            f"{second:,} of its JSON); a trace has one: pass each trace as a file "
                            "of its own")


_KEY = re.compile(rb"[ \t\r\n]*:")
