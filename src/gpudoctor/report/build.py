"""Analysis + findings -> Report (pure: no I/O, no printing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_breakdown import HostBreakdown
from gpudoctor.analysis.memory import MemoryResult
from gpudoctor.analysis.roofline import Placement
from gpudoctor.analysis.steps import Steps
from gpudoctor.core.finding import Finding
from gpudoctor.core.version import __version__
from gpudoctor.report.model import SCHEMA_VERSION, Report
from gpudoctor.report.sections import (
    AllFixesSection,
    BreakdownSection,
    CeilingsSection,
    GpuSection,
    HostOp,
    HostSection,
    MemorySection,
    RooflineRow,
    RooflineSection,
    StepsSection,
    StepTime,
)
from gpudoctor.trace.kernels import Kind
from gpudoctor.trace.model import Trace

if TYPE_CHECKING:
    from gpudoctor.rules.whatif import AllFixes

MAX_PLACEMENTS = 60
NO_GPU_WORK = "no GPU work was recorded"


def build_report(a: Analysis, findings: list[Finding]) -> Report:
    gpu = a.trace.gpu
    b = a.breakdown
    return Report(
        schema_version=SCHEMA_VERSION,
        tool_version=__version__,
        source=a.trace.source,
        gpu=GpuSection(
            name=gpu.name if gpu else a.ceilings.gpu,
            memory_bytes=gpu.memory_bytes if gpu else a.ceilings.memory_bytes,
            sm_count=gpu.sm_count if gpu else 0,
            compute_capability=".".join(map(str, gpu.compute_capability)) if gpu else "",
        ),
        ceilings=CeilingsSection(
            gpu=a.ceilings.gpu,
            source=a.ceilings.source,
            matrix_flops=a.ceilings.matrix_flops,
            vector_flops=a.ceilings.vector_flops,
            hbm_bytes_per_s=a.ceilings.hbm_bytes_per_s,
            h2d_pinned_bytes_per_s=a.ceilings.h2d_pinned_bytes_per_s,
        ),
        steps=_steps(a.steps),
        step_ms=b.step_ms,
        gpu_busy_pct=b.busy_pct,
        mfu=a.roofline.mfu,
        breakdown=BreakdownSection(
            busy_ms=round(b.busy_ms, 4),
            idle_ms=round(b.idle_ms, 4),
            by_kind={Kind[k].label: round(v, 4) for k, v in b.by_kind.items()},
            kernels_per_step=round(b.kernel_count_per_step, 2),
            # memcpy, memset
            copies_per_step=round(b.launch_count_per_step - b.kernel_count_per_step, 2),
            triton_ms=round(b.triton_ms, 4),
            cuda_graph_ms=round(b.cuda_graph_ms, 4),
            per_step=tuple(
                StepTime(round(float(d), 4), busy, idle)
                for d, busy, idle in zip(a.steps.durations_ms.tolist(), b.busy_per_step_ms,
                                         b.idle_per_step_ms)
            ),
        ),
        idle={cause: round(v, 4) for cause, v in sorted(a.idle.by_cause_ms.items(),
                                                        key=lambda kv: -kv[1])},
        roofline=RooflineSection(
            model_tflop_per_step=round(a.roofline.model_flops_per_step / 1e12, 6),
            placed_fraction=round(a.roofline.placed_fraction, 4),
            kernels=tuple(_placement(p) for p in a.roofline.kernels[:MAX_PLACEMENTS]),
            ops=tuple(_placement(p) for p in a.roofline.ops[:MAX_PLACEMENTS]),
            # a card with no ceilings: no roof to place a kernel under (not_applicable["roofline"]
            # says why)
            unavailable=None if a.ceilings.available else a.not_applicable.get("roofline",
                                                                               "no ceilings"),
        ),
        memory=_memory(a.memory),
        findings=tuple(findings),
        not_applicable=dict(a.not_applicable),
        warnings=a.warnings,
        unprofiled_step_ms=a.unprofiled_step_ms,
    )


def all_fixes_section(together: AllFixes) -> AllFixesSection:
    """Every replay-priced fix at once, rounded as the JSON writes it (``AllFixes.to_dict``)."""
    d = together.to_dict()
    return AllFixesSection(tuple(d["ids"]), d["step_ms"], d["step_after_ms"],
                           d["predicted_speedup"])


def build_host_report(trace: Trace, steps: Steps, host: HostBreakdown, warnings: tuple[str, ...],
                      unprofiled_step_ms: float | None = None) -> Report:
    """The report of a trace with no GPU work: step times and the host breakdown, nothing priced
    against a GPU (no ceilings, roofline, idle causes or findings)."""
    n = max(len(steps), 1)
    per_step = steps.durations_ms.tolist()
    thread = trace.threads[host.thread] if 0 <= host.thread < len(trace.threads) else ("", "")
    return Report(
        schema_version=SCHEMA_VERSION,
        tool_version=__version__,
        source=trace.source,
        gpu=GpuSection(name=None, memory_bytes=0, sm_count=0, compute_capability="", device="cpu"),
        ceilings=CeilingsSection(gpu=None, source="none: no GPU work in the trace", matrix_flops={},
                                 vector_flops=0.0, hbm_bytes_per_s=0.0, h2d_pinned_bytes_per_s=0.0),
        steps=_steps(steps),
        step_ms=steps.total_ns / 1e6 / n,
        gpu_busy_pct=0.0,
        mfu=0.0,
        breakdown=BreakdownSection(busy_ms=0.0, idle_ms=0.0, by_kind={}, kernels_per_step=0.0,
                                   copies_per_step=0.0, triton_ms=0.0, cuda_graph_ms=0.0,
                                   per_step=tuple(StepTime(round(d, 4), 0.0, 0.0)
                                                  for d in per_step)),
        idle={},
        roofline=RooflineSection(model_tflop_per_step=0.0, placed_fraction=0.0),
        memory=MemorySection(applicable=False, reason=NO_GPU_WORK),
        findings=(),
        not_applicable={"gpu": f"{NO_GPU_WORK}: the roofline, the idle causes, GPU memory and the "
                               "rules need GPU events"},
        warnings=warnings,
        unprofiled_step_ms=unprofiled_step_ms,
        host=HostSection(
            pid=thread[0],
            tid=thread[1],
            step_ms=round(host.step_ms, 4),
            by_category={k: round(v, 4) for k, v in host.by_category_ms.items()},
            ops=tuple(
                HostOp(o.name, o.category, round(o.ms_per_step, 4), round(o.calls_per_step, 3))
                for o in host.ops),
        ),
    )


def _steps(steps: Steps) -> StepsSection:
    return StepsSection(method=steps.method, count=len(steps), median_ms=round(steps.median_ms, 4),
                        per_step_ms=tuple(round(x, 4) for x in steps.durations_ms.tolist()))


def _placement(p: Placement) -> RooflineRow:
    return RooflineRow(
        name=p.name, kind=Kind[p.kind].label, dtype=p.dtype,
        count_per_step=round(p.count_per_step, 5), time_ms_per_step=round(p.time_ms_per_step, 5),
        flops=p.flops, bytes=p.bytes, achieved_flops=p.achieved_flops,
        achieved_bytes_per_s=p.achieved_bytes_per_s, intensity=round(p.intensity, 5),
        roof_flops=p.roof_flops, attainable_flops=p.attainable_flops,
        efficiency=round(p.efficiency, 5), bound=p.bound)


def _memory(m: MemoryResult) -> MemorySection:
    fields = {name: getattr(m, name) for name in m.__struct_fields__}  # model_state kept typed
    return MemorySection(**{**fields, "fragmentation": round(m.fragmentation, 4)},
                         peak_reserved_fraction=round(m.peak_reserved_fraction, 4))
