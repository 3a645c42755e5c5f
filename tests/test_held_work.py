"""Work the GPU holds queued while the host waits: not the host's doing (analysis/idle.py
``_split_held``), and a step held that way is not called healthy (report/model.py)."""

from __future__ import annotations

import pytest
from synth import TraceBuilder

from gpudoctor.analysis.idle import GPU_WAIT
from gpudoctor.pipeline import analyze_loaded, diagnose_loaded
from gpudoctor.trace.load import parse

STEP_US = 10_000.0


def _held_steps(held_from_us: float) -> TraceBuilder:
    """3 steps of 10 ms: a kernel, then a second one launched at 0.7 ms that the GPU starts only
    at ``held_from_us`` (a stream waiting on something the trace does not hold), the host blocked
    in a stream sync until it is done, then a last kernel."""
    t = TraceBuilder()
    for s in range(3):
        base = s * STEP_US
        t.step(s, base, STEP_US)
        t.launch("void k_first(float*)", base + 100, base + 110, 500)
        t.launch("void k_held(float*)", base + 700, base + held_from_us, 500)
        t.runtime("cudaStreamSynchronize", base + 800, held_from_us + 500 - 800)
        t.launch("void k_last(float*)", base + held_from_us + 600, base + held_from_us + 610, 1300)
    return t


def test_a_kernel_the_gpu_held_queued_is_gpu_wait_not_the_syncs() -> None:
    d = diagnose_loaded(parse(_held_steps(8_000).to_bytes()))
    idle = d.analysis.idle
    # queued at 0.705 ms (its launch returned), started at 8 ms: 7.295 ms held a step
    assert idle.ms(GPU_WAIT) == pytest.approx(7.295, abs=1e-3)
    assert idle.ms("host-sync") < 0.2
    assert d.report.finding("host-sync") is None or d.report.finding("host-sync").severity == "info"
    verdict = d.report.verdict()
    assert verdict.status == "held" and verdict.top_finding is None
    assert "idle with work queued for 7" in verdict.text


def test_a_kernel_started_within_a_millisecond_of_its_launch_is_the_hosts() -> None:
    # started 0.9 ms after its launch returned: under HELD_MIN_NS, the gap stays the sync's
    report = analyze_loaded(parse(_held_steps(1_605).to_bytes()))
    assert report.verdict().status != "held"


def test_a_graph_replays_own_gaps_are_not_work_held() -> None:
    # a CUDA-graph step: its kernels launched by one replay before each gap (gpu-wait 12.7% of the
    # step), each started microseconds after the one before: nothing held the GPU
    from pathlib import Path

    from gpudoctor.pipeline import analyze_path

    report = analyze_path(Path(__file__).parent / "data" / "launch_bound_fixed")
    assert report.held_share == 0.0 and report.verdict().status == "healthy"
