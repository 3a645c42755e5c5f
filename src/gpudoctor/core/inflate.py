"""A gzipped trace inflated in one call; ``python -m gpudoctor analyze PATH --json`` does that on a
second thread while it imports the analysis.

One call into one buffer of the size the gzip trailer states: no second copy of the JSON, no fresh
memory touched twice (a 48 MB trace: 0.064 s of CPU, against 0.092 s inflated 16 kB at a time into
a buffer of the loader's). The inflater releases the GIL for the whole call, so on a thread of its
own it runs beside the imports (0.13 s): benchmarks/BENCHMARKS-loading.md. Only the standard
library is imported here: the thread starts before numpy is.
"""

from __future__ import annotations

import os
import stat
import threading
import zlib

# gzip files from this size on are read a chunk at a time (trace/load.py), never inflated whole
CHUNKED_FROM_GZ = 8 << 20

GZIP_MAGIC = b"\x1f\x8b"  # what a gzip file starts with


def inflate(data: bytes | bytearray) -> bytes | None:
    """The JSON of a file that is one gzip member and nothing after it (what torch.profiler writes);
    None for anything else (several members, padding or bytes after the member, a truncated or
    corrupt stream), which gzip.decompress reads or refuses with its reason. ISA-L (the optional
    ``isal`` package) where installed, else zlib."""
    try:
        from isal import isal_zlib as inflater
    except ImportError:
        inflater = zlib  # type: ignore[assignment]
    if len(data) < 18 or data[:2] != GZIP_MAGIC:  # a member is 10 bytes of header, 8 of trailer
        return None
    # ISIZE, the last 4 bytes: the size mod 2**32. A corrupt file may state any size: deflate
    # inflates at most 1032-fold, so no larger buffer is asked for.
    size = min(int.from_bytes(data[-4:], "little"), 1032 * len(data))
    try:
        # 31: gzip; checks the member's CRC and size against its own trailer
        out = inflater.decompress(data, 31, max(size, 1))
    except Exception:  # noqa: BLE001 - any failure: gzip.decompress decides, and says why
        return None
    # The inflater stops at the end of the first member, whose trailer ends in its size. It was the
    # whole file when the file ends in that size and no second member starts right after it (two
    # members of one size end alike); bytes of another kind after it would have to end in the same
    # 4 bytes. (The member's CRC, checked, is not computed again: 0.01 s.)
    isize = (len(out) & 0xFFFFFFFF).to_bytes(4, "little")
    if not data.endswith(isize) or data.find(isize + GZIP_MAGIC, 0, len(data) - 4) >= 0:
        return None
    return out


class _Ahead:
    """A file inflated on a thread of its own, and which file it was (device, inode, size,
    modification time): the loader takes it only for the file it opens."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.identity: tuple[int, ...] | None = None
        self.json: bytes | None = None
        self.thread = threading.Thread(target=self._run, name="gpudoctor-inflate", daemon=True)

    def _run(self) -> None:
        try:
            with open(self.path, "rb") as stream:
                st = os.fstat(stream.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_size >= CHUNKED_FROM_GZ:
                    return
                data = stream.read()
            if len(data) == st.st_size:
                self.json = inflate(data)
                self.identity = _identity(st)
        except Exception:  # noqa: BLE001 - the loader reads the file itself, and fails as it fails
            self.json = None


_AHEAD: list[_Ahead] = []


def inflate_ahead(path: str) -> None:
    """Starts reading and inflating ``path`` on a thread of its own, where it is a gzip file that
    the loader reads whole (smaller than CHUNKED_FROM_GZ); ``take_inflated`` hands it over."""
    ahead = _Ahead(path)
    _AHEAD.append(ahead)
    ahead.thread.start()


def take_inflated(fd: int) -> bytes | None:
    """The JSON that ``inflate_ahead`` inflated, once the thread is done, where it is that of the
    open file ``fd`` (unchanged since); else None. Each is handed over once."""
    if not _AHEAD:
        return None
    ahead = _AHEAD.pop()
    ahead.thread.join()
    if ahead.json is None or ahead.identity != _identity(os.fstat(fd)):
        return None
    return ahead.json


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
