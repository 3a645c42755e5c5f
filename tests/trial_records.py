"""A ``--try-fixes`` trial record for the tests that render, write or read one back: a confirmed
bf16-autocast trial, any field replaced by keyword."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpudoctor.core.trial_record import PeakMemory, TrialNumerics, TrialRecord

NUMERICS = TrialNumerics((2.0,), (2.01,), 0.05, True, 0.005, False, None)

RECORD = TrialRecord(
    knob="bf16-autocast",
    knobs=("bf16-autocast",),
    reference="control",
    title="t",
    finding="fp32-matmul",
    predicted_speedup=1.8,
    predicted_saving_ms=4.0,
    predicted_by="replay",
    status="ok",
    reason="",
    verdict="confirmed",
    measured_speedup=1.7,
    speedup_ci95=(1.6, 1.8),
    baseline_ms=10.0,
    trial_ms=5.88,
    change_pct=-41.2,
    change_ci95_pct=(-44.0, -38.0),
    n_baseline=5,
    n_trial=5,
    method="welch-log",
    peak_memory_bytes=PeakMemory(2**30, 2**29),
    numerics=NUMERICS,
    effects=("<b>Net</b>.forward",),
    exit_code=0,
    wall_s=12.5,
    cwd="/work",
    dir="/runs/r/trials/bf16-autocast",
    files_written=None,
)


def record(**changes: Any) -> TrialRecord:
    return dataclasses.replace(RECORD, **changes)
