"""A trace file with events added at the end of its ``traceEvents``, its own bytes kept as they are.

Two passes over the file's JSON text, a chunk at a time as the loader reads a big trace
(trace/stream.py), so that a trace of any size costs the memory of a chunk, not of the file:

1. ``survey``: the integer pids and tids its events use (added tracks take others), its earliest
   ``ts`` (where a timeline viewer's zero lies), and the offset of the ``]`` that closes the events;
2. ``write_with_events``: the text copied up to that ``]``, the events added there (laid out as
   Kineto lays out its own, ``{`` and ``}`` on lines of their own), then the rest of the file.

Every byte of the trace stays as it was: its timestamps, names and args are untouched. A file that
already holds events of the given ``cat`` (an earlier annotation) is decoded whole instead, those
events dropped, and written again: its values kept, its layout not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec

from gpudoctor.core.inflate import GZIP_MAGIC
from gpudoctor.errors import InputError, TraceFormatError
from gpudoctor.trace.read import gunzip
from gpudoctor.trace.schema import Ph
from gpudoctor.trace.stream import Chunks, NotStreamed, pieces


@dataclass(frozen=True, eq=False)
class Survey:
    """What the writer needs to know of a trace file before adding to it."""

    path: Path
    ids: frozenset[int]  # every integer pid and tid of its events
    first_ts_us: float | None  # the earliest ts of its events
    closing: int  # offset in its JSON text of the ']' that closes traceEvents; -1: rewrite it whole
    annotated: bool  # it holds events of the category given to survey (they are replaced)


def survey(path: Path, cat: str) -> Survey:
    """Read ``path`` once, a chunk at a time; events of category ``cat`` are not counted."""
    marker = _marker(cat)
    seen = _Marked(marker)
    ids: set[int] = set()
    first: float | None = None
    try:
        with path.open("rb") as stream:
            chunks = Chunks(seen.watch(pieces(stream, str(path))), str(path))
            try:
                chunks.start()
            except NotStreamed:
                return _surveyed_whole(path, cat)
            for events in chunks.events():
                for e in events:
                    ids.update(v for v in (e.pid, e.tid) if isinstance(v, int))
                ts = [e.ts for e in events if e.ph is not _METADATA]
                if ts and (first is None or min(ts) < first):
                    first = min(ts)
    except OSError as exc:
        raise InputError(
            f"cannot read {path}: {exc.strerror or exc}; check the path and its permissions") from None
    if seen.found:  # its ids and start include the earlier annotation's: read again without it
        return _surveyed_whole(path, cat)
    return Survey(path, frozenset(ids), first, chunks.base - 1, False)


# Kineto gives its metadata events the time the profiler started, not an event's: a viewer's
# timeline starts at the earliest event of another kind.
_METADATA = Ph.M


def _marker(cat: str) -> bytes:
    """How the writer spells an added event's category (``_block``): found, the file was
    annotated."""
    return json.dumps({"cat": cat}, separators=(", ", ": "))[1:-1].encode()


class _Marked:
    """The JSON text passed through, watched for ``marker`` (across the pieces' boundaries too)."""

    def __init__(self, marker: bytes) -> None:
        self.marker, self.found = marker, False

    def watch(self, text: Iterator[bytes]) -> Iterator[bytes]:
        carry = b""
        for piece in text:
            if not self.found and (self.marker in carry + piece[: len(self.marker)]
                                   or self.marker in piece):
                self.found = True
            carry = piece[-len(self.marker) + 1:]
            yield piece


def _surveyed_whole(path: Path, cat: str) -> Survey:
    """``survey`` of a file read whole: one laid out otherwise, or annotated before."""
    events = decoded_whole(path).get("traceEvents", [])
    ids: set[int] = set()
    first: float | None = None
    for e in events:
        if not isinstance(e, dict) or e.get("cat") == cat:
            continue
        ids.update(v for v in (e.get("pid"), e.get("tid")) if isinstance(v, int)
                   and not isinstance(v, bool))
        ts = e.get("ts")
        if e.get("ph") != "M" and isinstance(ts, (int, float)) and not isinstance(ts, bool):
            first = float(ts) if first is None else min(first, float(ts))
    return Survey(path, frozenset(ids), first, -1, True)


def decoded_whole(path: Path) -> dict[str, Any]:
    """The whole trace file decoded (gunzipped first where it is), as ``{"traceEvents": [...],
    ...}``."""
    raw = path.read_bytes()
    data = bytes(gunzip(raw, str(path))) if raw[:2] == GZIP_MAGIC else raw
    try:
        top = msgspec.json.decode(data)
    except msgspec.DecodeError:
        raise TraceFormatError(
            f"{path} is not valid JSON; pass the trace file torch.profiler wrote") from None
    if isinstance(top, list):  # the Chrome "JSON Array" form: written as an object
        top = {"traceEvents": top}
    if not isinstance(top, dict) or not isinstance(top.get("traceEvents"), list):
        raise TraceFormatError(f"{path} is JSON but not a profiler trace (no 'traceEvents' list)")
    return top


def write_with_events(s: Survey, events: list[dict[str, Any]], cat: str, out: IO[bytes]) -> None:
    """Write the surveyed file's JSON to ``out`` with ``events`` added at the end of its events
    (and those of category ``cat`` an earlier pass added taken out)."""
    added = b",\n  ".join(_block(e) for e in events)
    if s.closing < 0:
        out.write(_rewritten(s.path, added, cat))
        return
    at = 0
    held = b""  # the text just before the ']': where its blank run starts is known only at the ']'
    with s.path.open("rb") as stream:
        for piece in pieces(stream, str(s.path)):
            end = at + len(piece)
            if at <= s.closing < end:
                cut = s.closing - at
                _write_events(out, held + piece[:cut], added)
                out.write(piece[cut:])
                held = b""
            elif end <= s.closing:
                text = held + piece
                out.write(text[: max(len(text) - _HELD, 0)])
                held = text[max(len(text) - _HELD, 0):]
            else:
                out.write(piece)
            at = end


# bytes held back before the ']': more than the blanks between the last event and it
_HELD = 1 << 12


def _write_events(out: IO[bytes], before: bytes, added: bytes) -> None:
    """``before`` (the text up to the ']') with ``added`` after its last event, before its
    blanks."""
    last = len(before.rstrip(b" \t\r\n"))
    out.write(before[:last])
    if added:
        out.write(b"" if before[last - 1: last] == b"[" else b",")
        out.write(b"\n  " + added)
    out.write(before[last:] or b"\n  ")


def _block(event: dict[str, Any]) -> bytes:
    """One event as Kineto writes one: ``{`` and ``}`` on lines of their own."""
    body = json.dumps(event, allow_nan=False, separators=(", ", ": "))
    return b"{\n    " + body[1:-1].encode("ascii") + b"\n  }"


def _rewritten(path: Path, added: bytes, cat: str) -> bytes:
    """The whole file decoded, the events of ``cat`` dropped, and written again with ``added``."""
    top = decoded_whole(path)
    kept = [e for e in top["traceEvents"] if not (isinstance(e, dict) and e.get("cat") == cat)]
    head = {k: v for k, v in top.items() if k != "traceEvents"}
    blocks = [_block(e) if isinstance(e, dict) else msgspec.json.encode(e) for e in kept]
    if added:
        blocks.append(added)
    opening = msgspec.json.encode(head)[:-1] + (b", " if head else b"")
    return opening + b'"traceEvents": [\n  ' + b",\n  ".join(blocks) + b"\n  ]\n}\n"
