"""naive-attention reads a softmax over the last dimension of a square [.., S, S] tensor as attention
scores; a segmentation loss's softmax over the classes of an [N, C, S, S] image is not one, and
a convolutional network's operators on S x S feature maps never join a score pattern."""

from __future__ import annotations

import pytest

from gpudoctor.pipeline import analyze_loaded
from gpudoctor.trace import parse
from tests.synth import TraceBuilder

S = 128


def _step_trace(softmax_dim: str, with_scores: bool) -> TraceBuilder:
    """Steps of a conv -> batch norm -> ReLU on a [16, 32, S, S] image and a log-softmax over
    ``softmax_dim`` of [16, 4, S, S]; with ``with_scores`` also q @ k^T of [16, 4, S, 64] each,
    which makes a [16, 4, S, S] score matrix."""
    b = TraceBuilder()
    t = 0.0
    image = [16, 32, S, S]
    fp32 = ["float"]
    for step in range(4):
        start = t
        b.launch(
            "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc",
            t,
            t + 10,
            900,
            op="aten::cudnn_convolution",
            dims=[image, [32, 32, 3, 3]],
        )
        b.events[-3]["args"]["Input type"] = fp32 * 2
        b.launch(
            "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>",
            t + 20,
            t + 920,
            400,
            op="aten::cudnn_batch_norm",
            dims=[image, [32], [32]],
        )
        b.events[-3]["args"]["Input type"] = fp32 * 3
        b.launch(
            "void at::native::vectorized_elementwise_kernel<4, at::native::relu>",
            t + 40,
            t + 1330,
            300,
            op="aten::relu",
            dims=[image],
        )
        b.events[-3]["args"]["Input type"] = fp32
        if with_scores:
            b.launch(
                "ampere_sgemm_128x64_nn",
                t + 60,
                t + 1640,
                500,
                op="aten::bmm",
                dims=[[64, S, 64], [64, 64, S]],
            )
            b.events[-3]["args"]["Input type"] = fp32 * 2
        b.launch(
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>",
            t + 80,
            t + 2200,
            200,
            op="aten::_log_softmax",
            dims=[[16, 4, S, S], [], []],
        )
        b.events[-3]["args"]["Input type"] = fp32 + ["Scalar", "Scalar"]
        b.events[-3]["args"]["Concrete Inputs"] = ["", softmax_dim, "False"]
        t += 2600
        b.step(step, start, t - start)
    return b


@pytest.mark.parametrize("dim", ["1", "-3"])
def test_a_softmax_over_an_image_s_classes_is_not_attention(dim: str) -> None:
    report = analyze_loaded(parse(_step_trace(dim, with_scores=False).to_bytes()), gpu="h100-sxm")
    assert "naive-attention" not in {f.id for f in report.findings}


def test_a_softmax_over_the_last_dimension_of_scores_is_and_the_convolutions_stay_out() -> None:
    report = analyze_loaded(parse(_step_trace("-1", with_scores=True).to_bytes()), gpu="h100-sxm")
    found = {f.id: f for f in report.findings}
    assert "naive-attention" in found
    ops = set(found["naive-attention"].evidence.ops)
    assert "aten::bmm" in ops and "aten::_log_softmax" in ops
    assert not ops & {"aten::cudnn_convolution", "aten::cudnn_batch_norm"}
