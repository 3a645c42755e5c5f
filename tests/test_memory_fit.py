"""What `gpudoctor memory` says about the fit on --gpu (issue 16): the options it suggests lower the
peak and never widen what is already narrow, the usable capacity is explained, and a context past
the model's positions is refused (or priced on request, for rotary positions)."""

from __future__ import annotations

import pytest
from test_cli import gd

from gpudoctor.errors import InputError
from gpudoctor.memory import estimate_from_options
from gpudoctor.memory.capacity import CUDA_TOTAL_BYTES, capacity_of
from gpudoctor.memory.estimate import CUDA_CONTEXT_BYTES, RESERVED_OVER_ALLOCATED

GIB = 1024**3


def test_int4_weights_are_never_told_to_widen_to_int8():
    est = estimate_from_options(
        "llama-3.1-70b",
        infer=True,
        batch=16,
        prompt=4096,
        new=512,
        weights_dtype="int4",
        gpu="h100-sxm",
    )
    assert est.fits is False and est.suggestions
    assert all(
        "weights_dtype" not in s.options for s in est.suggestions
    )  # nothing narrower than int4


@pytest.mark.parametrize(
    ("current", "offered"),
    [("bf16", {"fp8", "int8", "int4"}), ("fp8", {"int4"}), ("int8", {"int4"})],
)
def test_weight_dtypes_offered_are_narrower_than_the_current_one(current, offered):
    est = estimate_from_options(
        "llama-3.1-70b",
        infer=True,
        batch=64,
        prompt=8192,
        new=512,
        weights_dtype=current,
        gpu="h100-sxm",
    )
    assert {
        s.options["weights_dtype"] for s in est.suggestions if "weights_dtype" in s.options
    } == offered


@pytest.mark.parametrize(
    "args",
    [
        {
            "batch": 1,
            "seq": 4096,
        },  # checkpointing and a chunked loss stop at the optimizer step's peak
        {"batch": 4, "seq": 4096},
        {"batch": 1, "seq": 8192, "params_dtype": "fp32"},
    ],
)
def test_every_training_suggestion_lowers_the_peak(args):
    est = estimate_from_options("llama-3.1-8b", gpu="h100-sxm", **args)
    assert est.suggestions
    assert all(s.peak_bytes < est.peak_bytes for s in est.suggestions)


def test_a_change_that_does_not_lower_the_peak_is_not_offered():
    # Llama-3.1-8B at 1 x 1024 in fp32 + AdamW: the optimizer step sets the peak, so checkpointing
    # (which only cuts activations) leaves it where it is
    est = estimate_from_options(
        "llama-3.1-8b", batch=1, seq=1024, params_dtype="fp32", gpu="h100-sxm"
    )
    ckpt = estimate_from_options(
        "llama-3.1-8b", batch=1, seq=1024, params_dtype="fp32", checkpointing="full"
    )
    assert est.phase == "optimizer" and ckpt.peak_bytes == est.peak_bytes
    assert all(
        s.options.get("checkpointing") != "full" or len(s.options) > 1 for s in est.suggestions
    )
    assert all(s.peak_bytes < est.peak_bytes for s in est.suggestions)


def test_capacity_is_what_cuda_reports_where_measured():
    assert capacity_of("h100-sxm") == ("NVIDIA H100 SXM5 80GB", CUDA_TOTAL_BYTES["h100-sxm"])
    assert capacity_of("h100-sxm")[1] / GIB == pytest.approx(
        79.18, abs=0.01
    )  # not the datasheet's 80
    assert capacity_of("h200")[1] / GIB == pytest.approx(
        139.80, abs=0.01
    )  # not the datasheet row's 131.32
    assert capacity_of("a100-sxm-80gb")[1] == 80 * GIB  # no measurement: the datasheet


def test_usable_peak_is_the_fit_threshold():
    est = estimate_from_options("llama-3.1-8b", batch=1, seq=4096, gpu="h100-sxm")
    usable = est.usable_peak_bytes
    assert usable == int(
        (CUDA_TOTAL_BYTES["h100-sxm"] - CUDA_CONTEXT_BYTES) / RESERVED_OVER_ALLOCATED
    )
    for s in est.suggestions:
        assert s.fits == (s.peak_bytes <= usable + 1)


def test_output_explains_the_usable_capacity_and_each_saving():
    out = gd(
        "memory",
        "llama-3.1-8b",
        "--batch",
        "1",
        "--seq",
        "4096",
        "--gpu",
        "h100-sxm",
        "--width",
        "200",
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "of 79.18 GiB" in text and "x 1.12 allocator reserve + 0.67 GiB CUDA context" in text
    assert (
        "usable: 79.18 GiB on the card (as CUDA reports it, measured; the datasheet says 80.00 GiB) - "
        "0.67 GiB CUDA context = 78.51 GiB"
    ) in text
    assert "a peak up to 70.10 GiB fits" in text and "it fits up to 70.10 GiB" in text
    assert "saves 0.60 GiB, then the optimizer step sets the peak" in text


def test_default_lengths_stay_within_the_model():
    est = estimate_from_options("gpt2")
    assert (
        est.options["seq"] == 1024
        and "not given, so set to fit gpt2's 1,024 positions" in est.notes[0]
    )
    est = estimate_from_options("gpt2", infer=True)
    assert est.options["prompt"] + est.options["new"] == 1024
    assert estimate_from_options("llama-3.1-8b").options["seq"] == 2048  # the default, untouched


def test_rope_context_beyond_the_model_is_priced_only_on_request():
    with pytest.raises(InputError, match=r"beyond llama-3\.1-8b's 131,072 positions"):
        estimate_from_options("llama-3.1-8b", seq=262144, context="refuse")
    est = estimate_from_options("llama-3.1-8b", seq=262144, context="extend")
    assert est.options["seq"] == 262144 and any("priced as given" in n for n in est.notes)
    with pytest.raises(InputError, match="learned table of 1,024 rows"):
        estimate_from_options("gpt2", infer=True, prompt=1024, new=1, context="extend")


def test_library_callers_that_report_positions_get_a_note():
    # plan train says itself that --seq is beyond the model's positions and wants the memory priced
    est = estimate_from_options("gpt2", seq=2048)
    assert any("cannot run at this length" in n for n in est.notes)
    est = estimate_from_options("llama-3.1-8b", seq=262144)
    assert any("priced as given" in n for n in est.notes)
