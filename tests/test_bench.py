"""Bench without a GPU: the saved machine profile is used by analyze; health readings -> findings."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

import gpudoctor
from gpudoctor.hardware.health import HealthReading, health_findings
from gpudoctor.hardware.machine import (
    cache_dir,
    ceilings_from,
    measured_ceilings_for,
    save_profile,
)
from gpudoctor.hardware.probe import Measurement

DATA = Path(__file__).parent / "data"
H100 = "NVIDIA H100 80GB HBM3"


def _measurements() -> list[Measurement]:
    return [
        Measurement("hbm.copy", 2.9e12, "B/s"),
        Measurement("hbm.triad", 2.95e12, "B/s"),
        Measurement("gemm.bf16", 7.7e14, "FLOP/s"),
        Measurement("gemm.fp32", 5.0e13, "FLOP/s"),
        Measurement("gemm.fp8", 1.3e15, "FLOP/s"),
        Measurement("h2d.pinned", 5.2e10, "B/s"),
    ]


class _CpuEvent:
    """torch.cuda.Event on the CPU clock: the probes time themselves with it in these tests."""

    def __init__(self, enable_timing: bool = True) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, other: _CpuEvent) -> float:
        return max((other.t - self.t) * 1e3, 1e-6)


def _probes_on_cpu(monkeypatch) -> None:
    """Run the GPU probes' code on the CPU: tensors made there, CUDA events and syncs stubbed."""
    make = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *a, **k: make(*a, **{**k, "device": "cpu"}))
    monkeypatch.setattr(torch.cuda, "Event", _CpuEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)


def test_a_saved_profile_becomes_the_ceilings_of_that_gpu() -> None:
    ceilings = ceilings_from(_measurements(), H100, "GPU-1234", 85_017_493_504)
    assert ceilings.hbm_bytes_per_s == 2.95e12 and ceilings.matrix("bf16") == 7.7e14
    save_profile(
        "GPU-1234", {"measured_utc": "2026-11-22T01:00:00+00:00", "ceilings": ceilings.to_dict()}
    )
    assert (cache_dir() / "GPU-1234.json").exists()
    assert measured_ceilings_for(H100).source.startswith("measured ")
    assert measured_ceilings_for("NVIDIA A100-SXM4-80GB") is None
    report = gpudoctor.analyze(DATA / "fp32_matmul" / "trace.json.gz")
    assert report.ceilings.source.startswith("measured ") and "GPU-1234" in report.ceilings.source
    # the measured roof (770, not the datasheet's 989) prices the fix
    assert report.findings[0].evidence.numbers["bf16_roof_tflops"] == 770.0


def test_an_unreadable_profile_is_ignored() -> None:
    cache_dir().mkdir(parents=True, exist_ok=True)
    (cache_dir() / "broken.json").write_text("{not json")
    assert measured_ceilings_for(H100) is None


def test_health_findings() -> None:
    idle = HealthReading(
        {
            "throttle_reasons": ["gpu_idle"],
            "power_limit_w": 700,
            "power_limit_max_w": 700,
            "ecc_uncorrected_volatile": 0,
            "pcie_gen": 5,
            "pcie_gen_max": 5,
            "pcie_width": 16,
            "pcie_width_max": 16,
            "mig_mode": 0,
            "other_processes": 1,
        }
    )
    assert health_findings(idle) == []  # an idle card's "Idle" reason is not a problem
    sick = HealthReading(
        {
            "throttle_reasons": ["hw_thermal_slowdown"],
            "power_limit_w": 400,
            "power_limit_max_w": 700,
            "ecc_uncorrected_volatile": 3,
            "pcie_width": 8,
            "pcie_width_max": 16,
            "remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": 1, "failure": 0},
        }
    )
    ids = {f.id: f.severity for f in health_findings(sick)}
    assert ids == {
        "clock-throttle": "critical",
        "power-cap": "major",
        "ecc-errors": "critical",
        "remapped-rows": "major",
        "pcie-downgrade": "major",
    }


@pytest.mark.e2e
def test_collective_definitions_and_a_two_process_run(tmp_path) -> None:
    """nccl-tests' bus factors; the torchrun path end to end on two CPU processes (gloo)."""
    import json
    import os
    import subprocess
    import sys

    from gpudoctor.hardware.collective_bandwidth import _parse_bytes, bus_factor, sizes

    assert bus_factor("all_reduce", 8) == 1.75 and bus_factor("all_gather", 8) == 0.875
    assert sizes(_parse_bytes("4GiB"))[0] == 1024 and sizes(_parse_bytes("4GiB"))[-1] == 4 * 1024**3
    assert _parse_bytes("1MiB") == 1024**2
    out = tmp_path / "curve.json"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent / "src"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "gpudoctor.hardware.collective_bandwidth",
            "--out",
            str(out),
            "--max-bytes",
            "64KiB",
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-500:]
    data = json.loads(out.read_text())
    assert data["world_size"] == 2 and set(data["curves"]) == {
        "all_reduce",
        "all_gather",
        "reduce_scatter",
    }
    row = data["curves"]["all_reduce"][-1]
    assert row["bytes"] == 64 * 1024 and row["busbw_Bps"] == row["algbw_Bps"] * 1.0


