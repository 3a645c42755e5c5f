"""What each tool says about each planted trap: HTA's breakdowns vs gpudoctor's top finding.

    python benchmarks/bench_diagnosis_vs_hta.py [--hta-python /opt/htavenv/bin/python]

Runs over every trace under tests/data (recorded on an H100; tests/data/manifest.json) and prints
one Markdown table: the planted trap, HTA 0.5.0's idle-time categories and idle share, and
gpudoctor's top finding with its saving per step.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import gpudoctor

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


def hta(python: str, trace: Path) -> dict:
    out = subprocess.run(
        [python, str(ROOT / "benchmarks" / "_hta_diagnosis.py"), str(trace)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1][:120]}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hta-python", default="/opt/htavenv/bin/python")
    args = parser.parse_args()
    manifest = json.loads((DATA / "manifest.json").read_text())["scenarios"]
    print(
        "| trace | planted | HTA idle % of time | HTA idle categories | gpudoctor top finding | saving ms/step |"
    )
    print("|---|---|---:|---|---|---:|")
    for name, entry in manifest.items():
        for variant, trace in (
            (name, DATA / name / "trace.json.gz"),
            (f"{name}_fixed", DATA / f"{name}_fixed" / "trace.json.gz"),
        ):
            if not trace.exists():
                continue
            planted = entry.get("expected_finding") if variant == name else "(fixed twin)"
            h = hta(args.hta_python, trace)
            if "error" in h:
                hta_idle, hta_cats = "crashed", h["error"]
            else:
                hta_idle = f"{h.get('idle_pct', 0):.1f}"
                hta_cats = ", ".join(
                    f"{k} {100 * v:.0f}%"
                    for k, v in sorted(h["idle"].items(), key=lambda kv: -kv[1])
                    if v > 0
                )
            report = gpudoctor.analyze(trace)
            top = report.findings[0] if report.findings else None
            found = f"{top.id} ({top.severity})" if top else "none"
            print(
                f"| {variant} | {planted or '(healthy)'} | {hta_idle} | {hta_cats} | {found} | "
                f"{top.saving_ms:.2f} |"
                if top
                else f"| {variant} | {planted or '(healthy)'} | {hta_idle} | {hta_cats} | none | 0 |",
                flush=True,
            )


if __name__ == "__main__":
    main()
