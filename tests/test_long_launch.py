"""A long kernel launch is a wait only where the launch queue was full (replay/graph.py
``QUEUE_FULL_MIN``), and a step on the GPU's floor keeps the prior (replay/observer.py
``PLATEAU_SHARE``). benchmarks/BENCHMARKS-replay.md "A long launch is no wait"."""

from __future__ import annotations

import numpy as np
import pytest

from gpudoctor.analysis.steps import segment
from gpudoctor.replay.graph import QUEUE_FULL_MIN, build
from gpudoctor.replay.observer import FROM_PRIOR, unprofiled, without_profiler
from gpudoctor.replay.simulate import replay
from gpudoctor.trace import parse
from tests.synth import TraceBuilder


def _long_launch_after(queued: int, steps: int = 3) -> bytes:
    """Each step: ``queued`` launches 2 us apart (1 us each), their kernels 10 us each back to back
    on the GPU; then one launch that takes 80 us of host time, its kernel queued behind them."""
    b = TraceBuilder()
    step_us = 2 * queued + 120 + 10 * (queued + 1)
    for s in range(steps):
        t0 = s * step_us
        b.step(s, t0, step_us)
        for k in range(queued):
            b.launch("vectorized_elementwise_kernel", t0 + 1 + 2 * k, t0 + 10 + 10 * k, 10.0,
                     launch_dur=1.0)
        b.launch("vectorized_elementwise_kernel", t0 + 2 * queued + 5, t0 + 10 + 10 * queued,
                 10.0, launch_dur=80.0)
    return b.to_bytes()


def _long_launch_rows(queued: int) -> tuple[np.ndarray, np.ndarray]:
    """The chain entries of the long launches, and what each waited on (-1: nothing)."""
    trace = parse(_long_launch_after(queued))
    graph = build(trace, segment(trace))
    long_calls = np.flatnonzero((graph.end_ns - graph.ts_ns) >= 50_000)
    return long_calls, graph.wait_on[long_calls]


def test_a_long_launch_with_few_launches_queued_ahead_is_no_wait() -> None:
    """20 kernels queued ahead of it (16 not started): the host was busy, the GPU ran on."""
    long_calls, waits = _long_launch_rows(20)
    assert long_calls.size == 3
    assert (waits == -1).all()


def test_a_long_launch_behind_a_full_queue_waited_for_the_gpu() -> None:
    """200 kernels queued ahead of it (160 not started, over QUEUE_FULL_MIN): it returned as the GPU
    freed a slot, right after a kernel ended: a wait."""
    assert QUEUE_FULL_MIN <= 160
    long_calls, waits = _long_launch_rows(200)
    assert long_calls.size == 3
    assert (waits >= 0).all()


def _gpu_bound(steps: int = 4) -> bytes:
    """A GPU-bound loop: each step 50 launches 10 us apart (8 us each, under the profiler), their
    kernels 30 us each back to back (1.5 ms of GPU work); the host then waits for the GPU and runs
    100 small CPU operators before the next step: the GPU's floor slopes with the host time the
    profiler is said to have cost after the sync."""
    b = TraceBuilder()
    step_us = 2000
    for s in range(steps):
        t0 = s * step_us
        b.step(s, t0, step_us)
        for k in range(50):
            b.launch("ampere_sgemm_128x64_nn", t0 + 10 * k, t0 + 20 + 30 * k, 30.0,
                     op="aten::mm", launch_dur=8.0)
        b.runtime("cudaStreamSynchronize", t0 + 510, 1015)
        for j in range(100):
            b.op("aten::add", t0 + 1530 + 4 * j, 3.0)
    return b.to_bytes()


def test_a_step_measured_on_the_gpus_floor_keeps_the_prior() -> None:
    """The measured step 0.5% above what the prior replays, the GPU busier than the host: no scale
    fitted along the floor (a fit takes 1.27 there); the prior stands."""
    trace = parse(_gpu_bound())
    graph = build(trace, segment(trace))
    prior = 1.3
    at_prior = replay(graph, without_profiler(graph, prior))
    fitted = unprofiled(graph, at_prior.step_ns * 1.005, prior=prior)
    assert fitted.source == FROM_PRIOR and fitted.scale == prior
    assert fitted.replayed.step_ns == pytest.approx(at_prior.step_ns)
