"""Columns of decoded events, slice by slice: which table each event goes to, its times, its
name and thread as ids in the order they first appear, its args left raw (trace/load.py makes
the tables of them)."""

from __future__ import annotations

from collections import defaultdict
from itertools import chain, count, repeat
from operator import attrgetter, is_
from typing import Any

import msgspec
import numpy as np

from gpudoctor.trace.model import DeviceCat, HostCat
from gpudoctor.trace.schema import MAX_TIME_US, Cat, Ph, TraceEvent
from gpudoctor.trace.stream import release_free_memory

# Each event's category as one int8 code: a HostCat, DEVICE + a DeviceCat, or OTHER.
DEVICE = 8
OTHER = -1
UNKNOWN = -2  # a category neither Kineto nor PyTorch writes (``Cat.OTHER``): counted, and said (``split``)
FOREIGN = -3  # another accelerator's activity (MTIA, XPU, HPU, a PrivateUse1 backend): counted
CAT_CODES: dict[Cat, int] = {
    **dict.fromkeys(Cat, OTHER),
    Cat.OTHER: UNKNOWN,
    **dict.fromkeys((Cat.MTIA_RUNTIME, Cat.MTIA_CCP_EVENTS, Cat.MTIA_INSIGHT, Cat.GLOW_RUNTIME,
                     Cat.HPU_OP, Cat.XPU_RUNTIME, Cat.XPU_DRIVER, Cat.PRIVATEUSE1_RUNTIME,
                     Cat.PRIVATEUSE1_DRIVER), FOREIGN),
    Cat.CPU_OP: HostCat.OP,
    Cat.OPERATOR: HostCat.OP,
    Cat.USER_ANNOTATION: HostCat.ANNOTATION,
    Cat.PYTHON_FUNCTION: HostCat.PYTHON,
    Cat.CUDA_RUNTIME: HostCat.RUNTIME,
    Cat.CUDA_DRIVER: HostCat.DRIVER,
    Cat.KERNEL: DEVICE + DeviceCat.KERNEL,
    Cat.GPU_MEMCPY: DEVICE + DeviceCat.MEMCPY,
    Cat.GPU_MEMSET: DEVICE + DeviceCat.MEMSET,
    Cat.OPERATOR_OLD: HostCat.OP,
    Cat.RUNTIME_OLD: HostCat.RUNTIME,
    Cat.KERNEL_OLD: DEVICE + DeviceCat.KERNEL,
    Cat.MEMCPY_OLD: DEVICE + DeviceCat.MEMCPY,
    Cat.MEMSET_OLD: DEVICE + DeviceCat.MEMSET,
    Cat.PYTHON_OLD: HostCat.PYTHON,
}
# Columns are read with attrgetter and map: the loop over the events runs in C.
_CAT, _PH, _NAME, _ARGS = attrgetter("cat"), attrgetter("ph"), attrgetter(
    "name"), attrgetter("args")
_TS, _DUR, _THREAD = attrgetter("ts"), attrgetter("dur"), attrgetter("pid", "tid")


