"""The per-op cost model (analysis/opcost.py): FLOPs and bytes are lower bounds of the work, with
exact numbers for the formulas, written out from the op's semantics."""

from __future__ import annotations

import math

import pytest

from gpudoctor.analysis.opcost import element_type_of_kernel, op_cost

NAN = float("nan")
F32, BF16, LONG = "float", "c10::BFloat16", "long int"


def cost(
    name: str,
    dims: list,
    types: list,
    strides: list | None = None,
    concrete: list | None = None,
    flops: float = NAN,
    list_type: str = "",
):
    return op_cost(name, dims, types, flops, strides, concrete, list_type)


# --- index ops: only what they touch -------------------------------------------------------------


def test_nll_loss_reads_the_targets_not_the_logits() -> None:
    # misaligned_gemm's loss: [4096, 50257] fp32 logits; reading them all was 999% of HBM
    c = cost(
        "aten::nll_loss_forward",
        [[4096, 50257], [4096], [], [], []],
        [F32, LONG, "", "Scalar", "Scalar"],
        [[50257, 1], [1], [], [], []],
        ["", "", "", "1", "-100"],
    )
    assert c.bytes == 4096 * 8 + 4  # the targets, one fp32 loss
    assert c.flops == 4096 and c.known
    none = cost(
        "aten::nll_loss_forward",
        [[4096, 50257], [4096], [], [], []],
        [F32, LONG, "", "Scalar", "Scalar"],
        None,
        ["", "", "", "0", "-100"],
    )
    assert none.bytes == 4096 * 8 + 4096 * 4  # reduction='none': one loss per row


def test_nll_loss_backward_reads_the_targets_and_the_incoming_gradient() -> None:
    c = cost(
        "aten::nll_loss_backward",
        [[], [4096, 50257], [4096], [], [], [], []],
        [F32, F32, LONG, "", "Scalar", "Scalar", F32],
        None,
        ["", "", "", "", "1", "-100", ""],
    )
    assert c.bytes == 4096 * 8 + 4 + 4  # targets, grad_output, total_weight


def test_gather_counts_the_index_the_output_and_one_element_per_row() -> None:
    # inference_loop: gather(table [30000, 1024], 0, ids expanded to [8192, 1024] (stride 0), out=)
    c = cost(
        "aten::gather",
        [[30000, 1024], [], [8192, 1024], [], [8192, 1024]],
        [BF16, "Scalar", LONG, "Scalar", BF16],
        [[1024, 1], [], [1, 0], [], [1024, 1]],
        ["", "0", "", "False", ""],
    )
    index = 8192 * 8  # the expanded index holds 8192 distinct ids
    out = 8192 * 1024 * 2
    distinct = 1024 * 2  # along dim 0 the rows may repeat: one element per column is sure
    assert c.bytes == index + distinct + out
    assert c.flops == 0
    # gather(logits, -1, target[:, None]): one element per row
    row = cost(
        "aten::gather",
        [[4096, 50257], [], [4096, 1], []],
        [F32, "Scalar", LONG, "Scalar"],
        [[50257, 1], [], [1, 1], []],
        ["", "-1", "", "False"],
    )
    assert row.bytes == 4096 * 8 + 4096 * 4 + 4096 * 4


def test_embedding_and_index_select_count_one_row_of_the_table() -> None:
    emb = cost(
        "aten::embedding",
        [[50257, 768], [8, 1024], [], [], []],
        [F32, LONG, "Scalar", "Scalar", "Scalar"],
        [[768, 1], [1024, 1], [], [], []],
        ["", "", "-1", "False", "False"],
    )
    assert emb.bytes == 8192 * 8 + 768 * 4 + 8192 * 768 * 4
    sel = cost(
        "aten::index_select",
        [[8192, 2048], [], [8192]],
        [F32, "Scalar", LONG],
        [[2048, 1], [], [1]],
        ["", "0", ""],
    )
    assert sel.bytes == 8192 * 8 + 2048 * 4 + 8192 * 2048 * 4


