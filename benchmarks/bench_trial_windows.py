"""Knob trials compared over the same steps: each trial's mean step against its controls' over
the step indices both timed, beside the speedup the trial reported (all of each window).

The controls time every step from their skip to the end; a compile trial starts later (its
warm-up) and stops sooner, so a program whose steps differ with their place (an epoch's end, a
validation loop) is compared over different stretches of itself. A sample's step index is the
one the child recorded (trial.json ``sample_steps``, capture/marks.py ``interval_steps``); in a
file written before those were, the child's ``steps_seen`` less its sample count, plus its position
(tryfix/child_trial.py): right only where the samples run unbroken to the child's end, as in trials
that record no trace (``--no-trial-trace``, as benchmarks/bench_knob_trials.py runs them). Since
``run --try-fixes`` compares over the same steps itself (tryfix/trial.py ``same_steps``), its
reported speedups of new runs are this script's too.

    python benchmarks/bench_trial_windows.py RUN_DIR [RUN_DIR ...]

A run directory is one ``gpudoctor run --try-fixes`` left (trials.json and trials/<knob>/trial.json);
benchmarks/bench_knob_trials.py leaves one per program under OUT/runs/<program>/. Prints a row per
knob trial and, last, how many are within 1.25x of their prediction each way.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

WITHIN = 1.25
MIN_SHARED_STEPS = 10
CONTROLS = ("control", "control-end")


def timed_steps(run: Path, knob: str) -> dict[int, float] | None:
    """{step index: ms} of one trial, None where it timed nothing."""
    path = run / "trials" / knob / "trial.json"
    try:
        trial = json.loads(path.read_text())
        samples = [float(v) for v in trial.get("samples_ms") or []]
        steps = [int(k) for k in trial.get("sample_steps") or []]
        if len(steps) != len(samples):
            first = int(trial["steps_seen"]) - len(samples)
            steps = list(range(first, first + len(samples)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # a trial with no readable samples is left out
    if not samples:
        return None
    return dict(zip(steps, samples, strict=True))


def rows_of(run: Path) -> list[dict]:
    try:
        trials = json.loads((run / "trials.json").read_text())
        records = trials.get("trials", trials) if isinstance(trials, dict) else trials
        records = [r for r in records if isinstance(r, dict) and "knob" in r]
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        raise SystemExit(
            f"{run}: no readable trials.json ({type(exc).__name__}); pass the folders "
            "`gpudoctor run --try-fixes` leaves (RUNS/<program>/<run>)"
        ) from None
    controls = [c for c in (timed_steps(run, k) for k in CONTROLS) if c]
    out = []
    for rec in records:
        if (
            rec["knob"] in (*CONTROLS, "combined")
            or not rec.get("measured_speedup")
            or not rec.get("predicted_speedup")
        ):
            continue
        steps = timed_steps(run, rec["knob"])
        if not steps or not controls:
            continue
        shared = sorted(set(steps).intersection(*controls))
        if len(shared) < MIN_SHARED_STEPS:
            continue
        reference = statistics.geometric_mean(
            [statistics.mean(c[i] for i in shared) for c in controls]
        )
        out.append(
            {
                "run": run.name,
                "knob": rec["knob"],
                "predicted": rec["predicted_speedup"],
                "reported": rec["measured_speedup"],
                "same_steps": reference / statistics.mean(steps[i] for i in shared),
                "steps": (shared[0], shared[-1], len(shared)),
            }
        )
    return out


def within(predicted: float, measured: float) -> bool:
    return 1 / WITHIN <= predicted / measured <= WITHIN


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    rows = [r for run in ap.parse_args().runs for r in rows_of(run)]
    print("| run | knob | predicted | reported | over the same steps | steps (first-last, n) |")
    print("|---|---|---:|---:|---:|---|")
    for r in rows:
        a, b, n = r["steps"]
        print(
            f"| {r['run']} | {r['knob']} | {r['predicted']:.2f} | {r['reported']:.2f}"
            f"{'*' if within(r['predicted'], r['reported']) else ''} | {r['same_steps']:.2f}"
            f"{'*' if within(r['predicted'], r['same_steps']) else ''} | {a}-{b}, {n} |"
        )
    print(
        f"\nwithin {WITHIN}x: reported {sum(within(r['predicted'], r['reported']) for r in rows)}, "
        f"over the same steps {sum(within(r['predicted'], r['same_steps']) for r in rows)}, "
        f"of {len(rows)}"
    )


if __name__ == "__main__":
    main()
