"""Per-shape operator setup (the dynamic-shapes finding, the op-setup idle cause) and host
computation in CPU-only operators (host-work), on real H100 traces of twin programs and on
hand-built edge cases.

The two real traces are ``gpudoctor run --skip 5 --steps 5`` of tests/programs/twins/
empty_cache_varlen.py and cpu_augment_loop.py (H100, torch 2.11, 2026-11-25,
benchmarks/results/twins-h100-2026-11-25-e.json, whose env.json did not come back: the unprofiled
step below is the one that run recorded). Measured with --fixed on the same machine minutes apart:
x8.58 (165.58 -> 19.29 ms) and x6.40 (42.30 -> 6.61 ms).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from synth import TraceBuilder

from gpudoctor.analysis.idle import idle_causes, setup_calls
from gpudoctor.analysis.steps import segment
from gpudoctor.pipeline import analyze_loaded, analyze_path
from gpudoctor.trace import load, parse

DATA = Path(__file__).parent / "data" / "twins_h100"


def _actionable(report):  # type: ignore[no-untyped-def]
    return [f for f in report.findings if f.severity != "info"]


def test_cudnn_attention_on_a_new_length_every_step_is_dynamic_shapes() -> None:
    report = analyze_loaded(load(DATA / "empty_cache_varlen" / "trace.json.gz"), unprofiled_step_ms=184.1634)
    top = _actionable(report)[0]
    assert top.id == "dynamic-shapes"
    assert report.idle["op-setup"] == pytest.approx(171.676, abs=1e-3)
    assert top.saving_ms == pytest.approx(170.560, abs=1e-3)
    # x13.54 against x8.58 measured (1.58, outside the 0.67-1.5 band): the doctor leaves a
    # 13.6 ms step, the fixed twin ran 19.3 ms (11% more tokens from the padding, its own launches)
    assert top.predicted_speedup == pytest.approx(13.538, abs=1e-3)
    assert "aten::_cudnn_attention_forward" in top.evidence.ops
    assert any("sdpa_kernel" in fix.code for fix in top.fixes)
    assert any("// 128" in fix.code for fix in top.fixes)
    # a CUDA graph is not the fix: launch-bound no longer claims the setup's idle
    assert "launch-bound" not in [f.id for f in _actionable(report)[:1]]


def test_augmenting_on_the_cpu_in_the_loop_is_host_work_not_the_copy() -> None:
    report = analyze_loaded(load(DATA / "cpu_augment_loop" / "trace.json.gz"), unprofiled_step_ms=42.0385)
    top = _actionable(report)[0]
    assert top.id == "host-blocking-work"
    assert report.idle["host-work"] == pytest.approx(32.4107, abs=1e-3)
    assert report.idle["pageable-copy"] == pytest.approx(1.2243, abs=1e-3)
    assert 0.67 <= top.predicted_speedup / 6.3994 <= 1.5


def _steps_with_attention(lengths: list[int], first_call_us: float = 5000.0) -> TraceBuilder:
    """Steps of 2 attention calls each; the first call of a step takes ``first_call_us`` on the
    host when its length differs from the previous steps'."""
    t, ts, seen = TraceBuilder(), 0.0, set()
    for n, length in enumerate(lengths):
        setup = first_call_us if length not in seen else 20.0
        seen.add(length)
        t.step(n, ts, setup + 400)
        t.op("aten::_cudnn_attention_forward", ts + 1, setup, dims=[[8, 8, length, 64]])
        corr = t.runtime("cudaLaunchKernel", ts + setup - 5, 4)
        t.kernel("cudnn_attention_fprop", ts + setup, 50, corr)
        t.op("aten::_cudnn_attention_forward", ts + setup + 100, 20, dims=[[8, 8, length, 64]])
        corr = t.runtime("cudaLaunchKernel", ts + setup + 110, 4)
        t.kernel("cudnn_attention_fprop", ts + setup + 120, 50, corr)
        ts += setup + 400
    return t


def test_a_new_shape_every_step_is_setup() -> None:
    trace = parse(_steps_with_attention([100, 200, 300, 400, 500]).to_bytes())
    steps = segment(trace)
    assert setup_calls(trace, steps).sum() == 5
    assert idle_causes(trace, steps).ms("op-setup") == pytest.approx(5.0, abs=0.01)


def test_the_same_shape_every_step_is_not_setup() -> None:
    # the first step builds the plan once; the others reuse it
    trace = parse(_steps_with_attention([100, 100, 100, 100, 100]).to_bytes())
    assert setup_calls(trace, segment(trace)).sum() == 0


def test_one_slow_call_in_the_window_is_not_setup() -> None:
    trace = parse(_steps_with_attention([100, 200, 200, 200, 200, 200]).to_bytes())
    assert setup_calls(trace, segment(trace)).sum() == 0


def _host_work_ms(op: str) -> float:
    """Host-work idle of a step whose GPU waits 2.5 ms while the host runs 100 calls of ``op``
    that launch nothing."""
    t = TraceBuilder()
    t.step(0, 0, 3000)
    t.launch("ampere_bf16_s16816gemm_bf16_128x128", 10, 20, 100, op="aten::mm")
    for k in range(100):
        t.op(op, 200 + 25 * k, 20)
    t.launch("ampere_bf16_s16816gemm_bf16_128x128", 2800, 2810, 100, op="aten::mm")
    trace = parse(t.to_bytes())
    return idle_causes(trace, segment(trace)).ms("host-work")


def test_views_on_gpu_tensors_are_not_host_work() -> None:
    # autograd's bookkeeping (views, AccumulateGrad) launches nothing but is not host computation
    assert _host_work_ms("aten::narrow") == 0.0
    assert _host_work_ms("torch::autograd::AccumulateGrad") == 0.0
    # the same time in CPU arithmetic is
    assert _host_work_ms("aten::div") > 2.0


def test_cudnn_autotuning_on_a_new_size_every_step_is_dynamic_shapes() -> None:
    # multiscale_cudnn_benchmark (its bundle, env.json included): on its first run this program
    # was told allocator-churn (x2.66) and host-sync: every convolution was a setup call, so no
    # quartile of its calls was typical and the autotuner's cudaMalloc / syncs took the idle. The
    # detector now also compares a call with the GPU time it launched, and the setup owns the
    # allocations and syncs inside it. Measured: x12.25 (2555.8 -> 208.7 ms).
    report = analyze_path(DATA / "multiscale_cudnn_benchmark")
    top = _actionable(report)[0]
    assert top.id == "dynamic-shapes"
    assert report.idle["op-setup"] == pytest.approx(1050.623, abs=1e-3)
    assert top.predicted_speedup == pytest.approx(11.078, abs=1e-3)
    assert any("cudnn.benchmark = False" in fix.code for fix in top.fixes)
    assert not any("sdpa_kernel" in fix.code for fix in top.fixes)