def test_scatter_add_reads_the_index_and_source_writes_one_element_per_position() -> None:
    c = cost(
        "aten::scatter_add_",
        [[1000, 64], [], [4096, 64], [4096, 64]],
        [F32, "Scalar", LONG, F32],
        None,
        ["", "0", "", ""],
    )
    assert c.bytes == 4096 * 64 * 8 + 4096 * 64 * 4 + 64 * 4


def test_advanced_indexing_is_left_unplaced() -> None:
    c = cost("aten::index", [[8192, 1024], [[8192]]], [F32, "TensorList"])
    assert not c.known and c.bytes == 0 and c.flops == 0


# --- elementwise: in place, out=, broadcast, dtypes ----------------------------------------------


def test_in_place_add_reads_both_and_writes_self() -> None:
    n = 4096 * 4096
    c = cost(
        "aten::add_",
        [[4096, 4096], [4096, 4096], []],
        [BF16, BF16, "Scalar"],
        [[4096, 1], [4096, 1], []],
        ["", "", "1"],
    )
    assert c.bytes == 3 * n * 2 and c.flops == n
    # add_(bias) over rows: the bias is read once
    bias = cost("aten::add_", [[8, 1024], [1024], []], [F32, F32, "Scalar"])
    assert bias.bytes == (8 * 1024 + 1024 + 8 * 1024) * 4


def test_write_only_ops_read_nothing() -> None:
    n = 4096 * 50257
    fill = cost("aten::fill_", [[4096, 50257], []], [F32, "Scalar"], [[50257, 1], []], ["", "0."])
    assert fill.bytes == n * 4 and fill.flops == 0  # was read + write: 197% of HBM on host_sync
    assert cost("aten::zero_", [[1024]], [BF16]).bytes == 2048
    assert (
        cost("aten::normal_", [[1024, 1024], [], [], []], [F32, "Scalar", "Scalar", ""]).bytes
        == 4 * 2**20
    )


def test_copy_writes_self_in_its_dtype_and_reads_src_in_its_own() -> None:
    c = cost("aten::copy_", [[8192, 8192], [8192, 8192], []], [BF16, F32, "Scalar"])
    assert c.bytes == 8192 * 8192 * (2 + 4) and c.flops == 0


def test_broadcast_view_is_read_once() -> None:
    # a [4096] row expanded to [4096, 4096] (stride 0) holds 4096 distinct elements
    c = cost("aten::mul", [[4096, 4096], [4096, 4096]], [F32, F32], [[4096, 1], [0, 1]])
    n = 4096 * 4096
    assert c.bytes == n * 4 + 4096 * 4 + n * 4


def test_out_overload_writes_its_out_tensor_once() -> None:
    # mul.out(self, other, *, out): the out tensor is the result, not a third input
    c = cost("aten::mul", [[1024], [], [1024]], [F32, "double", F32])
    assert c.bytes == 1024 * 4 + 8 + 1024 * 4
    # abs.out with an empty out tensor (resized by the op): the result is still [8192, 1024]
    a = cost("aten::abs", [[8192, 1024], [0]], [F32, F32], [[1024, 1], [1]])
    assert a.bytes == 2 * 8192 * 1024 * 4
    # mse_loss_backward.grad_input: grad_output (a scalar), self, target read, grad_input written
    m = cost(
        "aten::mse_loss_backward",
        [[], [4096, 4096], [4096, 4096], [], [4096, 4096]],
        [F32, F32, F32, "Scalar", F32],
        None,
        ["", "", "", "1", ""],
    )
    assert m.bytes == 4 + 3 * 4096 * 4096 * 4


