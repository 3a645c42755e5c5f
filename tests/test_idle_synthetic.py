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
    t.launch("gemm", 230, 250, 100, op="aten::mm", tid=200)  # GPU 250-350
    trace = parse(t.to_bytes())
    idle = idle_causes(trace, segment(trace))
    # 160 -> 250 after the sync, plus the remaining 60 us of dispatch idle (blocked 150 us)
    assert idle.ms("host-sync") == pytest.approx(0.150)
