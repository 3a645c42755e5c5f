"""Every registered rule runs on degenerate traces without raising, and says nothing there."""

from __future__ import annotations

import pytest
from synth import TraceBuilder

from gpudoctor.analysis import analyze_trace
from gpudoctor.core.finding import SEVERITIES
from gpudoctor.errors import InputError
from gpudoctor.hardware.ceilings import for_gpu_name
from gpudoctor.rules.registry import RULES, get_rule, run_rules
from gpudoctor.trace import parse

REQUIRED = {
    "input-pipeline",
    "host-sync",
    "launch-bound",
    "fp32-matmul",
    "unfused-elementwise",
    "naive-attention",
    "pageable-copy",
    "allocator-churn",
    "per-sample-loop",
    "optimizer-loop",
    "host-blocking-work",
    "misaligned-gemm",
    "small-gemm",
    "memory-pressure",
}


def _analysis(builder: TraceBuilder):
    return analyze_trace(parse(builder.to_bytes()), for_gpu_name("h100-sxm"))


def test_every_required_id_is_registered() -> None:
    assert set(RULES) >= REQUIRED


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_on_an_empty_trace(rule_id: str) -> None:
    assert RULES[rule_id].check(_analysis(TraceBuilder())) is None


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_rule_on_a_trace_with_one_busy_kernel(rule_id: str) -> None:
    t = TraceBuilder()
    t.step(0, 0, 100)
    t.launch(
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
        0,
        1,
        98,
        op="aten::mm",
        dims=[[4096, 4096], [4096, 4096]],
    )
    finding = RULES[rule_id].check(_analysis(t))
    assert finding is None or finding.severity in ("minor", "info")


def test_findings_are_well_formed_and_ranked() -> None:
    t = TraceBuilder()
    for s in range(3):
        base = s * 1000
        t.step(s, base, 1000)
        t.launch(
            "ampere_sgemm_128x64_tn",
            base + 1,
            base + 10,
            500,
            op="aten::mm",
            dims=[[2048, 2048], [2048, 2048]],
            flops=2 * 2048**3,
        )
        t.op("aten::item", base + 20, 600)
        t.runtime("cudaStreamSynchronize", base + 25, 590)
        t.launch(
            "ampere_sgemm_128x64_tn",
            base + 700,
            base + 710,
            250,
            op="aten::mm",
            dims=[[2048, 2048], [2048, 2048]],
            flops=2 * 2048**3,
        )
    for e in t.events:
        if e.get("args", {}).get("Input type"):
            e["args"]["Input type"] = ["float", "float"]
    findings = run_rules(_analysis(t))
    ids = [f.id for f in findings]
    assert ids[0] == "fp32-matmul" and "host-sync" in ids
    savings = [f.saving_ms for f in findings]
    assert savings == sorted(savings, reverse=True)
    for f in findings:
        assert f.severity in SEVERITIES and f.fixes and f.saving_ms >= 0
        assert f.predicted_speedup == pytest.approx(1.0 / (1.0 - f.saving_ms / 1.0))


def test_unknown_rule_lists_the_known_ones() -> None:
    with pytest.raises(InputError, match="known rules: input-pipeline"):
        get_rule("nope")