def test_misaligned_gemm_rests_on_the_measured_curve() -> None:
    measurements = _measurements() + [Measurement("gemm.bf16.misaligned", 1.53e14, "FLOP/s")]
    ceilings = ceilings_from(measurements, H100, "GPU-1234", 85_017_493_504)
    save_profile(
        "GPU-1234", {"measured_utc": "2026-11-22T02:00:00+00:00", "ceilings": ceilings.to_dict()}
    )
    finding = gpudoctor.analyze(DATA / "misaligned_gemm" / "trace.json.gz").finding(
        "misaligned-gemm"
    )
    numbers = finding.evidence.numbers
    assert numbers["measured_bf16_8191_cubed_tflops"] == 153.0
    assert numbers["measured_bf16_8192_cubed_tflops"] == 770.0
    assert "measured 8192^3 bf16 rate" in numbers["reference"]


def test_bench_html_is_escaped_and_self_contained() -> None:
    from gpudoctor.bench import BenchResult
    from gpudoctor.hardware.ceilings import for_gpu_name
    from gpudoctor.report.bench import render_html

    ceilings = ceilings_from(_measurements(), H100, "GPU-<b>x</b>", 85_017_493_504)
    result = BenchResult(
        gpu="<script>alert(1)</script>",
        uuid="GPU-<b>x</b>",
        measured_utc="2026-11-22T00:00:00",
        measurements=_measurements(),
        health=HealthReading(),
        findings=[],
        ceilings=ceilings,
        datasheet=for_gpu_name(H100),
    )
    page = render_html(result)
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page
    assert "stroke-dasharray" in page  # datasheet roofs dashed
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert result.vs_datasheet(_measurements()[0]) == 2.9e12 / 3.35e12


def test_shape_probes_make_a_grid_that_plan_train_reads(monkeypatch, tmp_path) -> None:
    """The GEMM and attention grids end to end on the CPU (CUDA events replaced by a wall clock):
    every (M, N, K) is measured, and the JSON section loads as a calibration."""
    import json

    from gpudoctor.bench import plan_lines
    from gpudoctor.hardware import probe, shapes
    from gpudoctor.plan.calibration import load_calibration

    _probes_on_cpu(monkeypatch)
    monkeypatch.setattr(shapes, "l2_flusher", lambda torch: lambda: None)
    monkeypatch.setattr(shapes, "GEMM_DIMS_QUICK", (32, 64))
    monkeypatch.setattr(shapes, "ATTENTION_SEQS", (64, 128, 256))
    monkeypatch.setattr(shapes, "ATTENTION_TOKENS", 256)
    monkeypatch.setattr(shapes, "ATTENTION_HEADS", 2)
    seen: list[str] = []
    grids = shapes.shape_probes(probe.ProbePlan(quick=True), seen.append)
    assert seen == ["GEMM shapes", "attention"]
    rows = grids["gemm_grid"]["rows"]
    assert sorted((r["m"], r["n"], r["k"]) for r in rows) == [
        (m, n, k) for m in (32, 64) for n in (32, 64) for k in (32, 64)
    ]
    assert all(
        r["tflops"] == pytest.approx(2 * r["m"] * r["n"] * r["k"] / r["s"] / 1e12) for r in rows
    )
    att = grids["attention_grid"]["rows"]
    assert [(r["seq"], r["head_dim"], r["batch"]) for r in att] == [
        (64, 64, 4),
        (256, 64, 1),
        (64, 128, 4),
        (256, 128, 1),
    ]
    bench = {
        "gpu": H100,
        "ceilings": {"matrix_flops": {"bf16": 7.7e14}, "hbm_bytes_per_s": 2.9e12, "extra": {}},
        **grids,
    }
    (tmp_path / "b.json").write_text(json.dumps(bench))
    cal = load_calibration(tmp_path / "b.json", "h100-sxm")
    assert cal.gemm.dims == (32, 64) and cal.attention is not None and cal.launch_eager_s is None
    assert any(line.startswith("probe gemm_grid") for line in plan_lines(quick=False))


def test_bench_json_carries_the_grids() -> None:
    from gpudoctor.bench import BenchResult
    from gpudoctor.hardware.ceilings import for_gpu_name

    ceilings = ceilings_from(_measurements(), H100, "GPU-1", 85_017_493_504)
    result = BenchResult(
        gpu=H100,
        uuid="GPU-1",
        measured_utc="2026-11-22T00:00:00",
        measurements=_measurements(),
        health=HealthReading(),
        findings=[],
        ceilings=ceilings,
        datasheet=for_gpu_name(H100),
        gemm_grid={"rows": []},
        attention_grid={"error": "RuntimeError: no SDPA"},
    )
    d = result.to_dict()
    assert d["schema_version"] == "1.0" and d["gemm_grid"] == {"rows": []}
    assert d["attention_grid"]["error"].startswith("RuntimeError")


