"""The parts of a Kineto / Chrome trace that gpudoctor reads, as msgspec structs.

torch.profiler's ``export_chrome_trace`` writes ``{"traceEvents": [...], "deviceProperties": [...],
...}``. Decoding straight into typed structs, with each event's ``args`` kept as raw JSON until the
table of its kind decodes them, ``cat`` and ``ph`` as shared enum members, is what makes loading
fast: benchmarks/bench_json_decode.py compares it with ``json.loads`` and ``orjson.loads`` on the
same trace (benchmarks/BENCHMARKS-loading.md).

Field names and their spelling come from Kineto's ChromeTraceLogger (libkineto/src/output_json.cpp)
and torch/autograd/profiler_util.py; they have been stable from PyTorch 2.4 to 2.13.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

import msgspec

# Integer fields are bounded so that decoding never yields a Python int numpy cannot hold (a pid or
# correlation id of 2**70 would raise OverflowError deep in the loader). An event whose pid or
# tid is out of range is skipped (it counts in Trace.skipped_events); args holding an id or size out
# of range are unreadable, and their event is kept without them (Trace.bad_args).
I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
I32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]  # a GPU index, a grid dimension
# No GPU copies, sets or holds a pebibyte: a larger size is not one a profiler wrote, and sums of
# such sizes over a window stay far inside int64.
MAX_BYTES = 2**50
Bytes = Annotated[int, msgspec.Meta(ge=-MAX_BYTES, le=MAX_BYTES)]
# Times are microseconds: since the epoch (Kineto's absolute clock, ~1.7e15 today) or since the
# trace began. They become int64 nanoseconds; an event whose start or duration lies beyond
# +-4e15 us (the year 2096) cannot be one a profiler wrote, and ts + dur in ns would overflow int64.
MAX_TIME_US = 4e15


# A field the file leaves out: one empty Raw shared by every struct (Raw is immutable) rather than
# a new one each (the flows and instants of a trace have no args).
_ABSENT = msgspec.Raw()


class DeviceArgs(msgspec.Struct, gc=False):
    """``args`` of a kernel / memcpy / memset."""

    correlation: I64 | None = None
    stream: I64 | None = None
    device: I32 | None = None
    grid: list[I32] | None = None
    nbytes: Bytes | None = msgspec.field(default=None, name="bytes")


class LaunchArgs(msgspec.Struct, gc=False):
    """``args`` of a cuda_runtime / cuda_driver call."""

    correlation: I64 | None = None


class OpArgs(msgspec.Struct, gc=False):
    """``args`` of a cpu_op: decoded only for ops that launched GPU work."""

    flops: float | None = None
    input_dims: msgspec.Raw = msgspec.field(default=_ABSENT, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_ABSENT, name="Input type")
    input_strides: msgspec.Raw = msgspec.field(default=_ABSENT, name="Input Strides")
    concrete_inputs: msgspec.Raw = msgspec.field(default=_ABSENT, name="Concrete Inputs")


class MemoryArgs(msgspec.Struct, gc=False):
    """``args`` of a ``[memory]`` instant event (profile_memory=True)."""

    mem_bytes: Bytes | None = msgspec.field(default=None, name="Bytes")
    total_allocated: Bytes | None = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Bytes | None = msgspec.field(default=None, name="Total Reserved")
    device_type: I32 | None = msgspec.field(default=None, name="Device Type")
    device_id: I32 | None = msgspec.field(default=None, name="Device Id")


class _Shared(enum.Enum):
    """A string field that takes few values, decoded to one shared member per value instead of a
    new string per event: on a 150k-event trace ``cat`` and ``ph`` were 16 MB of the decoded
    events' 69 MB. A value not listed becomes ``OTHER`` (``_missing_``)."""

    # members are singletons: identity hashes them at C speed (Enum's own __hash__ is Python code)
    __hash__ = object.__hash__

    @classmethod
    def _missing_(cls, value: object) -> Any:
        return cls["OTHER"]


