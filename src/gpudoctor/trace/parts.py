"""What the loader keeps of each slice of decoded events: the columns of the events whose times
are usable, the args the tables need decoded into columns, and the host events' args joined into
bytes (trace/rawargs.py). Nothing of a slice's decoded objects outlives it, so that a trace read
in chunks holds its columns and one chunk (trace/load.py)."""

from __future__ import annotations

from itertools import repeat
from operator import is_

import msgspec
import numpy as np

from gpudoctor.trace.columns import (
    Events,
    Tables,
    field_of,
    int_column,
    split,
    unreadable,
    usable_times,
)
from gpudoctor.trace.model import HostCat
from gpudoctor.trace.rawargs import RawArgsBuilder
from gpudoctor.trace.schema import DeviceArgs, LaunchArgs, MemoryArgs, TraceEvent, decode_args

_I64_MAX = 2**63 - 1
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1


class Parts(msgspec.Struct):
    """Each slice's host, device and memory columns, and what was dropped or unreadable."""

    host: list[Events] = msgspec.field(default_factory=list)
    device: list[Events] = msgspec.field(default_factory=list)
    memory: list[Events] = msgspec.field(default_factory=list)
    host_args: RawArgsBuilder = msgspec.field(
        default_factory=lambda: RawArgsBuilder(compressed=False))
    timed: int = 0  # complete host and device events and [memory] events, before dropping bad times
    # the first bad time of each table
    bad_example: list[str] = msgspec.field(default_factory=lambda: ["", "", ""])
    bad_args: int = 0
    unknown_categories: int = 0  # complete events of a category neither Kineto nor PyTorch writes
    other_accelerator_events: int = 0  # complete events of an MTIA, XPU, HPU or PrivateUse1 device

    def add(self, events: list[TraceEvent], ids: Tables) -> None:
        *tables, unknown, foreign = split(events, ids)
        self.unknown_categories += unknown
        self.other_accelerator_events += foreign
        self.timed += sum(map(len, tables))
        kept = []
        for k, table in enumerate(tables):
            good, example = usable_times(table)
            self.bad_example[k] = self.bad_example[k] or example
            kept.append(good)
        host, device, memory = kept
        self.host.append(self._host(host))
        self.device.append(self._device(device))
        self.memory.append(self._memory(memory))

    def _host(self, events: Events) -> Events:
        is_launch = (events.code == HostCat.RUNTIME) | (events.code == HostCat.DRIVER)
        launch_idx = np.flatnonzero(is_launch)
        correlation = np.full(len(events), -1, np.int64)
        launch_raws = [events.args[i] for i in launch_idx.tolist()]
        launch_args = decode_args(launch_raws, LaunchArgs)
        self.bad_args += unreadable(launch_raws, launch_args)
        correlation[launch_idx] = int_column(field_of(launch_args, "correlation"))
        raws = events.args
        self.host_args.add(b"".join(raws), np.fromiter(map(len, raws), np.int64, len(raws)))
        events.extra = {"correlation": correlation}
        events.args = []
        return events

    def _device(self, events: Events) -> Events:
        raws = events.args
        args = decode_args(raws, DeviceArgs)
        self.bad_args += unreadable(raws, args)
        keys = events.keys
        device = int_column(field_of(args, "device")).astype(np.int32)
        # without one in its args, a GPU event's pid is its device index: one beyond int32 is no
        # GPU's (read as unknown, -1)
        missing = np.flatnonzero(device < 0).tolist()
        device[missing] = [pid if isinstance(pid, int) and _I32_MIN <= pid <= _I32_MAX else -1
                           for pid, _ in map(keys.__getitem__, missing)]
        stream = int_column(field_of(args, "stream"))
        missing = np.flatnonzero(stream < 0).tolist()  # ... and its tid its stream
        stream[missing] = [_as_int(tid) for _, tid in map(keys.__getitem__, missing)]
        events.extra = {
            "device": device,
            "stream": stream,
            "correlation": int_column(field_of(args, "correlation")),
            "nbytes": np.maximum(int_column(field_of(args, "nbytes")), 0),
            "blocks": _grid_sizes(field_of(args, "grid")),
        }
        events.keys, events.args = [], []
        return events

    def _memory(self, events: Events) -> Events:
        raws = events.args
        decoded = decode_args(raws, MemoryArgs)
        self.bad_args += unreadable(raws, decoded)
        events.extra = {
            "device_type": int_column(field_of(decoded, "device_type")),
            "delta": int_column(field_of(decoded, "mem_bytes"), missing=0),
            "allocated": np.maximum(int_column(field_of(decoded, "total_allocated")), 0),
            "reserved": np.maximum(int_column(field_of(decoded, "total_reserved")), 0),
            "device": int_column(field_of(decoded, "device_id")).astype(np.int32),
        }
        events.args = []
        return events


def _as_int(value: int | str) -> int:
    """A stream id from an int or a name such as "stream 7"; -1 when none fits in int64."""
    if isinstance(value, int):
        return value
    # ASCII digits only: str.isdigit() also admits '²', which int() refuses (found by the fuzz test)
    digits = "".join(ch for ch in value if "0" <= ch <= "9")
    if not digits or len(digits) > 18:  # 18 digits always fit int64; more may not (a tid of 2**70)
        return -1
    return int(digits)


def _grid_sizes(grids: list[list[int] | None]) -> np.ndarray:
    """Thread blocks of each launch: CUDA's largest grid, (2**31 - 1) x 65535 x 65535, fits int64; a
    product beyond it is capped there. Grids of three dimensions, as Kineto writes them, at once."""
    three = [g if g is not None and len(g) == 3 else _NO_GRID for g in grids]
    dims = np.maximum(np.array(three, dtype=np.int64).reshape(len(grids), 3), 1)
    # each dimension is below 2**31 (schema.I32): the product of two fits int64, of three may not
    # (an int64 product that wraps around is replaced below)
    sizes = dims[:, 0] * dims[:, 1] * dims[:, 2]
    rough = dims[:, 0].astype(np.float64) * dims[:, 1] * dims[:, 2]
    odd = np.flatnonzero((rough >= 2.0**62) | np.fromiter(map(is_, three, repeat(_NO_GRID)), bool,
                                                          len(grids)))
    for i in odd.tolist():
        sizes[i] = _grid_size(grids[i])
    return sizes


_NO_GRID = [0, 0, 0]


def _grid_size(grid: list[int] | None) -> int:
    if not grid:
        return 0
    size = 1
    for g in grid:
        size *= max(int(g), 1)
    return min(size, _I64_MAX)
