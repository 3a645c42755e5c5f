"""Analyses: pure functions Trace [+ Ceilings] -> frozen results, bundled for the rules."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from gpudoctor.analysis.breakdown import Breakdown, breakdown
from gpudoctor.analysis.idle import IdleResult, idle_causes
from gpudoctor.analysis.memory import MemoryResult, memory
from gpudoctor.analysis.observer import (
    PROFILER_OVERHEAD_NS_PER_EVENT,
    profiler_overhead_ms,
)
from gpudoctor.analysis.roofline import RooflineResult, roofline
from gpudoctor.analysis.startup import startup_note
from gpudoctor.analysis.steps import (
    Steps,
    describe,
    outlier_note,
    segment,
    whole_steps,
    without_outlier_edges,
)
from gpudoctor.core.loader import LoaderSettings
from gpudoctor.hardware.ceilings import Ceilings
from gpudoctor.trace.capabilities import trace_notes
from gpudoctor.trace.model import Trace
from gpudoctor.trace.stream import release_free_memory

if TYPE_CHECKING:
    from gpudoctor.capture.model_state import ModelState


class Analysis(msgspec.Struct, frozen=True, eq=False):
    """Everything the rules read: the trace, its ceilings and every analysis result."""

    trace: Trace
    ceilings: Ceilings
    steps: Steps
    breakdown: Breakdown
    idle: IdleResult
    roofline: RooflineResult
    memory: MemoryResult
    not_applicable: dict[str, str]
    warnings: tuple[str, ...]
    unprofiled_step_ms: float | None = None  # the same step timed outside the profiler
    # the DataLoader's fetch on the program's thread, of unprofiled_step_ms (capture/timing.py
    # fetch_in_step): None where the capture did not time it
    unprofiled_fetch_ms: float | None = None
    # how far the GPU trailed the host at the unprofiled steps' boundaries (median, capture/marks.py
    # leads_ms): None where the capture did not time it
    unprofiled_lead_ms: float | None = None
    loader: LoaderSettings | None = None  # the DataLoader's settings, where the capture read them
    step_source: str = ""  # what marked the steps in a live capture (capture/detect.py), "" offline
    # host time per step the profiler added (analysis/observer.py's per-event estimate), computed
    # once
    profiler_overhead_ms: float = 0.0
    # outermost modules with parameters called in a step, where a live capture counted them
    # (capture/session.py): each one a compiled call under the compile knobs
    outermost_calls: int | None = None
    # the outermost module's class, where a live capture saw it: fix snippets name it
    root_module: str = ""

    @property
    def step_ms(self) -> float:
        return self.breakdown.step_ms


def analyze_trace(trace: Trace, ceilings: Ceilings, unprofiled_step_ms: float | None = None,
                  model_state: ModelState | None = None, step_source: str = "",
                  cut_after: int | None = None, *,
                  unprofiled_fetch_ms: float | None = None,
                  unprofiled_lead_ms: float | None = None,
                  loader: LoaderSettings | None = None,
                  outermost_calls: int | None = None, root_module: str = "") -> Analysis:
    """Every analysis of ``trace``, once; the Analysis is built whole (its fields are not mutated
    after). ``cut_after``: a capture that ended early recorded this many whole steps
    (``steps.whole_steps``); ``unprofiled_fetch_ms``: the DataLoader's share of
    ``unprofiled_step_ms``, where the capture timed it."""
    found = whole_steps(segment(trace), cut_after)
    steps, left_out = without_outlier_edges(found, trace, unprofiled_step_ms)
    warnings: list[str] = []
    note = describe(steps)
    if note:
        warnings.append(note)
    if left_out:
        warnings.append(outlier_note(trace, found, left_out, steps))
    if startup := startup_note(trace, int(steps.start.min()), int(steps.end.max())):
        warnings.append(startup)
    warnings.extend(trace_notes(trace))
    mem = memory(trace, steps, model_state)
    bd = breakdown(trace, steps)
    idle = idle_causes(trace, steps)
    # the heap pages an analysis freed, handed back: its small objects leave holes that would add
    # up, analysis after analysis, in a big trace's RSS (benchmarks/BENCHMARKS-loading.md, "Traces
    # of any size")
    release_free_memory()
    roof = roofline(trace, steps, ceilings)
    release_free_memory()
    overhead = profiler_overhead_ms(trace, steps)
    dispatch = idle.ms("dispatch")
    if unprofiled_step_ms is None and dispatch > 0.1 * bd.step_ms and overhead > 0.1 * dispatch:
        warnings.append(
            f"up to {min(overhead, dispatch):.2f} ms per step of the dispatch idle may be the "
            f"profiler's own overhead (~{PROFILER_OVERHEAD_NS_PER_EVENT / 1000:.0f} us per "
            "recorded event); launch-bound discounts it: time the step without the profiler "
            "to confirm"
        )
    not_applicable: dict[str, str] = {}
    if not mem.applicable:
        not_applicable["memory"] = mem.reason
    if not ceilings.available:
        card = (f"{ceilings.gpu} (not in the datasheet table)" if ceilings.gpu
                else "a card the trace does not name")
        not_applicable["roofline"] = (
            f"unavailable: no ceilings for {card}; pass --ceilings FILE (as `gpudoctor bench` "
            "saves on that card) or --gpu NAME to draw it"
        )
    elif roof.placed_fraction < 0.5:
        not_applicable["roofline"] = (
            "under half of the kernel time has known FLOPs or bytes: record with "
            "record_shapes=True (and with_flops=True) to place kernels on the roofline"
        )
    return Analysis(
        trace=trace,
        ceilings=ceilings,
        steps=steps,
        breakdown=bd,
        idle=idle,
        roofline=roof,
        memory=mem,
        not_applicable=not_applicable,
        warnings=tuple(warnings),
        unprofiled_step_ms=unprofiled_step_ms,
        unprofiled_fetch_ms=unprofiled_fetch_ms if unprofiled_step_ms else None,
        unprofiled_lead_ms=unprofiled_lead_ms if unprofiled_step_ms else None,
        loader=loader,
        step_source=step_source,
        profiler_overhead_ms=overhead,
        outermost_calls=outermost_calls,
        root_module=root_module,
    )


__all__ = [
    "Analysis",
    "Breakdown",
    "IdleResult",
    "MemoryResult",
    "RooflineResult",
    "Steps",
    "analyze_trace",
]
