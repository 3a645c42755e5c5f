"""The casts bf16 autocast would add, counted from an fp32 trace's operators
(analysis/autocast_casts.py), against what the same programs ran under autocast."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synth import TraceBuilder

from gpudoctor.analysis import autocast_casts
from gpudoctor.pipeline import diagnose_path
from gpudoctor.rules.fp32_matmul import CASTS_PER_MATMUL, casts_per_matmul
from gpudoctor.rules.shared import fp32_matrix_events
from gpudoctor.trace.load import load

DATA = Path(__file__).parent / "data"


def load_trace(builder: TraceBuilder):  # type: ignore[no-untyped-def]
    from gpudoctor.trace import parse

    return parse(builder.to_bytes())


def counted(path: Path):  # type: ignore[no-untyped-def]
    a = diagnose_path(path).analysis
    parts = fp32_matrix_events(a)
    matmuls = np.concatenate([i for p, i in parts.items() if p != "attention"])
    classes = autocast_casts.op_classes(a.trace)
    ops, mine = autocast_casts.lower_ops_of(a.trace, matmuls, classes)
    fwd, bwd = autocast_casts.casts(a.trace, ops, classes)
    return a, matmuls, ops, mine, fwd, bwd


def test_a_post_norm_transformer_encoder_casts_the_normed_inputs_and_every_parameter():
    # nn.TransformerEncoderLayer (post-norm), 4 layers, then a Linear head on a mean over the
    # normed output: per layer the in-projection reads the block's float32 input (weight, bias,
    # input: 3), the out-projection reads attention's bf16 output (2), linear1 reads norm1's
    # float32 output (3), linear2 reads ReLU of linear1's bf16 output (2); the head 3. Each cast
    # of a parameter or of an activation that requires grad casts its gradient back: 43 and 43
    a, matmuls, ops, mine, fwd, bwd = counted(DATA / "knobs_h100" / "text_encoder_fp32")
    steps = len(a.steps)
    assert steps == 5 and ops.size == 17 * steps and mine.all()
    assert fwd[:17].tolist() == [3, 2, 3, 2] * 4 + [3]
    assert bwd[:17].tolist() == fwd[:17].tolist()
    assert (fwd.sum(), bwd.sum()) == (43 * steps, 43 * steps)
    # over the 52 fp32 matrix kernels a step (cuBLASLt's separate epilogue pass is elementwise)
    assert casts_per_matmul(a, matmuls) == pytest.approx(86 / 52)


def test_distilbert_counts_what_its_autocast_trial_ran():
    # its autocast trial's trace (benchmarks/results/compile-traces-h100-2026-12-06-z-bundles)
    # ran 101 casts a step inside aten::linear and 102 ToCopyBackward0; counted: 101 and 101 (q,
    # k and v read one LayerNorm output: three casts of it, not cached)
    a, _matmuls, ops, mine, fwd, bwd = counted(DATA / "knobs_h100" / "distilbert_classifier")
    steps = len(a.steps)
    assert ops.size == 38 * steps and mine.all()
    assert fwd[:6].tolist() == [3, 3, 3, 2, 3, 2]  # q, k, v, out, ffn lin1, ffn lin2
    assert (fwd.sum() / steps, bwd.sum() / steps) == (101, 101)


def test_the_data_s_cast_has_no_backward():
    # the ViT's patch embedding convolves the images: weight, bias and input cast, only the
    # parameters' gradients cast back
    a, _, ops, _, fwd, bwd = counted(DATA / "knobs_h100" / "vit_tiny_fp32_accuracy")
    first = a.trace.string(a.trace.host.name[ops[0]])
    assert first == "aten::conv2d" and (fwd[0], bwd[0]) == (3, 2)


def test_the_lab_s_mlp_counts_its_fixed_twin_s_casts():
    # 4 x (Linear, GELU) on data that needs no grad: forward 3 + 2 + 2 + 2, backward 2 x 4. The
    # fixed twin (the same step under autocast, tests/data/fp32_matmul_fixed) ran 19 a step: these
    # 17 and the cast of the output the step itself writes, ``.float()``, and its backward
    a, _, _ops, _, fwd, bwd = counted(DATA / "fp32_matmul")
    steps = len(a.steps)
    assert (fwd.sum() / steps, bwd.sum() / steps) == (9, 8)
    twin = load(DATA / "fp32_matmul_fixed")
    copies = twin.string_ids["aten::_to_copy"]
    assert np.count_nonzero(twin.host.name == copies) > 0


def test_kernels_no_counted_operator_launched_keep_the_flat_share():
    # word_language_model's nn.LSTM runs as cuDNN RNN kernels under aten::lstm: not an operator
    # of autocast's lists the count reads; its decoder Linear is
    a, matmuls, ops, mine, fwd, bwd = counted(DATA / "knobs_h200" / "word_language_model")
    assert ops.size == len(a.steps) and (~mine).sum() > 0.9 * matmuls.size
    expected = (fwd.sum() + bwd.sum() + CASTS_PER_MATMUL * (~mine).sum()) / matmuls.size
    assert casts_per_matmul(a, matmuls) == pytest.approx(expected)


def _conv_net(tmp_path: Path, with_backward: bool) -> Path:
    """conv -> batch_norm -> relu -> conv on an image copied to the device, one step."""
    t = TraceBuilder()
    t.step(1, 0, 400)
    fp32 = ["float", "float", "float"]
    t.op("aten::to", 5, 10, dims=[[8, 3, 32, 32]], types=["float"])
    t.launch(
        "conv_kernel_a", 20, 100, 30, op="aten::conv2d", dims=[[8, 3, 32, 32], [16, 3, 3, 3], []]
    )
    t.events[-3]["args"]["Input type"] = fp32
    t.op("aten::batch_norm", 40, 8, dims=[[8, 16, 32, 32]], types=["float"])
    t.op("aten::relu", 50, 4, dims=[[8, 16, 32, 32]], types=["float"])
    t.launch(
        "conv_kernel_b",
        60,
        140,
        30,
        op="aten::conv2d",
        dims=[[8, 16, 32, 32], [16, 16, 3, 3], [16]],
    )
    t.events[-3]["args"]["Input type"] = fp32
    if with_backward:
        convs = [e for e in t.events if e["name"] == "aten::conv2d"]
        for seq, e in enumerate(convs):
            e["args"]["Sequence number"] = 10 + seq
        for seq, ts in ((11, 200), (10, 260)):
            t.events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "pid": 100,
                    "tid": 101,
                    "ts": ts,
                    "dur": 30,
                    "name": "autograd::engine::evaluate_function: ConvolutionBackward0",
                    "args": {"Sequence number": seq},
                }
            )
    return t.write(tmp_path / "trace.json")


@pytest.mark.parametrize("with_backward", [True, False])
def test_a_convolution_after_batch_norm_and_relu_reads_bf16(tmp_path, with_backward):
    trace = load(_conv_net(tmp_path, with_backward))
    classes = autocast_casts.op_classes(trace)
    ops = np.flatnonzero(classes[trace.host.name] == autocast_casts.LOWER)
    fwd, bwd = autocast_casts.casts(trace, ops, classes)
    # the first: its weight (no bias) and the image (data: no gradient); the second: weight and
    # bias only, its input the first's bf16 output through batch norm and ReLU
    assert fwd.tolist() == [2, 2]
    assert bwd.tolist() == ([1, 2] if with_backward else [0, 0])


def _conv1d_block(tmp_path: Path) -> Path:
    """Hugging Face GPT-2's ``Conv1D``: ``addmm(bias, x, weight)`` after a LayerNorm, then a GELU
    and a second ``Conv1D`` on its output; one step, with their backward nodes."""
    t = TraceBuilder()
    t.step(1, 0, 400)
    fp32 = ["float", "float", "float"]
    t.op("aten::to", 5, 10, dims=[[512, 768]], types=["float"])
    t.op("aten::layer_norm", 20, 10, dims=[[512, 768]], types=["float"])
    t.launch("gemm_a", 40, 100, 30, op="aten::addmm", dims=[[3072], [512, 768], [768, 3072]])
    t.events[-3]["args"]["Input type"] = fp32
    t.op("aten::gelu", 80, 8, dims=[[512, 3072]], types=["float"])
    t.launch("gemm_b", 95, 160, 30, op="aten::addmm", dims=[[768], [512, 3072], [3072, 768]])
    t.events[-3]["args"]["Input type"] = fp32
    for seq, e in enumerate(e for e in t.events if e["name"] == "aten::addmm"):
        e["args"]["Sequence number"] = 10 + seq
    for seq, ts in ((11, 220), (10, 280)):
        t.events.append({"ph": "X", "cat": "cpu_op", "pid": 100, "tid": 101, "ts": ts, "dur": 30,
                         "name": "autograd::engine::evaluate_function: AddmmBackward0",
                         "args": {"Sequence number": seq}})
    return t.write(tmp_path / "trace.json")


def test_a_projection_written_as_addmm_casts_its_bias_and_weight(tmp_path):
    # each Conv1D casts its bias (argument 0) and weight (argument 2); the first also its input,
    # LayerNorm's float32 output, the second none (GELU carries the first's bf16 output). Each
    # cast of a parameter or an activation with a gradient casts its gradient back
    trace = load(_conv1d_block(tmp_path))
    classes = autocast_casts.op_classes(trace)
    ops = np.flatnonzero(classes[trace.host.name] == autocast_casts.LOWER)
    fwd, bwd = autocast_casts.casts(trace, ops, classes)
    assert fwd.tolist() == [3, 2]
    assert bwd.tolist() == [3, 2]


NAMES = [
    "aten::linear",
    "aten::conv2d",
    "aten::matmul",
    "aten::view",
    "aten::relu",
    "aten::layer_norm",
    "aten::softmax",
    "aten::to",
    "aten::add",
    "aten::embedding",
]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(NAMES),
            st.integers(0, 3),
            st.booleans(),
            st.sampled_from(["float", "c10::BFloat16", ""]),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_any_run_of_operators_counts_without_raising(ops) -> None:  # type: ignore[no-untyped-def]
    b = TraceBuilder()
    t = 0.0
    for k, (name, ndim, seq, dtype) in enumerate(ops):
        dims = [[4] * ndim, [4, 4], [4]] if ndim else []
        b.launch("k", t, t + 5, 2, op=name, dims=dims or None)
        if dims:
            b.events[-3]["args"]["Input type"] = [dtype] * 3
        if seq:
            b.events[-3]["args"]["Sequence number"] = k
        t += 10
    b.step(0, 0, t)
    trace = load_trace(b)
    classes = autocast_casts.op_classes(trace)
    kernels = np.arange(len(trace.device))
    found, mine = autocast_casts.lower_ops_of(trace, kernels, classes)
    fwd, bwd = autocast_casts.casts(trace, found, classes)
    assert mine.size == kernels.size and fwd.size == bwd.size == found.size
    assert ((fwd >= 0) & (fwd <= 3) & (bwd >= 0) & (bwd <= fwd)).all()
