"""optimizer-loop under ``optimizer.step(closure)`` (Lightning, LBFGS): the closure's forward and
backward run inside the ``Optimizer.step#`` annotation, and only the optimizer's own kernels and
host time are priced.

The synthetic step mirrors a real one (recorded on the CPU with torch.profiler, torch 2.13): inside
``Optimizer.step#AdamW.step`` come ``Optimizer.zero_grad#...``, the forward's ops on the main thread,
then the backward as ``autograd::engine::evaluate_function: ...`` ops (on the autograd thread on a
GPU, tid 200 here), then the optimizer's own ops on the main thread. Times in microseconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from synth import TraceBuilder

from gpudoctor.analysis import Analysis, analyze_trace
from gpudoctor.hardware.ceilings import for_gpu_name
from gpudoctor.rules import optimizer_loop
from gpudoctor.trace import load, parse

STEP_US = 20_000
MULTI_TENSOR = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::TensorListMetadata<4>>"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
MM = [[1024, 1024], [1024, 1024]]  # bf16: 6 MiB a GEMM, which the closure's kernels must not add
MUL = [[262144], [262144]]  # bf16: read two, write one, 1,572,864 bytes a kernel


def _closure(t: TraceBuilder, base: int) -> None:
    """zero_grad, 40 forward kernels (GPU 250-648), 40 backward kernels on the autograd thread
    (host ends at 997, GPU drains at 1495)."""
    t.annotation("Optimizer.zero_grad#AdamW.zero_grad", base + 110, 20)
    for i in range(40):
        t.launch("gemm_fwd", base + 200 + 8 * i, base + 250 + 10 * i, 8, op="aten::mm", dims=MM)
    for i in range(40):
        host = base + 600 + 10 * i
        t.op("autograd::engine::evaluate_function: MmBackward0", host - 1, 8, tid=200)
        t.launch("gemm_bwd", host, base + 700 + 20 * i, 15, op="aten::mm", dims=MM, tid=200)


def _trace(foreach: bool, steps: int = 3, shapes: bool = True) -> TraceBuilder:
    t = TraceBuilder()
    for k in range(steps):
        base = k * STEP_US
        t.step(k, base, STEP_US)
        t.annotation("Optimizer.step#AdamW.step", base + 100, 4100)  # host 100-4200
        _closure(t, base)
        if foreach:  # 5 multi-tensor kernels
            for i in range(5):
                t.launch(
                    MULTI_TENSOR,
                    base + 1100 + 30 * i,
                    base + 1510 + 30 * i,
                    40,
                    op="aten::_foreach_mul_",
                )
        else:  # a for-loop AdamW: 100 tiny kernels, launched 30 us apart, each 8 us on the GPU (last ends 4488)
            for i in range(100):
                t.launch(
                    ELEMENTWISE,
                    base + 1100 + 30 * i,
                    base + 1510 + 30 * i,
                    8,
                    op="aten::mul_",
                    dims=MUL if shapes else None,
                )
    return t


def _analysis(foreach: bool) -> Analysis:
    return analyze_trace(parse(_trace(foreach).to_bytes()), for_gpu_name("h100-sxm"))


def test_closure_with_foreach_adamw_is_not_an_optimizer_loop() -> None:
    # 85 kernels per step inside the annotation, 80 of them the closure's: before the fix this was
    # a critical optimizer-loop finding on a healthy multi-tensor step
    assert optimizer_loop.check(_analysis(foreach=True)) is None


def test_closure_with_a_for_loop_adamw_prices_only_the_optimizer() -> None:
    a = _analysis(foreach=False)
    finding = optimizer_loop.check(a)
    assert finding is not None
    numbers = finding.evidence.numbers
    assert numbers["optimizer_kernels_per_step"] == 100.0  # not 180: the closure's 80 are left out
    assert numbers["optimizer_kernel_ms_per_step"] == pytest.approx(0.800)  # 100 x 8 us
    # from the closure's last GPU kernel (1495; the host left the closure at 997) to the end of the
    # optimizer's last kernel (4488), not from the annotation's start (100)
    assert numbers["optimizer_span_ms_per_step"] == pytest.approx(2.993)
    # one fused pass over 100 x 1,572,864 bytes / LOOP_TRAFFIC_FACTOR (3) at 3.35 TB/s: 0.01565 ms
    assert numbers["fused_estimate_ms_per_step"] == pytest.approx(0.016)
    assert finding.saving_ms == pytest.approx(2.993 - 100 * 1_572_864 / 3 / 3.35e12 * 1e3, rel=1e-9)
    assert not any(k.startswith("gemm") for k in finding.evidence.kernels)


def test_a_loop_whose_sizes_the_trace_lacks_is_priced_at_a_third_of_its_kernels_time() -> None:
    """Recorded without shapes, the loop's bytes are unknown: the fused step is taken at a third of
    its kernels' time (what it takes at most), and the finding says so, not "about 0.00 ms"."""
    trace = parse(_trace(foreach=False, shapes=False).to_bytes())
    finding = optimizer_loop.check(analyze_trace(trace, for_gpu_name("h100-sxm")))
    assert finding is not None
    # 100 kernels of 8 us, a third of their time
    assert finding.evidence.numbers["fused_estimate_ms_per_step"] == pytest.approx(0.267)
    assert finding.saving_ms == pytest.approx(2.993 - 0.8 / 3, rel=1e-9)
    assert "takes at most about 0.27 ms (the trace records no tensor sizes" in finding.summary
    assert "0.00 ms" not in finding.summary


