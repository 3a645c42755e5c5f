"""Where DataLoader workers bound the step after their fix (rules/input_pipeline.py ``edit``): the
floor their throughput sets holds where they set the step now, not where a batch is only late now
and then, whose workers made one in less than the step (benchmarks/BENCHMARKS-gallery.md "Two more
public programs")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudoctor.pipeline import analyze_path
from gpudoctor.rules.input_pipeline import LOADER_SETS_STEP

DATA = Path(__file__).parent / "data"


def test_a_worker_late_now_and_then_does_not_hold_the_other_fixes_above_its_floor() -> None:
    """pytorch/examples' siamese ResNet (one worker, recorded on a lent H100 under ``run
    --fixes``): the GPU waits 0.40 ms of a 33.3 ms profiled step for batches. All fixes together
    had stopped at half the step (x2.00, under launch-bound's own x3.98), the floor of twice the
    workers; measured, CUDA graphs alone ran the same one worker at x3.22."""
    bundle = DATA / "knobs_h100" / "examples_siamese"
    report = analyze_path(bundle)
    loader = report.finding("input-pipeline")
    assert loader.evidence.numbers[LOADER_SETS_STEP] is False
    assert loader.evidence.numbers["step_floor_share_after_fix"] == 0.5
    graphs = report.finding("launch-bound").predicted_speedup
    assert graphs == pytest.approx(3.8484, abs=1e-3)
    together = report.all_fixes
    assert together.step_ms == pytest.approx(19.8614)
    assert together.step_after_ms == pytest.approx(2.6328, abs=1e-3)
    assert together.predicted_speedup > graphs
    trials = json.loads((bundle / "trials.json").read_text())["trials"]
    measured = next(t["measured_speedup"] for t in trials if t["knob"] == "compile-reduce-overhead")
    assert together.step_ms / measured < 0.5 * together.step_ms  # the one worker kept up


def test_workers_that_set_the_step_hold_every_fix_to_their_floor() -> None:
    """loader_two_workers (a twin, H100): two workers behind, the GPU waiting most of the step; ten
    workers at most make a batch every fifth of it, and all fixes together stop there (x5.00)."""
    report = analyze_path(DATA / "twins_h100" / "loader_two_workers")
    loader = report.finding("input-pipeline")
    assert loader.evidence.numbers[LOADER_SETS_STEP] is True
    assert loader.evidence.numbers["step_floor_share_after_fix"] == pytest.approx(0.2)
    assert report.all_fixes.step_after_ms == pytest.approx(0.2 * report.all_fixes.step_ms)
    assert report.all_fixes.predicted_speedup == pytest.approx(5.0)