class Strings:
    """The string table: every name becomes an int once."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def table(self) -> list[str]:
        return list(self.ids)

    def add(self, provisional: np.ndarray, names: Interner) -> np.ndarray:
        """The ids of names given as ``names``' ids, new names taking the next ids in the order
        they first appear."""
        first, renumbered = first_seen(provisional, len(names.ids))
        table, ids = list(names.ids), self.ids
        mapped = np.array([ids.setdefault(table[i], len(ids)) for i in first.tolist()],
                          dtype=np.int32)
        return mapped[renumbered] if len(mapped) else np.zeros(len(provisional), np.int32)


class Interner:
    """Ids of names or threads in the order they first appear, one table for all slices (the
    events' own strings are dropped with each slice: one copy of each name stays)."""

    def __init__(self) -> None:
        # a value not seen yet takes the next id as it is looked up: one hash per value, in C
        # (dict.fromkeys, then a lookup per value, took 2.7x as long for (pid, tid) pairs)
        self.ids: dict[Any, int] = defaultdict(count().__next__)

    def __call__(self, values: list[Any]) -> np.ndarray:
        return np.fromiter(map(self.ids.__getitem__, values), np.int32, len(values))


def first_seen(provisional: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The provisional ids in the order they first appear in ``provisional``, and each entry
    renumbered in that order: the ids interning only these entries would have given (events
    dropped for their times may have been the first, or the only ones, with some name). ``size``:
    how many provisional ids there are."""
    seen = np.zeros(size, bool)
    seen[provisional] = True
    if seen.all() and (len(provisional) == 0 or _in_first_order(provisional)):
        return np.arange(size), provisional
    distinct, first_at, renumbered = np.unique(provisional, return_index=True, return_inverse=True)
    order = np.argsort(first_at, kind="stable")
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    return distinct[order], rank[renumbered.reshape(-1)]


def _in_first_order(provisional: np.ndarray) -> bool:
    """Whether each id first appears after every smaller one (true of ids given in one pass)."""
    running = np.maximum.accumulate(provisional)
    return bool(provisional[0] == 0 and np.all(np.diff(running) <= 1))


class Events(msgspec.Struct):
    """The events of one table as columns, in the file's order. ``keys`` and ``args`` are the
    slice's own until ``read_args`` turns the args into columns (``extra``) and joined bytes."""

    code: np.ndarray  # int8: CAT_CODES
    ts: np.ndarray  # float64 us
    dur: np.ndarray  # float64 us (0 for instant events)
    name: np.ndarray  # int32: Interner ids (host and device events)
    thread: np.ndarray  # int32: Interner ids of (pid, tid) (host events)
    keys: list[tuple[int | str, int | str]]  # (pid, tid) (device events)
    args: list[Any]  # msgspec.Raw
    extra: dict[str, np.ndarray] = msgspec.field(default_factory=dict)  # columns read from the args

    def __len__(self) -> int:
        return len(self.ts)

    @staticmethod
    def concat(parts: list[Events]) -> Events:
        """The parts joined; consumes them: each column of the parts is dropped once joined, so that
        a big trace's columns are not all alive twice (peak memory)."""
        if len(parts) == 1:
            return parts[0]
        columns = {}
        for f in ("code", "ts", "dur", "name", "thread"):
            columns[f] = np.concatenate([getattr(p, f) for p in parts])
            for p in parts:
                setattr(p, f, _DROPPED)
            # the parts' small arrays sit in the heap: its freed pages handed back
            release_free_memory()
        extra = {}
        for k in parts[0].extra if parts else ():
            extra[k] = np.concatenate([p.extra[k] for p in parts])
            for p in parts:
                p.extra[k] = _DROPPED
            release_free_memory()
        return Events(**columns, keys=list(chain.from_iterable(p.keys for p in parts)),
                      args=list(chain.from_iterable(p.args for p in parts)), extra=extra)

    def take(self, keep: np.ndarray) -> Events:
        """The events where ``keep`` holds."""
        rows = np.flatnonzero(keep).tolist()
        return Events(self.code[keep], self.ts[keep], self.dur[keep], self.name[keep],
                      self.thread[keep],
                       [self.keys[i] for i in rows] if self.keys else [],
                      [self.args[i] for i in rows],
                       {k: v[keep] for k, v in self.extra.items()})


_DROPPED = np.zeros(0)


def _pick(events: list[TraceEvent], rows: np.ndarray, code: np.ndarray,
          names: Interner | None = None,
          threads: Interner | None = None, keys: bool = False) -> Events:
    """The columns of ``events[rows]``. With no ``names``, instant events (the ``[memory]`` ones):
    no duration to check, and their table reads neither names nor threads."""
    chosen = list(map(events.__getitem__, rows.tolist()))
    n = len(chosen)
    return Events(
        code=code[rows],
        ts=np.fromiter(map(_TS, chosen), np.float64, n),
        dur=np.fromiter(map(_DUR, chosen), np.float64, n) if names is not None else np.zeros(n),
        name=names(list(map(_NAME, chosen))) if names is not None else np.zeros(n, np.int32),
        thread=threads(list(map(_THREAD, chosen)))
        if threads is not None else np.zeros(n, np.int32),
        keys=list(map(_THREAD, chosen)) if keys else [],
        args=list(map(_ARGS, chosen)),
    )


class Tables(msgspec.Struct):
    """What the slices share: the ids of host names, threads and device names."""

    host_names: Interner
    threads: Interner
    device_names: Interner


def split(events: list[TraceEvent], ids: Tables) -> tuple[Events, Events, Events, int, int]:
    """Host and device complete events, ``[memory]`` events of any other category, how many
    complete events carry a category the loader does not know, and how many another
    accelerator's (both left out)."""
    n = len(events)
    code = np.fromiter(map(CAT_CODES.__getitem__, map(_CAT, events)), np.int8, n)
    complete = np.fromiter(map(is_, map(_PH, events), repeat(Ph.X)), bool, n)
    unknown = int((complete & (code == UNKNOWN)).sum())
    foreign = int((complete & (code == FOREIGN)).sum())
    host = np.flatnonzero((code >= 0) & (code < DEVICE) & complete)
    device = np.flatnonzero((code >= DEVICE) & complete)
    other = np.flatnonzero(code == OTHER)
    named = np.fromiter(map("[memory]".__eq__, map(_NAME, map(events.__getitem__, other.tolist()))),
                        bool, len(other))
    return (_pick(events, host, code, ids.host_names, ids.threads),
            _pick(events, device, code, ids.device_names, keys=True),
            _pick(events, other[named], code), unknown, foreign)


def usable_times(events: Events) -> tuple[Events, str]:
    """The events whose times a profiler could have written, and the first unusable time of those
    dropped ("" when none was)."""
    ts, dur = events.ts, events.dur
    ok = np.isfinite(ts) & (np.abs(ts) <= MAX_TIME_US) & np.isfinite(dur) & (
        np.abs(dur) <= MAX_TIME_US)
    if ok.all():
        return events, ""
    first = int(np.argmin(ok))
    bad_ts = not np.isfinite(ts[first]) or abs(ts[first]) > MAX_TIME_US
    example = f"ts={ts[first]:g} us" if bad_ts else f"dur={dur[first]:g} us"
    return events.take(ok), example


def int_column(values: list[int | None], missing: int = -1) -> np.ndarray:
    """``missing`` where a value is None."""
    if None not in values:
        return np.fromiter(values, np.int64, len(values))
    return np.fromiter((missing if v is None else v for v in values), np.int64, len(values))


def field_of(args: list[Any], name: str) -> list[Any]:
    """One field of each decoded ``args`` (None where the args are)."""
    if None not in args:
        return list(map(attrgetter(name), args))
    return [getattr(a, name) if a is not None else None for a in args]


def unreadable(raws: list[Any], decoded: list[Any]) -> int:
    """How many events carry ``args`` that did not decode (an id or size out of range, a field of
    the wrong type): the events are kept without them."""
    if None not in decoded:
        return 0
    return sum(1 for r, a in zip(raws, decoded) if a is None and r and bytes(r) != b"null")
