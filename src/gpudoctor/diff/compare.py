"""Two Sides -> one Diff: plain data, no I/O, no printing (the renderers are diff/console.py and
diff/html.py).

Step time: the unprofiled samples of env.json when both sides have them (they are the program
as it runs; the profiler inflates the profiled steps), else the profiled step times of both
traces, and the Diff says which and how many. The per-category, per-idle-cause and per-kernel
changes come from the profiled window (ms per profiled step). A resolved finding's predicted
saving (BEFORE's report) is set against the measured change of the whole step: when several
findings are resolved at once, or other code changed, that change is shared between them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from gpudoctor.diff.match import KernelChange, match
from gpudoctor.diff.samples import (
    DEFAULT_FLOOR_PCT,
    MIN_SIDE_SAMPLES,
    SLOWER,
    StepChange,
    compare_samples,
)
from gpudoctor.report.model import Report

DIFF_SCHEMA_VERSION = "1.0"
MAX_KERNELS = 15
# groups smaller than 0.5 us per step on both sides are left out of the lists
MIN_KERNEL_MS = 0.0005


@dataclass(frozen=True)
class Row:
    """One category (or idle cause) in ms per profiled step."""

    name: str
    before_ms: float
    after_ms: float

    @property
    def delta_ms(self) -> float:
        return self.after_ms - self.before_ms


@dataclass(frozen=True)
class FindingChange:
    """A finding id that is resolved (BEFORE only), new (AFTER only) or persisting (both)."""

    id: str
    title: str
    status: str  # "resolved", "new", "persisting"
    saving_before_ms: float | None  # what BEFORE's report said the fix would save per step
    saving_after_ms: float | None
    predicted_speedup: float | None  # BEFORE's report
    measured_saving_ms: float | None = None  # resolved: the step's measured change (before - after)
    measured_speedup: float | None = None
    ratio: float | None = None  # measured / predicted saving: 1.0 is a perfect prediction


@dataclass(frozen=True)
class SideInfo:
    """What the Diff keeps of one side."""

    path: str
    trace: str
    kind: str
    gpu: str
    profiled_step_ms: float
    unprofiled_step_ms: float | None
    samples: tuple[float, ...]  # the samples the step change was computed from
    notes: tuple[str, ...] = ()
    program: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Diff:
    """AFTER compared with BEFORE."""

    before: SideInfo
    after: SideInfo
    samples_kind: str  # "unprofiled" or "profiled"
    step: StepChange
    categories: tuple[Row, ...]
    idle: tuple[Row, ...]
    kernels: tuple[KernelChange, ...]  # every group, matched or not
    findings: tuple[FindingChange, ...]
    warnings: tuple[str, ...] = ()
    # the step breakdown picture: (label, ms per step)
    segments_before: tuple[tuple[str, float], ...] = ()
    segments_after: tuple[tuple[str, float], ...] = ()
    schema_version: str = DIFF_SCHEMA_VERSION

    @property
    def verdict(self) -> str:
        return self.step.verdict

    def changed_kernels(self, limit: int = MAX_KERNELS) -> list[KernelChange]:
        """Matched groups, the largest change first."""
        rows = [k for k in self.kernels if k.before and k.after
                and abs(k.delta_ms) >= MIN_KERNEL_MS]
        return sorted(rows, key=lambda k: -abs(k.delta_ms))[:limit]

    def appeared(self, limit: int = MAX_KERNELS) -> list[KernelChange]:
        rows = [k for k in self.kernels if k.before is None and k.ms_after >= MIN_KERNEL_MS]
        return sorted(rows, key=lambda k: -k.ms_after)[:limit]

    def disappeared(self, limit: int = MAX_KERNELS) -> list[KernelChange]:
        rows = [k for k in self.kernels if k.after is None and k.ms_before >= MIN_KERNEL_MS]
        return sorted(rows, key=lambda k: -k.ms_before)[:limit]

    def by_status(self, status: str) -> list[FindingChange]:
        return [f for f in self.findings if f.status == status]

    def gate(self, threshold_pct: float) -> bool:
        """True when the slowdown exceeds ``threshold_pct`` beyond noise: the lower end of the step
        change's 95% interval is above both the threshold and the run-to-run floor."""
        low = self.step.ci_low_pct
        return low is not None and self.step.verdict == SLOWER and low > max(threshold_pct,
                                                                             self.step.floor_pct)


def _rows(before: dict[str, Any], after: dict[str, Any]) -> tuple[Row, ...]:
    names = list(dict.fromkeys([*before, *after]))
    rows = [Row(str(n), float(before.get(n) or 0.0), float(after.get(n) or 0.0)) for n in names]
    rows = [r for r in rows if r.before_ms or r.after_ms]
    return tuple(sorted(rows, key=lambda r: -max(r.before_ms, r.after_ms)))


def segments(r: Report) -> tuple[tuple[str, float], ...]:
    """(label, ms per profiled step) that add up to the step: GPU kinds scaled to the busy time
    (kinds can overlap on several streams), then idle causes scaled to the idle time."""
    busy, idle = float(r.breakdown.busy_ms), float(r.breakdown.idle_ms)
    kinds = {k: float(v) for k, v in r.breakdown.by_kind.items() if v > 0}
    causes = {str(k): float(v) for k, v in r.idle.items() if v > 0}
    out: list[tuple[str, float]] = []
    total = sum(kinds.values())
    out += [(k, v * busy / total) for k, v in kinds.items()] if total > 0 else ([("busy", busy)]
                                                                                if busy else [])
    total = sum(causes.values())
    out += ([(f"idle: {k}", v * idle / total) for k, v in causes.items()] if total > 0
            else [("idle", idle)] if idle else [])
    return tuple(out)


