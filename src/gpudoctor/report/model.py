"""The Report: everything the renderers show, as plain data (JSON schema in
docs/report-schema.md)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from gpudoctor.analysis.collectives import MIN_COMM_SHARE
from gpudoctor.core.finding import Finding, speedup_text
from gpudoctor.report.sections import (
    AllFixesSection,
    AnnotatedTraceSection,
    BreakdownSection,
    CeilingsSection,
    GpuSection,
    HostSection,
    MemorySection,
    RooflineSection,
    StepsSection,
    UnprofiledSection,
)

if TYPE_CHECKING:  # a multi-rank report's sections: one trace's report never imports them
    from gpudoctor.ranks.sections import Distributed, RankRow

SCHEMA_VERSION = "1.0"

# How a Report shows itself (print, a notebook's cell): the renderer named here, looked up when it
# is shown. The renderers import the model; the model imports none of them, and analyze --json never
# loads rich.
SHOWN_BY = {"text": "gpudoctor.report.console:render_text",
            "html": "gpudoctor.report.html:render_html"}


def shown_by(how: str) -> Callable[..., str]:
    """The renderer ``SHOWN_BY[how]`` names."""
    module, name = SHOWN_BY[how].split(":")
    renderer: Callable[..., str] = getattr(importlib.import_module(module), name)
    return renderer


class Segment(msgspec.Struct, frozen=True):
    """One part of the step-breakdown bar, in ms per step (``Report.step_segments``)."""

    label: str  # a kernel kind's label, "idle: <cause>", or "busy" / "idle" when nothing splits it
    ms: float
    idle: bool
    rank: int  # its place among the busy (or the idle) segments, largest first: renderers colour by it
    cause: str = ""  # the idle cause (idle segments)


# A rank read alone whose collectives run exposed for this share of its step or more is not called
# healthy (analysis/collectives.py).
COLLECTIVES_VERDICT_SHARE = 0.25
# Fixes that replay together at this speedup or more are not called healthy, whatever each saves
# alone: the host and the GPU each hold the step, and a fix to one alone leaves the other holding
# it. Under it, the fixes together are within the prices' own error (1.25x) of nothing
# (benchmarks/BENCHMARKS-replay.md "A verdict for fixes that free each other").
TOGETHER_VERDICT_SPEEDUP = 1.25
# ... counting the time its GPU is held behind another stream with work queued (gpu-wait), named
# from the share the rank's note names it at (analysis/collectives.py MIN_COMM_SHARE)


class Verdict(msgspec.Struct, frozen=True):
    """The one-line answer (``Report.verdict``)."""

    # "healthy", "findings", "together" (no fix major alone, the fixes together are), "collectives"
    # (a rank read alone), "held" (its GPU idle with work queued) or "no-gpu-work" (Report.verdict)
    status: str
    top_finding: str | None  # the finding to fix first; None when healthy
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "top_finding": self.top_finding, "text": self.text}


class Report(msgspec.Struct, frozen=True):
    """The diagnosis as typed sections (report/sections.py), built once by report/build.py;
    ``to_dict`` is where it becomes the JSON of docs/report-schema.md, key for key."""

    schema_version: str
    tool_version: str
    source: str
    gpu: GpuSection
    ceilings: CeilingsSection
    steps: StepsSection
    step_ms: float  # mean step time over the recorded steps
    gpu_busy_pct: float
    mfu: float
    breakdown: BreakdownSection
    idle: dict[str, float]  # cause -> ms per step
    roofline: RooflineSection
    memory: MemorySection
    findings: tuple[Finding, ...]
    not_applicable: dict[str, str] = msgspec.field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    unprofiled_step_ms: float | None = None  # the same step timed without the profiler
    unprofiled: UnprofiledSection | None = None  # how far to trust it; None when the capture did not say
    host: HostSection | None = None  # CPU-only traces: the host breakdown
    # a multi-rank report (pipeline.analyze_ranks): one row per rank, and the run-wide facts
    # (exposed communication, the pipeline, one step's timeline per rank); empty / None for one
    # trace
    ranks: tuple[RankRow, ...] = ()
    distributed: Distributed | None = None
    # every replay-priced fix at once; None when fewer than two fixes were priced by replay
    all_fixes: AllFixesSection | None = None
    # the annotated trace written beside the report (report/perfetto.py); None when none was written
    annotated_trace: AnnotatedTraceSection | None = None
    # a rank read alone: the share of its step its collectives run with no compute beside them
    # (analysis/collectives.py); 0.0 otherwise
    exposed_collectives_share: float = 0.0
    # a rank read alone: the share of its step its GPU sits idle with work queued, held behind
    # another stream (a receive, a collective's peers: gpu-wait); 0.0 otherwise
    held_share: float = 0.0

    @property
    def mfu_known(self) -> bool:
        """MFU needs a peak (a card with ceilings) and the model's FLOPs (recorded shapes): with
        either missing it is unknown, not 0."""
        return self.roofline.unavailable is None and self.roofline.model_tflop_per_step > 0

    @property
    def host_only(self) -> bool:
        """No GPU work was recorded: the report covers the host (CPU) alone."""
        return self.gpu.device == "cpu"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool_version": self.tool_version,
            "source": self.source,
            "gpu": self.gpu.to_dict(),
            "ceilings": self.ceilings.to_dict(),
            "steps": self.steps.to_dict(),
            "step_ms": round(self.step_ms, 4),
            "unprofiled_step_ms": None if self.unprofiled_step_ms is None else round(
                self.unprofiled_step_ms, 4),
            "unprofiled": self.unprofiled.to_dict() if self.unprofiled is not None else None,
            "gpu_busy_pct": round(self.gpu_busy_pct, 2),
            "mfu": round(self.mfu, 5) if self.mfu_known else None,
            "breakdown": self.breakdown.to_dict(),
            "idle": self.idle,
            "roofline": self.roofline.to_dict(),
            "memory": self.memory.to_dict(),
            "verdict": self.verdict().to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "not_applicable": self.not_applicable,
            "warnings": list(self.warnings),
            "host": self.host.to_dict() if self.host is not None else {},
            **({"ranks": [r.to_dict() for r in self.ranks],
                "distributed": self.distributed.to_dict() if self.distributed is not None else {}}
               if self.ranks else {}),
            **({"all_fixes": self.all_fixes.to_dict()} if self.all_fixes is not None else {}),
            **({"annotated_trace": self.annotated_trace.to_dict()}
               if self.annotated_trace is not None else {}),
            **({"exposed_collectives_share": round(self.exposed_collectives_share, 4)}
               if self.exposed_collectives_share > 0 else {}),
            **({"held_share": round(self.held_share, 4)} if self.held_share > 0 else {}),
        }

    def step_segments(self) -> list[Segment]:
        """The step-breakdown bar, scaled once for every renderer: the busy time split by kernel
        kind, each kind's summed time scaled to ``busy_ms`` (kernels of overlapping streams sum to
        more than the busy time), largest first; then the idle time by cause, as ``idle`` reports it
        (the causes sum to ``idle_ms``), largest first. A part with nothing to split it is one
        "busy" or "idle" segment; empty parts are left out."""
        busy_ms, idle_ms = float(self.breakdown.busy_ms), float(self.breakdown.idle_ms)
        by_kind = {k: float(v) for k, v in self.breakdown.by_kind.items() if v > 0}
        scale = busy_ms / sum(by_kind.values()) if by_kind else 0.0
        segs = [Segment(label, ms * scale, False, i)
                for i, (label, ms) in enumerate(sorted(by_kind.items(), key=lambda kv: -kv[1]))]
        if busy_ms > 0 and not by_kind:
            segs.append(Segment("busy", busy_ms, False, 0))
        causes = {str(k): float(v) for k, v in self.idle.items() if v > 0}
        segs += [Segment(f"idle: {cause}", ms, True, i, cause)
                 for i, (cause, ms) in enumerate(sorted(causes.items(), key=lambda kv: -kv[1]))]
        if idle_ms > 0 and not causes:
            segs.append(Segment("idle", idle_ms, True, 0))
        return segs

    def unprofiled_text(self) -> str:
        """``4.060 ms ± 0.200 (5 steps)``, ``(... steps; uncertain)`` when the capture said not to
        trust it, or the bare ``4.060 ms`` when it gave no uncertainty ("" with no unprofiled
        step)."""
        if self.unprofiled_step_ms is None:
            return ""
        u = self.unprofiled
        if u is None or not u.steps:
            return f"{self.unprofiled_step_ms:.3f} ms"
        steps = int(u.steps)  # env.json's number, which may be written 5.0
        trust = "" if u.trusted else "; uncertain"
        spread = f"± {u.spread_ms:.3f} ({steps} step{'s' * (steps != 1)}{trust})"
        return f"{self.unprofiled_step_ms:.3f} ms {spread}"

    def verdict(self) -> Verdict:
        """The one-line answer: ``healthy`` when no finding is major or critical (a saving of 5% of
        the step, 10% for fusion by a compiler: core/finding.severity_for) and the fixes together
        replay under ``TOGETHER_VERDICT_SPEEDUP``, else the finding to fix first. A smaller saving
        is within the run-to-run spread of most programs (the gallery's plain runs moved 0.2-11%
        between two runs: benchmarks/BENCHMARKS-lab.md "Evidence moved from the source: lab, diff
        and report"): worth knowing, not worth a rewrite."""
        if self.host_only and not self.findings:  # nothing ran on a GPU, nothing found on the host
            return Verdict("no-gpu-work", None, "no GPU work was recorded in this window: the "
                           "report covers the host alone")
        top = next((f for f in self.findings if f.severity in ("critical", "major")), None)
        step = self.unprofiled_step_ms or self.step_ms
        waits = self.exposed_collectives_share + self.held_share
        if top is None and waits >= COLLECTIVES_VERDICT_SHARE:
            if not self.exposed_collectives_share:
                # its GPU waits with work queued on something this trace does not hold
                return Verdict("held", None, (
                    f"no finding is major, but the GPU sits idle with work queued for "
                    f"{100 * self.held_share:.0f}% of the step, held behind something this trace "
                    "does not show (another stream's event, another process, a peer): profile "
                    "what it waits on"))
            # what the step waits on is in the other ranks' traces, not in a finding of this one
            held = (f", and its GPU sits idle with work queued behind another stream (a receive, "
                    f"a collective's peers) for {100 * self.held_share:.0f}%"
                    if self.held_share >= MIN_COMM_SHARE else "")
            return Verdict("collectives", None, (
                "no finding on this rank is major, but its collectives run with no compute "
                f"beside them for {100 * self.exposed_collectives_share:.0f}% of its step{held}: "
                "analyze every rank's trace for the findings on them"))
        together = self.all_fixes
        if top is None and together is not None and (
                together.predicted_speedup >= TOGETHER_VERDICT_SPEEDUP):
            return Verdict("together", None, (
                f"no fix is major alone, but the {len(together.ids)} together replay at "
                f"{speedup_text(together.predicted_speedup)} ({together.step_ms:.3f} -> "
                f"{together.step_after_ms:.3f} ms): the host and the GPU each hold the step, and "
                "a fix to one alone leaves the other holding it; make them together"))
        if top is None:
            largest = self.findings[0] if self.findings else None
            text = "healthy: no major finding"
            if largest is not None and largest.saving_ms > 0:
                text += f" (the largest, {largest.id}, ~{largest.saving_ms:.3f} ms of {step:.3f} ms)"
            return Verdict("healthy", None, text)
        text = (f"fix {top.id} first: ~{top.saving_ms:.3f} ms of a {step:.3f} ms step "
                f"({speedup_text(top.predicted_speedup)})")
        return Verdict("findings", top.id, text)

    def held_back_behind(self, position: int) -> list[str]:
        """The findings listed before the one at ``position`` that save less: a fix that must come
        first (rules/registry.py ``rank``: a CUDA graph cannot capture a step that syncs)."""
        saving = self.findings[position].saving_ms
        return [f.id for f in self.findings[:position] if f.saving_ms < saving]

    def finding(self, finding_id: str) -> Finding | None:
        return next((f for f in self.findings if f.id == finding_id), None)

    def _repr_html_(self) -> str:  # notebooks
        return shown_by("html")(self, standalone=False)

    def __str__(self) -> str:
        return shown_by("text")(self)


class Reports(msgspec.Struct, frozen=True):
    """Several traces that are not the ranks of one job, each diagnosed on its own
    (pipeline.analyze_inputs); ``why`` says what told them apart (ranks/job.py)."""

    reports: tuple[Report, ...]
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool_version": self.reports[0].tool_version if self.reports else "",
            "separate_traces": self.why,
            "reports": [r.to_dict() for r in self.reports],
        }
