"""Fix snippets are written from the program's own values, or name the value they need; none
prints a number the trace did not give."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.analysis import analyze_trace
from gpudoctor.hardware.ceilings import for_gpu_name
from gpudoctor.pipeline import analyze_path
from gpudoctor.rules import host_blocking_work, naive_attention
from gpudoctor.rules.misaligned_gemm import _pad_snippet
from gpudoctor.trace.load import load

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


@pytest.mark.parametrize(
    ("trace", "masked"),
    [
        # the lab's trap: a causal masked_fill on the scores
        ("naive_attention", True),
        # a ViT's encoder (H200 knob bundle): no mask on its scores
        ("knobs_h200/vit_eager_attention", False),
    ],
)
def test_naive_attention_is_told_sdpa_with_the_programs_own_masking(
    trace: str, masked: bool
) -> None:
    a = analyze_trace(load(DATA / trace / "trace.json.gz"), for_gpu_name("h200"))
    finding = naive_attention.check(a)
    assert finding is not None
    code = finding.fixes[0].code
    assert ("is_causal=True" in code) is masked
    assert code.startswith("out = torch.nn.functional.scaled_dot_product_attention(q, k, v")
    assert "AutoModelForCausalLM" not in finding.fixes[1].code  # whatever class the program loads


@pytest.mark.parametrize(
    ("frames", "first"),
    [
        (
            (
                "transformers/models/videomae/image_processing_videomae.py:178 (_preprocess_image)",
                "transformers/utils/generic.py:824 (wrapper)",
            ),
            "Prepare the data in DataLoader worker processes",
        ),
        (("torch/serialization.py:967 (save)", "train.py:88 (step)"), "Checkpoint every N steps"),
        (("train.py:40 (log_metrics)", "logging/__init__.py:1100 (emit)"), "Move I/O and logging"),
        ((), "Move I/O and logging"),  # no stacks recorded: the general order
    ],
)
def test_host_work_is_told_the_fix_for_what_its_frames_show(frames: tuple, first: str) -> None:
    fixes = host_blocking_work._fixes(frames, None, host_blocking_work._checkpoint_fix(40.0, 50.0))
    assert fixes[0].title.startswith(first)
    assert len(fixes) == 4 and fixes[-1].title.startswith("Keep per-step Python light")


@pytest.mark.parametrize(
    ("save_ms", "step_ms", "every"),
    [
        (40.2, 50.4, 100),
        (1.0, 100.0, 10),
        (500.0, 10.0, 5000),
        (1e6, 1.0, 10000),
        (5.0, 0.0, 10000),
    ],
)
def test_the_checkpoint_interval_keeps_the_save_under_a_hundredth_of_the_time(
    save_ms: float, step_ms: float, every: int
) -> None:
    code = host_blocking_work._checkpoint_fix(save_ms, step_ms).code
    assert code.startswith(f"if step % {every} == 0:   # {save_ms:.1f} ms a save")


def test_the_read_back_interval_keeps_the_reads_under_a_hundredth_of_the_time() -> None:
    # the lab's trap reads 25 values a step: 29.7% of its profiled step, under 1% every 50 steps
    f = analyze_path(DATA / "host_sync").finding("host-sync")
    (code,) = [x.code for x in f.fixes if "running_loss" in x.code]
    assert code.startswith(
        "running_loss += loss.detach()   # no sync; read it every 50 steps: the reads hold 29.7%"
    )
    assert "if step % 50 == 0:" in code
    assert "print((running_loss / 50).item())" in code


@pytest.mark.parametrize(
    "cost_ms, step_ms, every",
    [(0.05, 10.0, 10), (0.83, 24.3, 10), (3.0, 10.0, 50), (50.0, 1.0, 5000), (500.0, 1.0, 10000)],
)
def test_every_n_steps_is_the_smallest_round_interval_under_a_hundredth(
    cost_ms: float, step_ms: float, every: int
) -> None:
    from gpudoctor.rules.shared import every_n_steps

    assert every_n_steps(cost_ms, step_ms) == every
