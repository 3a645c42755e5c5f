"""The columnar Trace: numpy arrays per event table, a string table, and the links between them.

Times are integer nanoseconds from the trace's first event. Index columns hold -1 for "none".

Links (computed once by ``trace.load``):
  device event --correlation--> runtime launch (host)  --CPU nesting--> innermost aten op
                                                        --CPU nesting--> outermost op, Python frame
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from functools import cached_property
from typing import Any

import msgspec
import numpy as np

from gpudoctor.core.arrays import distinct
from gpudoctor.trace.schema import OpArgs, decode_args


class HostCat(IntEnum):
    """What a host (CPU-side) event is."""

    OP = 0  # cpu_op: an aten / autograd operator
    ANNOTATION = 1  # user_annotation: record_function, ProfilerStep#N, Optimizer.step#...
    PYTHON = 2  # python_function (with_stack=True)
    RUNTIME = 3  # cuda_runtime: cudaLaunchKernel, cudaMemcpyAsync, cudaStreamSynchronize...
    DRIVER = 4  # cuda_driver: cuLaunchKernel (Triton), cuMemAlloc...
    OTHER = 5


class DeviceCat(IntEnum):
    """What a device (GPU-side) event is."""

    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2


class HostEvents(msgspec.Struct, frozen=True, eq=False):
    """CPU-side complete events, sorted by (thread, start, -end)."""

    ts: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    cat: np.ndarray  # int8 HostCat
    name: np.ndarray  # int32 string id
    thread: np.ndarray  # int32 index into Trace.threads
    correlation: np.ndarray  # int64 (runtime / driver events)
    raw_args: Sequence[bytes]  # each event's "args" as raw JSON (trace/rawargs.py), decoded on demand (Trace.op_args)
    parent: np.ndarray  # int32: enclosing host event on the same thread
    depth: np.ndarray  # int32
    op: np.ndarray  # int32: innermost enclosing cpu_op (excluding self)
    top_op: np.ndarray  # int32: outermost enclosing cpu_op (excluding self)
    frame: np.ndarray  # int32: innermost enclosing python_function

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def dur(self) -> np.ndarray:
        return self.end - self.ts

    def on_threads(self, threads: Any) -> np.ndarray:
        """Mask of the events on any of ``threads`` (``thread`` ids): np.isin's answer from a lookup
        table, without its int64 copy of the column (72 MB on a 4 GB trace's 9M host events)."""
        threads = np.asarray(threads, np.int64).reshape(-1)
        if not len(self.thread) or not threads.size:
            return np.zeros(len(self.thread), bool)
        low = min(int(self.thread.min()), int(threads.min()), 0)
        table = np.zeros(max(int(self.thread.max()), int(threads.max())) + 1 - low, bool)
        table[threads - low] = True
        return table[self.thread - low] if low else table[self.thread]

    def raw_args_at(self, rows: Sequence[int]) -> list[bytes]:
        """The raw "args" JSON of these events (b"" where none), read in one pass: RawArgs inflates
        each of its compressed blocks once for all the rows in it."""
        raws = self.raw_args
        chosen = raws.take(list(rows)) if hasattr(raws, "take") else [raws[i] for i in rows]
        return [bytes(r or b"") for r in chosen]

    def outermost(self, events: np.ndarray | None = None) -> np.ndarray:
        """The outermost operator around each of ``events`` (all of them: None), the event itself
        where none encloses it: the operator a kernel's launch, or a nested operator, belongs to."""
        if events is None:
            return np.where(self.top_op >= 0, self.top_op, np.arange(len(self.top_op)))
        top = self.top_op[events]
        return np.where(top >= 0, top, events)


class DeviceEvents(msgspec.Struct, frozen=True, eq=False):
    """GPU-side events (kernels, memcpy, memset), sorted by start."""

    ts: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    cat: np.ndarray  # int8 DeviceCat
    name: np.ndarray  # int32 string id
    device: np.ndarray  # int32
    stream: np.ndarray  # int64
    correlation: np.ndarray  # int64
    nbytes: np.ndarray  # int64 (memcpy / memset), 0 for kernels
    blocks: np.ndarray  # int64: grid x*y*z (kernels), 0 otherwise
    kind: np.ndarray  # int8 trace.kernels.Kind
    launch: np.ndarray  # int32: host runtime/driver event that launched it
    op: np.ndarray  # int32: innermost aten op around the launch
    top_op: np.ndarray  # int32: outermost aten op around the launch
    graph: np.ndarray  # bool: launched by cudaGraphLaunch
    triton: np.ndarray  # bool: Triton / Inductor generated

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def dur(self) -> np.ndarray:
        return self.end - self.ts


class MemoryEvents(msgspec.Struct, frozen=True, eq=False):
    """``[memory]`` instant events (profile_memory=True) on the GPU, sorted by time."""

    ts: np.ndarray  # int64 ns
    delta: np.ndarray  # int64 bytes (+alloc, -free)
    allocated: np.ndarray  # int64 bytes after the event
    reserved: np.ndarray  # int64 bytes after the event
    device: np.ndarray  # int32

    def __len__(self) -> int:
        return len(self.ts)


class GpuInfo(msgspec.Struct, frozen=True):
    """A GPU as the trace's deviceProperties describe it."""

    name: str
    memory_bytes: int = 0
    compute_capability: tuple[int, int] = (0, 0)
    sm_count: int = 0
    l2_bytes: int = 0


_RAW_FIELDS = ("input_dims", "input_type", "input_strides", "concrete_inputs")
# Op args decoded at a time (in the file's order, each compressed block of them inflated once):
# their raw text, a few hundred bytes an op, is all that a bulk read holds besides what it keeps.
DECODE_ROWS = 1 << 14


class OpArgsTable:
    """The host events' op args as they are read: each row's index into ``values`` (-2: not read
    yet, -1: none or unreadable), one ``OpArgs`` per distinct value. The ops of every step repeat
    the same shapes: a 4 GB trace's 640k decoded ops are a few hundred values, not an object, a key
    and their text each (0.3 GB of RSS; benchmarks/BENCHMARKS-loading.md, "Traces of any size")."""

    def __init__(self) -> None:
        self.ids: np.ndarray | None = None  # int32 [host events], made at the first read
        self.values: list[OpArgs] = []
        self._index: dict[tuple[Any, ...], int] = {}
        self._texts: dict[bytes, bytes] = {}  # the raw fields, one of each

    def add(self, args: OpArgs | None) -> int:
        """The index of ``args``' value, a new one taking the next."""
        if args is None:
            return -1
        key = (args.flops, bytes(args.input_dims), bytes(args.input_type),
               bytes(args.input_strides), bytes(args.concrete_inputs))
        at = self._index.get(key)
        if at is None:
            # the decoded fields would keep alive the text of the op's whole args: bytes of their
            # own
            for name, text in zip(_RAW_FIELDS, key[1:]):
                setattr(args, name, self._texts.setdefault(text, text))
            at = self._index[key] = len(self.values)
            self.values.append(args)
        return at


class Trace(msgspec.Struct, frozen=True, eq=False, dict=True):
    """A loaded profiler trace. Build it with ``gpudoctor.trace.load``."""

    source: str
    strings: list[str]
    threads: list[tuple[str, str]]  # (pid, tid) as strings
    host: HostEvents
    device: DeviceEvents
    memory: MemoryEvents
    gpus: list[GpuInfo]
    span: tuple[int, int]  # first start, last end (ns)
    event_count: int
    skipped_events: int = 0
    bad_times: int = 0  # events dropped for a start or duration no profiler writes (trace/load.py)
    negative_durations: int = 0  # events whose negative duration was read as 0
    missing_durations: int = 0  # complete events written without a duration, read as 0
    unknown_categories: int = 0  # complete events of a category neither Kineto nor PyTorch writes: left out
    other_accelerator_events: int = 0  # MTIA, XPU, HPU, PrivateUse1 activity: read by nothing here
    non_finite_numbers: int = 0  # values written as a bare inf or nan (not JSON), read as null
    bad_args: int = 0  # events kept without their args: an id or size out of range, a field of the wrong type
    # the profiler's clock at time 0 of the columns (ns): ranks' clocks are compared on it
    # (ranks/align.py)
    origin_ns: int = 0
    # deviceProperties fields read as 0 (unknown): out of range, wrong type
    unreadable_gpu_fields: tuple[str, ...] = ()
    _shape_cache: dict[bytes, Any] = msgspec.field(default_factory=dict)
    _op_args: OpArgsTable = msgspec.field(default_factory=OpArgsTable)

    def string(self, sid: int) -> str:
        return self.strings[sid]

    @cached_property
    def string_ids(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.strings)}

    def names_matching(self, predicate: Any) -> np.ndarray:
        """Boolean mask over the string table: True where ``predicate(name)`` holds."""
        return np.fromiter((bool(predicate(s)) for s in self.strings), bool, len(self.strings))

    def op_args(self, indices: Any) -> dict[int, OpArgs | None]:
        """Decoded args (flops, input shapes, strides, dtypes, scalar values) of some host events,
        cached."""
        rows = [int(i) for i in indices]
        values = self._op_args.values
        return {i: values[k] if k >= 0 else None
                for i, k in zip(rows, self.op_arg_ids(np.array(rows, np.int64)).tolist())}

    def op_arg_ids(self, rows: np.ndarray) -> np.ndarray:
        """int32 [rows]: each host event's index into ``op_arg_values`` (-1: no args, or
        unreadable); read once per row and kept."""
        table = self._op_args
        if table.ids is None:
            table.ids = np.full(len(self.host), -2, np.int32)
        ids = table.ids
        wanted = distinct(rows[ids[rows] == -2])
        if wanted.size:
            raws = self.host.raw_args
            if hasattr(raws, "positions"):  # RawArgs: in the file's order, each block inflated once
                wanted = wanted[np.argsort(raws.positions(wanted), kind="stable")]
            for lo in range(0, wanted.size, DECODE_ROWS):
                batch = wanted[lo:lo + DECODE_ROWS].tolist()
                chosen = raws.take(batch) if hasattr(raws, "take") else [raws[i] for i in batch]
                ids[batch] = [table.add(a) for a in decode_args(chosen, OpArgs)]
                del chosen
        return ids[rows]

    def _args_of(self, host_index: int) -> OpArgs | None:
        ids = self._op_args.ids
        k = int(ids[host_index]) if ids is not None else -2
        if k == -2:
            k = int(self.op_arg_ids(np.array([host_index], np.int64))[0])
        return self._op_args.values[k] if k >= 0 else None

    @property
    def op_arg_values(self) -> list[OpArgs]:
        """The distinct op args read so far, indexed by ``op_arg_ids``."""
        return self._op_args.values

    def input_dims(self, host_index: int) -> list[Any]:
        """Decoded "Input Dims" of one host event ([] when not recorded)."""
        args = self._args_of(host_index)
        return self._decode(args.input_dims) if args is not None else []

    def input_types(self, host_index: int) -> list[Any]:
        """Decoded "Input type" of one host event ([] when not recorded)."""
        args = self._args_of(host_index)
        return self._decode(args.input_type) if args is not None else []

    def input_strides(self, host_index: int) -> list[Any]:
        """Decoded "Input Strides" of one host event ([] when not recorded)."""
        args = self._args_of(host_index)
        return self._decode(args.input_strides) if args is not None else []

    def concrete_inputs(self, host_index: int) -> list[Any]:
        """Decoded "Concrete Inputs" (scalar arguments as strings) of one host event ([] when not
        recorded)."""
        args = self._args_of(host_index)
        return self._decode(args.concrete_inputs) if args is not None else []

    def _decode(self, raw: Any) -> list[Any]:
        if not raw:
            return []
        key = bytes(raw)
        cached = self._shape_cache.get(key)
        if cached is None:
            try:
                cached = msgspec.json.decode(key)
            except msgspec.DecodeError:
                cached = []
            if not isinstance(cached, list):
                cached = []
            self._shape_cache[key] = cached
        return cached

    @property
    def gpu(self) -> GpuInfo | None:
        return self.gpus[0] if self.gpus else None

    @cached_property
    def capabilities(self) -> Capabilities:
        """What the trace records, and so which analyses and rules it can support."""
        return capabilities(self)


