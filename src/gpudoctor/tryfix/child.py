"""One trial, in its own process: ``python -m gpudoctor.tryfix.child SPEC.json``.

The spec (written by tryfix/trial.py) names the program, its arguments, the knobs and the number of
steps. The child seeds the generators as the baseline did (capture/numerics.py), applies the knobs
(tryfix/knobs.py), then runs the program in-process as ``gpudoctor run`` does (capture/runner.py):
it runs ``skip`` steps, and on until its latest steps have settled, times from the step after those
judged settled (capture/timing.py ``settled``, ``timed_enough``), then either records the baseline's
profiler window (``trace``: the trial directory is then a run bundle that ``gpudoctor diff``
compares with the baseline's or another trial's) and stops, or stops where the window would open. It
writes into the trial's directory ``env.json`` (as a run's: its
``capture.unprofiled_step_ms_samples``), ``trace.json.gz`` with ``trace``, and ``trial.json``: the
samples, the first losses, the peak GPU memory, what each knob changed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from gpudoctor.tryfix.child_trial import ChildTrial


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    out_dir = Path(spec["out_dir"])
    knob_ids = list(spec["knobs"])

    from gpudoctor.capture.bundle import capture_facts, environment, write_json
    from gpudoctor.capture.numerics import peak_memory_bytes, record_losses, seed_all
    from gpudoctor.capture.runner import Target, run_program
    from gpudoctor.capture.session import CaptureConfig
    from gpudoctor.tryfix.knobs import apply_knobs

    target = Target(spec["target"], tuple(spec["args"]), bool(spec["is_module"]))
    trace = bool(spec.get("trace"))
    config = CaptureConfig(steps=int(spec.get("steps") or 1), skip=int(spec["skip"]),
                           calibration_steps=0, profile=trace, trial=True, record_memory=trace,
                           nvml_interval_s=0.2 if trace else 0)
    seed_all()
    effects: list[str] = []
    try:
        effects = apply_knobs(knob_ids)
        with record_losses(int(spec["loss_steps"])) as losses:
            outcome = run_program(target, config, out_dir, exit_after=True, wait_s=None)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 - a knob that cannot be applied: reported, like a crash
        failed = ChildTrial(tuple(knob_ids), tuple(effects), error=f"{type(exc).__name__}: {exc}")
        write_json(out_dir / "trial.json", failed.to_dict())
        return 1
    result = outcome.result
    trial = ChildTrial(
        knobs=tuple(knob_ids),
        effects=tuple(effects),
        losses=tuple(losses),
        exit_code=outcome.exit_code,
        error=result.error or outcome.message,
        ran=True,
        stopped_by_gpudoctor=outcome.stopped_by_us,
        step_source=result.step_source or None,
        steps_seen=result.steps_seen,
        samples_ms=tuple(round(x, 4) for x in result.unprofiled_step_ms),
        sample_steps=tuple(result.unprofiled_step_index)
        if len(result.unprofiled_step_index) == len(result.unprofiled_step_ms) else (),
        unsettled=next((n for n in result.notes if "had not settled" in n), ""),
        peak_memory_bytes=peak_memory_bytes(),
    )
    env = environment()
    env["program"] = spec.get("program") or {}
    env["capture"] = capture_facts(result, config, None)
    env["trial"] = {"knobs": knob_ids, "effects": effects}
    write_json(out_dir / "env.json", env)
    write_json(out_dir / "trial.json", trial.to_dict())
    return outcome.exit_code


def _exit_now(code: int) -> None:
    """Leave without the interpreter's teardown once trial.json is written: nothing after it is
    measured, and a DataLoader's persistent workers are joined there one by one, five seconds each
    when they do not stop (torch's MP_STATUS_CHECK_INTERVAL), which can take ten times the trial's
    steps (benchmarks/BENCHMARKS-try-fixes.md "Evidence moved from the source: try-fixes"). The
    parent kills the process group after it."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main(sys.argv) or 0)