class Cat(_Shared):
    """``cat``: the categories the loader reads, then others frequent enough (flows, instants) to
    be worth a member rather than a call to ``_missing_`` per event."""

    CPU_OP = "cpu_op"
    OPERATOR = "operator"
    USER_ANNOTATION = "user_annotation"
    PYTHON_FUNCTION = "python_function"
    CUDA_RUNTIME = "cuda_runtime"
    CUDA_DRIVER = "cuda_driver"
    KERNEL = "kernel"
    GPU_MEMCPY = "gpu_memcpy"
    GPU_MEMSET = "gpu_memset"
    CPU_INSTANT_EVENT = "cpu_instant_event"
    AC2G = "ac2g"
    FWDBWD = "fwdbwd"
    OVERHEAD = "overhead"
    GPU_USER_ANNOTATION = "gpu_user_annotation"
    TRACE = "Trace"
    # Kineto's other activity types (libkineto ActivityType): read by nothing here, left out
    # without a note
    CUDA_SYNC = "cuda_sync"
    CUDA_PROFILER_RANGE = "cuda_profiler_range"
    EXTERNAL_CORRELATION = "external_correlation"
    GLOW_RUNTIME = "glow_runtime"
    MTIA_RUNTIME = "mtia_runtime"
    MTIA_CCP_EVENTS = "mtia_ccp_events"
    MTIA_INSIGHT = "mtia_insight"
    HPU_OP = "hpu_op"
    XPU_RUNTIME = "xpu_runtime"
    XPU_DRIVER = "xpu_driver"
    COLLECTIVE_COMM = "collective_comm"
    PRIVATEUSE1_RUNTIME = "privateuse1_runtime"
    PRIVATEUSE1_DRIVER = "privateuse1_driver"
    # what PyTorch 1.8's Kineto wrote for the same events (the TensorBoard plugin reads both)
    OPERATOR_OLD = "Operator"
    RUNTIME_OLD = "Runtime"
    KERNEL_OLD = "Kernel"
    MEMCPY_OLD = "Memcpy"
    MEMSET_OLD = "Memset"
    PYTHON_OLD = "Python"
    NONE = ""
    OTHER = "\x00other"  # any other category; no profiler writes this one


class Ph(_Shared):
    """``ph``, the Chrome trace event type: X complete, i / I instant, s / t / f flow, M metadata,
    B / E begin and end, C counter, b / n / e async."""

    X = "X"
    I = "i"  # noqa: E741 - the letter the format uses
    I_OLD = "I"
    S = "s"
    T = "t"
    F = "f"
    M = "M"
    B = "B"
    E = "E"
    C = "C"
    ASYNC_B = "b"
    ASYNC_N = "n"
    ASYNC_E = "e"
    NONE = ""
    OTHER = "\x00other"


# An event written without "dur": negative (read as 0, as a negative one is) and no profiler's
# value, so that the loader can count such events apart (trace/load.py).
NO_DUR = -1e-300


class TraceEvent(msgspec.Struct, gc=False):
    """One entry of ``traceEvents``: complete ("X"), instant ("i"), metadata ("M"), flow (s/f).

    ``args`` stays raw JSON here; each table decodes the args it needs, all at once, into the
    struct of its kind (one decoder call per table rather than one per event).
    """

    ph: Ph = Ph.NONE
    cat: Cat = Cat.NONE
    name: str = ""
    pid: I64 | str = 0
    tid: I64 | str = 0
    ts: float = 0.0
    dur: float = NO_DUR
    args: msgspec.Raw = _ABSENT


class DeviceProperties(msgspec.Struct):
    """One GPU as Kineto records it in ``deviceProperties``."""

    id: I64 = 0
    name: str = ""
    totalGlobalMem: Bytes = 0
    computeMajor: I32 = 0
    computeMinor: I32 = 0
    numSms: I32 = 0
    l2CacheSize: Bytes = 0


class TraceFile(msgspec.Struct):
    """The whole file. ``traceEvents`` is required: its absence means "not a profiler trace"."""

    traceEvents: list[TraceEvent]
    deviceProperties: list[DeviceProperties] = []
    schemaVersion: int | None = None
    baseTimeNanoseconds: int | None = None
    distributedInfo: msgspec.Raw = _ABSENT


class TraceOutline(TraceFile):
    """The file with its events cut out and ``0`` in their place (trace/load.py decodes the events
    a slice at a time): the same fields, read and checked as ``TraceFile`` reads them."""

    traceEvents: int  # type: ignore[assignment]


def decode_args(raws: list[Any], kind: type) -> list[Any]:
    """Decode many raw ``args`` objects with one decoder call; unreadable ones become None."""
    if not raws:
        return []
    # Raw objects are buffers: joined as they are unless some event has no args at all
    joined = b"[" + b",".join(raws if all(raws) else [r or b"null" for r in raws]) + b"]"
    try:
        return msgspec.json.decode(joined, type=list[kind | None])  # type: ignore[valid-type]
    except (msgspec.ValidationError, msgspec.DecodeError):
        decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(kind, strict=False)
        out: list[Any] = []
        for r in raws:
            try:
                out.append(decoder.decode(bytes(r)) if r else None)
            except (msgspec.ValidationError, msgspec.DecodeError):
                out.append(None)
        return out
