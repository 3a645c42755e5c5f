"""Keep Kineto's start/stop chatter off the user's terminal, and nothing else.

Every time a torch.profiler window starts or stops, libkineto (inside libtorch) logs at its USDT
level straight to file descriptor 2::

    USDT:2026-11-25 16:42:19 26766:26766 SyncActivityProfilerHandler.cpp:52] profiler_start

Its level is the highest there is, so KINETO_LOG_LEVEL cannot drop these lines without dropping its
errors too. Around the profiler calls that write them, ``kineto_chatter_filtered`` points fd 2 at a
temporary file, then puts it back and copies to stderr everything written meanwhile (by Kineto, by
the program's other threads) except those two lines: no error is hidden, only delayed by the
length of the call.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

CHATTER = re.compile(rb"^USDT:[^\n]*\] profiler_(?:start|stop)\r?\n?$")


@contextlib.contextmanager
def kineto_chatter_filtered() -> Iterator[None]:
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    try:
        tmp = tempfile.TemporaryFile()  # noqa: SIM115 - closed below, once fd 2 is back
    except OSError:  # no writable temporary folder: let the lines through
        yield
        return
    try:
        saved = os.dup(2)
    except OSError:  # fd 2 is closed: nothing to filter
        tmp.close()
        yield
        return
    try:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            _copy_back(tmp.fileno())
    finally:
        os.close(saved)
        tmp.close()


def _copy_back(fd: int) -> None:
    """Write to stderr what reached the temporary file ``fd``, less Kineto's start/stop lines."""
    if os.lseek(fd, 0, os.SEEK_CUR) == 0:
        return
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    kept = b"".join(line for line in b"".join(chunks).splitlines(keepends=True)
                    if not CHATTER.match(line))
    while kept:
        try:
            kept = kept[os.write(2, kept):]
        except OSError:  # stderr went away meanwhile
            return
