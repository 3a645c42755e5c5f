"""The Report's sections as typed, frozen data: report/build.py fills them once, the renderers read
their attributes, and ``to_dict`` writes each one's JSON (docs/report-schema.md) key for key, in
the order the schema gives — the only place a section becomes a dict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import msgspec

from gpudoctor.analysis.host_breakdown import HostOp
from gpudoctor.core.records import as_dict

if TYPE_CHECKING:
    from gpudoctor.capture.model_state import ModelState


class GpuSection(msgspec.Struct, frozen=True):
    """The GPU the trace ran on (``name`` None: no GPU work was recorded)."""

    name: str | None
    memory_bytes: int
    sm_count: int
    compute_capability: str  # "9.0"; "" when unknown
    device: str = ""  # "cpu" for a trace with no GPU work; written only when set

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "memory_bytes": self.memory_bytes,
                             "sm_count": self.sm_count,
                             "compute_capability": self.compute_capability}
        return {**d, "device": self.device} if self.device else d


class CeilingsSection(msgspec.Struct, frozen=True):
    """The roofs the report was priced against (hardware/ceilings.py ``Ceilings``) and where they
    come from."""

    gpu: str | None  # the datasheet row or machine profile; None: no GPU work
    source: str  # "datasheet: ...", "measured: ...", or why there is none
    matrix_flops: dict[str, float]  # dtype -> FLOP/s on the matrix units
    vector_flops: float
    hbm_bytes_per_s: float
    h2d_pinned_bytes_per_s: float

    def to_dict(self) -> dict[str, Any]:
        return as_dict(self)


class GenerateTiming(msgspec.Struct, frozen=True):
    """``generate()`` calls timed outside the window (capture/marks.py ``token_times``), medians in
    ms."""

    calls_timed: int
    forwards_per_call: float
    call_ms: float
    prefill_ms: float | None = None  # None: no call had a prefill and a decode to tell apart
    decode_ms_per_token: float | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GenerateTiming:
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in as_dict(self).items() if v is not None}


class StepsSection(msgspec.Struct, frozen=True):
    """The recorded steps: how they were found and their times (ms, rounded as written)."""

    method: str  # analysis/steps.py: profiler-step, optimizer-step, ..., whole-trace
    count: int
    median_ms: float
    per_step_ms: tuple[float, ...]
    source: str = ""  # what marked a live capture's steps; "" when not a live capture
    root_module: str = ""  # the live capture's outermost module class
    generate: GenerateTiming | None = None  # a live capture of generate() calls: per-token timing

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"method": self.method, "count": self.count,
                             "median_ms": self.median_ms, "per_step_ms": list(self.per_step_ms)}
        if self.source:
            d["source"] = self.source
        if self.root_module:
            d["root_module"] = self.root_module
        if self.generate is not None:
            d["generate"] = self.generate.to_dict()
        return d


class UnprofiledSection(msgspec.Struct, frozen=True):
    """How far to trust the step timed without the profiler (capture/timing.py ``UnprofiledStep``,
    as env.json's ``capture.unprofiled`` holds it)."""

    ms: float
    spread_ms: float  # its standard error
    steps: int  # timed steps it comes from
    estimator: str = ""
    samples_from: str = ""  # "before" / "after" the window, or "both"
    trusted: bool = True
    why: str = ""  # why it is not trusted

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> UnprofiledSection:
        """From env.json (capture/bundle.py ``facts_of`` checked its numbers) or
        ``UnprofiledStep.to_dict``."""
        return cls(d["ms"], d["spread_ms"], d["steps"], d.get("estimator", ""),
                   d.get("samples_from", ""), d.get("trusted", True), d.get("why", ""))

    def to_dict(self) -> dict[str, Any]:
        return as_dict(self)


class StepTime(msgspec.Struct, frozen=True):
    """One recorded step: its duration and the GPU's busy and idle time in it (ms)."""

    step_ms: float
    busy_ms: float
    idle_ms: float


class BreakdownSection(msgspec.Struct, frozen=True):
    """Where the profiled step's GPU time goes, per step (ms, rounded as written)."""

    busy_ms: float
    idle_ms: float
    # kernel kind label -> ms; kinds on several streams can sum past busy_ms
    by_kind: dict[str, float]
    kernels_per_step: float
    copies_per_step: float  # memcpy and memset launches
    triton_ms: float
    cuda_graph_ms: float
    per_step: tuple[StepTime, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return as_dict(self) | {"per_step": [as_dict(s)
                                                        for s in self.per_step]}


class RooflineRow(msgspec.Struct, frozen=True):
    """One kernel (or op) on the roofline, aggregated over the steps (analysis/roofline.py
    ``Placement``, with its kind's label and its ratios rounded as written)."""

    name: str
    kind: str  # the kind's label: "gemm (tensor cores)"
    dtype: str
    count_per_step: float
    time_ms_per_step: float
    flops: float  # per step
    bytes: float  # per step
    achieved_flops: float  # FLOP/s
    achieved_bytes_per_s: float
    intensity: float  # FLOP/byte; 0 when the bytes are unknown
    roof_flops: float
    attainable_flops: float
    efficiency: float  # against the attainable FLOP/s (bandwidth efficiency when no FLOPs)
    bound: str  # latency | memory | compute | unknown


class RooflineSection(msgspec.Struct, frozen=True):
    """The roofline's placed kernels and ops, largest first, and the model's FLOPs per step."""

    model_tflop_per_step: float
    placed_fraction: float  # share of kernel time with known FLOPs or bytes
    kernels: tuple[RooflineRow, ...] = ()
    ops: tuple[RooflineRow, ...] = ()
    # why there is no roof (a card with no ceilings); None: there is one
    unavailable: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "model_tflop_per_step": self.model_tflop_per_step,
            "placed_fraction": self.placed_fraction,
            "kernels": [as_dict(k) for k in self.kernels],
            "ops": [as_dict(o) for o in self.ops],
        }
        return d if self.unavailable is None else {**d, "unavailable": self.unavailable}


class MemorySection(msgspec.Struct, frozen=True):
    """GPU memory over the steps (analysis/memory.py ``MemoryResult``, rounded as written)."""

    applicable: bool
    reason: str  # why not applicable ("" when applicable)
    capacity_bytes: int = 0
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    fragmentation: float = 0.0
    allocations_per_step: float = 0.0
    allocated_bytes_per_step: float = 0.0
    reserved_growth_bytes: int = 0
    malloc_calls_per_step: float = 0.0
    malloc_ms_per_step: float = 0.0
    persistent_bytes: int = 0
    model_state: ModelState | None = None  # the optimizer's params/grads/states bytes (live runs)
    peak_reserved_fraction: float = 0.0  # of capacity_bytes

    def to_dict(self) -> dict[str, Any]:
        d = {name: getattr(self, name) for name in self.__struct_fields__}
        state = None if self.model_state is None else self.model_state.to_dict()
        return d | {"model_state": state}  # its JSON object, in its place


class HostSection(msgspec.Struct, frozen=True):
    """The host's step of a trace with no GPU work: time by category and the top-level ops."""

    pid: Any  # the step thread, as the trace names it
    tid: Any
    step_ms: float
    by_category: dict[str, float] = msgspec.field(default_factory=dict)  # category -> ms per step
    ops: tuple[HostOp, ...] = ()  # analysis/host_breakdown.py's, rounded by report/build.py
    device: ClassVar[str] = "cpu"

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "thread": {"pid": self.pid, "tid": self.tid},
                "step_ms": self.step_ms, "by_category": self.by_category,
                "ops": [as_dict(o) for o in self.ops]}


