"""The clock that code measuring elapsed time reads: one place a test can replace.

Settle detection, a trial's time bounds, the time-window fallback and the ranks' deadlines all
decide by elapsed seconds. Read from the machine's clock, their outcomes move with the machine's
load (a 3 ms sleep measured 4-45 ms on a busy 2-core box), so each takes a ``Clock`` and the tests
drive a ``ManualClock`` whose time moves only when they say (tests/test_unprofiled_timing.py,
tests/test_rank_window.py).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Seconds on a monotonic clock, and a way to let some of them pass."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The machine's clocks: ``time.perf_counter`` (monotonic, the finest the host has) and
    ``time.sleep``."""

    def now(self) -> float:
        return time.perf_counter()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock whose time moves only by ``advance`` or ``sleep``: the same outcome on any machine.

    ``sleep`` advances at once (a poll loop against a deadline ends after as many polls as the
    deadline holds, without waiting). Thread-safe: a test may advance it from one thread while
    another reads it.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._t = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock does not run backwards (advance by {seconds})")
        with self._lock:
            self._t += seconds
