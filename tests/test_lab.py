"""The lab on the CPU: the catalog, and a smoke run (GPU timings are in benchmarks/BENCHMARKS-lab.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.lab.catalog import EXPECTED
from gpudoctor.lab.registry import TRAP_IDS, load_baselines, load_trap, load_traps
from gpudoctor.rules.registry import RULES

SRC = Path(__file__).parent.parent / "src"


def gd(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def test_every_required_finding_has_a_trap() -> None:
    planted = {t.expected_finding for t in load_traps()}
    assert planted == set(RULES)
    assert len(TRAP_IDS) == 17


def test_the_catalog_names_the_finding_each_trap_plants() -> None:
    assert {t.id: t.expected_finding for t in load_traps()} == EXPECTED
    assert EXPECTED["tf32_matmul"] == EXPECTED["fp32_attention"] == "fp32-matmul"


def test_lab_list_json(tmp_path: Path) -> None:
    out = gd("lab", "list", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    entries = json.loads(out.stdout)
    traps = {e["name"]: e["expected_finding"] for e in entries if e["kind"] == "trap"}
    assert traps["host_sync"] == "host-sync" and len(traps) == 17
    assert traps["tf32_matmul"] == traps["fp32_attention"] == "fp32-matmul"
    assert {e["name"] for e in entries if e["kind"] == "baseline"} == {
        "healthy_train",
        "healthy_infer",
        "healthy_closure",
    }


@pytest.mark.parametrize("trap_id", ["tf32_matmul", "fp32_attention"])
def test_tf32_traps_run_on_the_cpu_and_leave_the_matmul_precision_alone(trap_id: str) -> None:
    import torch

    trap = load_trap(trap_id)
    before = torch.get_float32_matmul_precision()
    for build in (trap.build_sick, trap.build_fixed):
        work = build("cpu")
        try:
            work.step()
            work.step()
        finally:
            work.close()
        assert work.flops_per_step and work.flops_per_step > 0
        assert torch.get_float32_matmul_precision() == before  # set for the step only


def test_matmul_precision_is_restored_when_the_step_raises() -> None:
    import torch

    from gpudoctor.lab.common import matmul_precision

    before = torch.get_float32_matmul_precision()
    with pytest.raises(RuntimeError), matmul_precision("high" if before != "high" else "medium"):
        assert torch.get_float32_matmul_precision() != before
        raise RuntimeError("step failed")
    assert torch.get_float32_matmul_precision() == before


def test_healthy_closure_steps_the_optimizer_through_a_closure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    [base] = [b for b in load_baselines() if b.id == "healthy_closure"]
    work = base.build("cpu")
    losses: list[float] = []
    original = torch.optim.AdamW.step

    def step(self, closure=None):  # the baseline hands zero_grad, forward and backward to step()
        assert closure is not None
        loss = original(self, closure)
        losses.append(float(loss))
        return loss

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    try:
        work.step()
    finally:
        work.close()
    assert len(losses) == 1 and losses[0] > 0


@pytest.mark.e2e
def test_lab_smoke_run_on_the_cpu(tmp_path: Path) -> None:
    out = gd(
        "lab",
        "run",
        "launch_bound",
        "--device",
        "cpu",
        "--json",
        "--out",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    [result] = json.loads(out.stdout)
    assert result["trap"] == "launch_bound" and result["verdict"] == "ran-on-cpu"
    assert result["sick_ms"] > 0 and result["fixed_ms"] > 0
    assert list(tmp_path.glob("lab-*/launch_bound/trace.json.gz"))
    assert (
        "USDT" not in out.stderr
    )  # Kineto's profiler_start / profiler_stop lines (capture/quiet.py)


def test_lab_errors(tmp_path: Path) -> None:
    out = gd("lab", "run", "nope", "--device", "cpu", cwd=tmp_path)
    assert out.returncode == 2 and "unknown trap 'nope'" in out.stderr
    out = gd("lab", "run", "--device", "cpu", cwd=tmp_path)
    assert out.returncode == 2 and "--all" in out.stderr
    out = gd("lab", "run", "host_sync", cwd=tmp_path)  # no CUDA here
    assert out.returncode == 2 and "--device cpu" in out.stderr
