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

# Compressed blocks hold about this many bytes of args: one is inflated to read any event in it,
# small enough that reading one event's args costs well under a millisecond.
BLOCK_BYTES = 1 << 18
_CACHED_BLOCKS = 8


class RawArgs(Sequence[bytes]):
    """Each event's ``args`` as bytes (b"" where it has none), by row; ``take`` reads many at once."""

    def __init__(self, blocks: list[bytes], starts: np.ndarray, offsets: np.ndarray, compressed: bool,
                 order: np.ndarray | None = None) -> None:
        self._blocks = blocks  # the args of consecutive events (in the file's order), compressed or not
        self._starts = starts  # int64 [blocks]: where each block starts in the args of all events
        self._offsets = offsets  # int64 [events + 1]: where each event's args start, in the file's order
        self._compressed = compressed
        self._order = order  # int64 [rows]: the event of each row (None: row i is event i)
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
        return RawArgs(self._blocks, self._starts, self._offsets, self._compressed, rows.astype(np.int64))

    def __len__(self) -> int:
        return len(self._offsets) - 1 if self._order is None else len(self._order)

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
        first, last = self._offsets[events], self._offsets[events + 1]
        block = np.searchsorted(self._starts, first, side="right") - 1
        out: list[bytes] = [b""] * len(rows)
        for b in np.unique(block[last > first]).tolist():
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
        return sum(map(len, self._blocks)) + self._offsets.nbytes + (0 if self._order is None else self._order.nbytes)


class RawArgsBuilder:
    """RawArgs a slice at a time: each slice's args are cut into blocks (and compressed) as they come."""

    def __init__(self, compressed: bool) -> None:
        self.compressed = compressed
        self.blocks: list[bytes] = []
        self.starts: list[int] = []
        self.lengths: list[np.ndarray] = []
        self.at = 0

    def add(self, blob: bytes, sizes: np.ndarray) -> None:
        """One slice's args joined, and the length of each."""
        self.lengths.append(sizes.astype(np.int64))
        for first, last in _cuts(sizes, BLOCK_BYTES if self.compressed else len(blob) + 1):
            piece = blob[first:last]
            self.starts.append(self.at + first)
            self.blocks.append(zlib.compress(piece, 1) if self.compressed else piece)
        self.at += len(blob)

    def finish(self) -> RawArgs:
        sizes = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        self.lengths = []
        offsets = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return RawArgs(self.blocks, np.array(self.starts, np.int64), offsets, self.compressed)


def _cuts(sizes: np.ndarray, target: int) -> list[tuple[int, int]]:
    """Byte ranges of about ``target`` bytes each that split ``sizes``' items only between items."""
    ends = np.cumsum(sizes)
    total = int(ends[-1]) if len(ends) else 0
    if total <= target:
        return [(0, total)] if total else []
    cuts = np.unique(ends[np.minimum(np.searchsorted(ends, np.arange(target, total, target)), len(ends) - 1)])
    bounds = [0, *cuts.tolist()]
    if bounds[-1] != total:
        bounds.append(total)
    return list(pairwise(bounds))
