"""A clock on the DataLoader's fetches, for timing steps outside a capture session (the lab's
twins): how long each ``__next__`` took on the calling thread, added up until taken.

A capture session times the fetch through its own hooks (capture/hooks.py); this is the same
measure where no session runs, so that a step timed by the lab carries its loader's share as a
run's does (capture/timing.py ``fetch_in_step``).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


class FetchClock:
    """Seconds of DataLoader fetches on one thread, added up until taken (``timing_fetches``)."""

    def __init__(self) -> None:
        self._seconds = 0.0
        self._fetches = 0
        self.thread = threading.get_ident()

    def add(self, seconds: float) -> None:
        self._seconds += seconds
        self._fetches += 1

    @property
    def fetched(self) -> bool:
        """Whether any fetch was timed since entering."""
        return self._fetches > 0

    def take(self) -> float:
        """Seconds fetched since the last take (or entering), and start again from 0."""
        seconds, self._seconds = self._seconds, 0.0
        return seconds


def timed_fetch(original: Any, ours: Callable[[], bool], before: Callable[[Any], None],
                fetched: Callable[[float], None]) -> Any:
    """A DataLoader iterator's ``__next__`` that, where ``ours()`` (the program's thread), calls
    ``before(iterator)`` and then ``fetched(seconds)`` with how long the fetch took; a fetch that
    ends the epoch (StopIteration) took its time all the same."""

    @functools.wraps(original)
    def wrapped(iterator: Any, *args: Any, **kwargs: Any) -> Any:
        if not ours():
            return original(iterator, *args, **kwargs)
        before(iterator)
        start = time.perf_counter()
        try:
            return original(iterator, *args, **kwargs)
        finally:
            fetched(time.perf_counter() - start)

    return wrapped


@contextlib.contextmanager
def timing_fetches() -> Iterator[FetchClock]:
    """While inside, every DataLoader fetch on this thread adds its seconds to the clock's
    ``take()``; the loader's ``__next__`` is the original again afterwards."""
    from torch.utils.data import dataloader

    owner = dataloader._BaseDataLoaderIter
    original = owner.__dict__["__next__"]
    clock = FetchClock()
    owner.__next__ = timed_fetch(original, lambda: threading.get_ident() == clock.thread,
                                 lambda _: None, clock.add)
    try:
        yield clock
    finally:
        owner.__next__ = original
