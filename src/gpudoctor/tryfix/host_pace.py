"""The host's pace in a trial's process beside the capture's, from their traces.

Each trial runs the program in a fresh process, and two processes of one program on one machine
can run their host at paces far apart (benchmarks/BENCHMARKS-try-fixes.md "The host's pace, trial
by trial"). Where the step the knob
leaves is the host's, its measured speedup moves with that pace, which the price (made at the
capture's pace) cannot know; the trial says so beside its verdict.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from gpudoctor.analysis.observer import launch_call_ns
from gpudoctor.analysis.steps import segment
from gpudoctor.core.trial_record import HOST_PACE_NOTED_SHARE
from gpudoctor.errors import GpuDoctorError
from gpudoctor.trace.load import load
from gpudoctor.tryfix.knobs import Knob


def comparable(knobs: Iterable[Knob]) -> bool:
    """A trial whose launch calls are the capture's population: not a compile knob's, whose
    kernels launch through Triton."""
    return not any(k.group == "compile" for k in knobs)


def launch_ns_of(run_dir: Path) -> float | None:
    """The median launch call of the trace in ``run_dir`` (a capture or a trial; trace/load.py
    finds it), None where there is none, it cannot be read, or it holds too few launch calls."""
    try:
        trace = load(run_dir)
        return launch_call_ns(trace, segment(trace))
    except (GpuDoctorError, OSError, ValueError):
        return None


def pace_note(trial_ns: float | None, capture_ns: float | None) -> tuple[float | None, str]:
    """The trial's launch call over the capture's, and the line that names it where it is further
    than HOST_PACE_NOTED_SHARE from 1 ("" otherwise)."""
    if not trial_ns or not capture_ns:
        return None, ""
    ratio = trial_ns / capture_ns
    if abs(ratio - 1) <= HOST_PACE_NOTED_SHARE:
        return round(ratio, 3), ""
    pace = "slower" if ratio > 1 else "faster"
    return round(ratio, 3), (
        f"its host ran {pace} than the capture's ({trial_ns / 1e3:.1f} us a launch call against "
        f"{capture_ns / 1e3:.1f}): where the host holds the step after the knob, the measured "
        "speedup moves with that pace, which the prediction took from the capture")
