"""The host's pace in a trial's process beside the capture's, from their traces.

Each trial runs the program in a fresh process, and two processes of one program on one machine
can run their host at paces far apart: the median time of an eager launch call moved 0.63-1.25x
from the capture's across the trials of two sessions' knob sets, the controls 0.85-1.25x
(benchmarks/BENCHMARKS-try-fixes.md "The host's pace, trial by trial"). Where the step the knob
leaves is the host's, its measured speedup moves with that pace, which the price (made at the
capture's pace) cannot know; the trial says so beside its verdict.
"""

from __future__ import annotations

from pathlib import Path

from gpudoctor.analysis.observer import launch_call_ns
from gpudoctor.analysis.steps import segment
from gpudoctor.core.trial_record import HOST_PACE_NOTED_SHARE
from gpudoctor.errors import GpuDoctorError
from gpudoctor.trace.load import load

# a trial's launch calls this far from the capture's (either way) is named beside its verdict
NOTED_SHARE = HOST_PACE_NOTED_SHARE
TRACE_NAMES = ("trace.json.gz", "trace.json")


def launch_ns_of(run_dir: Path) -> float | None:
    """The median launch call of the trace in ``run_dir`` (a capture or a trial), None where
    there is no trace, it cannot be read, or it holds too few launch calls."""
    path = next((run_dir / n for n in TRACE_NAMES if (run_dir / n).is_file()), None)
    if path is None:
        return None
    try:
        trace = load(path)
        return launch_call_ns(trace, segment(trace))
    except (GpuDoctorError, OSError, ValueError):
        return None


def pace_note(trial_ns: float | None, capture_ns: float | None) -> tuple[float | None, str]:
    """The trial's launch call over the capture's, and the line that names it where it is further
    than NOTED_SHARE from 1 ("" otherwise)."""
    if not trial_ns or not capture_ns:
        return None, ""
    ratio = trial_ns / capture_ns
    if abs(ratio - 1) <= NOTED_SHARE:
        return round(ratio, 3), ""
    pace = "slower" if ratio > 1 else "faster"
    return round(ratio, 3), (
        f"its host ran {pace} than the capture's ({trial_ns / 1e3:.1f} us a launch call against "
        f"{capture_ns / 1e3:.1f}): where the host holds the step after the knob, the measured "
        "speedup moves with that pace, which the prediction took from the capture")