# ---------------------------------------------------------------------------------------------
# What a trace records (``Trace.capabilities``), computed once per trace
#
# Every analysis assumes some of these facts (trace/capabilities.py says what a trace lacks):
#
#     launch_links   GPU events tied to the host calls that launched them: cuda_runtime /
#                    cuda_driver events whose correlation ids the kernels carry, on a host timeline
#                    with durations. The idle causes, the alignment of steps to the GPU timeline and
#                    every kernel -> op attribution (shapes, FLOPs, source lines) stand on them.
#     cpu_ops        operator (cpu_op) events: op names, input shapes, FLOPs.
#     memory_events  GPU ``[memory]`` events (profile_memory=True).
#
# A profiler window starts with work queued before it: GPU events with no launch record that run
# before the first launched one. Those are expected; GPU events without a launch record after it
# mean launch events are missing from the file.

NEEDS = ("launch_links", "cpu_ops", "memory_events")
# below this share of the window's GPU events with a launch record, the links are too few to stand
# on
MIN_LINKED_SHARE = 0.5

class Capabilities(msgspec.Struct, frozen=True):
    """Counts of what the trace holds; the properties say what it can support."""

    gpu_events: int
    gpu_time_ns: int  # summed durations of the GPU events
    host_events: int
    host_time_ns: int  # summed durations of the host events
    runtime_calls: int  # cuda_runtime and cuda_driver events
    linked: int  # GPU events whose launch call is in the trace
    unlinked_in_window: int  # GPU events with no launch record that start after the first linked one
    cpu_ops: int
    memory_events: int

    @property
    def linked_share(self) -> float:
        """Share of the GPU events recorded in the window (after the work queued before it) that
        have their launch call in the trace."""
        window = self.linked + self.unlinked_in_window
        return self.linked / window if window else 0.0

    @property
    def launch_links(self) -> bool:
        return self.linked > 0 and self.linked_share >= MIN_LINKED_SHARE and self.host_time_ns > 0

    def has(self, need: str) -> bool:
        if need == "launch_links":
            return self.launch_links
        if need == "cpu_ops":
            return self.cpu_ops > 0
        if need == "memory_events":
            return self.memory_events > 0
        raise ValueError(f"unknown need {need!r}; known: {', '.join(NEEDS)}")

    def lacks(self, needs: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(n for n in needs if not self.has(n))

    def reason(self, need: str) -> str:
        """Why the trace lacks ``need``, in words."""
        if need == "launch_links":
            if self.runtime_calls == 0:
                return "it has no cuda_runtime / cuda_driver events, so no GPU event can be tied to its launch"
            if self.linked == 0:
                return "no GPU event carries the correlation id of a cuda_runtime / cuda_driver launch in it"
            if self.linked_share < MIN_LINKED_SHARE:
                return (f"{100 * (1 - self.linked_share):.0f}% of the GPU events recorded in the "
                        "window have no launch record (cuda_runtime / cuda_driver event)")
            return "its host events all last zero time"
        if need == "cpu_ops":
            return "it has no cpu_op events"
        if need == "memory_events":
            return "it has no GPU [memory] events (record with profile_memory=True)"
        raise ValueError(f"unknown need {need!r}; known: {', '.join(NEEDS)}")


def capabilities(trace: Trace) -> Capabilities:
    host, dev = trace.host, trace.device
    is_runtime = (host.cat == HostCat.RUNTIME) | (host.cat == HostCat.DRIVER)
    linked = dev.launch >= 0
    return Capabilities(
        gpu_events=len(dev),
        gpu_time_ns=int(np.sum(dev.dur, dtype=np.float64)),  # float: no int64 wrap-around
        host_events=len(host),
        host_time_ns=int(np.sum(host.dur, dtype=np.float64)),
        runtime_calls=int(is_runtime.sum()),
        linked=int(linked.sum()),
        unlinked_in_window=int((~linked & ~queued_before_window(trace)).sum()),
        cpu_ops=int((host.cat == HostCat.OP).sum()),
        memory_events=len(trace.memory),
    )


def queued_before_window(trace: Trace) -> np.ndarray:
    """GPU events with no launch record that start before the first launched event of their stream
    (of any stream, for a stream with none): work queued before the profiler window opened. With no
    launched event at all, none is. In every recorded fixture all unlinked GPU events are these."""
    dev = trace.device
    linked = dev.launch >= 0
    if not linked.any():
        return np.zeros(len(dev), bool)
    streams, which = np.unique(dev.device.astype(np.int64) * (1 << 40) + dev.stream,
                               return_inverse=True)
    first = np.full(len(streams), int(dev.ts[linked].min()), np.int64)
    first_linked = np.full(len(streams), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_linked, which[linked], dev.ts[linked])
    first = np.where(first_linked < np.iinfo(np.int64).max, first_linked, first)
    return ~linked & (dev.ts < first[which])
