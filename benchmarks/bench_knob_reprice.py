"""Knob trials re-priced offline: every kept ``run --try-fixes`` bundle's trials, the prediction the
run made beside the one the current code makes from the same trace, against the speedup measured.

A bundle is a run directory (env.json, trace.json.gz, trials.json) as benchmarks/bench_knob_trials.py
leaves them; ``--bundles`` takes a folder of them or a .tar.gz / .tar.xz of that folder (the kept
one holds each trace as trace.json: xz over the plain JSON is half the size of tar over gzip):

    python benchmarks/bench_knob_reprice.py --bundles benchmarks/results/knob-trials-h200-2026-12-03-bundles.tar.xz

The prediction now is what ``run --try-fixes`` would print: the report's findings planned with the
knobs the run tried and the knobs' own replayed prices (tryfix/trial.py ``plan``,
pipeline.knob_prices_for); a combined trial, its knobs' edits replayed together
(tryfix/session.py ``together_price``). Re-pricing trials whose results are known is a fit, not a forecast: the
table says which prices were made before the measurement ("then") and which after ("now").
"host pace": each trial's median eager launch call over its capture's (trials.json ``host_pace``,
or read from the two traces for bundles older than the field; none for a compile knob's trial):
where it moved beyond 15%, the trial's host ran at another pace than the one the price assumed
(benchmarks/BENCHMARKS-try-fixes.md "The host's pace, trial by trial").
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_knob_trials
from bench_knob_trials import (  # the trials' own targets and format
    SLOWER_PREDICTED_AT_MOST,
    WITHIN,
    fmt,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from gpudoctor.core.trial_record import HOST_PACE_NOTED_SHARE as NOTED_SHARE
from gpudoctor.tryfix.host_pace import comparable, launch_ns_of, pace_note
from gpudoctor.tryfix.knobs import BY_ID

KEPT_IN_TESTS = Path(__file__).resolve().parents[1] / "tests" / "data" / "knobs_h200"


def bundles_in(path: Path, scratch: Path) -> list[Path]:
    """The run bundles in ``path`` (a folder, or a .tar.gz / .tar.xz of one). A bundle packed
    without its trace takes the one tests/data/knobs_h200 keeps under its name (not stored twice)."""
    if path.is_file():
        with tarfile.open(path) as tar:
            tar.extractall(scratch, filter="data")
        path = scratch

    def traced(folder: Path) -> bool:
        return (folder / "trace.json.gz").is_file() or (folder / "trace.json").is_file()

    for trials in path.rglob("trials.json"):
        kept = KEPT_IN_TESTS / trials.parent.name / "trace.json.gz"
        if not traced(trials.parent) and kept.is_file():
            shutil.copyfile(kept, trials.parent / "trace.json.gz")
    return sorted(p.parent for p in path.rglob("trials.json") if traced(p.parent))


def repriced(bundle: Path) -> list[dict[str, Any]]:
    from gpudoctor.pipeline import analyze_path, knob_prices_for
    from gpudoctor.tryfix.session import together_price
    from gpudoctor.tryfix.trial import plan

    trials = json.loads((bundle / "trials.json").read_text())["trials"]
    knobs = [t["knob"] for t in trials if not str(t["knob"]).startswith(("control", "combined"))]
    report = analyze_path(bundle)
    planned = plan(report.findings, knobs, knob_prices_for(bundle)).trials
    now: dict[str, Any] = {p.knob.id: p for p in planned}
    for t in trials:  # the combined trial: its knobs' edits replayed together, as the run does
        if str(t["knob"]).startswith("combined") and t.get("knobs"):
            now[t["knob"]] = together_price(bundle, list(t["knobs"]), planned)
    rows = []
    spread = controls_spread(trials)
    capture_launch: list[float | None] = []
    for t in trials:
        p = now.get(t["knob"])
        if p is None:
            continue
        pace = t.get("host_pace")
        knobs = [BY_ID[k] for k in t.get("knobs") or () if k in BY_ID]
        if pace is None and comparable(knobs):  # bundles older than the field: read the traces
            if not capture_launch:
                capture_launch.append(launch_ns_of(bundle))
            pace, _ = pace_note(launch_ns_of(bundle / "trials" / t["knob"]), capture_launch[0])
        rows.append(
            {
                "program": bundle.name,
                "knob": t["knob"],
                "then": t.get("predicted_speedup"),
                "now": p.predicted_speedup,
                "now_by": p.priced_by,
                "measured": t.get("measured_speedup"),
                "ci95": t.get("speedup_ci95"),
                "status": t.get("status"),
                "controls_spread": spread,
                "host_pace": pace,
            }
        )
    return rows


def controls_spread(trials: list[dict[str, Any]]) -> float | None:
    """How far the program's two controls (before and after the trials, each in its own process)
    measured apart, as a share: the speed a process of this program drifts by with no knob at all.
    None where the run kept one control."""
    c = {t["knob"]: t.get("measured_speedup") for t in trials}
    a, b = c.get("control"), c.get("control-end")
    if not a or not b:
        return None
    return max(a, b) / min(a, b) - 1.0


def slower_beyond_drift(r: dict[str, Any]) -> bool:
    """Measured slower by more than its controls drifted apart: the interval's top below
    1 / (1 + spread). A trial whose program kept one control counts by its interval alone."""
    ci = r.get("ci95") or [None, None]
    if ci[1] is None:
        return False
    return ci[1] < 1.0 / (1.0 + (r.get("controls_spread") or 0.0))


def within(p: float | None, m: float | None) -> bool | None:
    return None if not p or not m else 1 / WITHIN <= p / m <= WITHIN


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| program | knob | predicted then | predicted now (by) | measured [95%] | now / measured | host pace |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ci = r.get("ci95") or [None, None]
        q = r["now"] / r["measured"] if r["now"] and r["measured"] else None
        star = "*" if within(r["now"], r["measured"]) else ""
        lines.append(
            f"| {r['program']} | {r['knob']} | {fmt(r['then'])} | {fmt(r['now'])} ({r['now_by'] or '-'}) "
            f"| {fmt(r['measured'])} [{fmt(ci[0])}-{fmt(ci[1])}] | {fmt(q)}{star} | {fmt(r.get('host_pace'))} |"
        )
    paired = [r for r in rows if r["measured"]]
    then_in = sum(bool(within(r["then"], r["measured"])) for r in paired)
    now_in = sum(bool(within(r["now"], r["measured"])) for r in paired)
    slower = [r for r in paired if bench_knob_trials.slower({"speedup_ci95": r.get("ci95")})]
    slow_ok = [r for r in slower if (r["now"] or 1.0) <= SLOWER_PREDICTED_AT_MOST]
    clear = [r for r in slower if slower_beyond_drift(r)]
    clear_ok = [r for r in clear if (r["now"] or 1.0) <= SLOWER_PREDICTED_AT_MOST]
    paced = [r for r in paired if r.get("host_pace") is not None]
    held = [r for r in paced if abs(r["host_pace"] - 1) <= NOTED_SHARE]
    lines += [
        "",
        f"measured trials: {len(paired)}; within {WITHIN}x: then {then_in}, now {now_in}",
        (
            f"measured slower (interval below 1): {len(slower)}; predicted now at x{SLOWER_PREDICTED_AT_MOST} "
            f"or below: {len(slow_ok)}"
        ),
        (
            f"of those, slower by more than the program's two controls drifted apart: {len(clear)}; "
            f"predicted now at x{SLOWER_PREDICTED_AT_MOST} or below: {len(clear_ok)}"
        ),
        (
            f"with a host pace read from their traces: {len(paced)}; within {WITHIN}x where it held "
            f"within {NOTED_SHARE:.0%} of the capture's: {sum(bool(within(r['now'], r['measured'])) for r in held)} "
            f"of {len(held)}; where it moved: "
            f"{sum(bool(within(r['now'], r['measured'])) for r in paced if r not in held)} of {len(paced) - len(held)}"
        ),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--bundles", type=Path, required=True, help="a folder of run bundles, or a .tar.gz of one"
    )
    ap.add_argument("--json", type=Path, default=None, help="write the rows here")
    opts = ap.parse_args()
    if not opts.bundles.exists():
        ap.error(f"--bundles {opts.bundles}: no such file or folder")
    with tempfile.TemporaryDirectory() as scratch:
        rows = [row for b in bundles_in(opts.bundles, Path(scratch)) for row in repriced(b)]
    if opts.json:
        opts.json.write_text(json.dumps(rows, indent=1) + "\n")
    sys.stdout.write(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
