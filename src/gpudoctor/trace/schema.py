"""The parts of a Kineto / Chrome trace that gpudoctor reads, as msgspec structs.

torch.profiler's ``export_chrome_trace`` writes ``{"traceEvents": [...], "deviceProperties":
[...], ...}``. Decoding straight into typed structs, with each event's ``args`` kept as raw JSON until the
table of its kind decodes them, is what makes loading fast: benchmarks/bench_json_decode.py
compares it with ``json.loads`` and ``orjson.loads`` on the same trace (BENCHMARKS.md).

Field names and their spelling come from Kineto's ChromeTraceLogger (libkineto/src/output_json.cpp)
and torch/autograd/profiler_util.py; they have been stable from PyTorch 2.4 to 2.13.
"""

from __future__ import annotations

import msgspec


class DeviceArgs(msgspec.Struct, gc=False):
    """``args`` of a kernel / memcpy / memset."""

    correlation: int | None = None
    stream: int | None = None
    device: int | None = None
    grid: list[int] | None = None
    nbytes: int | None = msgspec.field(default=None, name="bytes")


class LaunchArgs(msgspec.Struct, gc=False):
    """``args`` of a cuda_runtime / cuda_driver call."""

    correlation: int | None = None


class OpArgs(msgspec.Struct, gc=False):
    """``args`` of a cpu_op: decoded only for ops that launched GPU work."""

    flops: float | None = None
    input_dims: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input type")
    input_strides: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input Strides")
    concrete_inputs: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Concrete Inputs")


class MemoryArgs(msgspec.Struct, gc=False):
    """``args`` of a ``[memory]`` instant event (profile_memory=True)."""

    mem_bytes: int | None = msgspec.field(default=None, name="Bytes")
    total_allocated: int | None = msgspec.field(default=None, name="Total Allocated")
    total_reserved: int | None = msgspec.field(default=None, name="Total Reserved")
    device_type: int | None = msgspec.field(default=None, name="Device Type")
    device_id: int | None = msgspec.field(default=None, name="Device Id")


class TraceEvent(msgspec.Struct, gc=False):
    """One entry of ``traceEvents``: complete ("X"), instant ("i"), metadata ("M"), flow (s/f).

    ``args`` stays raw JSON here; each table decodes the args it needs, all at once, into the
    struct of its kind (one decoder call per table rather than one per event).
    """

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class DeviceProperties(msgspec.Struct):
    """One GPU as Kineto records it in ``deviceProperties``."""

    id: int = 0
    name: str = ""
    totalGlobalMem: int = 0
    computeMajor: int = 0
    computeMinor: int = 0
    numSms: int = 0
    l2CacheSize: int = 0


class TraceFile(msgspec.Struct):
    """The whole file. ``traceEvents`` is required: its absence means "not a profiler trace"."""

    traceEvents: list[TraceEvent]
    deviceProperties: list[DeviceProperties] = []
    schemaVersion: int | None = None
    baseTimeNanoseconds: int | None = None
    distributedInfo: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
