"""The lab on the CPU: the catalog, and a smoke run (GPU timings are in BENCHMARKS.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpudoctor.lab.registry import TRAP_IDS, load_traps
from gpudoctor.rules.registry import RULES

SRC = Path(__file__).parent.parent / "src"


def gd(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300, check=False)


def test_every_required_finding_has_a_trap() -> None:
    planted = {t.expected_finding for t in load_traps()}
    assert planted == set(RULES)
    assert len(TRAP_IDS) == 14


def test_lab_list_json(tmp_path: Path) -> None:
    out = gd("lab", "list", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    entries = json.loads(out.stdout)
    traps = {e["name"]: e["expected_finding"] for e in entries if e["kind"] == "trap"}
    assert traps["host_sync"] == "host-sync" and len(traps) == 14
    assert {e["name"] for e in entries if e["kind"] == "baseline"} == {"healthy_train", "healthy_infer"}


def test_lab_smoke_run_on_the_cpu(tmp_path: Path) -> None:
    out = gd("lab", "run", "launch_bound", "--device", "cpu", "--json", "--out", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    [result] = json.loads(out.stdout)
    assert result["trap"] == "launch_bound" and result["verdict"] == "ran-on-cpu"
    assert result["sick_ms"] > 0 and result["fixed_ms"] > 0
    assert list(tmp_path.glob("lab-*/launch_bound/trace.json.gz"))


def test_lab_errors(tmp_path: Path) -> None:
    out = gd("lab", "run", "nope", "--device", "cpu", cwd=tmp_path)
    assert out.returncode == 2 and "unknown trap 'nope'" in out.stderr
    out = gd("lab", "run", "--device", "cpu", cwd=tmp_path)
    assert out.returncode == 2 and "--all" in out.stderr
    out = gd("lab", "run", "host_sync", cwd=tmp_path)  # no CUDA here
    assert out.returncode == 2 and "--device cpu" in out.stderr
