"""Re-price findings for the step as it runs without the profiler (when that time is known).

The profiler adds host time to every recorded event; on a host-bound step that time shows up as
GPU idle that the unprofiled program does not have. ``gpudoctor run`` and the lab time the same
program outside the profiled window. With P the profiled step, U the unprofiled one and B the
GPU busy time (about the same in both), a share f = (U - B) / (P - B) of the profiled idle is
real; each finding keeps its kernel-time part and keeps f of its idle part, and its predicted
speedup is taken against U.
"""

from __future__ import annotations

import dataclasses

from gpudoctor.rules.finding import Finding, severity_for, speedup


def idle_scale(profiled_step_ms: float, busy_ms: float, unprofiled_step_ms: float) -> float:
    """The share of the profiled idle that the unprofiled step still has (0..1)."""
    idle = profiled_step_ms - busy_ms
    if idle <= 0 or unprofiled_step_ms >= profiled_step_ms:
        return 1.0
    return min(max((unprofiled_step_ms - busy_ms) / idle, 0.0), 1.0)


def calibrate(
    findings: list[Finding], profiled_step_ms: float, busy_ms: float, unprofiled_step_ms: float
) -> list[Finding]:
    f = idle_scale(profiled_step_ms, busy_ms, unprofiled_step_ms)
    out = []
    for finding in findings:
        idle = finding.idle_ms * f
        saving = min(finding.saving_ms - finding.idle_ms + idle, 0.95 * unprofiled_step_ms)
        saving = max(saving, 0.0)
        numbers = dict(finding.evidence.numbers, saving_in_profiled_trace_ms=round(finding.saving_ms, 3))
        severity = severity_for(saving, unprofiled_step_ms)
        if finding.severity == "major" and finding.id == "memory-pressure":
            severity = "major" if severity in ("minor", "info") else severity  # the wall itself
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
    return sorted(out, key=lambda x: (-x.saving_ms, x.id))
