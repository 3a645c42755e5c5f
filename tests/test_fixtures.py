"""The doctor on real traces recorded on an H100 (tests/data/, see manifest.json): every trap's
own finding comes first, with pinned numbers; the healthy workloads get no major finding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gpudoctor
from gpudoctor.report.model import Report

DATA = Path(__file__).parent / "data"

# scenario, top finding, its saving (ms/step), step ms, GPU busy %, MFU
# The top finding's saving, offline (no unprofiled step): priced by replaying the step's graph
# with its fix as an edit (rules/whatif.py), as a share of the profiled step, the profiler's cost
# taken out at its prior (replay/observer.py PRIOR_SCALE).
EXPECTED = [
    ("input_pipeline", "input-pipeline", 41.4046, 57.458, 16.3, 0.0493),
    # a host-bound step: the 25 reads, the 48 check operators computed only to be read, and
    # their kernels leave the step; the syncs no longer wait
    ("host_sync", "host-sync", 4.6608, 10.469, 27.1, 0.0381),
    ("launch_bound", "launch-bound", 31.5947, 32.785, 2.3, 0.0),
    (
        "fp32_matmul",
        "fp32-matmul",
        5.3035,  # 5.6652 with 2/3 a cast per GEMM kernel
        8.096,
        99.1,
        0.0472,
    ),
    ("unfused_elementwise", "unfused-elementwise", 10.9993, 15.899, 98.2, 0.1048),
    ("naive_attention", "naive-attention", 9.9589, 13.747, 98.8, 0.0568),
    ("pageable_copy", "pageable-copy", 16.3603, 19.18, 94.0, 0.0063),
    ("allocator_churn", "allocator-churn", 1.3256, 3.004, 38.5, 0.0),
    ("per_sample_loop", "per-sample-loop", 9.5271, 9.847, 7.1, 0.0001),
    ("optimizer_loop", "optimizer-loop", 13.3868, 17.904, 6.0, 0.0039),
    ("host_blocking_work", "host-blocking-work", 14.593, 23.271, 30.7, 0.1373),
    ("misaligned_gemm", "misaligned-gemm", 30.3781, 41.979, 99.9, 0.1284),
    ("small_gemm", "small-gemm", 2.8988, 3.003, 89.4, 0.0),
    ("memory_pressure", "memory-pressure", 99.8539, 122.68, 15.8, 0.0934),
    # an eager bf16 GPT: what torch.compile would fuse (2.629 ms, x1.11) is minor, under the 10% a
    # fusion finding needs to be major; compiling it measured x1.08 (scripts/compile_gain_healthy.py,
    # H200, 2026-11-26)
    ("healthy_train", None, None, 27.002, 97.9, 0.4193),
    ("healthy_infer", None, None, 8.666, 98.6, 0.4809),
]

_cache: dict[str, Report] = {}


def report(name: str) -> Report:
    if name not in _cache:
        _cache[name] = gpudoctor.analyze(DATA / name / "trace.json.gz")
    return _cache[name]


@pytest.mark.parametrize(
    "name, top, saving, step, busy, mfu", EXPECTED, ids=[e[0] for e in EXPECTED]
)
def test_scenario(
    name: str, top: str | None, saving: float | None, step: float, busy: float, mfu: float
) -> None:
    r = report(name)
    assert r.step_ms == pytest.approx(step, abs=5e-4)
    assert r.gpu_busy_pct == pytest.approx(busy, abs=0.05)
    assert r.mfu == pytest.approx(mfu, abs=5e-5)
    if top is None:
        assert [f.id for f in r.findings if f.severity in ("major", "critical")] == []
    else:
        assert r.findings[0].id == top
        assert r.findings[0].saving_ms == pytest.approx(saving, abs=5e-4)
        assert r.findings[0].severity == "critical" or name == "host_sync"


def test_every_required_id_tops_some_real_trace() -> None:
    tops = {report(e[0]).findings[0].id for e in EXPECTED if e[1]}
    assert len(tops) == 14


def test_step_time_matches_unprofiled_on_gpu_bound_traces() -> None:
    """GPU-aligned steps: the host runs ahead, yet the step is the GPU's (within 4%)."""
    manifest = json.loads((DATA / "manifest.json").read_text())["scenarios"]
    for name in (
        "fp32_matmul",
        "misaligned_gemm",
        "naive_attention",
        "unfused_elementwise",
        "healthy_train",
    ):
        assert report(name).step_ms == pytest.approx(manifest[name]["sick_median_ms"], rel=0.04)


def test_host_sync_points_at_the_source_line_and_the_op() -> None:
    f = report("host_sync").finding("host-sync")
    assert f is not None
    assert f.evidence.ops[0] == "aten::item"
    assert f.evidence.sources[0].startswith("gpudoctor/lab/traps/host_sync.py:")
    assert f.evidence.numbers["syncs_per_step"] == 25
    # per layer abs -> amax -> item, per gradient isfinite -> all -> item: 8 x 2 + 16 x 2
    assert f.evidence.numbers["check_ops_per_step"] == 48
    assert f.evidence.numbers["host_work_removed_ms_per_step"] == pytest.approx(3.108, abs=1e-3)
    assert "hold 3.11 ms of the host's time" in f.summary


