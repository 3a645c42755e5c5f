"""Fix snippets are written from the program's own values, or name the value they need; none
prints a number the trace did not give."""

from __future__ import annotations

from pathlib import Path

from gpudoctor.pipeline import analyze_path
from gpudoctor.rules.misaligned_gemm import _pad_snippet

DATA = Path(__file__).parent / "data"


def test_the_padding_line_is_the_programs_own_odd_dimension() -> None:
    """The lab's misaligned_gemm trap projects onto a 50257-token vocabulary (4096 x 50257 x 4095
    its largest GEMM): its first fix pads that dimension, the largest odd one."""
    finding = analyze_path(DATA / "misaligned_gemm").finding("misaligned-gemm")
    assert finding is not None
    assert finding.evidence.numbers["shapes_MxNxK"][0] == "4096x50257x4095"
    assert finding.fixes[0].code == "size = (size + 63) // 64 * 64   # 50257 -> 50304"


def test_the_padding_line_follows_the_shape_it_is_given() -> None:
    assert _pad_snippet((1000, 768, 3001), 8) == "size = (size + 63) // 64 * 64   # 3001 -> 3008"
    # aligned for its dtype (4 for fp32) but not to 64: the line still pads the odd one
    assert _pad_snippet((1000, 768, 3000), 4) == "size = (size + 63) // 64 * 64   # 3000 -> 3008"


def test_loader_snippets_name_the_values_the_trace_does_not_hold() -> None:
    """input-pipeline on the lab's loader trap (batches made on the training thread): the worker
    count is the user's W, not an invented 8."""
    finding = analyze_path(DATA / "input_pipeline").finding("input-pipeline")
    assert finding is not None
    code = finding.fixes[0].code
    assert "num_workers=W" in code and "# B: the batch now; W: up to the host's cores" in code
    assert "num_workers=8" not in code and "prefetch_factor" not in code
