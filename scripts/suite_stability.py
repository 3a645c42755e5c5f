"""Run the test suite several times in a row with a CPU hog beside it, and name every test whose
outcome changed from one run to the next (or that failed in any).

A suite that passes on a quiet machine and fails on a busy one is measuring the machine; this is
the check that it does not. Usage (the full suite, three runs, one busy loop per hog)::

    python scripts/suite_stability.py --runs 3 --hogs 1 --out /tmp/stability
    python scripts/suite_stability.py --runs 3 --hogs 1 -- -m "not e2e"     # the fast suite

Everything after ``--`` goes to pytest. Each run writes its JUnit XML and console log under
``--out``; ``summary.json`` holds each run's wall time and counts and the changed tests. The exit
code is 0 only when every run passed and no outcome changed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOG = "while True:\n    pass\n"


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed / failed / error / skipped, from a JUnit XML file pytest wrote."""
    found: dict[str, str] = {}
    if not junit.is_file():
        return found
    for case in ET.parse(junit).iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        tags = {child.tag for child in case}
        outcome = (
            "failed"
            if "failure" in tags
            else "error"
            if "error" in tags
            else "skipped"
            if "skipped" in tags
            else "passed"
        )
        # a test that failed in its call and errored in its teardown is written twice: keep the worst
        if found.get(name) not in ("failed", "error"):
            found[name] = outcome
    return found


def changed(runs: list[dict[str, str]]) -> dict[str, list[str]]:
    """Tests whose outcome was not the same in every run, or that failed or errored in any run."""
    names = sorted(set().union(*runs)) if runs else []
    out = {}
    for name in names:
        seen = [run.get(name, "absent") for run in runs]
        if len(set(seen)) > 1 or any(s in ("failed", "error") for s in seen):
            out[name] = seen
    return out


def run_once(index: int, out: Path, hogs: int, pytest_args: list[str]) -> dict:
    junit = out / f"run{index}.xml"
    log = out / f"run{index}.log"
    hog_procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
    start = time.monotonic()
    try:
        with log.open("w") as fh:
            code = subprocess.call(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-p",
                    "no:cacheprovider",
                    f"--junitxml={junit}",
                    *pytest_args,
                ],
                cwd=ROOT,
                stdout=fh,
                stderr=subprocess.STDOUT,
            )
    finally:
        for proc in hog_procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    wall = time.monotonic() - start
    found = outcomes(junit)
    return {
        "run": index,
        "exit_code": code,
        "wall_s": round(wall, 1),
        "counts": dict(Counter(found.values())),
        "outcomes": found,
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, pytest_args = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=1, help="busy-loop processes beside each run")
    parser.add_argument("--out", type=Path, default=Path("suite-stability"))
    opts = parser.parse_args(ours)
    if opts.runs < 1 or opts.hogs < 0:
        parser.error("--runs must be at least 1 and --hogs at least 0")
    opts.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for i in range(1, opts.runs + 1):
        print(
            f"run {i}/{opts.runs}: pytest {' '.join(pytest_args)} with {opts.hogs} busy loop(s), "
            f"{os.cpu_count()} cores",
            flush=True,
        )
        result = run_once(i, opts.out, opts.hogs, pytest_args)
        runs.append(result)
        print(
            f"  exit {result['exit_code']} in {result['wall_s']:.0f} s: {result['counts']}",
            flush=True,
        )
    flips = changed([r["outcomes"] for r in runs])
    summary = {
        "pytest_args": pytest_args,
        "hogs": opts.hogs,
        "cores": os.cpu_count(),
        "runs": [{k: v for k, v in r.items() if k != "outcomes"} for r in runs],
        "changed": flips,
    }
    (opts.out / "summary.json").write_text(json.dumps(summary, indent=1))
    for name, seen in flips.items():
        print(f"CHANGED {name}: {' / '.join(seen)}")
    print(
        f"{len(flips)} test(s) changed or failed; wall times: "
        + ", ".join(f"{r['wall_s']:.0f} s" for r in runs)
    )
    return 0 if not flips and all(r["exit_code"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
