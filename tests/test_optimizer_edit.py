"""optimizer-loop's edit: what a fused step still does on the host, on the lab trap's recorded
traces (H100: AdamW over 66 parameter tensors, foreach=False, and its fused twin)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpudoctor.analysis import analyze_trace
from gpudoctor.hardware.ceilings import for_gpu_name
from gpudoctor.pipeline import analyze_loaded
from gpudoctor.rules import optimizer_loop
from gpudoctor.trace import load

DATA = Path(__file__).parent / "data"


def _regions(folder: str):  # type: ignore[no-untyped-def]
    trace = load(DATA / folder)
    a = analyze_trace(trace, for_gpu_name("h100-sxm"))
    host = trace.host
    names = trace.names_matching(lambda s: s.startswith("Optimizer.step#"))
    return a, np.flatnonzero(names[host.name])


def test_the_walk_over_parameters_before_the_first_operator_stays() -> None:
    """Both steps walk their parameters in Python before the first operator (``_init_group``):
    0.23-0.27 ms of each loop step, 0.32-0.41 ms of each fused one. The edit takes out the
    loop's host time from its first operator to the region's end, not the walk."""
    a, regions = _regions("optimizer_loop")
    host = a.trace.host
    edit = optimizer_loop.edit(a, optimizer_loop.check(a))
    assert edit is not None
    assert (edit.host_removed_s - host.ts[regions]).tolist() == [232787, 255354, 270670]
    assert (edit.host_removed_e == host.end[regions]).all()
    fused, fused_regions = _regions("optimizer_loop_fixed")
    assert optimizer_loop.check(fused) is None
    walk = optimizer_loop._first_operator(
        fused,
        fused_regions,
        fused.trace.host.ts[fused_regions],
        fused.trace.host.end[fused_regions],
    )
    assert (walk - fused.trace.host.ts[fused_regions]).tolist() == [317850, 331298, 410924]


def test_a_region_without_an_operator_is_left_whole() -> None:
    a, regions = _regions("optimizer_loop")
    host = a.trace.host
    # a window that ends before the region's first operator: nothing of it is the loop's
    ends = host.ts[regions] + 1000
    assert (optimizer_loop._first_operator(a, regions, host.ts[regions], ends) == ends).all()


def test_the_fused_step_priced_with_its_walk() -> None:
    """Sick 11.38 ms, fixed 2.78 ms unprofiled (x4.09, tests/data/manifest.json); taking the walk
    out with the loop priced x4.21, keeping it x3.86."""
    report = analyze_loaded(load(DATA / "optimizer_loop"), unprofiled_step_ms=11.3788)
    loop = report.finding("optimizer-loop")
    assert loop is not None and loop.evidence.numbers["priced_by"] == "replay"
    assert loop.predicted_speedup == pytest.approx(3.859, abs=1e-3)
