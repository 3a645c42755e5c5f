"""Price and rank the rules' findings, once: ``price`` is the one place that does it.

The rules price each finding against the profiled step. ``price`` re-prices them for the step as
it runs without the profiler (when that time is known, ``calibrate``), floors the fixes that keep
every op at the host's time to issue them (``floor_at_host_time``), then ranks them (registry's
``rank``), once, at the end.

The profiler adds host time to every event it records; on a host-bound step that time shows up
as GPU idle the unprofiled program does not have. ``gpudoctor run`` and the lab time the same
program outside the profiled window. With P the profiled step and U the unprofiled one, the
profiler added I = P - U of host time per step, spread over the recorded events: a cause of idle
whose host time held a share of the step's recorded events gave that share of I (never more than
its idle). Each finding keeps its kernel-time part, its idle part shrinks like the idle of its
cause, and its predicted speedup is taken against U; no finding removes more idle than the
unprofiled step has (U minus the GPU's busy time).
"""

from __future__ import annotations

import msgspec

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.idle import IdleResult
from gpudoctor.analysis.observer import host_step_ms, step_boundary_ms
from gpudoctor.core.finding import (
    HOST_WORK_REMOVED,
    KERNELS_REMOVED,
    MAX_SAVING_SHARE,
    STEP_AFTER_FIX,
    STEP_FLOOR_AFTER_FIX,
    STEP_FLOOR_SHARE_AFTER_FIX,
    Finding,
    severity_for,
    speedup,
)
from gpudoctor.rules.shared import GPU_BOUND_SHARE, UNSEEN_MIN_SHARE, UNSEEN_TAKEN_BY
from gpudoctor.rules.whatif import AllFixes, reprice


def _metadata(finding_id: str) -> tuple[str, str]:
    """The idle cause behind a finding's idle part and how it is calibrated (its rule declares
    both: rules/base.py Rule.idle_cause, Rule.calibration); an unknown id: no cause, "idle"."""
    from gpudoctor.rules.registry import RULES

    rule = RULES.get(finding_id)
    return (rule.idle_cause, rule.calibration) if rule is not None else ("", "idle")


def idle_scales(idle: IdleResult, profiled_step_ms: float,
                unprofiled_step_ms: float) -> dict[str, float]:
    """For each cause, the share of its profiled idle that remains unprofiled (0..1)."""
    added = max(profiled_step_ms - unprofiled_step_ms, 0.0)
    total = sum(idle.events_by_cause.values())
    scales = {}
    for cause, events in idle.events_by_cause.items():
        ms = idle.ms(cause)
        if ms <= 0 or total <= 0:
            scales[cause] = 1.0
            continue
        scales[cause] = 1.0 - min(added * events / total, ms) / ms
    return scales


# Calibration "step-share" (rules/base.py): findings whose whole saving is host-driven time that
# stretches with the host (a pageable copy is staged by the CPU, a per-sample loop is most of the
# step). What they leave (the step after the fix, P - saving) shrinks like the rest of the step,
# except the profiler's own time at the step's edges (B, analysis/observer.step_boundary_ms), which
# the unprofiled step does not have at all: left = (P - saving - B) x U / (P - B). With B = 0 that
# is the saving scaled by U / P. Calibration "gpu-step-share": small GEMMs, the same way on a step
# the GPU keeps busy (GPU_BOUND_SHARE of it, rules/shared.py): stacking them leaves a step of a few
# large kernels, and that remainder is what the fixed twin measures. On a step the host holds back,
# the kernels' time does not shrink with the profiler gone: the kernel saving stands as it is.
# Calibration "host-step-share": a per-parameter optimizer loop, the same way on a step the host
# holds back (under GPU_BOUND_SHARE busy): the loop and the rest of the step are both the host's
# dispatch, and both shrink with the profiler gone (priced by the idle share of its cause instead,
# the lab's twin was over-predicted: tests/test_calibrate.py::
# test_optimizer_loop_on_a_host_bound_step_is_calibrated_like_the_step). On a GPU-bound step the
# idle share stands. A finding priced by the host's own work its fix removes (evidence
# HOST_WORK_REMOVED: a host-bound step's reads and the checks computed for them, rules/host_sync.py)
# is calibrated the same way. The lab's twins against each calibration:
# benchmarks/BENCHMARKS-twins.md "Evidence moved from the source: rule pricing", calibration.