def test_host_sync_on_a_host_bound_step_is_priced_by_the_work_it_removes() -> None:
    """The fixed twin reads and checks nothing: 4.39 against 7.04 ms unprofiled. Replayed without
    the reads, their checks (host time and kernels) and the syncs' waits, the host left at the
    pace of its smaller work (replay/pace.py): x1.618 predicted, x1.602 measured (the formula, the step left shrunk like the step, x1.434; the GPU idle after the
    syncs alone x1.27)."""
    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.trace import load

    entry = json.loads((DATA / "manifest.json").read_text())["scenarios"]["host_sync"]
    r = analyze_loaded(
        load(DATA / "host_sync" / "trace.json.gz"), unprofiled_step_ms=entry["sick_median_ms"]
    )
    assert r.findings[0].id == "host-sync"
    assert r.findings[0].predicted_speedup == pytest.approx(1.6175, abs=1e-3)
    assert r.findings[0].evidence.numbers["priced_by"] == "replay"
    assert entry["sick_median_ms"] / entry["fixed_median_ms"] == pytest.approx(1.602, abs=1e-3)
    # a per-parameter optimizer reads its step count, 66 a step, from CPU tensors: no read waits
    # for the GPU (none makes a blocking call), so there is no host-sync finding
    loop = report("optimizer_loop")
    assert loop.finding("host-sync") is None
    assert loop.findings[0].id == "optimizer-loop"


def test_fp32_matmul_names_cuda_core_kernels() -> None:
    f = report("fp32_matmul").finding("fp32-matmul")
    assert any("sgemm" in k or "ffma" in k for k in f.evidence.kernels)
    assert f.evidence.numbers["achieved_tflops"] == pytest.approx(50.8, abs=0.1)


def test_misaligned_gemm_reports_the_odd_shapes() -> None:
    f = report("misaligned_gemm").finding("misaligned-gemm")
    shapes = f.evidence.numbers["shapes_MxNxK"]
    assert any("4095" in s or "50257" in s for s in shapes)
    assert all("align1" in k for k in f.evidence.kernels[:2])


def test_input_pipeline_attributes_idle_to_the_dataloader() -> None:
    r = report("input_pipeline")
    assert max(r.idle, key=r.idle.get) == "input-pipeline"
    assert "DataLoader" in r.findings[0].evidence.ops[0]


def test_memory_pressure_reads_the_peak() -> None:
    m = report("memory_pressure").memory
    assert m.peak_reserved_fraction == pytest.approx(0.989, abs=0.002)
    assert report("memory_pressure").finding("allocator-churn") is None  # pressure owns the churn


def test_small_gemm_prices_graph_replayed_kernels_by_grid() -> None:
    r = report("small_gemm")
    assert r.breakdown.cuda_graph_ms > 0
    f = r.finding("small-gemm")
    assert f.evidence.numbers["priced_by_grid_fill"] > 0
    # 1024 graph-replayed kernels a step, ~0.29 us apart: the gaps go with the kernels
    assert f.evidence.numbers["queue_gaps_removed_ms_per_step"] == pytest.approx(0.292, abs=1e-3)


def test_per_sample_loop_keeps_one_iterations_operators() -> None:
    """32 samples x (select, then matmul, add, relu per layer): 320 of the step's 322 operators
    are the loop, and the batched fix keeps one iteration's 10. Replayed: the loop's host span keeps
    an average iteration's share, the stack that gathers the samples goes, the profiler's work at
    the step edges is not the program's, the host left at the pace of its smaller work (replay/pace.py):
    x30.35 predicted, x24.40 measured (6.494 -> 0.266 ms), 1.24x over (x22.43 at the sick step's
    pace)."""
    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.trace import load

    entry = json.loads((DATA / "manifest.json").read_text())["scenarios"]["per_sample_loop"]
    r = analyze_loaded(
        load(DATA / "per_sample_loop" / "trace.json.gz"), unprofiled_step_ms=entry["sick_median_ms"]
    )
    f = r.finding("per-sample-loop")
    assert f.evidence.numbers["ops_per_step"] == 322.0
    assert f.evidence.numbers["loop_ops_removed_per_step"] == 310.0
    # the GPU after the fix: the sum's kernel and the three batched GEMMs
    assert f.evidence.numbers["step_floor_after_fix_ms"] == pytest.approx(0.019, abs=1e-3)
    assert f.evidence.numbers["priced_by"] == "replay"
    assert f.predicted_speedup == pytest.approx(30.354, abs=1e-3)
    assert entry["sick_median_ms"] / entry["fixed_median_ms"] == pytest.approx(24.404, abs=1e-3)


def test_host_blocking_work_names_the_io_frame() -> None:
    f = report("host_blocking_work").finding("host-blocking-work")
    assert any("host_blocking_work.py" in s for s in f.evidence.sources)


