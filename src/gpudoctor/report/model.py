"""The Report: everything the renderers show, as plain data (JSON schema in docs/report-schema.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpudoctor.core.finding import Finding

SCHEMA_VERSION = "1.0"


@dataclass(frozen=True)
class Report:
    schema_version: str
    tool_version: str
    source: str
    gpu: dict[str, Any]  # name, memory_bytes, sm_count, compute_capability; name None: no GPU work
    ceilings: dict[str, Any]  # source, matrix_flops {dtype: FLOP/s}, vector_flops, hbm_bytes_per_s
    steps: dict[str, Any]  # method, count, median_ms, per_step_ms
    step_ms: float  # mean step time over the recorded steps
    gpu_busy_pct: float
    mfu: float
    breakdown: dict[str, Any]  # busy_ms, idle_ms, by_kind {label: ms}, kernels_per_step...
    idle: dict[str, float]  # cause -> ms per step
    roofline: dict[str, Any]  # kernels [...], ops [...], placed_fraction, model_tflop_per_step
    memory: dict[str, Any]
    findings: tuple[Finding, ...]
    not_applicable: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    unprofiled_step_ms: float | None = None  # the same step timed without the profiler
    host: dict[str, Any] = field(default_factory=dict)  # CPU-only traces: the host breakdown

    @property
    def host_only(self) -> bool:
        """No GPU work was recorded: the report covers the host (CPU) alone."""
        return self.gpu.get("device") == "cpu"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool_version": self.tool_version,
            "source": self.source,
            "gpu": self.gpu,
            "ceilings": self.ceilings,
            "steps": self.steps,
            "step_ms": round(self.step_ms, 4),
            "unprofiled_step_ms": None if self.unprofiled_step_ms is None else round(self.unprofiled_step_ms, 4),
            "gpu_busy_pct": round(self.gpu_busy_pct, 2),
            "mfu": round(self.mfu, 5),
            "breakdown": self.breakdown,
            "idle": self.idle,
            "roofline": self.roofline,
            "memory": self.memory,
            "findings": [f.to_dict() for f in self.findings],
            "not_applicable": self.not_applicable,
            "warnings": list(self.warnings),
            "host": self.host,
        }

    def finding(self, finding_id: str) -> Finding | None:
        return next((f for f in self.findings if f.id == finding_id), None)

    def _repr_html_(self) -> str:  # notebooks
        from gpudoctor.report.html import render_html

        return render_html(self, standalone=False)

    def __str__(self) -> str:
        from gpudoctor.report.console import render_text

        return render_text(self)