# The unprofiled step's time beyond the profiled one, per step: waits the window did not record.
# A loader whose workers deliver batches in bursts makes most steps fast and a few long; the
# recorded steps can all be fast ones, and this time is then most of the program's step.
UNSEEN_MS = "unseen_in_window_ms"
# UNSEEN_TAKEN_BY (rules/shared.py): the findings that take that time.
# UNSEEN_MIN_SHARE (rules/shared.py; the replay's pricing reads it too): below that share of U the
# gap is the spread between two timings of one step, not waits.


def calibrate(
    findings: list[Finding],
    unprofiled_step_ms: float,
    scales: dict[str, float],
    busy_ms: float,
    profiled_step_ms: float,
    boundary_ms: float = 0.0,
) -> list[Finding]:
    """``busy_ms``: GPU busy time per step; no fix removes more idle than U - busy.
    ``boundary_ms``: the profiler's host time at each step's edges (see "step-share" above).
    The findings come back in their order, unranked (``price`` ranks).

    An unprofiled step longer than the profiled one (U > P) holds time the window did not see:
    the window's findings are priced on the window (U taken as P), never on that unseen time, and
    their speedups against U. A program fed by a DataLoader whose waits are bursty is the usual
    case: the unseen time goes to the findings that take it (UNSEEN_TAKEN_BY: ``input-pipeline``,
    ``dynamic-shapes``) when the trace has one (UNSEEN_MS)."""
    unseen = max(unprofiled_step_ms - profiled_step_ms, 0.0) if profiled_step_ms > 0 else 0.0
    if unseen < UNSEEN_MIN_SHARE * unprofiled_step_ms:
        unseen = 0.0  # within the spread of timing one step two ways: the unprofiled step stands
    actual_step_ms = unprofiled_step_ms
    unprofiled_step_ms -= unseen
    out = []
    for finding in findings:
        gpu_bound = busy_ms >= GPU_BOUND_SHARE * profiled_step_ms
        cause, calibration = _metadata(finding.id)
        after = finding.evidence.numbers.get(STEP_AFTER_FIX)
        if after is not None:  # the fix leaves a step made of kernel time and kept idle
            saving = max(unprofiled_step_ms - float(after), 0.0)
            idle = saving if finding.idle_ms >= finding.saving_ms else min(finding.idle_ms, saving)
        elif profiled_step_ms > 0 and (calibration == "step-share"
                                       or (calibration == "gpu-step-share" and gpu_bound)
                                       or (calibration == "host-step-share" and not gpu_bound)
                                       or HOST_WORK_REMOVED in finding.evidence.numbers):
            inner = max(profiled_step_ms - boundary_ms, 1e-9)
            share = min(unprofiled_step_ms / inner, 1.0)
            left = max(profiled_step_ms - finding.saving_ms - boundary_ms, 0.0) * share
            saving = unprofiled_step_ms - left
            idle = min(finding.idle_ms * share, saving)
        else:
            f = scales.get(cause, 1.0)
            idle = min(finding.idle_ms * f, max(unprofiled_step_ms - busy_ms, 0.0))
            saving = finding.saving_ms - finding.idle_ms + idle
        numbers = dict(finding.evidence.numbers,
                       saving_in_profiled_trace_ms=round(finding.saving_ms, 3))
        if unseen > 0 and finding.id in UNSEEN_TAKEN_BY:
            saving += unseen
            idle += unseen
            numbers[UNSEEN_MS] = round(unseen, 3)
        floor = finding.evidence.numbers.get(STEP_FLOOR_AFTER_FIX)
        if floor is not None:  # what the fix cannot go below, whatever the window saw
            saving = min(saving, actual_step_ms - float(floor))
            idle = min(idle, max(saving, 0.0))
        share = finding.evidence.numbers.get(STEP_FLOOR_SHARE_AFTER_FIX)
        if share is not None:  # the same, as a share of the step the program runs
            saving = min(saving, actual_step_ms * (1.0 - float(share)))
            idle = min(idle, max(saving, 0.0))
        saving = max(min(saving, MAX_SAVING_SHARE * actual_step_ms), 0.0)
        severity = severity_for(saving, actual_step_ms, finding.severity_floor, finding.major_share)
        out.append(
            msgspec.structs.replace(
                finding,
                saving_ms=saving,
                idle_ms=idle,
                predicted_speedup=speedup(actual_step_ms, saving),
                severity=severity,
                evidence=msgspec.structs.replace(finding.evidence, numbers=numbers),
            )
        )
    return out


