"""``python -m gpudoctor.lab.program``: a lab trap as an ordinary program, and --try-fixes pointed at it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gpudoctor.capture.timing import TRIAL_JUDGED_MIN_STEPS
from gpudoctor.lab import program

SRC = Path(__file__).resolve().parents[1] / "src"


def test_runs_the_trap_and_marks_every_step(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    marked = []
    monkeypatch.setattr("gpudoctor.capture.session.step", lambda: marked.append(1))
    assert (
        program.main(["optimizer_loop", "--steps", "5", "--log-every", "2", "--device", "cpu"]) == 0
    )
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "optimizer_loop (sick) on cpu, 5 steps"
    # every --log-every steps, and the last step
    assert [int(m) for m in re.findall(r"^step (\d+): [0-9.]+ ms/step$", out, re.MULTILINE)] == [
        2,
        4,
        5,
    ]
    assert len(marked) == 5


def test_runs_the_fixed_twin_and_a_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    assert program.main(["allocator_churn", "--fixed", "--steps", "2", "--device", "cpu"]) == 0
    assert program.main(["healthy_infer", "--steps", "2", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "allocator_churn (fixed) on cpu, 2 steps" in out and "healthy_infer (sick) on cpu" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nitro"], "no trap or baseline named 'nitro'; choose from input_pipeline"),
        (["healthy_train", "--fixed"], "healthy_train is a healthy baseline: it has no fixed twin"),
        (["launch_bound", "--steps", "0"], "--steps and --log-every must be at least 1"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        program.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_asked_for_without_cuda_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert program.main(["launch_bound", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert (
        "torch sees no CUDA device; use --device cpu" in err and len(err.strip().splitlines()) == 1
    )


@pytest.mark.e2e
def test_try_fixes_on_a_trap_run_as_a_module(tmp_path: Path) -> None:
    """The step marker sets the steps, and the knob reaches the trap's own optimizer."""
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="120")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpudoctor",
            "run",
            "--skip",
            "4",
            "--steps",
            "2",
            "--calibrate",
            "0",
            "--no-trial-trace",
            "--out",
            str(tmp_path),
            "--fixes",
            "optimizer-foreach",
            "-m",
            "gpudoctor.lab.program",
            "optimizer_loop",
            "--steps",
            "120",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    (run_dir,) = tmp_path.iterdir()
    assert (
        json.loads((run_dir / "env.json").read_text())["capture"]["step_source"] == "gpudoctor-step"
    )
    trial = next(
        t
        for t in json.loads((run_dir / "report.json").read_text())["trials"]
        if t["knob"] == "optimizer-foreach"
    )
    assert trial["status"] == "ok" and trial["effects"] == ["AdamW(foreach=True)"]
    # how many steps settle first depends on the machine's load (26 of 30 on a loaded 2-core CI runner); the
    # trial must time at least what a verdict needs
    assert trial["n_trial"] >= TRIAL_JUDGED_MIN_STEPS
