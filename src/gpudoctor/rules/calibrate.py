"""Re-price findings for the step as it runs without the profiler (when that time is known).

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

import dataclasses

from gpudoctor.analysis.idle import IdleResult
from gpudoctor.core.finding import (
    MAX_SAVING_SHARE,
    STEP_AFTER_FIX,
    STEP_FLOOR_AFTER_FIX,
    Finding,
    severity_for,
    speedup,
)


def _metadata(finding_id: str) -> tuple[str, str]:
    """The idle cause behind a finding's idle part and how it is calibrated (its rule declares
    both: rules/base.py Rule.idle_cause, Rule.calibration); an unknown id: no cause, "idle"."""
    from gpudoctor.rules.registry import RULES

    rule = RULES.get(finding_id)
    return (rule.idle_cause, rule.calibration) if rule is not None else ("", "idle")


def idle_scales(idle: IdleResult, profiled_step_ms: float, unprofiled_step_ms: float) -> dict[str, float]:
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
# stretches with the host: a pageable copy is staged by the CPU, a per-sample loop is most of the step. What they leave (the step after the
# fix, P - saving) shrinks like the rest of the step, except the profiler's own time at the step's
# edges (B, analysis/observer.step_boundary_ms), which the unprofiled step does not have at all:
# left = (P - saving - B) x U / (P - B). With B = 0 that is the saving scaled by U / P. The lab's
# per_sample_loop (H100, 2026-11-22): P 9.85, U 6.49, B 0.22 ms; the fixed twin profiled 0.569 ms
# (predicted 0.555), unprofiled 0.266 ms (predicted 0.229; U / P alone predicted 0.366).
# Calibration "gpu-step-share": small GEMMs, the same way on a step the GPU keeps busy
# (GPU_BOUND_SHARE of it): stacking them leaves a step of a few large kernels, and that remainder is what the lab's twin measures (small_gemm,
# H100: predicted 0.19 ms profiled; the fixed twin 0.18-0.21 ms profiled, 0.10-0.14 unprofiled).
# On a step the host holds back, the kernels' time does not shrink with the profiler gone: the
# kernel saving stands as it is.
GPU_BOUND_SHARE = 0.8


def calibrate(
    findings: list[Finding],
    unprofiled_step_ms: float,
    scales: dict[str, float],
    busy_ms: float,
    profiled_step_ms: float,
    boundary_ms: float = 0.0,
) -> list[Finding]:
    """``busy_ms``: GPU busy time per step; no fix removes more idle than U - busy.
    ``boundary_ms``: the profiler's host time at each step's edges (see "step-share" above)."""
    from gpudoctor.rules.registry import rank

    out = []
    for finding in findings:
        gpu_bound = busy_ms >= GPU_BOUND_SHARE * profiled_step_ms
        cause, calibration = _metadata(finding.id)
        after = finding.evidence.numbers.get(STEP_AFTER_FIX)
        if after is not None:  # the fix leaves a step made of kernel time and kept idle
            saving = max(unprofiled_step_ms - float(after), 0.0)
            idle = saving if finding.idle_ms >= finding.saving_ms else min(finding.idle_ms, saving)
        elif profiled_step_ms > 0 and (calibration == "step-share" or (calibration == "gpu-step-share" and gpu_bound)):
            inner = max(profiled_step_ms - boundary_ms, 1e-9)
            share = min(unprofiled_step_ms / inner, 1.0)
            left = max(profiled_step_ms - finding.saving_ms - boundary_ms, 0.0) * share
            saving = unprofiled_step_ms - left
            idle = min(finding.idle_ms * share, saving)
        else:
            f = scales.get(cause, 1.0)
            idle = min(finding.idle_ms * f, max(unprofiled_step_ms - busy_ms, 0.0))
            saving = finding.saving_ms - finding.idle_ms + idle
        floor = finding.evidence.numbers.get(STEP_FLOOR_AFTER_FIX)
        if floor is not None:
            saving = min(saving, unprofiled_step_ms - float(floor))
            idle = min(idle, max(saving, 0.0))
        saving = max(min(saving, MAX_SAVING_SHARE * unprofiled_step_ms), 0.0)
        numbers = dict(finding.evidence.numbers, saving_in_profiled_trace_ms=round(finding.saving_ms, 3))
        severity = severity_for(saving, unprofiled_step_ms, finding.severity_floor)
        out.append(
            dataclasses.replace(
                finding,
                saving_ms=saving,
                idle_ms=idle,
                predicted_speedup=speedup(unprofiled_step_ms, saving),
                severity=severity,
                evidence=dataclasses.replace(finding.evidence, numbers=numbers),
            )
        )
    return rank(out)


# Calibration "same-ops": findings whose fix makes the same kernels faster without removing any
# op: the step cannot get shorter than the time the host needs to issue those ops (a GPU-bound step hides the host's
# time; after the fix it shows). Fusion, fused attention and batching remove ops: not floored.


def floor_at_host_time(findings: list[Finding], step_ms: float, host_ms: float | None) -> list[Finding]:
    """Cap the saving of same-ops fixes so the step they predict is not below the host's time."""
    from gpudoctor.rules.registry import rank

    if not host_ms or host_ms <= 0:
        return findings
    out = []
    for finding in findings:
        if _metadata(finding.id)[1] == "same-ops" and step_ms - finding.saving_ms < host_ms:
            saving = max(step_ms - host_ms, 0.0)
            numbers = dict(finding.evidence.numbers, host_time_per_step_ms=round(host_ms, 3))
            finding = dataclasses.replace(
                finding,
                saving_ms=saving,
                predicted_speedup=speedup(step_ms, saving),
                severity=severity_for(saving, step_ms, finding.severity_floor),
                evidence=dataclasses.replace(finding.evidence, numbers=numbers),
            )
        out.append(finding)
    return rank(out)
