"""The host events' ``args`` as raw JSON, kept as bytes in a few large blocks rather than as one
object per event that points into the file's buffer: the buffer (or a chunk of it) can be freed
once its events are read, and a big trace's args are compressed block by block (trace/load.py)."""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from gpudoctor.core.arrays import distinct

# Compressed blocks hold about this many bytes of args: one is inflated to read any event in it,
# small enough that reading one event's args costs well under a millisecond.
BLOCK_BYTES = 1 << 18
_CACHED_BLOCKS = 8
# Offsets are kept as their low bits (uint32) and the events where the high bits step up: half
# the memory of int64 offsets (72 MB on a 4 GB trace's 9M host events)
_LOW_BITS = 32


class RawArgs(Sequence[bytes]):
    """Each event's ``args`` as bytes (b"" where it has none), by row; ``take`` reads many at
    once."""

    def __init__(self, blocks: list[bytes], starts: np.ndarray, low: np.ndarray, wraps: np.ndarray,
                 compressed: bool, order: np.ndarray | None = None) -> None:
        self._blocks = blocks  # the args of consecutive events (in the file's order), compressed or not
        self._starts = starts  # int64 [blocks]: where each block starts in the args of all events
        # where each event's args start, in the file's order: the offset's low bits, uint32 [events
        # + 1], and int64 [wraps] the indices at which it passes another 2**_LOW_BITS bytes
        # (``_offsets``)
        self._low, self._wraps = low, wraps
        self._compressed = compressed
        # int32 (int64 past 2**31 events) [rows]: the event of each row (None: row i is event i)
        self._order = order
        self._cache: OrderedDict[int, bytes] = OrderedDict()

    @classmethod
    def build(cls, parts: Iterable[tuple[bytes, np.ndarray]], compressed: bool) -> RawArgs:
        """From each slice's args joined and their lengths, in the file's order."""
        builder = RawArgsBuilder(compressed)
        for blob, sizes in parts:
            builder.add(blob, sizes)
        return builder.finish()

    def reordered(self, order: np.ndarray) -> RawArgs:
        """Row i holds what row ``order[i]`` held."""
        rows = order if self._order is None else self._order[order]
        return RawArgs(self._blocks, self._starts, self._low, self._wraps, self._compressed,
                       rows.astype(_index_type(len(self._low)), copy=False))

    def positions(self, rows: np.ndarray) -> np.ndarray:
        """Where each row's args stand in the file's order: rows read in that order inflate each
        block once."""
        return rows if self._order is None else self._order[rows]

    def _offsets(self, events: np.ndarray) -> np.ndarray:
        """int64 offsets of ``events`` (indices into the events + 1 offsets)."""
        return self._low[events].astype(np.int64) + (np.searchsorted(self._wraps, events,
                                                                     side="right") << _LOW_BITS)

    def __len__(self) -> int:
        return len(self._low) - 1 if self._order is None else len(self._order)

    def __getitem__(self, row: Any) -> Any:
        if isinstance(row, slice):
            return self.take(range(len(self))[row])
        n = len(self)
        if not -n <= row < n:
            raise IndexError("row out of range")
        return self.take([row % n])[0]

    def take(self, rows: Iterable[int]) -> list[bytes]:
        """The args of many rows, each block read once."""
        rows = np.fromiter(rows, np.int64)
        events = rows if self._order is None else self._order[rows]
        first, last = self._offsets(events), self._offsets(events + 1)
        block = np.searchsorted(self._starts, first, side="right") - 1
        out: list[bytes] = [b""] * len(rows)
        for b in distinct(block[last > first]).tolist():
            data, base = self._block(b), int(self._starts[b])
            for i in np.flatnonzero(block == b).tolist():
                out[i] = data[int(first[i]) - base:int(last[i]) - base]
        return out

    def _block(self, b: int) -> bytes:
        if not self._compressed:
            return self._blocks[b]
        data = self._cache.pop(b, None)
        if data is None:
            data = zlib.decompress(self._blocks[b])
            if len(self._cache) >= _CACHED_BLOCKS:
                self._cache.popitem(last=False)
        self._cache[b] = data
        return data

    @property
    def stored_bytes(self) -> int:
        return (sum(map(len, self._blocks)) + self._low.nbytes + self._wraps.nbytes
                + (0 if self._order is None else self._order.nbytes))


class RawArgsBuilder:
    """RawArgs a slice at a time: each slice's args are cut into blocks (and compressed) as they
    come."""

    def __init__(self, compressed: bool) -> None:
        self.compressed = compressed
        self.blocks: list[bytes] = []
        self.starts: list[int] = []
        self.low: list[np.ndarray] = [np.zeros(1, np.uint32)]
        self.wraps: list[np.ndarray] = []
        self.at = 0  # bytes of args so far
        self.count = 0  # events so far

    def add(self, blob: bytes, sizes: np.ndarray) -> None:
        """One slice's args joined, and the length of each."""
        ends = np.cumsum(sizes, dtype=np.int64)
        ends += self.at
        self.low.append((ends & ((1 << _LOW_BITS) - 1)).astype(np.uint32))
        passed = np.diff(ends >> _LOW_BITS, prepend=self.at >> _LOW_BITS)
        at = np.flatnonzero(passed)
        self.wraps.append(np.repeat(at + self.count + 1, passed[at]))
        for first, last in _cuts(sizes, BLOCK_BYTES if self.compressed else len(blob) + 1):
            piece = blob[first:last]
            self.starts.append(self.at + first)
            self.blocks.append(zlib.compress(piece, 1) if self.compressed else piece)
        self.at += len(blob)
        self.count += len(sizes)

    def finish(self) -> RawArgs:
        low, self.low = np.concatenate(self.low), []
        wraps = np.concatenate(self.wraps) if self.wraps else np.zeros(0, np.int64)
        return RawArgs(self.blocks, np.array(self.starts, np.int64), low, wraps.astype(np.int64),
                       self.compressed)


def _index_type(n: int) -> type[np.signedinteger[Any]]:
    return np.int32 if n <= np.iinfo(np.int32).max else np.int64


def _cuts(sizes: np.ndarray, target: int) -> list[tuple[int, int]]:
    """Byte ranges of about ``target`` bytes each that split ``sizes``' items only between items."""
    ends = np.cumsum(sizes)
    total = int(ends[-1]) if len(ends) else 0
    if total <= target:
        return [(0, total)] if total else []
    cuts = distinct(ends[np.minimum(np.searchsorted(ends, np.arange(target, total, target)),
                                     len(ends) - 1)])
    bounds = [0, *cuts.tolist()]
    if bounds[-1] != total:
        bounds.append(total)
    return list(pairwise(bounds))
