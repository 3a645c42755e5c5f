"""Idle attribution on a hand-built step whose every gap has a known cause."""

from __future__ import annotations

import pytest
from synth import TraceBuilder

from gpudoctor.analysis.idle import idle_causes
from gpudoctor.analysis.steps import segment
from gpudoctor.trace import parse


def _scenario() -> TraceBuilder:
    t = TraceBuilder()
    t.step(0, 0, 3000)
    t.launch("ampere_bf16_s16816gemm_bf16_128x128", 10, 20, 200, op="aten::mm")  # GPU 20-220
    t.op("aten::item", 30, 210)  # host blocked 30-240 while the GPU drains
    t.runtime("cudaStreamSynchronize", 40, 198)
    t.launch("ampere_bf16_s16816gemm_bf16_128x128", 260, 270, 100, op="aten::mm")  # GPU 270-370
    t.annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 300, 280)
    t.launch(
        "void at::native::vectorized_elementwise_kernel<4>", 590, 600, 300, op="aten::add"
    )  # 600-900
    t.python("train.py(88): save_log", 905, 2000)  # host work, no ops, 905-2905
    return t


def test_each_gap_gets_its_cause() -> None:
    trace = parse(_scenario().to_bytes())
    idle = idle_causes(trace, segment(trace))
    assert idle.idle_ms == pytest.approx(2.400)
    # the gap after the sync (50 us), plus dispatch idle the host would have hidden had it not
    # waited 210 us in aten::item (the 20 us before the first kernel)
    assert idle.ms("host-sync") == pytest.approx(0.070)
    assert idle.ms("input-pipeline") == pytest.approx(0.230)
    assert idle.ms("host-work") == pytest.approx(2.100)
    assert idle.ms("dispatch") == pytest.approx(0.0)
    assert sum(idle.by_cause_ms.values()) == pytest.approx(idle.idle_ms)


def test_a_kernel_queued_before_the_gap_is_gpu_wait() -> None:
    t = TraceBuilder()
    t.step(0, 0, 500)
    t.launch("gemm_a", 1, 10, 100, op="aten::mm")  # GPU 10-110
    corr = t.runtime("cudaLaunchKernel", 20, 4)  # launched at 24, but starts at 300
    t.kernel("gemm_b", 300, 100, corr, stream=9)
    trace = parse(t.to_bytes())
    idle = idle_causes(trace, segment(trace))
    assert idle.ms("gpu-wait") == pytest.approx(0.190)  # 110 -> 300


def test_sync_on_the_autograd_thread_counts() -> None:
    t = TraceBuilder()
    t.step(0, 0, 400)
    t.launch("gemm", 5, 10, 100, op="aten::mm")
    t.launch("gemm", 50, 60, 100, op="aten::mm", tid=200)  # backward thread, GPU 60-160
    t.op("aten::_local_scalar_dense", 70, 150, tid=200)  # 70-220 waits on the GPU
    t.runtime("cudaStreamSynchronize", 72, 146, tid=200)
    t.launch("gemm", 230, 250, 100, op="aten::mm", tid=200)  # GPU 250-350
    trace = parse(t.to_bytes())
    idle = idle_causes(trace, segment(trace))
    # 160 -> 250 after the sync, plus the remaining 60 us of dispatch idle (blocked 150 us)
    assert idle.ms("host-sync") == pytest.approx(0.150)


def _between_launches(ops: list[tuple[str, float]]) -> TraceBuilder:
    """One step: a kernel, then ``ops`` back to back on the host from 100 us (name, us each, no
    CUDA call inside), then the next kernel's launch."""
    t = TraceBuilder()
    t.launch("ampere_bf16_s16816gemm_bf16_128x128", 10, 20, 50, op="aten::mm")  # GPU 20-70
    ts = 100.0
    for name, dur in ops:
        t.op(name, ts, dur)
        ts += dur + 1.0
    t.launch("ampere_bf16_s16816gemm_bf16_128x128", ts + 5, ts + 10, 50, op="aten::mm")
    t.step(0, 0, ts + 100)
    return t


def test_views_among_cpu_operators_are_host_work() -> None:
    """A batch augmented on the CPU in the loop: each sample's crop is a view (aten::slice) between
    its flip and normalisation on CPU tensors; the views do not cut the augmentation into pieces
    under HOST_WORK_MIN_NS."""
    sample = [("aten::slice", 5.0), ("aten::flip", 30.0), ("aten::div", 30.0), ("aten::sub", 30.0)]
    trace = parse(_between_launches(sample * 20).to_bytes())
    idle = idle_causes(trace, segment(trace))
    s, e = idle.labels["host-work"]
    # from the first launch's operator (ends at 16 us) to the next one's (at 2085 us)
    assert s.size == 1 and (e - s).sum() / 1e3 == pytest.approx(2085.0 - 16.0)
    assert idle.ms("host-work") > 1.9 and idle.ms("dispatch") < 0.1


def test_views_alone_stay_dispatch() -> None:
    """Views and autograd's bookkeeping with nothing computed on the host between them (a backward
    narrowing each gradient of a cat) launch nothing and do no host work: dispatch."""
    views = [("aten::narrow", 10.0), ("aten::slice", 10.0), ("aten::as_strided", 10.0)]
    trace = parse(_between_launches(views * 60).to_bytes())
    idle = idle_causes(trace, segment(trace))
    assert idle.ms("host-work") == 0.0
    assert idle.ms("dispatch") > 1.9
