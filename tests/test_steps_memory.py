"""Step segmentation and the memory analysis on hand-built traces."""

from __future__ import annotations

import numpy as np
import pytest
from synth import TraceBuilder

from gpudoctor.analysis import analyze_trace
from gpudoctor.analysis.memory import memory
from gpudoctor.analysis.steps import segment
from gpudoctor.hardware.ceilings import for_gpu_name
from gpudoctor.trace import parse


def test_optimizer_annotations_delimit_steps_without_profiler_steps() -> None:
    t = TraceBuilder()
    for s in range(3):
        base = s * 100
        t.launch("gemm", base + 1, base + 5, 50, op="aten::mm")
        t.annotation("Optimizer.step#AdamW.step", base + 60, 30)
    steps = segment(parse(t.to_bytes()))
    assert steps.method == "optimizer-step"
    assert len(steps) == 3
    assert np.diff(steps.host_end).tolist() == [100_000, 100_000]  # one optimizer step apart


def test_no_markers_means_one_step_and_a_warning() -> None:
    t = TraceBuilder()
    t.launch("gemm", 1, 5, 50, op="aten::mm")
    a = analyze_trace(parse(t.to_bytes()), for_gpu_name("h100-sxm"))
    assert a.steps.method == "whole-trace" and len(a.steps) == 1
    assert any("whole trace" in w for w in a.warnings)


def test_gpu_bound_steps_follow_the_gpu() -> None:
    """The host queues three steps in 30 us; the GPU needs 100 us for each."""
    t = TraceBuilder()
    for s in range(3):
        t.step(s, s * 10, 10)
        t.launch("gemm", s * 10 + 1, 20 + s * 100, 100, op="aten::mm")
    steps = segment(parse(t.to_bytes()))
    assert (steps.end - steps.start).tolist() == [120_000, 100_000, 100_000]


def test_memory_peaks_churn_and_fragmentation() -> None:
    t = TraceBuilder()
    t.step(0, 0, 100)
    t.launch("gemm", 1, 2, 10, op="aten::mm")
    t.memory(10, 4 << 30, 4 << 30, 8 << 30)
    t.memory(20, 2 << 30, 6 << 30, 8 << 30)
    t.memory(30, -(6 << 30), 0, 8 << 30)
    t.runtime("cudaMalloc", 40, 30)
    t.runtime("cudaFree", 75, 10)
    trace = parse(t.to_bytes())
    m = memory(trace, segment(trace))
    assert m.applicable
    assert m.peak_allocated_bytes == 6 << 30 and m.peak_reserved_bytes == 8 << 30
    assert m.fragmentation == pytest.approx(0.5)  # 4 of 8 GiB allocated when reserved first peaked
    assert m.allocations_per_step == 2 and m.allocated_bytes_per_step == 6 << 30
    assert m.malloc_calls_per_step == 2 and m.malloc_ms_per_step == pytest.approx(0.040)
    assert m.peak_reserved_fraction == pytest.approx((8 << 30) / 85_045_624_832)


def test_memory_without_memory_events_is_not_applicable() -> None:
    t = TraceBuilder()
    t.step(0, 0, 100)
    t.launch("gemm", 1, 2, 10, op="aten::mm")
    a = analyze_trace(parse(t.to_bytes()), for_gpu_name("h100-sxm"))
    assert "memory" in a.not_applicable and "profile_memory=True" in a.not_applicable["memory"]
    assert np.isfinite(a.roofline.mfu)