def test_kind_probes_measure_every_kind_that_plan_train_reads(monkeypatch, tmp_path) -> None:
    """The elementwise and optimizer probes end to end on the CPU (CUDA events replaced by a wall
    clock): each kind's bytes/s is its counted bytes over its seconds, and the sections load."""
    import json

    from gpudoctor.bench import overlap_skipped, plan_lines
    from gpudoctor.hardware import kinds
    from gpudoctor.hardware.probe import ProbePlan
    from gpudoctor.plan.calibration import load_calibration

    _probes_on_cpu(monkeypatch)
    monkeypatch.setattr(kinds, "ELEMENTS_QUICK", 1 << 18)
    monkeypatch.setattr(kinds, "OPTIMIZER_TENSOR_ELEMENTS", 1 << 10)
    seen: list[str] = []
    out = kinds.kind_probes(ProbePlan(quick=True), seen.append)
    assert seen == ["elementwise kinds", "optimizer step"]
    rows = out["elementwise"]["rows"]
    assert list(rows) == list(kinds.ELEMENTWISE_KINDS)
    assert all(r["bytes_per_s"] == pytest.approx(r["bytes"] / r["s"]) for r in rows.values())
    n = 1 << 18  # bytes: inputs read once + output written once
    assert {k: r["bytes"] // n for k, r in rows.items()} == {
        "contiguous": 6,
        "rope": 4,
        "broadcast_heads": 4,
        "weight": 4,
        "rowscale": 8,
        "cast_up": 6,
        "cast_down": 6,
        "reduction": 4,
    }
    assert rows["rope"]["shape"] == "[4, 16, 32, 128].transpose(1, 2) * [1, 1, 16, 128]"
    opt = out["optimizer"]
    assert (opt["tensors"], opt["params"]) == (32, 32 * 1024)
    assert {k: r["bytes_per_param"] for k, r in opt["rows"].items()} == {
        "adamw_foreach": 40,
        "adamw_fused": 14,
    }
    bench = {
        "gpu": H100,
        "ceilings": {"matrix_flops": {"bf16": 7.7e14}, "hbm_bytes_per_s": 2.9e12, "extra": {}},
        "gemm_grid": {"rows": [{"m": 256, "n": 256, "k": 256, "tflops": 5.9}]},
        **out,
        "overlap": overlap_skipped(1),
    }
    (tmp_path / "b.json").write_text(json.dumps(bench))
    cal = load_calibration(tmp_path / "b.json", "h100-sxm")
    assert set(cal.elementwise) == set(kinds.ELEMENTWISE_KINDS) and cal.overlap is None
    assert overlap_skipped(1)["skipped"].endswith(
        "needs 2+ GPUs and collectives: this machine shows one GPU"
    )
    lines = plan_lines(quick=False)
    assert any(line.startswith("probe elementwise: bytes/s of contiguous, rope") for line in lines)
    assert any(line.startswith("with 2+ GPUs: overlap") for line in lines)


def test_bench_json_carries_the_kind_sections() -> None:
    from gpudoctor.bench import BenchResult
    from gpudoctor.hardware.ceilings import for_gpu_name

    ceilings = ceilings_from(_measurements(), H100, "GPU-1", 85_017_493_504)
    result = BenchResult(
        gpu=H100,
        uuid="GPU-1",
        measured_utc="2026-11-22T00:00:00",
        measurements=_measurements(),
        health=HealthReading(),
        findings=[],
        ceilings=ceilings,
        datasheet=for_gpu_name(H100),
        elementwise={"rows": {}},
        overlap={"skipped": "one GPU"},
    )
    d = result.to_dict()
    assert (
        d["schema_version"] == "1.0" and d["elementwise"] == {"rows": {}} and d["optimizer"] == {}
    )
    assert d["overlap"] == {"skipped": "one GPU"}


def test_the_profilers_cost_per_event_is_measured_and_saved_with_the_ceilings(monkeypatch) -> None:
    """The probe's code on the CPU (syncs stubbed): a cost per recorded host event, counted in the
    profile's own exported trace, lands in the machine profile's ceilings for the replay."""
    from gpudoctor.hardware.probe import ProbePlan, profiler_probes

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    (m,) = profiler_probes(torch, ProbePlan(quick=True), device="cpu")
    assert m.probe == "profiler.event" and m.unit == "s" and m.value >= 0
    assert (
        m.detail["ops"] == 500 and m.detail["events"] >= 500
    )  # each add_ is recorded, counted in the export
    assert m.value == pytest.approx(
        max(m.detail["profiled_us_per_op"] - m.detail["plain_us_per_op"], 0)
        / m.detail["events_per_op"]
        / 1e6,
        rel=0.01,
        abs=1e-9,
    )
    ceilings = ceilings_from(
        [*_measurements(), Measurement("profiler.event", 4.5e-6, "s")], H100, "GPU-1", 1
    )
    assert ceilings.extra["profiler_event_s"] == 4.5e-6
