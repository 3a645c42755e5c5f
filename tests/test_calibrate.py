"""rules/calibrate.py on a real trace and on the calibrations' choice between a host-bound and a
GPU-bound step."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.core.finding import Evidence, make_finding
from gpudoctor.pipeline import analyze_loaded
from gpudoctor.rules.calibrate import calibrate
from gpudoctor.trace import load

DATA = Path(__file__).parent / "data"


def test_optimizer_loop_on_a_host_bound_step_is_calibrated_like_the_step() -> None:
    """The lab's optimizer_loop, run C of 2026-11-26 (H100, CUPTI detached after each window): the
    sick step 7.587 ms unprofiled, its fixed twin 2.066 ms (x3.67). The loop is 9.37 of the 13.19
    ms profiled step and the GPU is busy 1.07 ms of it: what the fused step leaves shrinks like the
    step, x3.73 (the idle share of its cause read x4.32). Replayed (its region's host time from
    its first operator and all but one launch of its region gone, its kernels at the fused
    traffic): x3.29; x3.39 with the walk over the parameters before that operator gone too."""
    report = analyze_loaded(
        load(DATA / "optimizer_loop_h100_c" / "trace.json.gz"), unprofiled_step_ms=7.587
    )
    loop = report.finding("optimizer-loop")
    assert loop is not None and report.findings[0].id == "optimizer-loop"
    assert loop.evidence.numbers["priced_by"] == "replay"
    assert loop.predicted_speedup == pytest.approx(3.292, abs=1e-3)
    assert 1 / 1.5 <= loop.predicted_speedup / (7.587 / 2.066) <= 1.5
    formula = _formula_price(DATA / "optimizer_loop_h100_c", 7.587, "optimizer-loop")
    assert formula.evidence.numbers["saving_in_profiled_trace_ms"] == pytest.approx(9.366, abs=1e-3)
    assert formula.saving_ms == pytest.approx(5.552, abs=1e-3)
    assert formula.predicted_speedup == pytest.approx(3.728, abs=1e-3)


def _formula_price(folder: Path, unprofiled_ms: float, finding_id: str):  # type: ignore[no-untyped-def]
    """The finding as its rule's formula prices it (the replay's fallback)."""
    from gpudoctor.analysis import analyze_trace
    from gpudoctor.pipeline import choose_ceilings
    from gpudoctor.rules.calibrate import by_formula
    from gpudoctor.rules.registry import find

    trace = load(folder / "trace.json.gz")
    a = analyze_trace(trace, choose_ceilings(trace), unprofiled_ms)
    return next(f for f in by_formula(find(a), a) if f.id == finding_id)


def _loop_finding(saving: float, idle: float):  # type: ignore[no-untyped-def]
    return make_finding(
        "optimizer-loop", "loop", 10.0, saving, "", Evidence(numbers={}), (), idle_ms=idle
    )


def test_host_step_share_only_where_the_host_holds_the_step_back() -> None:
    """P = 10 ms, a loop of 6 ms (5 of it idle). Host-bound (U = 5, GPU busy 1 ms): the 4 ms the fix
    leaves shrink like the step, to 2: saving 3. GPU-bound (U = 9.5, busy 8 ms): its idle shrinks
    like its cause's (to half) but by no more than U - busy allows: 1 + min(2.5, 1.5) = 2.5."""
    host = calibrate(
        [_loop_finding(6.0, 5.0)], 5.0, {"optimizer": 0.5}, busy_ms=1.0, profiled_step_ms=10.0
    )[0]
    assert host.saving_ms == pytest.approx(3.0)
    gpu = calibrate(
        [_loop_finding(6.0, 5.0)], 9.5, {"optimizer": 0.5}, busy_ms=8.0, profiled_step_ms=10.0
    )[0]
    assert gpu.saving_ms == pytest.approx(2.5)


def test_pageable_copy_leaves_the_pinned_copy_and_the_kernels_after_the_fix() -> None:
    """The lab's pageable_copy, run G of 2026-11-26 (H200): the sick step 8.808 ms unprofiled, its
    fixed twin (pinned, non_blocking) 2.717 ms (x3.24). Profiled, the 128 MB pageable copy took
    16.23 of a 17.03 ms step; scaled to the unprofiled step alone its saving left 1.3 ms after the
    fix (x6.92, 2.13x over). The pinned copy at the share of the datasheet's link that copies reach
    (54.8 GB/s: the trace has no pinned copy) and the kernels are a floor: 2.721 ms, x3.24.
    Replayed with the copy at that bandwidth, not blocking (nor the stream sync in its operator),
    and its staging gone: x3.22."""
    report = analyze_loaded(
        load(DATA / "pageable_copy_h200_g" / "trace.json.gz"), unprofiled_step_ms=8.808
    )
    copy = report.findings[0]
    assert copy.id == "pageable-copy" and copy.evidence.numbers["priced_by"] == "replay"
    assert copy.evidence.numbers["pinned_GBps_assumed"] == pytest.approx(54.8)
    assert copy.evidence.numbers["step_floor_after_fix_ms"] == pytest.approx(2.721, abs=1e-3)
    assert copy.predicted_speedup == pytest.approx(3.218, abs=1e-3)
    formula = _formula_price(DATA / "pageable_copy_h200_g", 8.808, "pageable-copy")
    assert formula.saving_ms == pytest.approx(8.808 - 2.721, abs=1e-3)
    assert formula.predicted_speedup == pytest.approx(3.237, abs=1e-3)
    assert 1 / 1.1 <= copy.predicted_speedup / (8.808 / 2.717) <= 1.1


def _loader_finding(saving: float):  # type: ignore[no-untyped-def]
    from gpudoctor.core.finding import STEP_FLOOR_SHARE_AFTER_FIX

    return make_finding(
        "input-pipeline",
        "loader",
        10.0,
        saving,
        "",
        Evidence(numbers={STEP_FLOOR_SHARE_AFTER_FIX: 0.5}),
        (),
        idle_ms=saving,
    )


def test_a_floor_share_holds_against_the_step_the_program_runs() -> None:
    """Workers already too slow (P = 10 ms, 5 of it waiting for them): twice as many at most halve
    the step. Where the unprofiled step is longer (U = 30: bursty waits the window did not see, all
    given to input-pipeline) the floor is half of U, 15 ms, not half of P (which left 5 ms: x6)."""
    longer = calibrate([_loader_finding(5.0)], 30.0, {}, busy_ms=2.0, profiled_step_ms=10.0)[0]
    assert longer.saving_ms == pytest.approx(15.0) and longer.predicted_speedup == pytest.approx(
        2.0
    )
    # a step the profiler inflated (U = 8): what the window saw, scaled, stays under the floor
    shorter = calibrate(
        [_loader_finding(5.0)], 8.0, {"input-pipeline": 0.6}, busy_ms=2.0, profiled_step_ms=10.0
    )[0]
    assert shorter.saving_ms == pytest.approx(3.0) and shorter.saving_ms <= 4.0
