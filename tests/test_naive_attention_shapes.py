"""naive-attention reads a softmax over the last dimension of a square [.., S, S] tensor as attention
scores; a segmentation loss's softmax over the classes of an [N, C, S, S] image is not one, and
a convolutional network's operators on S x S feature maps never join a score pattern."""

from __future__ import annotations

import pytest

from gpudoctor.pipeline import analyze_loaded
from gpudoctor.trace import parse
from tests.synth import TID, TraceBuilder

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


def _graph_attention_trace(with_dot_product: bool) -> TraceBuilder:
    """Training steps of a graph attention layer over S nodes and 8 heads: the [8, S, S] scores are
    a broadcast sum of per-node terms ([8, S, 1] + [8, 1, S]), LeakyReLU, masked to the edges,
    softmax, then attention @ features; the backward (the autograd thread) has a product of the
    scores' shape, the features' gradient times the features. With ``with_dot_product`` the
    forward also makes scores as q @ k^T (dot-product attention)."""
    b = TraceBuilder()
    t = 0.0
    fp32 = ["float"]
    scores = [8, S, S]
    for step in range(4):
        start = t
        forward = [
            ("aten::add", [[8, S, 1], [8, 1, S]]),
            ("aten::leaky_relu", [scores]),
            ("aten::where", [scores, scores, scores]),
            ("aten::_softmax", [scores, [], []]),
            ("aten::bmm", [scores, [8, S, 64]]),
        ]
        if with_dot_product:
            forward.insert(0, ("aten::bmm", [[8, S, 64], [8, 64, S]]))
        for k, (op, dims) in enumerate(forward):
            kernel = ("ampere_sgemm_128x64_nn" if op == "aten::bmm" else
                      "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>"
                      if op == "aten::_softmax" else
                      "void at::native::vectorized_elementwise_kernel<4, at::native::add>")
            b.launch(kernel, t + 20 * k, t + 100 + 300 * k, 250, op=op, dims=dims)
            b.events[-3]["args"]["Input type"] = fp32 * len(dims)
            if op == "aten::_softmax":
                b.events[-3]["args"]["Concrete Inputs"] = ["", "-1", "False"]
        back = t + 200
        b.op("autograd::engine::evaluate_function: BmmBackward0", back, 20, tid=TID + 1)
        b.launch("ampere_sgemm_128x64_nt", back + 2, t + 2200, 250, op="aten::bmm",
                 dims=[[8, S, 64], [8, 64, S]], tid=TID + 1)
        b.events[-3]["args"]["Input type"] = fp32 * 2
        t += 2600
        b.step(step, start, t - start)
    return b


def test_graph_attention_s_broadcast_scores_are_not_dot_product_attention() -> None:
    """The fix is SDPA, which takes q @ k^T scores only: a graph attention network's additive scores
    (their backward's S x S product notwithstanding) are not this finding."""
    report = analyze_loaded(parse(_graph_attention_trace(False).to_bytes()), gpu="h100-sxm")
    assert "naive-attention" not in {f.id for f in report.findings}
    report = analyze_loaded(parse(_graph_attention_trace(True).to_bytes()), gpu="h100-sxm")
    found = {f.id: f for f in report.findings}
    assert "naive-attention" in found
    assert {"aten::bmm", "aten::_softmax", "aten::leaky_relu"} <= set(
        found["naive-attention"].evidence.ops)
