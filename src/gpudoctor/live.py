"""Capture, then diagnose: ``gpudoctor run`` and ``gpudoctor.profile()``.

Capture (capture/) knows nothing of analysis; this module joins the two: it runs the window,
analyzes the trace with the unprofiled step time, and writes the run bundle.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from types import TracebackType
from typing import Any

from gpudoctor.capture.bundle import capture_facts, environment, new_run_dir, write_json
from gpudoctor.capture.runner import Outcome, Target, run_program
from gpudoctor.capture.session import CaptureConfig, CaptureResult, CaptureSession
from gpudoctor.errors import GpuDoctorError, NoGpuActivityError
from gpudoctor.report.model import Report

DEFAULT_BASE = Path("gpudoctor-runs")


def diagnose_capture(result: CaptureResult, config: CaptureConfig, run_dir: Path) -> tuple[Report | None, str]:
    """Analyze what a session captured and write env.json, report.json, report.html.

    Returns the report (None when there is nothing to diagnose) and a note for the user.
    """
    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.report.html import render_html
    from gpudoctor.report.json_report import to_json
    from gpudoctor.trace import load

    env = environment()
    report: Report | None = None
    note = ""
    unprofiled = statistics.median(result.unprofiled_step_ms) if result.unprofiled_step_ms else None
    if result.trace_path is not None:
        try:
            report = analyze_loaded(load(result.trace_path), unprofiled_step_ms=unprofiled,
                                    model_state=result.model_state or None)
        except NoGpuActivityError:
            note = (f"no GPU activity in the window (device: {result.device}): the CPU-only profile is in "
                    f"{result.trace_path}; the doctor needs a CUDA device to diagnose GPU time")
    env["capture"] = capture_facts(result, config, report.step_ms if report else None)
    if report is not None:
        env["ceilings"] = report.ceilings
        (run_dir / "report.json").write_text(to_json(report) + "\n")
        (run_dir / "report.html").write_text(render_html(report))
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "env.json", env)
    return report, note


def run_and_diagnose(
    target: Target,
    config: CaptureConfig,
    base: Path = DEFAULT_BASE,
    exit_after: bool = True,
    wait_s: float = 30.0,
    window_s: float = 3.0,
) -> tuple[Outcome, Path, Report | None, str]:
    run_dir = new_run_dir(base, target.name)
    outcome = run_program(target, config, run_dir, exit_after=exit_after, wait_s=wait_s, window_s=window_s)
    result = outcome.result
    if result.trace_path is None:
        return outcome, run_dir, None, _why_nothing(outcome, config)
    report, note = diagnose_capture(result, config, run_dir)
    throttled = [r for r in result.nvml.get("throttle_reasons_seen", []) if r not in ("gpu_idle", "sync_boost")]
    if throttled:
        note = (note + "; " if note else "") + f"the GPU's clocks were held back during the window ({', '.join(throttled)})"
    if result.error:
        note = (note + "; " if note else "") + f"the window ended early ({result.error}): the report covers what was captured"
    return outcome, run_dir, report, note


def _why_nothing(outcome: Outcome, config: CaptureConfig) -> str:
    seen = outcome.result.steps_seen
    if outcome.message:
        return outcome.message
    if seen == 0 and outcome.exit_code not in (0, 2):
        return f"the program stopped (exit code {outcome.exit_code}) before its first step: nothing was recorded"
    if seen == 0:
        return ("the program ran no step: it never called optimizer.step() or gpudoctor.step(), and it ended "
                "before the time window; call gpudoctor.step() once per iteration, or lower --wait")
    needed = config.skip + 1 + config.steps
    return (f"the program ended after {seen} steps, before the window (--skip {config.skip} + 1 warm-up + "
            f"--steps {config.steps} = {needed}); lower --skip or --steps")


class Doctor:
    """``with gpudoctor.profile(steps=5, skip=3) as doc: ... doc.step()``; then ``doc.report()``."""

    def __init__(self, steps: int = 5, skip: int = 3, stack: bool = False, out: str | Path | None = None,
                 name: str = "profile") -> None:
        self.config = CaptureConfig(steps=steps, skip=skip, stack=stack)
        self.run_dir = new_run_dir(Path(out) if out else DEFAULT_BASE, name)
        self.session = CaptureSession(self.config, self.run_dir)
        self._report: Report | None = None
        self._note = ""

    def __enter__(self) -> Doctor:  # noqa: PYI034 - Doctor is not meant to be subclassed; no typing_extensions
        self.session.start()
        return self

    def step(self) -> None:
        """Mark the end of one iteration (optimizer steps are counted without it)."""
        self.session.explicit_steps = True
        self.session.step()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is not None:
            self.session.fail(f"{type(exc).__name__}: {exc}")
        else:
            self.session.close()
        if self.session.result.trace_path is not None:
            self._report, self._note = diagnose_capture(self.session.result, self.config, self.run_dir)

    def report(self) -> Report:
        """The diagnosis of the recorded window."""
        if self._report is None:
            result = self.session.result
            why = self._note or (
                f"no window was recorded: {result.steps_seen} steps seen, {self.config.skip + 1 + self.config.steps} "
                "needed (skip + 1 warm-up + steps); call doc.step() once per iteration"
            )
            raise GpuDoctorError(why)
        return self._report

    def _repr_html_(self) -> str:
        return self._report._repr_html_() if self._report is not None else f"<pre>{self._note}</pre>"


def profile(steps: int = 5, skip: int = 3, stack: bool = False, out: str | Path | None = None) -> Any:
    """Profile ``steps`` steps of the code inside the ``with`` block, after ``skip`` untouched ones."""
    return Doctor(steps=steps, skip=skip, stack=stack, out=out)
