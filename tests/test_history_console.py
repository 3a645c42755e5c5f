"""``gpudoctor history`` in an 80-column pipe, and the one step time that history and ``diff --last``
both quote for a run: the mean of its unprofiled steps (not the report's median estimate)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from runs import DATA, make_run

SRC = Path(__file__).parent.parent / "src"
PROGRAM = {
    "target": "/home/user/projects/nanogpt/train_gpt2.py",
    "args": ["--batch-size", "32", "--compile"],
    "is_module": False,
    "git_commit": "abc1234",
}
# a slow half and a fast half: the median (what the report's unprofiled step is) is not the mean
OLD = [22.0, 22.1, 22.2, 24.0, 24.1, 24.2, 24.3]
NEW = [23.9, 24.0, 24.05, 24.1, 24.2, 25.0, 25.1]


def gd(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="80")
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=180,
        check=False,
    )


def _run(folder: Path, trace: str, samples: list[float], when: str, gpu: str, finding: str) -> Path:
    run = make_run(folder, DATA / trace / "trace.json.gz", samples, when, PROGRAM, gpu)
    env = json.loads((run / "env.json").read_text())
    env["capture"]["unprofiled_step_ms"] = statistics.median(samples)  # as gpudoctor run writes it
    (run / "env.json").write_text(json.dumps(env))
    (run / "report.json").write_text(
        json.dumps(
            {
                "unprofiled_step_ms": statistics.median(samples),
                "step_ms": 30.0,
                "findings": [{"id": finding, "saving_ms": 12.345}],
            }
        )
    )
    return run


def _runs(tmp_path: Path) -> Path:
    runs = tmp_path / "gpudoctor-runs"
    _run(
        runs / "train_gpt2-20261120-000000",
        "healthy_train",
        OLD,
        "2026-11-20T00:00:00+00:00",
        "NVIDIA H100 80GB HBM3",
        "dataloader-bottleneck",
    )
    _run(
        runs / "train_gpt2-20261121-000000",
        "healthy_train",
        NEW,
        "2026-11-21T00:00:00+00:00",
        "NVIDIA H200",
        "host-sync",
    )
    return runs


def test_history_fits_80_columns_with_the_program_readable(tmp_path):
    _runs(tmp_path)
    out = gd("history", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    text = out.stdout
    for name in (
        "train_gpt2-20261121-000000",
        "train_gpt2-20261120-000000",
        "dataloader-bottleneck",
        "train_gpt2.py --batch-size",
        "host-sync (12.35 ms)",
        "H200",
        "abc1234",
    ):
        assert name in text, name  # whole: the run's name, its program's words, the finding's id
    assert len(lines) <= 13  # three lines a run at most, not a character a line
    assert "step ms: mean of the steps timed without the profiler" in text
    assert f"{statistics.fmean(OLD):.3f}" in text and f"{statistics.fmean(NEW):.3f}" in text
    assert f"{statistics.median(OLD):.3f}" not in text


def test_history_and_diff_last_quote_one_step_time(tmp_path):
    _runs(tmp_path)
    hist = gd("history", "--json", cwd=tmp_path)
    assert hist.returncode == 0, hist.stderr
    newer, older = json.loads(hist.stdout)
    assert (older["step_ms"], newer["step_ms"]) == (
        round(statistics.fmean(OLD), 4),
        round(statistics.fmean(NEW), 4),
    )
    assert older["step_kind"] == newer["step_kind"] == "unprofiled"
    diff = gd("diff", "--last", "--json", cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr
    step = json.loads(diff.stdout)["step"]
    assert (round(step["before_ms"], 4), round(step["after_ms"], 4)) == (
        older["step_ms"],
        newer["step_ms"],
    )
    text = gd("diff", "--last", "--width", "160", cwd=tmp_path).stdout
    assert f"{older['step_ms']:.3f} -> {newer['step_ms']:.3f} ms mean step" in text


def test_history_reads_a_folder_of_out_folders(tmp_path):
    """A folder holding several ``gpudoctor run --out`` folders (one per program) lists their runs
    together; a folder with runs of its own is not searched further."""
    shared = tmp_path / "team-runs"
    _run(
        shared / "alice" / "train_gpt2-20261120-000000",
        "healthy_train",
        OLD,
        "2026-11-20T00:00:00+00:00",
        "NVIDIA H100 80GB HBM3",
        "host-sync",
    )
    _run(
        shared / "bob" / "train_gpt2-20261121-000000",
        "healthy_train",
        NEW,
        "2026-11-21T00:00:00+00:00",
        "NVIDIA H200",
        "launch-bound",
    )
    out = gd("history", shared, "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    names = [Path(r["path"]).name for r in json.loads(out.stdout)]
    assert names == ["train_gpt2-20261121-000000", "train_gpt2-20261120-000000"]
    out = gd("history", shared / "alice", "--json", cwd=tmp_path)
    assert [Path(r["path"]).name for r in json.loads(out.stdout)] == ["train_gpt2-20261120-000000"]
    # a run directory given itself is its one run; the env.json of its trials is not a run's
    run = shared / "alice" / "train_gpt2-20261120-000000"
    (run / "trials" / "control").mkdir(parents=True)
    (run / "trials" / "control" / "env.json").write_text((run / "env.json").read_text())
    out = gd("history", run, "--json", cwd=tmp_path)
    assert [Path(r["path"]).name for r in json.loads(out.stdout)] == ["train_gpt2-20261120-000000"]
    empty = tmp_path / "nothing-here"
    (empty / "sub" / "deeper").mkdir(parents=True)
    out = gd("history", empty, cwd=tmp_path)
    assert out.returncode == 0 and "no run directory under" in out.stdout
