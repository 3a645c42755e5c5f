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

import numpy as np
import pytest
from synth import TraceBuilder

from gpudoctor.analysis.host_events import setup_calls
from gpudoctor.analysis.idle import idle_causes
from gpudoctor.analysis.steps import segment
from gpudoctor.pipeline import analyze_loaded, analyze_path
from gpudoctor.trace import load, parse

DATA = Path(__file__).parent / "data" / "twins_h100"


def _actionable(report):  # type: ignore[no-untyped-def]
    return [f for f in report.findings if f.severity != "info"]


def test_cudnn_attention_on_a_new_length_every_step_is_dynamic_shapes() -> None:
    report = analyze_loaded(
        load(DATA / "empty_cache_varlen" / "trace.json.gz"), unprofiled_step_ms=184.1634
    )
    top = _actionable(report)[0]
    assert top.id == "dynamic-shapes"
    assert report.idle["op-setup"] == pytest.approx(171.676, abs=1e-3)
    assert top.saving_ms == pytest.approx(165.878, abs=1e-3)
    # replayed with each setup call at its operator's median call on a known shape: x9.36 against
    # x8.58 measured (the formula read x13.54: it left a 13.6 ms step, the fixed twin ran 19.3 ms)
    assert top.evidence.numbers["priced_by"] == "replay"
    assert top.predicted_speedup == pytest.approx(10.072, abs=1e-3)
    # cuDNN attention builds its plan on the host and tries no kernels: nothing to add
    assert top.evidence.numbers["trial_kernel_ms_per_step"] == 0.0
    assert "aten::_cudnn_attention_forward" in top.evidence.ops
    assert any("sdpa_kernel" in fix.code for fix in top.fixes)
    # the bucket written from the lengths the attention saw in the window's five steps (128 to
    # 955 tokens: multiples of 128, the program's own fix, leave 8 sizes)
    assert top.fixes[0].code.startswith(
        "L = -(-L // 128) * 128   # 5 sizes seen, 128 to 955: 8 buckets at most"
    )
    # a CUDA graph is not the fix: launch-bound no longer claims the setup's idle
    assert "launch-bound" not in [f.id for f in _actionable(report)[:1]]


def test_augmenting_on_the_cpu_in_the_loop_is_host_work_not_the_copy() -> None:
    report = analyze_loaded(
        load(DATA / "cpu_augment_loop" / "trace.json.gz"), unprofiled_step_ms=42.0385
    )
    top = _actionable(report)[0]
    assert top.id == "host-blocking-work"
    assert report.idle["host-work"] == pytest.approx(32.4107, abs=1e-3)
    assert report.idle["pageable-copy"] == pytest.approx(1.2243, abs=1e-3)
    # the per-sample crops' slices and each result's allocation sit among the CPU operators: the
    # region the fix removes is the whole augmentation (32.77 ms a step profiled; it held a fifth of
    # it while those views cut it up: x1.17). x4.15 against x6.40 measured; the rest is the
    # batch's pageable copy, which the fix also removes (pageable-copy's own finding). The profiled
    # step replays within 2% of the measured one, so the profiler's cost keeps its prior
    # (replay/observer.py PRIOR_SCALE)
    assert top.evidence.numbers["host_work_span_idle_ms_per_step"] == pytest.approx(32.769)
    # the work is the crops' operators on CPU tensors: named, and the data fix comes first
    assert top.evidence.numbers["host_only_operator_ms_per_step"] > 0.5 * 32.769
    assert top.evidence.ops[:3] == ("aten::div", "aten::stack", "aten::to")
    assert "torch operators on CPU tensors (aten::div" in top.summary
    assert top.fixes[0].title.startswith("Prepare the data in DataLoader worker processes")
    assert top.predicted_speedup == pytest.approx(4.1175, abs=1e-3)
    assert top.evidence.numbers["saving_by_formula_ms"] == pytest.approx(29.6335, abs=1e-3)


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
    # allocations and syncs inside it; a call that waits on CUDA events inside itself (the
    # autotuner timing its trials: 10 waits a forward, 20 a backward) is setup too, so the first
    # layer's convolutions, whose trials were GPU-heavy, count: 16.4 setup calls a step, not 14.4.
    # The runner's "measured" x12.25 (2555.8 -> 208.7 ms, medians of printed 5-step means) holds
    # the fixed twin's first meetings with its buckets: its 5-step means were 1788.7, 11.4,
    # 771.6, 10.5 and 406.0 ms, the steps that met no new bucket 10.5-11.4 ms.
    report = analyze_path(DATA / "multiscale_cudnn_benchmark")
    top = _actionable(report)[0]
    assert top.id == "dynamic-shapes"
    assert report.idle["op-setup"] == pytest.approx(1062.067, abs=1e-3)
    assert top.evidence.numbers["setup_calls_per_step"] == 16.4
    # the autotuner's trial kernels go with the setup: 80.5 ms of GPU time a step
    assert top.evidence.numbers["trial_kernel_ms_per_step"] == pytest.approx(80.546, abs=1e-3)
    # replayed with the setup calls at their typical time and the trial kernels (those launched
    # before a call's last timing wait) gone: against the unprofiled 1082.2 ms step it leaves
    # 11.2 ms, x96.6 (the steps that met no new bucket: 10.5-11.4 ms). The formula left 18.1 ms
    # (x59.8), and 97.7 ms (x11.08) when the trials stayed in the step
    assert top.evidence.numbers["priced_by"] == "replay"
    assert top.predicted_speedup == pytest.approx(97.103, abs=1e-3)
    assert any("cudnn.benchmark = False" in fix.code for fix in top.fixes)
    assert not any("sdpa_kernel" in fix.code for fix in top.fixes)


