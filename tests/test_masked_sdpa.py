"""scaled_dot_product_attention given its causal mask as a tensor, as naive-attention.

The real trace is the sdpa_float_causal_mask twin (tests/programs/twins, H100, torch 2.11): six
blocks call SDPA with one [1024, 1024] float mask; its fixed twin passes ``is_causal=True``. The
synthetic ones check which masks are this pattern: one shared by the batch, square, in
self-attention.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.pipeline import analyze_path, diagnose_path
from gpudoctor.rules import naive_attention
from gpudoctor.trace.kernels import Kind

TWINS = Path(__file__).parent / "data" / "twins_h100"


def test_the_masked_calls_kernels_forward_and_backward_are_priced_at_half() -> None:
    found = diagnose_path(TWINS / "sdpa_float_causal_mask")
    a = found.analysis
    idx, seq = naive_attention.masked_sdpa(a)
    assert seq == 1024
    # the main forward and backward kernel per block and step (not the backward's small ones)
    assert idx.size == 2 * 6 * len(a.steps)
    assert (a.trace.device.kind[idx] == Kind.ATTENTION).all()
    f = found.report.findings[0]
    assert f.id == "naive-attention" and "[1024, 1024] mask" in f.summary
    assert f.evidence.numbers["attention_kernels_ms_per_step"] == pytest.approx(2.18, abs=1e-3)
    assert "is_causal=True" in f.fixes[0].code and "cannot tell" in f.summary


@pytest.mark.parametrize(
    ("mask", "seq"),
    [
        ([1024, 1024], 1024),
        ([1, 1, 1024, 1024], 1024),
        ([8, 1, 1024, 1024], 0),  # a mask per sequence: padding
        ([8, 1, 1, 1024], 0),  # a key padding mask
        ([512, 1024], 0),  # not square
        ([], 0),  # no mask recorded
    ],
)
def test_only_one_square_mask_for_the_whole_batch_is_this_pattern(mask: list, seq: int) -> None:
    q = [8, 12, 1024, 64]
    assert naive_attention._shared_square_mask([q, q, q, mask, [], []]) == seq


def test_cross_attention_and_no_mask_are_not() -> None:
    q, k = [8, 12, 256, 64], [8, 12, 1024, 64]
    assert naive_attention._shared_square_mask([q, k, k, [1024, 1024]]) == 0
    assert naive_attention._shared_square_mask([q, q, q]) == 0


def test_the_fixed_twin_with_is_causal_has_no_such_finding() -> None:
    report = analyze_path(TWINS / "sdpa_float_causal_mask")
    assert report.findings[0].id == "naive-attention"
    a = diagnose_path(TWINS / "tf32_gpt").analysis  # SDPA without a mask
    assert naive_attention.masked_sdpa(a)[0].size == 0
