"""The DataLoader's queue of ready batches, as the capture sees it through the batches it hands out.

Worker processes fill a queue of ``num_workers x prefetch_factor`` batches ahead of the loop while
the program starts (and again while the profiler exports its trace): steps served from that backlog
are faster than the loader can sustain. The capture does not time them as unprofiled steps, opens
its window after them, and times two rounds of the queue after it (capture/session.py).
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple

from gpudoctor.core.loader import LoaderSettings, usable_cpus

# A loader fetched from in none of this many steps feeds none: whatever its queue's count says, it
# serves the steps no backlog.
IDLE_STEPS = 2


class _Fetched(NamedTuple):
    """What one loader's settings were fetched under: in how many steps, the last of them, and how
    many batches."""

    steps: int
    last_step: int
    batches: int


class LoaderQueue:
    """What the batches fetched so far say of the loader's queue."""

    def __init__(self) -> None:
        self.depth = 0  # batches a multi-worker DataLoader keeps ready (workers x prefetch)
        self.backlog = False  # the current iterator still serves its start-up backlog
        self._yielded = 0  # the current iterator's count of batches at the last fetch
        self._started = False  # the start-up backlog has been served (or a later epoch began)
        self._iterator: Any = None  # a weak reference to the iterator seen last
        self._fetched_in = -1  # the step (boundaries seen before it) of the last fetch
        # what each loader's settings were fetched under. The training loop's loader is the one
        # fetched from in the most steps: an evaluation pass fetches many batches within one step
        # (tests/test_loader_settings.py; benchmarks/BENCHMARKS-replay.md "Knob set l")
        self._settings: dict[tuple[int, bool, int | None, bool], _Fetched] = {}

    @property
    def settings(self) -> LoaderSettings | None:
        """The settings of the loader fetched from in the most steps (then the most batches), with
        the CPUs this process may use; None where no DataLoader was fetched from."""
        if not self._settings:
            return None
        workers, pinned, batch, persistent = max(
            self._settings, key=lambda k: (self._settings[k].steps, self._settings[k].batches))
        return LoaderSettings(num_workers=workers, pin_memory=pinned, batch_size=batch,
                              persistent_workers=persistent, cpus=usable_cpus())

    def batch(self, iterator: Any, step: int = 0) -> None:
        """A batch is about to be fetched from ``iterator`` (a DataLoader's) in the program's step
        ``step`` (the step boundaries seen so far)."""
        key = _settings_of(iterator)
        self._fetched_in = step
        seen = self._settings.get(key, _Fetched(0, -1, 0))
        self._settings[key] = _Fetched(seen.steps + (step != seen.last_step), step,
                                       seen.batches + 1)
        depth = int(getattr(iterator, "_num_workers", 0) or 0) * int(
            getattr(iterator, "_prefetch_factor", 0) or 0)
        if depth <= 0:
            return
        self.depth = max(self.depth, depth)
        yielded = int(getattr(iterator, "_num_yielded", 0) or 0)
        # only the loop's first iterator starts with a queue filled while the program set up; a
        # later epoch's iterator restarts its count at 0 with no such backlog, and read as one an
        # epoch shorter than the queue leaves no step timed. A persistent-workers loader hands out
        # the same iterator object every epoch, its count reset to 0: with fewer batches an epoch
        # than its queue holds, every step would read as backlog
        if self._iterator is not None and (self._iterator() is not iterator
                                           or yielded < self._yielded):
            self._started = True
        self._yielded = yielded
        try:
            self._iterator = weakref.ref(iterator)
        except TypeError:  # an iterator that takes no weak reference: each batch's is "the same"
            self._iterator = None
        self.backlog = not self._started and yielded < depth
        self._started = self._started or yielded >= depth

    def step_ended(self, steps: int) -> None:
        """``steps`` step boundaries seen: a loader fetched from in none of the last IDLE_STEPS
        steps serves them no backlog. A whole dataset taken in one batch before the loop leaves
        its iterator's count under the queue for good, and read as backlog, no step before the
        window would ever be timed (benchmarks/BENCHMARKS-gallery.md "Forward-forward and
        Lightning's GAN, never run before")."""
        if self._fetched_in >= 0 and steps - 1 - self._fetched_in > IDLE_STEPS:
            self.backlog = False

    def calibration_target(self, asked: int) -> int:
        """Steps to time after the window: what was asked, or behind a DataLoader with workers two
        rounds of its queue (2 x workers x prefetch): its workers hand over batches in bursts, and
        a few steps see one wait or none, and their mean misses the program's step by far
        (benchmarks/BENCHMARKS-capture.md "Evidence moved from the source: capture")."""
        if asked <= 0 or self.depth <= 0:
            return asked
        return max(asked, 2 * self.depth)

    def serving_backlog(self, steps_seen: int, skip: int, distributed: bool) -> bool:
        """The window waits while the loader still serves the batches its workers queued before the
        loop started (at most its queue depth more steps; not in a distributed job, whose ranks
        agree on one step). Opened inside that backlog, the window records steps that never wait
        for a batch, and a loader-bound step reads launch-bound (benchmarks/BENCHMARKS-capture.md
        "Evidence moved from the source: capture")."""
        return self.backlog and not distributed and steps_seen < max(skip, 1) + self.depth


def _settings_of(iterator: Any) -> tuple[int, bool, int | None, bool]:
    """A DataLoader iterator's workers, pinning, batch size (its batch sampler's, where it has
    one) and persistent workers, read off torch's private attributes (absent ones read as the
    defaults)."""
    batch = getattr(getattr(iterator, "_index_sampler", None), "batch_size", None)
    workers = getattr(iterator, "_num_workers", 0)
    return (workers if isinstance(workers, int) and workers >= 0 else 0,
            getattr(iterator, "_pin_memory", False) is True,
            batch if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0 else None,
            getattr(iterator, "_persistent_workers", False) is True)