def _autotuned_steps(waits: int) -> TraceBuilder:
    """5 steps, each a convolution on a new size whose call launches 8 trial runs of one kernel
    (400 us each), waiting on an event after each of the first ``waits``, over 4 ms of host time."""
    t, ts = TraceBuilder(), 0.0
    for n in range(5):
        t.step(n, ts, 5000)
        t.op("aten::cudnn_convolution", ts + 10, 4000, dims=[[16, 64, 100 + 8 * n, 100 + 8 * n]])
        for k in range(8):
            at = ts + 20 + 450 * k
            corr = t.runtime("cudaLaunchKernel", at, 5)
            t.kernel("sm90_xmma_fprop_implicit_gemm_bf16", at + 10, 400, corr)
            if k < waits:
                t.runtime("cudaEventSynchronize", at + 20, 400)
        ts += 5000
    return t


def test_an_operator_timing_its_own_kernels_is_setup() -> None:
    # GPU-heavy trials (3.2 ms of GPU in a 4 ms call): not 5 times its GPU time on the host, yet
    # 8 event waits inside one call are an autotuner's
    timed = parse(_autotuned_steps(waits=8).to_bytes())
    assert setup_calls(timed, segment(timed)).sum() == 5
    untimed = parse(_autotuned_steps(waits=0).to_bytes())
    assert setup_calls(untimed, segment(untimed)).sum() == 0


def test_the_trial_kernels_are_priced_with_the_setup() -> None:
    from gpudoctor.analysis import analyze_trace
    from gpudoctor.hardware.ceilings import for_gpu_name
    from gpudoctor.rules.dynamic_shapes import check

    f = check(analyze_trace(parse(_autotuned_steps(waits=8).to_bytes()), for_gpu_name("h100-sxm")))
    # 8 runs of 400 us: one is the convolution's own work, 7 are trials
    assert f.evidence.numbers["trial_kernel_ms_per_step"] == pytest.approx(2.8, abs=1e-6)
    assert f.saving_ms == pytest.approx(
        f.evidence.numbers["gpu_idle_behind_setup_ms_per_step"] + 2.8, abs=1e-3
    )
    assert f.idle_ms == pytest.approx(
        f.evidence.numbers["gpu_idle_behind_setup_ms_per_step"], abs=1e-3
    )


def test_the_edit_keeps_the_run_after_the_last_timing_wait() -> None:
    from gpudoctor.analysis import analyze_trace
    from gpudoctor.hardware.ceilings import for_gpu_name
    from gpudoctor.rules.dynamic_shapes import check, edit

    trace = parse(_autotuned_steps(waits=7).to_bytes())
    a = analyze_trace(trace, for_gpu_name("h100-sxm"))
    e = edit(a, check(a))
    # 7 timed trials a step go, the 8th run (after the last wait) is the convolution's own work
    assert e.device_removed.size == 35
    kept = np.setdiff1d(np.arange(len(trace.device)), e.device_removed)
    assert (trace.device.ts[kept] % 5_000_000 == 3_180_000).all()  # the 8th launch: +3170 us, +10
    # every call of the operator set up (no typical call): its whole host time goes, its waits too
    assert (e.host_removed_e - e.host_removed_s == 4_000_000).all() and e.host_removed_s.size == 5
    assert e.unwait.size == 5 * (8 + 7)


def test_images_of_a_new_size_each_step_are_bucketed_from_the_sizes_seen() -> None:
    """multiscale_cudnn_benchmark: the stem convolution's input is [32, 3, S, S], S a multiple of
    4 between 320 and 640; the window's five steps drew 472 to 616. The first forward convolution
    of each step (not the backward's, which starts from the last layer's 15 x 15) says so."""
    report = analyze_loaded(load(DATA / "multiscale_cudnn_benchmark" / "trace.json.gz"))
    f = report.finding("dynamic-shapes")
    assert f.fixes[0].code.splitlines() == [
        "size = -(-size // 32) * 32   # 5 sizes seen, 472 to 616 px: 7 buckets at most",
        "x = F.interpolate(x, size=(size, size))",
    ]


def test_without_recorded_shapes_the_bucket_is_a_letter() -> None:
    from gpudoctor.rules.dynamic_shapes import varying_sizes

    trace = load(DATA / "multiscale_cudnn_benchmark" / "trace.json.gz")
    none = np.empty(0, np.int64)
    assert varying_sizes(trace, none) is None


def _setup_calls(dims: list) -> tuple:  # type: ignore[type-arg]
    """One attention operator call per entry of ``dims`` (its recorded input shapes)."""
    t = TraceBuilder()
    for k, d in enumerate(dims):
        t.op("aten::_cudnn_attention_forward", k * 100.0, 50.0, dims=d)
    trace = parse(t.to_bytes())
    return trace, np.arange(len(dims), dtype=np.int64)


def test_varying_sizes_reads_the_dimensions_that_change_and_nothing_else() -> None:
    from gpudoctor.rules.dynamic_shapes import varying_sizes

    lengths = [[[8, 4, n, 64], [8, 4, n, 64]] for n in (100, 300, 300, 770)]
    assert varying_sizes(*_setup_calls(lengths)) == (100, 770, 3)
    # one call, the same shape every call, shapes of another rank, a scalar first input: no size
    assert varying_sizes(*_setup_calls(lengths[:1])) is None
    assert varying_sizes(*_setup_calls([lengths[0]] * 3)) is None
    assert varying_sizes(*_setup_calls([[[8, 4, 100, 64]], [[8, 100, 64]]])) is None
    assert varying_sizes(*_setup_calls([[[]], [[]]])) is None
