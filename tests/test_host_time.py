"""The host's own step by cause (analysis/host_time.py), on recorded traces: a sleep outside any
operator, a slow DataLoader, a rank blocked while its GPU waits in an all-reduce, and the events
recorded in each cause (what the profiler's own time is estimated from)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from gpudoctor.analysis import analyze_trace
from gpudoctor.analysis.host_time import HostTime, host_time
from gpudoctor.pipeline import choose_ceilings
from gpudoctor.trace import load

DATA = Path(__file__).parent / "data"


def _host(path: Path) -> HostTime:
    t = load(path)
    a = analyze_trace(t, choose_ceilings(t))
    return host_time(t, a.steps, a.idle)


def test_the_sleeping_rank_and_the_waiting_one() -> None:
    """2x H100 DDP, rank 1 sleeping 20 ms a step (tests/data/ddp2_h100/slow): rank 1's host spends
    20.29 ms a step outside any operator; rank 0's blocks 4.92 ms while its GPU sits in the
    all-reduces (waiting for rank 1) and 3.91 ms while its GPU computes. Both record the same
    ~4,552 dispatch events a step."""
    slow = DATA / "ddp2_h100" / "slow"
    r0, r1 = _host(slow / "rank0" / "trace.json.gz"), _host(slow / "rank1" / "trace.json.gz")
    assert r1.ms == {
        "host-sync": pytest.approx(0.032, abs=1e-3),
        "optimizer": pytest.approx(0.91, abs=1e-3),
        "host-work": pytest.approx(20.2911, abs=1e-4),
        "dispatch": pytest.approx(39.749, abs=1e-3),
    }
    assert r0.ms == {
        "collective-wait": pytest.approx(4.917, abs=1e-3),
        "host-sync": pytest.approx(3.908, abs=1e-3),
        "optimizer": pytest.approx(1.172, abs=1e-3),
        "dispatch": pytest.approx(36.209, abs=1e-3),
    }
    assert (r0.events["dispatch"], r1.events["dispatch"]) == (4551.6, 4552.6)
    assert "host-work" not in r1.events  # a sleep records nothing: the profiler does not stretch it
    assert r1.step_ms == pytest.approx(60.982, abs=1e-3)


def test_a_slow_loader_and_host_work_on_one_gpu() -> None:
    pipe = _host(DATA / "input_pipeline" / "trace.json.gz")
    assert pipe.ms["input-pipeline"] == pytest.approx(34.8121, abs=1e-4)
    assert pipe.events["input-pipeline"] == 75.0
    assert pipe.step_ms == pytest.approx(57.2546, abs=1e-4)  # every moment of the host steps, once
    work = _host(DATA / "host_blocking_work" / "trace.json.gz")
    assert (
        work.ms["host-work"] == pytest.approx(15.0869, abs=1e-4)
        and "collective-wait" not in work.ms
    )


def test_no_host_steps_no_host_time() -> None:
    t = load(DATA / "host_blocking_work" / "trace.json.gz")
    a = analyze_trace(t, choose_ceilings(t))
    assert (
        host_time(t, msgspec.structs.replace(a.steps, host_start=None, host_end=None), a.idle)
        == HostTime()
    )