def categories(before: Report, after: Report) -> tuple[Row, ...]:
    """GPU busy time by kind, then the busy and idle totals and the profiled step (ms per step)."""
    b, a = before.breakdown, after.breakdown
    rows = list(_rows(b.by_kind, a.by_kind))
    rows.append(Row("total busy", float(b.busy_ms), float(a.busy_ms)))
    rows.append(Row("total idle", float(b.idle_ms), float(a.idle_ms)))
    rows.append(Row("profiled step", before.step_ms, after.step_ms))
    return tuple(rows)


# a finding AFTER still reports at <= 10% of BEFORE's saving counts as resolved
RESOLVED_FRACTION = 0.1


def finding_changes(before: Report, after: Report, step: StepChange) -> tuple[FindingChange, ...]:
    """Resolved, new and persisting findings; resolved ones carry predicted vs measured.

    Resolved: the id is gone from AFTER, or AFTER still reports it with at most 10% of BEFORE's
    saving (a residual: the lab's fixed launch-bound twin still shows 0.09 of 10.0 ms)."""
    out = []
    measured = step.before_ms - step.after_ms
    speedup = step.speedup if math.isfinite(step.speedup) else None
    for f in before.findings:
        g = after.finding(f.id)
        left = None if g is None else g.saving_ms
        if g is None or (f.saving_ms > 0 and g.saving_ms <= RESOLVED_FRACTION * f.saving_ms):
            ratio = measured / f.saving_ms if f.saving_ms > 0 else None
            out.append(FindingChange(f.id, f.title, "resolved", f.saving_ms, left,
                                     f.predicted_speedup, measured, speedup, ratio))
        else:
            out.append(FindingChange(f.id, f.title, "persisting", f.saving_ms, left,
                                     f.predicted_speedup))
    out += [FindingChange(g.id, g.title, "new", None, g.saving_ms, None) for g in after.findings
            if before.finding(g.id) is None]
    return tuple(out)


def choose_samples(before: Any, after: Any) -> tuple[str, tuple[float, ...],
                                                     tuple[float, ...], list[str]]:
    """(kind, before samples, after samples, notes): unprofiled when both sides have 2+ of them."""
    notes = []
    if len(before.unprofiled) >= MIN_SIDE_SAMPLES and len(after.unprofiled) >= MIN_SIDE_SAMPLES:
        return "unprofiled", before.unprofiled, after.unprofiled, notes
    if before.unprofiled or after.unprofiled:
        which = "BEFORE" if len(before.unprofiled) >= MIN_SIDE_SAMPLES else "AFTER"
        notes.append(f"only {which} has unprofiled step samples (env.json): both sides use their "
                     "profiled steps, which the profiler inflates; compare two run directories for "
                     "the program's real step time")
    else:
        notes.append("no unprofiled step samples (env.json of a run directory): the step times are "
                     "the profiled steps of the traces, inflated by the profiler; `gpudoctor run` "
                     "times the step without it")
    return "profiled", before.profiled, after.profiled, notes


def _info(side: Any, samples: tuple[float, ...], program: dict[str, Any]) -> SideInfo:
    return SideInfo(side.path, side.trace_path, side.kind, side.gpu, side.report.step_ms,
                    side.report.unprofiled_step_ms, samples, side.notes, program)


def compare(before: Any, after: Any, floor_pct: float = DEFAULT_FLOOR_PCT) -> Diff:
    """AFTER vs BEFORE (two ``diff.inputs.Side``)."""
    from gpudoctor.diff.history import program_of
    from gpudoctor.errors import InputError

    kind, a, b, notes = choose_samples(before, after)
    for side, values in ((before, a), (after, b)):
        if not values:
            raise InputError(f"{side.label} {side.path} has no step to time (no profiled step, no "
                             "unprofiled sample): record a window of whole steps (torch.profiler "
                             "with prof.step(), or gpudoctor run)")
    step = compare_samples(a, b, floor_pct)
    warnings = list(notes)
    if before.gpu and after.gpu and before.gpu != after.gpu:
        warnings.append(f"BEFORE ran on {before.gpu} and AFTER on {after.gpu}: the change mixes "
                        "the code's and the GPU's; compared anyway")
    if before.trace_path == after.trace_path:
        warnings.append("BEFORE and AFTER are the same trace: there is no difference to find")
    methods = (before.report.steps.method, after.report.steps.method)
    if methods[0] != methods[1]:
        warnings.append(f"the steps were found differently (BEFORE: {methods[0]}, AFTER: "
                        f"{methods[1]}): per-step figures may not cover the same work")
    warnings += [f"{n}" for n in (*before.notes, *after.notes)]
    return Diff(
        before=_info(before, a, program_of(before.env)),
        after=_info(after, b, program_of(after.env)),
        samples_kind=kind,
        step=step,
        categories=categories(before.report, after.report),
        idle=_rows(before.report.idle, after.report.idle),
        kernels=tuple(match(list(before.groups), list(after.groups))),
        findings=finding_changes(before.report, after.report, step),
        warnings=tuple(warnings),
        segments_before=segments(before.report),
        segments_after=segments(after.report),
    )


def step_dict(step: StepChange) -> dict[str, Any]:
    d = asdict(step)
    d["speedup"] = step.speedup if math.isfinite(step.speedup) else None
    d["delta_ms"] = step.delta_ms
    return d