class TracePlace(msgspec.Struct, frozen=True):
    """Where a finding lies in the annotated trace (report/perfetto.py ``Place``)."""

    track: str
    slice: str  # the slice's name on that track
    ts_us: float  # the trace's own clock
    dur_us: float
    placed_by: str
    from_start_ms: float  # after the trace's first event: where Perfetto's timeline starts


class AnnotatedTraceSection(msgspec.Struct, frozen=True):
    """The annotated trace written beside the report: its file, how to open it, and each
    finding's place in it (by finding id)."""

    file: str
    how: str
    findings: dict[str, TracePlace] = msgspec.field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AnnotatedTraceSection:
        """From report/perfetto.py ``Annotation.entry`` or a report.json's ``annotated_trace``."""
        return cls(d["file"], d["how"], {k: TracePlace(**v) for k, v in d["findings"].items()})

    def to_dict(self) -> dict[str, Any]:
        return as_dict(self)


class AllFixesSection(msgspec.Struct, frozen=True):
    """Every replay-priced fix applied at once (rules/whatif.py ``AllFixes``, rounded as
    written)."""

    ids: tuple[str, ...]
    step_ms: float
    step_after_ms: float
    predicted_speedup: float

    def to_dict(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "step_ms": self.step_ms, "step_after_ms": self.step_after_ms,
                "predicted_speedup": self.predicted_speedup}