def test_result_dtype_follows_type_promotion() -> None:
    n = 8192 * 1024
    mixed = cost("aten::add", [[8192, 1024], [8192, 1024], []], [BF16, F32, "Scalar"])
    assert mixed.bytes == n * 2 + n * 4 + n * 4  # bf16 + fp32 -> fp32
    scalar = cost("aten::mul", [[8192, 1024], []], [BF16, "double"])
    assert scalar.bytes == n * 2 + 8 + n * 2  # a 0-dim double does not promote a bf16 tensor
    compare = cost("aten::eq", [[1024, 1024], [1024, 1024]], [F32, F32])
    assert compare.bytes == 2 * 2**20 * 4 + 2**20  # bool result


# --- reductions ----------------------------------------------------------------------------------


def test_reductions_write_their_kept_dims() -> None:
    n = 8192 * 2048
    s = cost(
        "aten::sum",
        [[8192, 2048], [], [], []],
        [BF16, "ScalarList", "Scalar", ""],
        None,
        ["", "[0]", "True", ""],
    )
    assert s.bytes == n * 2 + 2048 * 2 and s.flops == n
    full = cost(
        "aten::sum", [[8192, 2048], []], [BF16, ""], None, ["", "6"]
    )  # sum(self, dtype): not a dim
    assert full.bytes == n * 2 + 2
    mean_out = cost(
        "aten::mean",
        [[64, 128, 12, 12], [], [], [], [0]],
        [F32, "ScalarList", "Scalar", "", F32],
        None,
        ["", "[-1, -2]", "True", "", ""],
    )
    assert mean_out.bytes == 64 * 128 * 144 * 4 + 64 * 128 * 4
    assert (
        cost(
            "aten::argmax",
            [[32, 50257], [], []],
            [BF16, "Scalar", "Scalar"],
            None,
            ["", "-1", "False"],
        ).bytes
        == 32 * 50257 * 2 + 32 * 8
    )
    assert cost("aten::max", [[1024]], [F32]).bytes == 1024 * 4 + 4  # max(self): one value
    # max(self, other) is elementwise
    assert cost("aten::max", [[1024], [1024]], [F32, F32]).bytes == 3 * 1024 * 4


# --- several tensors per argument: lists, fused optimizers ---------------------------------------


def test_tensor_lists_take_their_dtype_from_the_kernel() -> None:
    kernel = (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<c10::BFloat16, 2, 2, 0>, "
        "std::plus<float>, float>"
    )
    assert element_type_of_kernel(kernel) == BF16
    assert (
        element_type_of_kernel(
            "CatArrayBatchedCopy_vectorized<at::native::(anonymous namespace)::OpaqueType<2u>, "
            "unsigned int, 3, 128, 1, 16, 8>"
        )
        == "opaque16"
    )
    assert element_type_of_kernel("nvjet_sm90_tst_256x128") == ""
    lists = [[[4096, 4096], [4096]], [[4096, 4096], [4096]], []]
    n = 4096 * 4096 + 4096
    add = cost("aten::_foreach_add_", lists, ["TensorList", "TensorList", "Scalar"], list_type=BF16)
    assert add.bytes == 3 * n * 2 and add.flops == n
    assert not cost(
        "aten::_foreach_add_", lists, ["TensorList", "TensorList", "Scalar"]
    ).known  # dtype unknown
    cat = cost(
        "aten::cat", [[[8, 1024, 16, 64]] * 3, []], ["TensorList", "Scalar"], list_type="opaque16"
    )
    assert cat.bytes == 2 * 3 * 8 * 1024 * 16 * 64 * 2 and cat.flops == 0
    # a long list whose shapes the profiler left out
    assert not cost("aten::cat", [[], []], ["TensorList", "Scalar"], list_type="opaque16").known


def test_fused_adamw_reads_four_lists_and_writes_three() -> None:
    p = [[1024, 1024], [1024]]
    n = 1024 * 1024 + 1024
    dims = [p, p, p, p, [], [[], []], [], [], [], [], [], [], [], [], []]
    types = ["TensorList"] * 6 + ["Scalar"] * 7 + ["", ""]
    c = cost("aten::_fused_adamw_", dims, types, list_type=F32)
    assert (
        c.bytes == (4 * n + 2) * 4 + 3 * n * 4
    )  # params, grads, exp_avg, exp_avg_sq, the steps; 3 written


