"""The columnar Trace: numpy arrays per event table, a string table, and the links between them.

Times are integer nanoseconds from the trace's first event. Index columns hold -1 for "none".

Links (computed once by ``trace.load``):
  device event --correlation--> runtime launch (host)  --CPU nesting--> innermost aten op
                                                        --CPU nesting--> outermost op, Python frame
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from gpudoctor.trace.schema import OpArgs, decode_args

if TYPE_CHECKING:
    from gpudoctor.trace.capabilities import Capabilities


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


@dataclass(frozen=True, eq=False)
class HostEvents:
    """CPU-side complete events, sorted by (thread, start, -end)."""

    ts: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    cat: np.ndarray  # int8 HostCat
    name: np.ndarray  # int32 string id
    thread: np.ndarray  # int32 index into Trace.threads
    correlation: np.ndarray  # int64 (runtime / driver events)
    raw_args: list[Any]  # msgspec.Raw: each event's "args", decoded on demand (Trace.op_args)
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


@dataclass(frozen=True, eq=False)
class DeviceEvents:
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


@dataclass(frozen=True, eq=False)
class MemoryEvents:
    """``[memory]`` instant events (profile_memory=True) on the GPU, sorted by time."""

    ts: np.ndarray  # int64 ns
    delta: np.ndarray  # int64 bytes (+alloc, -free)
    allocated: np.ndarray  # int64 bytes after the event
    reserved: np.ndarray  # int64 bytes after the event
    device: np.ndarray  # int32

    def __len__(self) -> int:
        return len(self.ts)


@dataclass(frozen=True)
class GpuInfo:
    """A GPU as the trace's deviceProperties describe it."""

    name: str
    memory_bytes: int = 0
    compute_capability: tuple[int, int] = (0, 0)
    sm_count: int = 0
    l2_bytes: int = 0


@dataclass(frozen=True, eq=False)
class Trace:
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
    bad_args: int = 0  # events kept without their args: an id or size out of range, a field of the wrong type
    unreadable_gpu_fields: tuple[str, ...] = ()  # deviceProperties fields read as 0 (unknown): out of range, wrong type
    _shape_cache: dict[bytes, Any] = field(default_factory=dict, repr=False)
    _op_args: dict[int, Any] = field(default_factory=dict, repr=False)

    def string(self, sid: int) -> str:
        return self.strings[sid]

    @cached_property
    def string_ids(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.strings)}

    def names_matching(self, predicate: Any) -> np.ndarray:
        """Boolean mask over the string table: True where ``predicate(name)`` holds."""
        return np.fromiter((bool(predicate(s)) for s in self.strings), bool, len(self.strings))

    def op_args(self, indices: Any) -> dict[int, OpArgs | None]:
        """Decoded args (flops, input shapes, strides, dtypes, scalar values) of some host events, cached."""
        wanted = [int(i) for i in indices if int(i) not in self._op_args]
        if wanted:
            decoded = decode_args([self.host.raw_args[i] for i in wanted], OpArgs)
            self._op_args.update(zip(wanted, decoded))
        return {int(i): self._op_args[int(i)] for i in indices}

    def input_dims(self, host_index: int) -> list[Any]:
        """Decoded "Input Dims" of one host event ([] when not recorded)."""
        args = self.op_args([host_index])[host_index]
        return self._decode(args.input_dims) if args is not None else []

    def input_types(self, host_index: int) -> list[Any]:
        """Decoded "Input type" of one host event ([] when not recorded)."""
        args = self.op_args([host_index])[host_index]
        return self._decode(args.input_type) if args is not None else []

    def input_strides(self, host_index: int) -> list[Any]:
        """Decoded "Input Strides" of one host event ([] when not recorded)."""
        args = self.op_args([host_index])[host_index]
        return self._decode(args.input_strides) if args is not None else []

    def concrete_inputs(self, host_index: int) -> list[Any]:
        """Decoded "Concrete Inputs" (scalar arguments as strings) of one host event ([] when not recorded)."""
        args = self.op_args([host_index])[host_index]
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
        from gpudoctor.trace.capabilities import capabilities

        return capabilities(self)