# Calibration "same-ops": findings whose fix makes the same kernels faster without removing any op:
# the step cannot get shorter than the time the host needs to issue those ops (a GPU-bound step
# hides the host's time; after the fix it shows). Fixes that remove ops (fusion, fused attention)
# declare how many kernels per step they take away (KERNELS_REMOVED): the host still issues the
# rest, so their step is floored at the host's time scaled by the kernels that remain (without the
# floor the lab's naive_attention was over-predicted: benchmarks/BENCHMARKS-twins.md "Evidence moved
# from the source: rule pricing", calibration). Batching fixes (per-sample loops, small GEMMs)
# remove the host's own loop with the kernels and are priced by the step they leave instead.


def floor_at_host_time(findings: list[Finding], step_ms: float, host_ms: float | None,
                       kernels_per_step: float = 0.0,
                       actual_step_ms: float | None = None) -> list[Finding]:
    """Cap each saving so the step it predicts is not below the host's time for the ops that
    remain (unranked: ``price`` ranks). ``actual_step_ms`` (default ``step_ms``): the step the
    speedups are taken against, when the window's step (``step_ms``) is shorter (``calibrate``)."""
    if not host_ms or host_ms <= 0:
        return findings
    actual = step_ms if actual_step_ms is None else actual_step_ms
    out = []
    for finding in findings:
        floor = _host_floor(finding, host_ms, kernels_per_step)
        unseen = float(finding.evidence.numbers.get(UNSEEN_MS, 0.0))
        if floor is not None and step_ms - (finding.saving_ms - unseen) < floor:
            saving = max(step_ms - floor, 0.0) + unseen
            numbers = dict(finding.evidence.numbers, host_time_per_step_ms=round(host_ms, 3))
            if floor < host_ms:
                numbers["host_time_after_fix_ms"] = round(floor, 3)
            finding = msgspec.structs.replace(
                finding,
                saving_ms=saving,
                predicted_speedup=speedup(actual, saving),
                severity=severity_for(saving, actual, finding.severity_floor, finding.major_share),
                evidence=msgspec.structs.replace(finding.evidence, numbers=numbers),
            )
        out.append(finding)
    return out


def _host_floor(finding: Finding, host_ms: float, kernels_per_step: float) -> float | None:
    """The host time the step keeps after this finding's fix, or None when the fix removes the
    host's own work (no floor)."""
    if _metadata(finding.id)[1] == "same-ops":
        return host_ms
    removed = finding.evidence.numbers.get(KERNELS_REMOVED)
    if removed is None or kernels_per_step <= 0:
        return None
    return host_ms * max(1.0 - float(removed) / kernels_per_step, 0.0)


def price(findings: list[Finding], a: Analysis) -> list[Finding]:
    """The findings priced for the step as it runs and ranked (``priced`` without "all fixes")."""
    return priced(findings, a)[0]


def priced(findings: list[Finding], a: Analysis) -> tuple[list[Finding], AllFixes | None]:
    """The findings priced for the step as it runs and ranked: the one place either happens; and
    every replay-priced fix at once.

    Each fix that is an edit of the step's graph is priced by replaying it (rules/whatif.py);
    the others by their rule's formula, re-priced here: with the step timed without the profiler
    (``a.unprofiled_step_ms``, U), against U (``calibrate``), the host's time losing the
    profiler's share of it; same-ops and op-removing fixes floored at the host's time
    (``floor_at_host_time``)."""
    from gpudoctor.rules.registry import rank

    out = reprice(findings, by_formula(findings, a), a)
    return rank(out.findings), out.together


def by_formula(findings: list[Finding], a: Analysis) -> list[Finding]:
    host_ms = host_step_ms(a.trace, a.steps)
    unprofiled = a.unprofiled_step_ms
    if unprofiled:
        scales = idle_scales(a.idle, a.step_ms, unprofiled)
        findings = calibrate(findings, unprofiled, scales, a.breakdown.busy_ms, a.step_ms,
                             step_boundary_ms(a.trace, a.steps))
        if host_ms is not None and a.step_ms > 0:
            # the host's time without the profiler's share of it: the per-event estimate, or the
            # step's own shrink when that is larger (the per-event estimate can leave more host
            # time than the unprofiled step has, and price a same-ops fix at nothing)
            host_ms = max(min(host_ms - a.profiler_overhead_ms,
                              host_ms * unprofiled / a.step_ms), 0.0)
        findings = floor_at_host_time(findings,
                                      min(unprofiled, a.step_ms) if a.step_ms > 0 else unprofiled,
                                      host_ms, a.breakdown.launch_count_per_step,
                                      actual_step_ms=unprofiled)
    else:
        if host_ms is not None:  # offline: the per-event estimate of the profiler's share
            host_ms = max(host_ms - a.profiler_overhead_ms, 0.0)
        findings = floor_at_host_time(findings, a.step_ms, host_ms,
                                      a.breakdown.launch_count_per_step)
    return findings