# --- matrix ops ----------------------------------------------------------------------------------


def test_addmm_out_overload_takes_mat1_and_mat2() -> None:
    # Inductor's extern addmm(bias, mat1, mat2, beta, alpha, out=): the out tensor is not mat2
    c = cost(
        "aten::addmm",
        [[2048], [8192, 8192], [8192, 2048], [], [], [8192, 2048]],
        [BF16, BF16, BF16, "Scalar", "Scalar", BF16],
        [[1], [8192, 1], [1, 8192], [], [], [2048, 1]],
        ["", "", "", "1", "1", ""],
    )
    assert c.gemm_shape == (1, 8192, 2048, 8192)
    assert c.flops == 2.0 * 8192 * 2048 * 8192
    assert c.bytes == (2048 + 8192 * 8192 + 8192 * 2048 + 8192 * 2048) * 2
    assert c.matrix


def test_attention_counts_the_causal_half() -> None:
    q = [8, 16, 1024, 128]
    dims = [q, q, q, [], [], [], [], [], [], [], [], [], []]
    types = [BF16] * 3 + [""] * 3 + ["Scalar"] * 6 + [""]
    causal = cost(
        "aten::_cudnn_attention_forward",
        dims,
        types,
        None,
        ["", "", "", "", "", "", "1024", "1024", "True", "0.", "True", "False", ""],
    )
    full = cost(
        "aten::_cudnn_attention_forward",
        dims,
        types,
        None,
        ["", "", "", "", "", "", "1024", "1024", "True", "0.", "False", "False", ""],
    )
    assert full.flops == 4.0 * 8 * 16 * 1024 * 1024 * 128
    assert causal.flops == 4.0 * 8 * 16 * (1024 * 1025 / 2) * 128
    assert full.bytes == 4 * math.prod(q) * 2  # q, k, v read, the output written


def test_convolution_flops_from_stride_padding_dilation() -> None:
    # cudnn_convolution(x [64, 3, 96, 96], w [32, 3, 3, 3], padding 1, stride 2, dilation 1, groups 1)
    c = cost(
        "aten::cudnn_convolution",
        [[64, 3, 96, 96], [32, 3, 3, 3], [], [], [], [], [], [], []],
        [
            BF16,
            BF16,
            "ScalarList",
            "ScalarList",
            "ScalarList",
            "Scalar",
            "Scalar",
            "Scalar",
            "Scalar",
        ],
        None,
        ["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"],
    )
    out = 64 * 32 * 48 * 48
    assert c.flops == 2.0 * 64 * 48 * 48 * (32 * 3 * 3 * 3)
    assert c.bytes == (64 * 3 * 96 * 96 + 32 * 27 + out) * 2


# --- what cannot be bounded ------------------------------------------------------------------------


def test_inductor_kernels_count_their_buffers_unless_they_fuse_a_gather() -> None:
    c = cost("triton_poi_fused__to_copy_8", [[8192, 2048], [8192, 2048], []], [F32, BF16, "Scalar"])
    assert c.bytes == 8192 * 2048 * (4 + 2) and c.flops == 0
    assert not cost(
        "triton_red_fused__log_softmax_nll_loss_forward_3", [[8192, 8192], [8192]], [BF16, LONG]
    ).known
    assert not cost("triton_tem_fused_mm_0", [[64, 64], [64, 64]], [BF16, BF16]).known
    assert not cost("mylib::fused_op", [[64, 64]], [BF16]).known


@pytest.mark.parametrize("name", ["aten::nonzero", "aten::index_put_", "aten::upsample_nearest2d"])
def test_unmodelled_ops_are_unknown(name: str) -> None:
    assert not cost(name, [[64, 64]], [F32]).known
