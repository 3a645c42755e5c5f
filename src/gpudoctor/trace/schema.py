"""The parts of a Kineto / Chrome trace that gpudoctor reads, as msgspec structs.

torch.profiler's ``export_chrome_trace`` writes ``{"traceEvents": [...], "deviceProperties":
[...], ...}``. Decoding straight into typed structs (unknown keys skipped, shape lists kept as
raw JSON until an analysis asks for them) is what makes loading fast: on a 57 MB, 168k-event
trace, ``msgspec`` into structs took 0.10 s where ``json.loads`` took 1.30 s and ``orjson``
0.65 s (benchmarks/bench_json_decode.py has the side-by-side run).

Field names and their spelling come from Kineto's ChromeTraceLogger (libkineto/src/output_json.cpp)
and torch/autograd/profiler_util.py; they have been stable from PyTorch 2.4 to 2.13.
"""

from __future__ import annotations

import msgspec


class EventArgs(msgspec.Struct, omit_defaults=True):
    """``args`` of one event: only the keys some analysis uses."""

    external_id: int | None = msgspec.field(default=None, name="External id")
    correlation: int | None = None
    stream: int | None = None
    device: int | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    nbytes: int | None = msgspec.field(default=None, name="bytes")
    flops: float | None = None
    input_dims: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Concrete Inputs")
    python_id: int | None = msgspec.field(default=None, name="Python id")
    python_parent_id: int | None = msgspec.field(default=None, name="Python parent id")
    # [memory] instant events (profile_memory=True)
    mem_bytes: int | None = msgspec.field(default=None, name="Bytes")
    total_allocated: int | None = msgspec.field(default=None, name="Total Allocated")
    total_reserved: int | None = msgspec.field(default=None, name="Total Reserved")
    device_type: int | None = msgspec.field(default=None, name="Device Type")
    device_id: int | None = msgspec.field(default=None, name="Device Id")


class TraceEvent(msgspec.Struct):
    """One entry of ``traceEvents``: complete ("X"), instant ("i"), metadata ("M"), flow (s/f)."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: EventArgs | None = None


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
