"""The replay's fit where the capture timed the DataLoader's fetch (rules/whatif.py
``_fit_with_fetch``): the loader keeps its timed time in the profiler-free step, measured against
what the loader replays in once the profiler's cost is out of its own events too; the rest of the
step is fitted to the rest. Two bundles recorded on a lent H100 under ``run --try-fixes``
(benchmarks/BENCHMARKS-replay.md "The timed fetch against the loader's replayed time")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudoctor.pipeline import _run_model, analyze_path

DATA = Path(__file__).parent / "data" / "knobs_h100"


def _loader_workers_measured(bundle: Path) -> float:
    trials = json.loads((bundle / "trials.json").read_text())["trials"]
    return next(t["measured_speedup"] for t in trials if t["knob"] == "loader-workers")


def test_a_loader_on_the_training_thread_keeps_its_timed_fetch_and_the_rest_is_fitted() -> None:
    """Fabric's MNIST classifier (num_workers=0): 7.68 ms a step unprofiled, 5.45 of it the fetch;
    every event of the fetch is a small CPU operator whose recorded time the fit takes as the
    profiler's, so the loader keeps none of it in the replay and all of its timed 5.45 ms beside
    it. Moving the fetch to workers leaves the rest, 2.23 ms: x3.45 (measured x3.54; with the
    loader measured against its recorded time, x1.87)."""
    bundle = DATA / "fabric_image_classifier"
    a, model = _run_model(bundle)
    assert a.unprofiled_step_ms == pytest.approx(7.6779)
    assert a.unprofiled_fetch_ms == pytest.approx(5.4492)
    assert model.fetch_unseen_ms == pytest.approx(5.4492, abs=1e-3)
    assert model.base.replayed.step_ns / 1e6 == pytest.approx(7.6779 - 5.4492, abs=2e-3)
    price = analyze_path(bundle).finding("input-pipeline").predicted_speedup
    assert price == pytest.approx(3.445, abs=2e-3)
    assert 1 / 1.25 <= price / _loader_workers_measured(bundle) <= 1.25


def test_a_fetch_beside_the_gpus_work_stops_the_fit_at_the_gpus_floor() -> None:
    """per_sample_tensor_dataset: 18.78 ms a step, 14.25 of it the fetch, while the GPU's work
    replays in 9.77 ms with the most profiler cost out: the step less the fetch (4.53 ms) is below
    what the GPU needs, so the fetch ran beside the GPU's work. The fit stops at that floor and the
    fix leaves the GPU's step: x1.92 (measured x2.44), not the x4.1 the rest alone would say."""
    bundle = DATA / "per_sample_tensor_dataset"
    a, model = _run_model(bundle)
    floor_ms = model.base.replayed.step_ns / 1e6
    assert floor_ms == pytest.approx(9.768, abs=2e-3)
    assert floor_ms > a.unprofiled_step_ms - a.unprofiled_fetch_ms
    assert model.fetch_unseen_ms == pytest.approx(a.unprofiled_step_ms - floor_ms, abs=1e-3)
    price = analyze_path(bundle).finding("input-pipeline").predicted_speedup
    assert price == pytest.approx(1.923, abs=2e-3)
    assert 1 / 1.5 <= price / _loader_workers_measured(bundle) <= 1.5
