"""host-sync on a hand-built step: where the host holds the step back, the reads and the checks
computed only for them are the saving; where the GPU is busy, the idle after each sync is."""

from __future__ import annotations

import pytest
from synth import TraceBuilder

from gpudoctor.analysis import analyze_trace
from gpudoctor.core.finding import HOST_WORK_REMOVED
from gpudoctor.hardware.ceilings import for_gpu_name
from gpudoctor.rules.host_sync import check
from gpudoctor.trace import parse

ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"


def _steps(kernel_us: float) -> TraceBuilder:
    """3 steps of 1 ms: 8 layers, each an add (40 us of host) then abs -> amax -> item (a 30 us
    check and a 50 us read, 10 us of which waits in cudaStreamSynchronize)."""
    t = TraceBuilder()
    for s in range(3):
        base = s * 1000
        t.step(s, base, 1000)
        ts = base + 10
        for _ in range(8):
            t.launch(
                ADD, ts, ts + 5, kernel_us, op="aten::add", dims=[[64, 64], [64, 64]], launch_dur=34
            )
            t.launch(
                "abs_kernel", ts + 45, ts + 50, 1, op="aten::abs", dims=[[64, 64]], launch_dur=9
            )
            t.launch(
                "reduce_kernel",
                ts + 60,
                ts + 65,
                1,
                op="aten::amax",
                dims=[[64, 64], []],
                launch_dur=9,
            )
            t.op("aten::item", ts + 75, 50, dims=[[]])
            t.runtime("cudaStreamSynchronize", ts + 110, 10)
            ts += 125
    return t


def _finding(kernel_us: float):  # type: ignore[no-untyped-def]
    return check(analyze_trace(parse(_steps(kernel_us).to_bytes()), for_gpu_name("h100-sxm")))


def test_on_a_host_bound_step_the_reads_and_their_checks_are_the_saving() -> None:
    f = _finding(kernel_us=2)
    assert f.evidence.numbers["syncs_per_step"] == 8
    assert f.evidence.numbers["check_ops_per_step"] == 16
    # 8 x (abs start -> item end: 75 + 50 - 45 = 80 us, less the 10 us wait) = 0.56 ms
    assert f.evidence.numbers[HOST_WORK_REMOVED] == pytest.approx(0.56, abs=1e-6)
    assert f.saving_ms == pytest.approx(0.56, abs=1e-6)


def test_on_a_busy_gpu_the_idle_after_the_syncs_is_the_saving() -> None:
    f = _finding(kernel_us=110)
    assert HOST_WORK_REMOVED not in f.evidence.numbers
    assert f.saving_ms == pytest.approx(
        f.evidence.numbers["gpu_idle_after_syncs_ms_per_step"], abs=1e-3
    )


def test_uploads_and_autotuning_are_not_reads() -> None:
    """Real H100 twins (tests/data/twins_h100): uploads from pageable memory sync too, and an
    autotuner waits on its trial kernels; neither is a value read back for the program, so
    host-sync keeps the GPU idle after them (the pageable_h2d twin's 10 `.to(device)` a step
    would otherwise have been priced at 8.7 ms, the multiscale twin's 41 convolutions at 686 ms)."""
    from pathlib import Path

    from gpudoctor.pipeline import analyze_path

    data = Path(__file__).parent / "data" / "twins_h100"
    for name, idle in (("pageable_h2d", 0.558), ("multiscale_cudnn_benchmark", 8.03)):
        f = analyze_path(data / name).finding("host-sync")
        assert HOST_WORK_REMOVED not in f.evidence.numbers, name
        assert f.evidence.numbers["saving_in_profiled_trace_ms"] == pytest.approx(idle, abs=1e-3), (
            name
        )


def _nan_checked_steps(check_op: str) -> TraceBuilder:
    """3 steps of a 900 us kernel, then ``if torch.isnan(loss):`` — the check's kernel, and the
    read (``is_nonzero``) waiting 866 us in cudaStreamSynchronize for the GPU."""
    t = TraceBuilder()
    for s in range(3):
        base = s * 1000
        t.step(s, base, 1000)
        t.launch(
            ADD,
            base + 10,
            base + 15,
            900,
            op="aten::add",
            dims=[[4096, 4096], [4096, 4096]],
            launch_dur=9,
        )
        t.launch("isnan_kernel", base + 30, base + 35, 1, op=check_op, dims=[[]], launch_dur=9)
        t.op("aten::is_nonzero", base + 50, 880, dims=[[]])
        t.runtime("cudaStreamSynchronize", base + 55, 866)
    return t


def test_a_finiteness_check_read_every_step_is_named_and_its_fix_comes_first() -> None:
    found = check(
        analyze_trace(parse(_nan_checked_steps("aten::isnan").to_bytes()), for_gpu_name("h100-sxm"))
    )
    assert found.evidence.numbers["finiteness_check_reads_per_step"] == 1
    assert "logging_nan_inf_filter=False" in found.fixes[0].code


def test_a_read_after_any_other_operator_is_not_a_finiteness_check() -> None:
    found = check(
        analyze_trace(parse(_nan_checked_steps("aten::gt").to_bytes()), for_gpu_name("h100-sxm"))
    )
    assert "finiteness_check_reads_per_step" not in found.evidence.numbers
    assert all("nan_inf" not in fix.code for fix in found.fixes)
