"""scripts/validate_multigpu.py: its table logic on hand-made reports, its archive packing under the
per-file limit, and one planted case end to end on the CPU (2 gloo ranks, rank 1's DataLoader
sleeping 20 ms a batch, against its --fixed twin)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from script_module import load

ROOT = Path(__file__).parent.parent
vm = load("validate_multigpu", "scripts")

CASE = {c.name: c for c in vm.CASES}
DELAY_MS = 150  # the straggler_loader run's planted loader sleep on the CPU


def _finding(fid: str, saving: float, severity: str = "major", **numbers: object) -> dict:
    return {"id": fid, "saving_ms": saving, "severity": severity, "evidence": {"numbers": numbers}}


def _report(*findings: dict) -> dict:
    return {"findings": [_finding("launch-bound", 9.0), *findings]}


def test_straggler_hit_needs_the_planted_rank_and_prices_against_the_twin() -> None:
    report = _report(
        _finding("straggler", 15.0, rank=3, cause="input-pipeline"), _finding("exposed-comm", 1.0)
    )
    row = vm.judge(CASE["straggler_loader"], report, 40.0, 20.0, nproc=4)
    assert row["found"] == "straggler r3 input-pipeline"
    assert (row["hit"], row["cause_ok"]) == (True, True)
    assert (row["predicted_ms"], row["measured_ms"], row["ratio"], row["within_1_5x"]) == (
        15.0,
        20.0,
        0.75,
        True,
    )
    assert row["expected"] == "straggler (rank 3, input-pipeline)"
    wrong_rank = vm.judge(
        CASE["straggler_loader"],
        _report(_finding("straggler", 15.0, rank=0, cause="x")),
        40.0,
        20.0,
        nproc=4,
    )
    assert (wrong_rank["hit"], wrong_rank["cause_ok"]) == (False, False)


def test_exposed_comm_names_its_largest_part_and_no_ratio_when_the_fix_is_slower() -> None:
    report = _report(
        _finding(
            "exposed-comm", 7.5, wait_for_slowest_ms=3.9, overlap_not_taken_ms=7.5, transfer_ms=6.9
        )
    )
    row = vm.judge(CASE["fsdp2_no_prefetch"], report, 46.5, 70.4, nproc=2)
    assert row["found"] == "exposed-comm, most not-overlapped"
    assert row["hit"] is True
    assert (row["measured_ms"], row["ratio"], row["within_1_5x"]) == (-23.9, None, False)
    # the accumulation case names the overlap's cause, and checks it
    report = _report(
        _finding(
            "exposed-comm",
            8.67,
            wait_for_slowest_ms=8.54,
            overlap_not_taken_ms=8.67,
            transfer_ms=11.7,
            overlap_not_taken_cause="accumulation",
        )
    )
    row = vm.judge(CASE["ddp_accum_no_sync"], report, 96.59, 49.06, nproc=2)
    assert (row["found"], row["cause"], row["cause_ok"]) == (
        "exposed-comm, most transfer",
        "accumulation",
        True,
    )
    report["findings"][1]["evidence"]["numbers"]["transfer_ms"] = 1.0
    assert vm.judge(CASE["ddp_accum_no_sync"], report, 96.59, 49.06, nproc=2)["found"] == (
        "exposed-comm, most not-overlapped (accumulation)"
    )


def test_stage_imbalance_rank_and_missing_report() -> None:
    row = vm.judge(
        CASE["pipeline_imbalance"],
        _report(_finding("stage-imbalance", 46.68, slowest_rank=1)),
        106.84,
        64.27,
        nproc=2,
    )
    assert (row["found"], row["hit"], row["measured_ms"], row["ratio"]) == (
        "stage-imbalance r1",
        True,
        42.57,
        1.097,
    )
    # an info note (no straggler, within noise) is no top finding
    noted = vm.judge(
        CASE["ddp_huge_bucket"],
        _report(_finding("straggler", 0.0, "info", rank=0, cause="step-noise")),
        19.32,
        29.0,
        nproc=2,
    )
    assert (noted["found"], noted["hit"], noted["predicted_ms"]) == ("none", False, None)
    none = vm.judge(CASE["pipeline_imbalance"], None, None, 64.27, nproc=2)
    assert (none["found"], none["hit"], none["measured_ms"]) == ("no report", False, None)


def test_healthy_run_is_ok_only_without_a_major_multi_gpu_finding() -> None:
    ok = vm.healthy_row("ddp", _report(_finding("exposed-comm", 0.0, "info", transfer_ms=7.4)))
    assert ok == {
        "run": "ddp",
        "ok": True,
        "findings": ["exposed-comm, most transfer info 0.00 ms"],
    }
    sick = vm.healthy_row("fsdp2", _report(_finding("straggler", 9.85, rank=1, cause="more-work")))
    assert sick == {
        "run": "fsdp2",
        "ok": False,
        "findings": ["straggler r1 more-work major 9.85 ms"],
    }


def test_table_rows() -> None:
    row = vm.judge(
        CASE["straggler_sleep"],
        _report(_finding("straggler", 14.73, rank=1, cause="host-work")),
        37.81,
        17.82,
        nproc=2,
    )
    text = vm.format_table(
        [row], [vm.healthy_row("ddp", {"findings": []})], {"straggler_sleep": 20.4}
    )
    lines = text.splitlines()
    assert lines[1].split() == [
        "straggler_sleep",
        "yes",
        "straggler",
        "r1",
        "host-work",
        "14.73",
        "19.99",
        "0.74",
        "37.81",
        "17.82",
        "20",
    ]
    assert lines[2] == "healthy ddp: ok; no multi-GPU finding"


def test_twin_args_name_the_last_rank() -> None:
    assert vm.concrete(CASE["straggler_batch"].sick, 4) == (
        "--bigger-batch-rank",
        "3",
        "--batch",
        "32",
    )
    assert vm.concrete(CASE["ddp_accum_no_sync"].fixed, 4) == ("--accum", "4", "--fixed")


def test_pack_splits_traces_under_the_limit(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(vm, "TAR_LIMIT", 2500)
    monkeypatch.setattr(vm, "MAX_TRACE_TARS", 2)
    results = []
    for label in ("a-sick", "b-sick", "a-fixed"):
        run = tmp_path / "runs" / label
        for r in range(2):
            (run / f"rank{r}").mkdir(parents=True)
            (run / f"rank{r}" / "trace.json.gz").write_bytes(b"x" * 1000)
            (run / f"rank{r}" / "env.json").write_text("{}")
        (run / "report.json").write_text("{}")
        results.append({"label": label, "run": str(run)})
    out = tmp_path / "out"
    out.mkdir()
    left = vm.pack(out, results, {"a-sick", "b-sick"})
    assert sorted(p.name for p in out.iterdir()) == [
        "reports.tar.gz",
        "traces-1.tar.gz",
        "traces-2.tar.gz",
    ]
    with tarfile.open(out / "traces-1.tar.gz") as t1, tarfile.open(out / "traces-2.tar.gz") as t2:
        assert t1.getnames() == ["a-sick/rank0/trace.json.gz", "a-sick/rank1/trace.json.gz"]
        assert t2.getnames() == ["b-sick/rank0/trace.json.gz", "b-sick/rank1/trace.json.gz"]
    assert left == []
    with tarfile.open(out / "reports.tar.gz") as rep:
        names = rep.getnames()
    assert len(names) == 9 and not any("trace" in n for n in names)


@pytest.mark.e2e
def test_one_case_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "validate_multigpu.py"),
            "--cpu",
            "--nproc",
            "2",
            "--only",
            "straggler_loader",
            "--delay-ms",
            str(DELAY_MS),
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    (row,) = summary["rows"]
    assert (row["found"], row["hit"], row["cause_ok"]) == (
        "straggler r1 input-pipeline",
        True,
        True,
    )
    # the loader sleeps DELAY_MS a batch on rank 1: the price comes from the trace (the sleep's
    # excess over the other rank). At the GPU runs' 20 ms a busy 2-core machine's own noise hid the
    # straggler; 150 ms stands out of it. The measured saving is two timings of a job on shared
    # cores: it is reported, not asserted.
    assert 0.6 * DELAY_MS <= row["predicted_ms"] <= 1.3 * DELAY_MS
    assert isinstance(row["measured_ms"], float)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "console.txt",
        "reports.tar.gz",
        "summary.json",
        "traces-1.tar.gz",
    ]
    assert proc.stdout.splitlines()[-1].startswith(
        "straggler_loader    yes  straggler r1 input-pipeline"
    )


def test_a_planted_delay_can_be_lengthened() -> None:
    sick = vm.concrete(CASE["straggler_loader"].sick, 2, DELAY_MS)
    assert sick == ("--slow-loader", "1", "--delay-ms", "150")
    assert vm.concrete(CASE["straggler_loader"].sick, 4) == (
        "--slow-loader",
        "3",
        "--delay-ms",
        "20",
    )
    assert vm.concrete(CASE["straggler_batch"].sick, 2, DELAY_MS) == (
        "--bigger-batch-rank",
        "1",
        "--batch",
        "32",
    )
