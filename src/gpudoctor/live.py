"""Capture, then diagnose: ``gpudoctor run`` and ``gpudoctor.profile()``.

Capture (capture/) knows nothing of analysis; this module joins the two: it runs the window,
analyzes the trace with the unprofiled step time, and writes the run bundle.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import TracebackType
from typing import Any

from gpudoctor.capture.bundle import (
    capture_facts,
    environment,
    global_rank,
    new_run_dir,
    program_facts,
    rank_suffix,
    unprofiled_step,
    write_json,
)
from gpudoctor.capture.runner import Outcome, Target, run_program
from gpudoctor.capture.session import CaptureConfig, CaptureResult, CaptureSession
from gpudoctor.core.card import problem_reasons
from gpudoctor.errors import GpuDoctorError, IncompleteTraceError, NoGpuActivityError
from gpudoctor.report.model import Report

DEFAULT_BASE = Path("gpudoctor-runs")


def diagnose_capture(result: CaptureResult, config: CaptureConfig, run_dir: Path,
                     rank: int | None = None, program: dict[str, Any] | None = None) -> tuple[Report | None, str]:
    """Analyze what a session captured and write env.json, report.json, report.html (each name
    carries the global rank in a distributed job: ``report.rank3.json``); ``program`` (what ran,
    its git commit: bundle.program_facts) goes into env.json.

    Returns the report (None when there is nothing to diagnose) and a note for the user.
    """
    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.report.html import render_html
    from gpudoctor.report.json_report import to_json
    from gpudoctor.trace import load

    env = environment()
    if program:
        env["program"] = program
    report: Report | None = None
    note = ""
    suffix = rank_suffix(rank)
    unprofiled = unprofiled_step(result.unprofiled_step_ms)
    if result.trace_path is not None:
        try:
            report = analyze_loaded(load(result.trace_path), unprofiled_step_ms=unprofiled,
                                    model_state=result.model_state or None, step_source=result.step_source)
        except NoGpuActivityError:
            note = (f"no GPU activity in the window (device: {result.device}): the CPU-only profile is in "
                    f"{result.trace_path}; the doctor needs a CUDA device to diagnose GPU time")
        except IncompleteTraceError as exc:  # the window holds nothing sound to report (its message names the file)
            note = f"the recorded window cannot be diagnosed: {exc}"
    if report is not None:
        report = _with_capture_facts(report, result)
    env["capture"] = capture_facts(result, config, report.step_ms if report else None)
    run_dir.mkdir(parents=True, exist_ok=True)
    if report is not None:
        env["ceilings"] = report.ceilings
        (run_dir / f"report{suffix}.json").write_text(to_json(report) + "\n")
        (run_dir / f"report{suffix}.html").write_text(render_html(report))
    write_json(run_dir / f"env{suffix}.json", env)
    return report, note


def _with_capture_facts(report: Report, result: CaptureResult) -> Report:
    """What only the live capture knows: what marked the steps, per-token generate() timing, and
    its notes (thin calibration, a window cut short)."""
    steps = dict(report.steps)  # steps["source"]: set by analyze_loaded from step_source
    if result.root_module:
        steps["root_module"] = result.root_module
    if result.generate:
        steps["generate"] = result.generate
    warnings = tuple(report.warnings) + tuple(n for n in result.notes if n not in report.warnings)
    return dataclasses.replace(report, steps=steps, warnings=warnings)


def run_and_diagnose(
    target: Target,
    config: CaptureConfig,
    base: Path = DEFAULT_BASE,
    exit_after: bool = True,
    wait_s: float = 30.0,
    window_s: float = 3.0,
) -> tuple[Outcome, Path, Report | None, str]:
    rank = global_rank()
    run_dir = new_run_dir(base, target.name, rank)
    program = program_facts(target.path_or_module, target.args, target.is_module)  # before the program can chdir
    outcome = run_program(target, config, run_dir, exit_after=exit_after, wait_s=wait_s, window_s=window_s)
    result = outcome.result
    if result.trace_path is None:
        return outcome, run_dir, None, _why_nothing(outcome, config, wait_s)
    report, note = diagnose_capture(result, config, run_dir, rank, program)
    throttled = problem_reasons(result.nvml.get("throttle_reasons_seen"))
    if throttled:
        note = (note + "; " if note else "") + f"the GPU's clocks were held back during the window ({', '.join(throttled)})"
    if result.error:
        note = (note + "; " if note else "") + f"the window ended early ({result.error}): the report covers what was captured"
    return outcome, run_dir, report, note


def _why_nothing(outcome: Outcome, config: CaptureConfig, wait_s: float) -> str:
    result = outcome.result
    seen = result.steps_seen
    if outcome.message:
        return outcome.message
    if seen == 0 and outcome.exit_code not in (0, 2):
        return f"the program stopped (exit code {outcome.exit_code}) before its first step: nothing was recorded"
    if seen == 0 and result.training_forwards:
        return (f"the program called {result.root_module} {result.training_forwards} times with gradients and never "
                f"stepped a torch.optim optimizer, so its steps could not be told apart (forwards count as steps after "
                f"{config.patience} such calls) and it ended before the time window (--wait {wait_s:g} s); call "
                "gpudoctor.step() once per iteration, or lower --wait")
    if seen == 0:
        return ("the program ran no step gpudoctor could see (no module call, optimizer step, generate() or CUDA "
                f"graph replay) and ended before the time window (--wait {wait_s:g} s); call gpudoctor.step() once "
                "per iteration, or lower --wait")
    source = result.step_source or "steps"
    how = f"exit code {outcome.exit_code}" if outcome.exit_code else "it ended"
    return (f"the program ran {seen} step{'s' * (seen != 1)} ({source}) and stopped ({how}) before the window, "
            f"which opens after --skip {config.skip}; lower --skip")


class Doctor:
    """``with gpudoctor.profile(steps=5, skip=3) as doc: ... doc.step()``; then ``doc.report()``."""

    def __init__(self, steps: int = 5, skip: int = 3, stack: bool = False, out: str | Path | None = None,
                 name: str = "profile") -> None:
        self.config = CaptureConfig(steps=steps, skip=skip, stack=stack)
        self.rank = global_rank()
        self.run_dir = new_run_dir(Path(out) if out else DEFAULT_BASE, name, self.rank)
        self.session = CaptureSession(self.config, self.run_dir, rank=self.rank)
        self._report: Report | None = None
        self._note = ""

    def __enter__(self) -> Doctor:  # noqa: PYI034 - Doctor is not meant to be subclassed; no typing_extensions
        self.session.start()
        return self

    def step(self) -> None:
        """Mark the end of one iteration (optimizer steps are counted without it)."""
        self.session.step()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is not None:
            self.session.fail(f"{type(exc).__name__}: {exc}")
        else:
            self.session.close()
        if self.session.result.trace_path is not None:
            self._report, self._note = diagnose_capture(self.session.result, self.config, self.run_dir, self.rank)

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
