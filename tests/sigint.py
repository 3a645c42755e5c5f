"""SIGINT as the tests' processes may inherit it: a script's background job (``pytest ... &``) starts with
it ignored, and so does every process it starts. The tests of Ctrl-C set it explicitly either way."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


def ignore_sigint() -> None:
    """``preexec_fn``: the child starts as a background job does, SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def default_sigint() -> None:
    """``preexec_fn``: the child starts as a terminal's foreground job does, Ctrl-C a KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """This process ignores SIGINT inside the block (the children it starts inherit that), as a
    background job would; what it did before is restored after."""
    saved = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved)
