"""input-pipeline when the loader's time is pinning: synthetic steps for the cases the real traces do not
cover (tests/test_tryfix.py reads three H100 traces of a Lightning module)."""

from __future__ import annotations

from pathlib import Path

import pytest
from synth import TraceBuilder

from gpudoctor.pipeline import analyze_path

NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
BATCH = [[4096, 1024], []]  # 16 MiB of fp32


def _steps(tmp_path: Path, pin_us: float, compiled: bool, types: list | None = None) -> dict:
    """Three steps of 5 ms: a 990 us kernel, then 3 ms in the loader's __next__ (``pin_us`` of it in
    aten::pin_memory), then a 690 us kernel; the GPU idles while the host fetches."""
    t = TraceBuilder()
    for n in range(3):
        base = n * 5000.0
        t.step(n, base, 5000)
        if compiled:
            t.op("Torch-Compiled Region: 0/0", base + 2, 5)
        t.launch("ampere_bf16_s16816gemm_bf16_128x128", base + 10, base + 20, 980, op="aten::mm")
        t.annotation(NEXT, base + 1100, 3000)
        t.op(
            "aten::pin_memory",
            base + 1150,
            pin_us,
            dims=BATCH,
            types=types if types is not None else ["float", ""],
        )
        t.launch(
            "void at::native::vectorized_elementwise_kernel<4>",
            base + 4200,
            base + 4210,
            690,
            op="aten::add",
        )
    report = analyze_path(t.write(tmp_path / "trace.json"))
    return next(f for f in report.findings if f.id == "input-pipeline")


def test_slow_pinning_under_torch_compile_puts_the_in_process_compile_first(tmp_path: Path) -> None:
    finding = _steps(tmp_path, pin_us=2800, compiled=True)
    numbers = finding.evidence.numbers
    assert (
        numbers["loader_time_is_pinning"] is True
        and numbers["host_time_pinning_ms_per_step"] == 2.8
    )
    assert numbers["pinning_gb_per_s"] == pytest.approx(
        4096 * 1024 * 4 / 2800e-6 / 1e9, abs=0.01
    )  # 5.99
    assert numbers["pinning_slowed_under_torch_compile"] is True
    assert "TORCHINDUCTOR_COMPILE_THREADS=1" in finding.fixes[0].code
    assert finding.fixes[1].title.startswith("Pin the in-memory data set once")


def test_slow_pinning_without_torch_compile_gets_the_pin_once_fix_only(tmp_path: Path) -> None:
    finding = _steps(tmp_path, pin_us=2800, compiled=False)
    assert finding.evidence.numbers["pinning_slowed_under_torch_compile"] is False
    assert finding.fixes[0].title.startswith("Pin the in-memory data set once")
    assert not any("COMPILE_THREADS" in f.code for f in finding.fixes)


def test_fast_pinning_under_torch_compile_is_not_blamed_on_it(tmp_path: Path) -> None:
    """16 MiB in 1.6 ms is 10.5 GB/s, above SLOW_PINNING_GBPS; 1.6 of the 3 ms in __next__ is still most
    of it, so the pin-once fix leads, and compile is not named."""
    finding = _steps(tmp_path, pin_us=1600, compiled=True)
    assert finding.evidence.numbers["pinning_gb_per_s"] == pytest.approx(10.49, abs=0.01)
    assert finding.evidence.numbers["pinning_slowed_under_torch_compile"] is False
    assert finding.fixes[0].title.startswith("Pin the in-memory data set once")


def test_pinning_of_an_unknown_dtype_gives_no_bandwidth_and_no_blame(tmp_path: Path) -> None:
    finding = _steps(tmp_path, pin_us=2800, compiled=True, types=["c10::SomeFutureType", ""])
    assert "pinning_gb_per_s" not in finding.evidence.numbers
    assert finding.evidence.numbers["pinning_slowed_under_torch_compile"] is False


def test_a_loader_that_mostly_does_other_work_keeps_the_workers_fix(tmp_path: Path) -> None:
    finding = _steps(tmp_path, pin_us=300, compiled=True)
    assert finding.evidence.numbers["loader_time_is_pinning"] is False
    assert finding.fixes[0].title == "Load batches in worker processes and pin them"