def test_predictions_against_the_measured_fixed_twins() -> None:
    """Predicted saving vs (sick - fixed), both per step, for GPU-bound traps where the profiler
    adds no host time: within 30%."""
    manifest = json.loads((DATA / "manifest.json").read_text())["scenarios"]
    for name in ("fp32_matmul", "naive_attention", "unfused_elementwise", "misaligned_gemm"):
        measured = manifest[name]["sick_median_ms"] - manifest[name]["fixed_median_ms"]
        assert report(name).findings[0].saving_ms == pytest.approx(measured, rel=0.30), name


TRAPS = [e for e in EXPECTED if e[1] is not None]


@pytest.mark.parametrize(
    "name, finding_id", [(e[0], e[1]) for e in TRAPS], ids=[e[0] for e in TRAPS]
)
def test_the_fixed_twin_removes_most_of_the_predicted_saving(name: str, finding_id: str) -> None:
    """Each trap's fixed twin, recorded the same way: its own finding shrinks to under a quarter
    of what the sick trace was predicted to save (most twins lose the finding entirely)."""
    sick = report(name).finding(finding_id)
    fixed = report(f"{name}_fixed").finding(finding_id)
    assert sick is not None
    assert fixed is None or fixed.saving_ms <= 0.25 * sick.saving_ms


def test_compiled_healthy_training_is_triton_and_clean() -> None:
    r = report("healthy_compiled")
    assert r.breakdown.triton_ms > 0.5 * r.breakdown.busy_ms * 0.1
    assert [f.id for f in r.findings if f.severity in ("major", "critical")] == []


def test_calibrated_predictions_against_the_fixed_twins() -> None:
    """With the unprofiled step time (as `gpudoctor run` and the lab measure it), the planted
    finding still ranks first everywhere, and its predicted speedup is within 0.67-1.5x of the
    measured one (sick / fixed, unprofiled) for these traps — the others are listed in
    benchmarks/BENCHMARKS-diagnosis.md with their ratios."""
    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.trace import load

    manifest = json.loads((DATA / "manifest.json").read_text())["scenarios"]
    within = set()
    for name, top, *_ in TRAPS:
        entry = manifest[name]
        r = analyze_loaded(
            load(DATA / name / "trace.json.gz"), unprofiled_step_ms=entry["sick_median_ms"]
        )
        assert r.findings[0].id == top, name
        ratio = r.findings[0].predicted_speedup / (
            entry["sick_median_ms"] / entry["fixed_median_ms"]
        )
        if 0.67 <= ratio <= 1.5:
            within.add(name)
    # every trap: naive_attention's sick step is GPU-bound, so the profiler's cost there is not
    # fitted; at the prior the fits give (replay/observer.py PRIOR_SCALE) its fixed twin's host
    # (2.96 ms unprofiled) is priced within the band, where the default cost alone left x0.53
    assert within == {
        "host_sync",
        "launch_bound",
        "fp32_matmul",
        "unfused_elementwise",
        "pageable_copy",
        "allocator_churn",
        "per_sample_loop",
        "optimizer_loop",
        "host_blocking_work",
        "misaligned_gemm",
        "memory_pressure",
        "small_gemm",
        "naive_attention",
    }


def test_a_run_directory_brings_its_unprofiled_step_time(tmp_path: Path) -> None:
    import shutil

    shutil.copy(DATA / "launch_bound" / "trace.json.gz", tmp_path / "trace.json.gz")
    unprofiled = json.loads((DATA / "manifest.json").read_text())["scenarios"]["launch_bound"][
        "sick_median_ms"
    ]
    (tmp_path / "env.json").write_text(json.dumps({"capture": {"unprofiled_step_ms": unprofiled}}))
    r = gpudoctor.analyze(tmp_path)
    assert r.unprofiled_step_ms == pytest.approx(unprofiled)
    top = r.findings[0]
    assert top.id == "launch-bound"
    # the profiler tripled this host-bound step; calibrated, the saving fits in the real step
    assert top.saving_ms < unprofiled < report("launch_bound").findings[0].saving_ms
    # before calibration: the whole dispatch idle (no per-event discount when the real step is known)
    assert top.evidence.numbers["saving_in_profiled_trace_ms"] == pytest.approx(31.927, abs=1e-3)


def test_ddp_training_on_two_gpus() -> None:
    """Rank 0 of 2-GPU DDP (2x H200, NCCL 2.28, recorded with scripts/record_ddp_fixture.py):
    NCCL kernels are communication, overlapping backward on their own stream; a trivial sync
    inside DDP does not hold back the launch-bound finding."""
    r = report("ddp_train")
    assert r.gpu.name == "NVIDIA H200"
    assert r.breakdown.by_kind["communication (NCCL)"] == pytest.approx(0.9761, abs=1e-4)
    assert [(f.id, f.severity) for f in r.findings[:3]] == [
        ("launch-bound", "critical"),
        ("host-sync", "info"),
        ("unfused-elementwise", "info"),
    ]
    assert r.step_ms == pytest.approx(25.735, abs=1e-3)
