"""A window that the program's error ended early: the step it cut short is left out, so that the
report's "over N steps" counts whole steps and its per-step counts are per whole step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.analysis.steps import segment, whole_steps
from gpudoctor.pipeline import analyze_path
from gpudoctor.trace import load

DATA = Path(__file__).parent / "data"
SRC = Path(__file__).parent.parent / "src"


def _run_dir(folder: Path, trace: Path, error: str | None, steps_recorded: int) -> Path:
    folder.mkdir()
    shutil.copy(trace, folder / "trace.json.gz")
    capture = {"steps": 5, "skip": 10, "steps_recorded": steps_recorded, "error": error}
    (folder / "env.json").write_text(json.dumps({"schema_version": "1.0", "capture": capture}))
    return folder


@pytest.mark.parametrize(
    "scenario", ["cpu_only", "host_sync"]
)  # the host-only and the GPU analysis
def test_the_step_a_crash_cut_short_is_left_out(tmp_path, scenario):
    trace = DATA / scenario / "trace.json.gz"
    assert len(segment(load(trace))) == 3  # ProfilerStep#1-3: here the third is the one cut short
    report = analyze_path(_run_dir(tmp_path / "run", trace, "RuntimeError: boom", 2))
    assert report.steps.count == 2 and len(report.steps.per_step_ms) == 2
    assert (
        "the window ended early (the program stopped during a step): the step it cut short is left out, "
        "2 whole steps remain"
    ) in report.warnings


def test_a_window_that_ended_as_planned_keeps_its_steps(tmp_path):
    trace = DATA / "cpu_only" / "trace.json.gz"
    report = analyze_path(_run_dir(tmp_path / "run", trace, None, 2))
    assert report.steps.count == 3
    steps = segment(load(trace))
    assert (
        whole_steps(steps, 3) is steps
        and whole_steps(steps, 0) is steps
        and whole_steps(steps, None) is steps
    )


CRASH = """
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = DataLoader(TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,))), batch_size=32)
for i, (x, y) in enumerate(data):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    if i == 13:  # the window opens at step 10: two whole steps, then this one stops mid-step
        raise RuntimeError("boom at step 13")
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.e2e
def test_a_real_crash_counts_one_optimizer_step_per_step(tmp_path):
    (tmp_path / "crash.py").write_text(CRASH)
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="160")
    out = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "run", "crash.py", "--steps", "5", "--skip", "10"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert "boom at step 13" in out.stderr
    [run] = (tmp_path / "gpudoctor-runs").iterdir()
    report = json.loads((run / "report.json").read_text())
    assert report["steps"]["count"] == 2
    calls = {op["name"]: op["calls_per_step"] for op in report["host"]["ops"]}
    assert calls["Optimizer.step#SGD.step"] == 1 and calls["Optimizer.zero_grad#SGD.zero_grad"] == 1
    assert "mean over 2 steps" in out.stdout
