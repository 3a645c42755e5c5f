"""The verdict where no fix is major alone but the fixes together are.

tests/data/knobs_h100/distilbert_classifier is a ``gpudoctor run --try-fixes --fixes
bf16-autocast,compile`` bundle recorded on an H100 (torch 2.11, transformers 5.17, 2026-12-06;
benchmarks/BENCHMARKS-replay.md "Knob set r: four ordinary programs never run before"): an fp32
DistilBERT classifier whose fp32 GEMMs (23.6 ms on CUDA cores) hold the 31.4 ms step, its host
not far behind. Autocast alone measured x1.17, compile alone x1.08, the two together x2.52.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from gpudoctor.pipeline import analyze_loaded, analyze_path
from gpudoctor.report.model import TOGETHER_VERDICT_SPEEDUP
from gpudoctor.trace import load

DATA = Path(__file__).parent / "data"


def test_fixes_that_free_each_other_are_not_healthy() -> None:
    # timed unprofiled at 31.40 ms, 0.7% over the GPU's floor (31.17 replayed with the most
    # profiler time out), the host 10.6 ms ahead of the GPU at the step's edges: the GPU holds the
    # step, the host's pace is the lead's and autocast alone is major (x1.16; measured x1.17).
    # Timed 3.3% over the floor (32.2 ms), the fit puts the host on the step beside the GPU, and
    # only the fixes together free it
    found = analyze_path(DATA / "knobs_h100" / "distilbert_classifier")
    assert found.findings[0].id == "fp32-matmul" and found.findings[0].severity == "major"
    assert found.verdict().status == "findings"
    trace = load(DATA / "knobs_h100" / "distilbert_classifier")
    report = analyze_loaded(trace, unprofiled_step_ms=32.2)
    assert all(f.severity in ("minor", "info") for f in report.findings)
    assert report.all_fixes is not None
    assert set(report.all_fixes.ids) == {
        "host-sync",
        "launch-bound",
        "fp32-matmul",
        "unfused-elementwise",
        "small-gemm",
    }
    verdict = report.verdict()
    assert verdict.status == "together" and verdict.top_finding is None
    assert verdict.text.startswith(
        "no fix is major alone, but the 5 together replay at x4.45 (32.200 -> 7.228 ms)"
    )


def test_fixes_together_under_the_bound_leave_a_step_healthy() -> None:
    # the lab's host_blocking_work fixed twin: two minor fixes, x1.14 together
    report = analyze_path(DATA / "host_blocking_work_fixed" / "trace.json.gz")
    assert report.all_fixes is not None
    assert report.all_fixes.predicted_speedup < TOGETHER_VERDICT_SPEEDUP
    assert report.verdict().status == "healthy"
    # the same report with the fixes together at the bound is not
    at_bound = msgspec.structs.replace(
        report,
        all_fixes=msgspec.structs.replace(
            report.all_fixes, predicted_speedup=TOGETHER_VERDICT_SPEEDUP
        ),
    )
    assert at_bound.verdict().status == "together"
