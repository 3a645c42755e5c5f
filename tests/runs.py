"""Run directories for the diff and history tests: a real trace plus an env.json holding step
samples in the fields ``gpudoctor run`` writes (capture.unprofiled_step_ms_samples...)."""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
MANIFEST = json.loads((DATA / "manifest.json").read_text())["scenarios"]
TWINS = sorted(k for k, v in MANIFEST.items() if v.get("fixed_trace") and v.get("fixed_times_ms"))


def make_run(
    folder: Path,
    trace: Path,
    samples: list[float] | None,
    recorded_utc: str = "2026-11-22T00:00:00+00:00",
    program: dict[str, Any] | None = None,
    gpu: str = "NVIDIA H100 80GB HBM3",
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(trace, folder / "trace.json.gz")
    capture: dict[str, Any] = {"steps": 5, "skip": 10}
    if samples is not None:
        capture.update(
            unprofiled_step_ms=round(statistics.fmean(samples), 4),
            unprofiled_step_ms_samples=samples,
            unprofiled_before_window_ms=samples,
            unprofiled_after_window_ms=[],
        )
    env = {
        "schema_version": "1.0",
        "recorded_utc": recorded_utc,
        "argv": ["gpudoctor", "run", "train.py"],
        "gpu": {"name": gpu},
        "capture": capture,
    }
    if program is not None:
        env["program"] = program
    (folder / "env.json").write_text(json.dumps(env))
    return folder


def twin_runs(base: Path, trap: str) -> tuple[Path, Path]:
    """The sick and fixed run directories of one lab trap, with the manifest's measured timings."""
    entry = MANIFEST[trap]
    sick = make_run(base / f"{trap}-sick", DATA / entry["trace"], entry["sick_times_ms"])
    fixed = make_run(base / f"{trap}-fixed", DATA / entry["fixed_trace"], entry["fixed_times_ms"])
    return sick, fixed


def rewrite_trace(src: Path, dst: Path, edit: Any) -> Path:
    """A copy of a trace whose JSON went through ``edit(data)`` (which changes it in place)."""
    data = json.loads(gzip.decompress(src.read_bytes()))
    edit(data)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(gzip.compress(json.dumps(data).encode()))
    return dst
