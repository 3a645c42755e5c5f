"""The doctor prescribes the fused kernels only for the ops they replace, with the measured figures."""

from __future__ import annotations

from pathlib import Path

from gpudoctor.kernels.prescribe import kernel_fix
from gpudoctor.pipeline import analyze_loaded
from gpudoctor.trace import load


def test_only_matching_ops_get_the_kernel_fix():
    assert kernel_fix(["aten::add", "aten::mul"]) is None
    assert kernel_fix(["aten::pow", "aten::mean"]) is None  # not all of an RMSNorm
    rms = kernel_fix(["aten::pow", "aten::mean", "aten::rsqrt", "aten::mul"])
    assert rms is not None and "RMSNorm in 14.5x less GPU time than HF eager" in rms.title
    assert "from 190 to 150 ms" in rms.title and "from 34.5 to 18.6 GB" in rms.title
    assert "H100 SXM, 2026-11-22" in rms.title and "patch(model)" in rms.code
    ce = kernel_fix(["aten::log_softmax"])
    assert ce is not None and "26.9x less peak memory" in ce.title


DATA = Path(__file__).parent / "data"


def test_a_hand_written_gelu_gets_no_kernel_fix():
    """The unfused trap is a tanh-GELU formula: a built-in, not a gated kernel, is the cure."""
    finding = analyze_loaded(load(DATA / "unfused_elementwise")).finding("unfused-elementwise")
    assert not any("gpudoctor's fused kernels" in f.title for f in finding.fixes)
    assert finding.fixes[1].title.startswith("Use the fused built-ins")


def test_a_plain_gelu_mlp_is_not_taken_for_a_gated_one():
    """The memory_pressure trap's model has a GELU MLP and LayerNorm: no fused kernel replaces them."""
    finding = analyze_loaded(load(DATA / "memory_pressure")).finding("memory-pressure")
    titles = [f.title for f in finding.fixes]
    assert titles[0].startswith("Find what stays allocated between steps")
    assert not any("gpudoctor's fused kernels" in t for t in titles)
    assert kernel_fix(["aten::gelu", "aten::mul"]) is None
    assert "SwiGLU 1.7x faster" in kernel_fix(["aten::silu", "aten::mul"]).title