def test_without_a_closure_the_region_starts_at_the_annotation() -> None:
    t = TraceBuilder()
    for k in range(3):
        base = k * STEP_US
        t.step(k, base, STEP_US)
        for i in range(40):
            t.launch("gemm_fwd", base + 200 + 8 * i, base + 250 + 10 * i, 8, op="aten::mm")
        t.annotation("Optimizer.step#AdamW.step", base + 1000, 3200)  # host 1000-4200
        for i in range(100):
            t.launch(ELEMENTWISE, base + 1100 + 30 * i, base + 1510 + 30 * i, 8, op="aten::mul_")
    finding = optimizer_loop.check(analyze_trace(parse(t.to_bytes()), for_gpu_name("h100-sxm")))
    assert finding is not None
    assert finding.evidence.numbers["optimizer_kernels_per_step"] == 100.0
    assert finding.evidence.numbers["optimizer_span_ms_per_step"] == pytest.approx(
        3.488
    )  # 1000 -> 4488


# Real Lightning traces (scripts/record_lightning_closure.py: H100, torch 2.11, Lightning 2.6.6,
# bf16-mixed 8 x Linear(2048) MLP, batch 512, recorded through GpuDoctorCallback(skip=5, steps=3)).
# The backward runs on the autograd thread inside Optimizer.step#AdamW.step. Before the fix the
# healthy foreach step was told "optimizer-loop critical, save 7.10 ms" of an 8.23 ms step.
DATA = Path(__file__).parent / "data"


def _real(name: str) -> Analysis:
    return analyze_trace(load(DATA / name / "trace.json.gz"), for_gpu_name("h100-sxm"))


def test_real_lightning_foreach_step_is_healthy() -> None:
    assert optimizer_loop.check(_real("lightning_closure")) is None


def test_real_lightning_for_loop_step_is_priced_on_the_optimizer_alone() -> None:
    finding = optimizer_loop.check(_real("lightning_closure_loop"))
    assert finding is not None and finding.severity == "critical"
    numbers = finding.evidence.numbers
    # 16 parameters x 8 kernels; before the fix 221 (the closure's forward and backward included)
    assert numbers["optimizer_kernels_per_step"] == 128.0
    assert numbers["optimizer_span_ms_per_step"] == pytest.approx(3.222)  # was 9.624
    # predicted 2.94 ms/step; measured (profiled steps): 10.490 for-loop - 8.233 foreach = 2.26 ms
    assert finding.saving_ms == pytest.approx(2.941, abs=5e-4)  # was 9.259


@pytest.mark.parametrize(
    ("cls", "first"),
    [
        ("SGD", "opt = torch.optim.SGD(params, lr=lr, fused=True)"),
        ("RMSprop", "opt = torch.optim.RMSprop(params, lr=lr, foreach=True)"),
        ("Lion", "@torch.compile(fullgraph=False)\ndef opt_step():\n    opt.step()"),
    ],
)
def test_the_fix_names_the_programs_own_optimizer(cls: str, first: str) -> None:
    """The fused or multi-tensor step of the optimizer the trace names (``Optimizer.step#<class>``),
    not an AdamW the program does not use; one torch.optim has no such step for is compiled."""
    data = _trace(foreach=False).to_bytes().replace(b"AdamW", cls.encode())
    finding = optimizer_loop.check(analyze_trace(parse(data), for_gpu_name("h100-sxm")))
    assert finding is not None
    assert finding.fixes[0].code == first
    assert all("AdamW" not in f.code for f in finding.fixes)
