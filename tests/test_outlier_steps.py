"""A one-off step at the window's edge is left out of the per-step figures; a loader's stall is not."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest
from synth import TraceBuilder

from gpudoctor.analysis.steps import segment, without_outlier_edges
from gpudoctor.pipeline import analyze_loaded, analyze_path
from gpudoctor.trace import load, parse

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = ROOT / "benchmarks" / "results" / "knob-trials-h200-2026-12-03-bundles.tar.xz"


@pytest.fixture(scope="module")
def dcgan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytorch/examples' DCGAN on fake data, `gpudoctor run` on an H200 (its bundle as kept with the
    knob trials): steps of 23.3, 21.6, 39.4 and 18.1 ms, then 1,070 ms in which cuDNN's autotuner met
    the epoch's last, smaller batch."""
    out = tmp_path_factory.mktemp("dcgan")
    with tarfile.open(BUNDLES) as tar:
        members = [
            m
            for m in tar.getmembers()
            if m.name.lstrip("./").startswith("examples_dcgan_fake/") and m.isfile()
        ]
        tar.extractall(out, members=members, filter="data")
    return out / "examples_dcgan_fake"


def test_a_one_off_step_at_the_edge_is_left_out_and_named(dcgan: Path) -> None:
    report = analyze_path(dcgan)
    assert report.unprofiled_step_ms == pytest.approx(28.8923)
    # the four typical steps, not the 234.6 ms mean of five
    assert report.step_ms == pytest.approx(25.6082, abs=1e-4)
    assert report.warnings[0].startswith(
        "ProfilerStep#5 took 1070.45 ms; its longest operator "
        "aten::conv_transpose2d took 627.40 ms: over 4x the median step (22.45 ms)"
    )
    # with the outlier in, launch-bound read x15.53 (critical); the loader-workers knob measured
    # x1.85 [1.00-3.42] on this program. Its profiled step replays 11% under the measured one (the
    # loader's stalls the window did not see): that bounds nothing, the profiler's prior stands,
    # and more workers at most halve the step
    top = report.findings[0]
    assert top.id == "input-pipeline"
    assert top.predicted_speedup == pytest.approx(2.0, abs=1e-3)


def test_untimed_the_operators_holding_the_step_say_it_is_one_off(dcgan: Path) -> None:
    trace = load(dcgan)
    steps = segment(trace)
    kept, left_out = without_outlier_edges(steps, trace, None)
    assert left_out == (4,) and len(kept) == 4
    report = analyze_loaded(trace)
    assert report.step_ms == pytest.approx(25.6082, abs=1e-4)


def test_a_loader_stall_is_the_steady_state() -> None:
    # steps of 4.8, 4.0, 3.5, 132.0 and 25.0 ms: the workers' queue drained; the step timed outside
    # the profiler (41.0 ms) holds the stalls too
    report = analyze_path(ROOT / "tests" / "data" / "gallery_h100" / "dataloader_workers")
    assert not any("left out of the per-step figures" in w for w in report.warnings)
    assert report.step_ms == pytest.approx(33.8668, abs=1e-4)


def _steps(last_ms: float, op_in_last: bool, n: int = 5) -> TraceBuilder:
    t, ts = TraceBuilder(), 0.0
    for i in range(n):
        dur = last_ms * 1000 if i == n - 1 else 2000.0
        t.step(i, ts, dur)
        if i < n - 1 or op_in_last:
            t.op("aten::convolution", ts + 10, dur - 20)
        else:
            t.python("checkpoint.py(12): save", ts + 10, dur - 20)
        t.launch("k", ts + 20, ts + 30, 100)
        ts += dur
    return t


@pytest.mark.parametrize(
    ("last_ms", "op_in_last", "n", "left_out"),
    [
        (20.0, True, 5, (4,)),  # 10x the others, inside an operator: one-off
        (20.0, False, 5, ()),  # 10x, in Python outside any operator (a checkpoint, a loader): kept
        (7.0, True, 5, ()),  # 3.5x: under the threshold
        (20.0, True, 3, ()),  # three steps stay whatever they hold
    ],
)
def test_the_edge_rule(last_ms: float, op_in_last: bool, n: int, left_out: tuple[int, ...]) -> None:
    trace = parse(_steps(last_ms, op_in_last, n).to_bytes())
    steps = segment(trace)
    kept, out = without_outlier_edges(steps, trace)
    assert out == left_out
    assert len(kept) == n - len(left_out)
    if left_out:  # what stays is the typical step
        assert np.all(kept.durations_ms < 3)


def test_a_timed_step_that_the_outlier_explains_keeps_it() -> None:
    # the step timed outside the profiler is the slow one's mean: leaving it out moves away from it
    trace = parse(_steps(20.0, True).to_bytes())
    _, out = without_outlier_edges(segment(trace), trace, unprofiled_ms=5.6)
    assert out == ()
