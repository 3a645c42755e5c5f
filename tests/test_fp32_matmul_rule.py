"""fp32-matmul covers the three ways a float32 model misses the bf16 tensor cores: fp32 GEMMs
on CUDA cores, TF32 GEMMs (half the bf16 rate), and fp32 attention (no flash kernel)."""

from __future__ import annotations

from pathlib import Path

import pytest
from synth import TraceBuilder

from gpudoctor.analysis import analyze_trace
from gpudoctor.hardware.ceilings import for_gpu_name
from gpudoctor.hardware.gemm_rate import gemm_seconds
from gpudoctor.rules.fp32_matmul import check, fp32_matrix_events
from gpudoctor.trace import parse

N = 4096
FP32 = ["float", "float"]
TF32_KERNEL = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
SIMT_KERNEL = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"
BACKWARD_NODE = "autograd::engine::evaluate_function: MmBackward0"
BF16_KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas"


def _gemm_steps(
    kernel: str, types: list[str] | None, gemm_us: float = 500.0, steps: int = 3
) -> TraceBuilder:
    t = TraceBuilder()
    for s in range(steps):
        base = s * 1000
        t.step(s, base, 1000)
        t.op("aten::mm", base + 1, 6, dims=[[N, N], [N, N]], types=types)
        corr = t.runtime("cudaLaunchKernel", base + 2, 4)
        t.kernel(kernel, base + 10, gemm_us, corr)
        t.kernel(
            "void at::native::vectorized_elementwise_kernel<4, gelu>",
            base + 10 + gemm_us,
            100,
            t.runtime("cudaLaunchKernel", base + 8, 3),
        )
        t.op(BACKWARD_NODE, base + 12, 2)  # a training step: the autograd engine ran
    return t


def _analysis(t: TraceBuilder):
    return analyze_trace(parse(t.to_bytes()), for_gpu_name("h100-sxm"))


def test_tf32_gemms_are_priced_at_the_bf16_rate_for_their_shape() -> None:
    a = _analysis(_gemm_steps(TF32_KERNEL, FP32))
    parts = fp32_matrix_events(a)
    assert [len(parts[p]) for p in ("simt", "tf32", "attention")] == [0, 3, 0]
    f = check(a)
    assert f is not None and "TF32" in f.title
    # the bf16 GEMM of 4096^3 off the reference grid (hardware/gemm_rate.py: 174.3 us on the
    # H100 SXM's datasheet roof); the casts move its smallest matrix, [4096,4096], read in fp32
    # and written in bf16 (101 MB / 3.35 TB/s = 0.030 ms)
    c = a.ceilings
    bf16_ms = float(gemm_seconds(N, N, N, "bf16", c)) * 1e3
    assert bf16_ms == pytest.approx(0.1743, abs=1e-4)
    casts_ms = N * N * (4 + 2) / c.hbm_bytes_per_s * 1e3
    assert casts_ms == pytest.approx(0.030, abs=1e-3)
    assert f.saving_ms == pytest.approx(0.5 - bf16_ms - casts_ms, rel=1e-6)
    assert f.evidence.numbers["tf32_gemm_ms_per_step"] == 0.5
    assert f.evidence.numbers["fp32_cuda_core_gemm_ms_per_step"] == 0.0
    titles = [x.title for x in f.fixes]
    assert "autocast" in titles[0] and not any(
        "set_float32_matmul_precision" in x.code for x in f.fixes
    )
    assert "mantissa" in f.fixes[0].code  # the note on accuracy comes with the fix


def test_a_tf32_gemm_never_takes_longer_than_it_ran_and_without_shapes_takes_the_roof_ratio() -> (
    None
):
    # a TF32 kernel already as fast as the grid's bf16 one keeps its time (the casts claim nothing)
    fast = check(_analysis(_gemm_steps(TF32_KERNEL, FP32, gemm_us=150.0)))
    assert fast is None or fast.saving_ms <= 0.0
    # no recorded shapes: the kernel's time at the bf16 / TF32 ratio of the ceilings
    t = _gemm_steps(TF32_KERNEL, FP32)
    for e in t.events:
        e.get("args", {}).pop("Input Dims", None)
    a = _analysis(t)
    f = check(a)
    c = a.ceilings
    casts_ms = 0.0  # no bytes known without shapes
    assert f is not None
    assert f.saving_ms == pytest.approx(
        0.5 * (1 - c.matrix_flops["tf32"] / c.best_matrix_flops) - casts_ms, rel=1e-6
    )


def test_tf32_named_kernel_counts_when_dtypes_were_not_recorded() -> None:
    # record_shapes=False: no dtypes, the kernel name is the only evidence
    t = _gemm_steps(TF32_KERNEL, FP32)
    for e in t.events:
        e.get("args", {}).pop("Input Dims", None)
        e.get("args", {}).pop("Input type", None)
    a = _analysis(t)
    assert len(fp32_matrix_events(a)["tf32"]) == 3


def test_bf16_gemms_and_split_k_reductions_are_not_tf32() -> None:
    assert check(_analysis(_gemm_steps(BF16_KERNEL, ["c10::BFloat16"] * 2))) is None
    split_k = "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false>"
    assert check(_analysis(_gemm_steps(split_k, FP32))) is None


def test_fp32_on_cuda_cores_still_suggests_tf32_as_the_smaller_step() -> None:
    f = check(_analysis(_gemm_steps(SIMT_KERNEL, FP32)))
    assert f is not None and "CUDA cores" in f.title
    assert any("set_float32_matmul_precision('high')" in x.code for x in f.fixes)


def test_fp32_attention_is_priced_at_the_fused_16_bit_rate() -> None:
    t = TraceBuilder()
    b, h, s, d = 4, 16, 2048, 64
    for i in range(3):
        base = i * 2000
        t.step(i, base, 2000)
        t.op(
            "aten::_scaled_dot_product_efficient_attention",
            base + 1,
            6,
            dims=[[b, h, s, d]] * 3,
            types=["float"] * 3,
        )
        corr = t.runtime("cudaLaunchKernel", base + 2, 4)
        t.kernel(
            "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float>::Params)",
            base + 10,
            1500,
            corr,
        )
    a = _analysis(t)
    f = check(a)
    assert f is not None and "flash" in f.title
    flops = 4.0 * b * h * s * s * d
    after_ms = flops / (a.ceilings.best_matrix_flops * 0.45) * 1e3
    assert f.saving_ms == pytest.approx(1.5 - after_ms, rel=1e-6)
    assert any("FlashAttention" in x.title for x in f.fixes)


def _math_sdpa(dtype: str) -> TraceBuilder:
    """SDPA's math fallback: scaled_dot_product_attention > _scaled_dot_product_attention_math >
    bmm, softmax, bmm, over 32 heads of 2048 x 64."""
    t = TraceBuilder()
    bh, s, d = 32, 2048, 64
    gemm = TF32_KERNEL if dtype == "float" else BF16_KERNEL
    for i in range(3):
        base = i * 5_000
        t.step(i, base, 5_000)
        t.op(
            "aten::scaled_dot_product_attention",
            base + 1,
            60,
            dims=[[1, bh, s, d]] * 3,
            types=[dtype] * 3,
        )
        t.op(
            "aten::_scaled_dot_product_attention_math",
            base + 2,
            58,
            dims=[[1, bh, s, d]] * 3,
            types=[dtype] * 3,
        )
        t.op("aten::bmm", base + 3, 10, dims=[[bh, s, d], [bh, d, s]], types=[dtype] * 2)
        t.kernel(gemm, base + 100, 900, t.runtime("cudaLaunchKernel", base + 4, 4))
        t.op("aten::_softmax", base + 20, 10, dims=[[bh, s, s]], types=[dtype])
        t.kernel(
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>",
            base + 1_000,
            1_500,
            t.runtime("cudaLaunchKernel", base + 21, 4),
        )
        t.op("aten::bmm", base + 40, 10, dims=[[bh, s, s], [bh, s, d]], types=[dtype] * 2)
        t.kernel(gemm, base + 2_500, 900, t.runtime("cudaLaunchKernel", base + 41, 4))
    return t


def test_sdpa_math_fallback_in_fp32_is_fp32_attention_not_naive_attention() -> None:
    from gpudoctor.rules.naive_attention import check as naive_check

    a = _analysis(_math_sdpa("float"))
    parts = fp32_matrix_events(a)
    assert len(parts["attention"]) == 9 and len(parts["tf32"]) == 0  # bmm, softmax, bmm x 3 steps
    f = check(a)
    assert f is not None and "flash" in f.title
    # the pattern's 3.3 ms a step, down to its two bmm's FLOPs at the fused-attention rate
    flops = 2 * (2.0 * 32 * 2048 * 2048 * 64)
    fused_ms = flops / (a.ceilings.best_matrix_flops * 0.45) * 1e3
    assert f.saving_ms == pytest.approx(3.3 - fused_ms, rel=1e-6)
    assert naive_check(a) is None


def test_sdpa_math_fallback_in_bf16_stays_naive_attention() -> None:
    from gpudoctor.rules.naive_attention import check as naive_check

    a = _analysis(_math_sdpa("c10::BFloat16"))
    assert len(fp32_matrix_events(a)["attention"]) == 0
    assert naive_check(a) is not None


@pytest.mark.parametrize("gpu", ["v100-sxm2-32gb", "t4"])
def test_a_card_without_bf16_tensor_cores_is_told_fp16_with_a_scaler(gpu: str) -> None:
    """V100 and T4 have fp16 tensor cores only, and no TF32: bf16 autocast there runs without
    tensor cores. The fixes say fp16 with a gradient scaler, and nothing of bf16 or TF32."""
    t = TraceBuilder()
    for s in range(3):  # a 1024-cube fp32 GEMM in 300 us (7 TFLOP/s) each 1 ms step
        t.step(s, s * 1000, 1000)
        t.op("aten::mm", s * 1000 + 1, 6, dims=[[1024, 1024], [1024, 1024]], types=FP32)
        t.kernel(SIMT_KERNEL, s * 1000 + 10, 300, t.runtime("cudaLaunchKernel", s * 1000 + 2, 4))
        t.op(BACKWARD_NODE, s * 1000 + 12, 2)  # a training step
    f = check(analyze_trace(parse(t.to_bytes()), for_gpu_name(gpu)))
    assert f is not None and f.saving_ms > 0.1
    codes = "\n".join(x.code for x in f.fixes)
    assert "dtype=torch.float16" in f.fixes[0].code and "GradScaler" in f.fixes[0].code
    assert "TrainingArguments(fp16=True)" in codes and "precision='16-mixed'" in codes
    assert "bfloat16" not in codes and "bf16" not in codes
    assert "set_float32_matmul_precision" not in codes


def _unshaped_steps(kernel: str) -> TraceBuilder:
    """Three 1 ms steps of one 0.8 ms GEMM from an aten::mm recorded without shapes."""
    t = TraceBuilder()
    for s in range(3):
        t.step(s, s * 1000, 1000)
        t.op("aten::mm", s * 1000 + 1, 6)
        t.kernel(kernel, s * 1000 + 10, 800, t.runtime("cudaLaunchKernel", s * 1000 + 2, 4))
    return t


def test_fp32_gemms_named_sgemm_count_without_recorded_shapes() -> None:
    """No record_shapes: no dtype, no FLOPs. cuBLAS's "volta_sgemm_*" is an fp32 GEMM on CUDA
    cores all the same. Priced as if it ran at the fp32 roof (its most FLOPs) and then at
    GEMM_EFFICIENCY of the fp16 tensor-core roof: the least the fix saves. 0.8 ms a step on a V100
    (15.7 and 125 TFLOP/s): 0.8 x (1 - 15.7 / (125 x 0.6)) = 0.633 ms."""
    t = _unshaped_steps("volta_sgemm_128x64_nn")
    a = analyze_trace(parse(t.to_bytes()), for_gpu_name("v100-sxm2-32gb"))
    assert fp32_matrix_events(a)["simt"].size == 3
    f = check(a)
    assert f is not None and "CUDA cores" in f.title
    assert f.saving_ms == pytest.approx(0.8 * (1 - 15.7 / (125 * 0.6)), rel=1e-6)
    assert "the trace records no shapes" in f.summary and "0 TFLOP/s" not in f.summary
    assert "achieved_tflops" not in f.evidence.numbers
    # a tensor-core kernel ("s884gemm": fp16 operands, fp32 out) is not one
    t2 = _unshaped_steps("volta_s884gemm_fp16_128x128_ldg8_f2f_nn")
    assert check(analyze_trace(parse(t2.to_bytes()), for_gpu_name("v100-sxm2-32gb"))) is None
    from gpudoctor.rules.shared import _SGEMM_NAME

    named = ["volta_sgemm_128x32_nt", "cutlass_simt_sgemm_128x128_8x2_nn_align1"]
    assert all(_SGEMM_NAME.search(n) for n in named)
    small_n = "gemmsn_tn_kernel<float, ...>(cublasgemmsmallnparams<...>)"  # lowered, as matched
    assert not _SGEMM_NAME.search(small_n)


TF32_CONV = "sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nchwkcrs_nchw_tilesize128x128x32_warpgroupsize1x1x1_g1_execute_kernel__5x_cudnn"
BF16_CONV = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_kernel__5x_cudnn"
LAYOUT = "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, float const*, float*)"
CONV_DIMS = [[128, 64, 64, 64], [64, 64, 3, 3], [], [], [], [], [], [], [], []]


def _conv_steps(kernels: list[str], types: list[str]) -> TraceBuilder:
    """Three steps of one convolution whose operator launches ``kernels`` (400 us each)."""
    t = TraceBuilder()
    for s in range(3):
        base = s * 2000
        t.step(s, base, 2000)
        t.op("aten::cudnn_convolution", base + 1, 20, dims=CONV_DIMS, types=types)
        for k, name in enumerate(kernels):
            corr = t.runtime("cudaLaunchKernel", base + 2 + 4 * k, 3)
            t.kernel(name, base + 30 + 400 * k, 400, corr)
        t.op(BACKWARD_NODE, base + 25, 2)  # a training step
    return t


def test_fp32_convolutions_are_tf32_at_best_and_priced_at_the_bf16_ratio() -> None:
    """cuDNN runs fp32 convolutions as TF32 by default: the kernel and the layout kernel it
    launches are priced at half their time on an H100 (TF32 / bf16 roofs, 495 / 989 TFLOP/s)."""
    a = _analysis(_conv_steps([LAYOUT, TF32_CONV], ["float", "float"] + [""] * 8))
    parts = fp32_matrix_events(a)
    assert [len(parts[p]) for p in ("simt", "tf32", "attention", "conv")] == [0, 0, 0, 6]
    f = check(a)
    assert f is not None and "Convolutions run on fp32 tensors" in f.title
    assert f.evidence.numbers["fp32_convolution_ms_per_step"] == 0.8
    ratio = a.ceilings.matrix_flops["tf32"] / a.ceilings.best_matrix_flops
    assert ratio == pytest.approx(0.5, abs=0.01)
    assert f.saving_ms == pytest.approx(0.8 * (1 - ratio), rel=1e-6)
    assert "autocast" in f.fixes[0].title
    assert not any("set_float32_matmul_precision" in x.code for x in f.fixes)


def test_bf16_convolutions_are_not_fp32_work() -> None:
    a = _analysis(_conv_steps([BF16_CONV], ["c10::BFloat16", "c10::BFloat16"] + [""] * 8))
    assert len(fp32_matrix_events(a)["conv"]) == 0
    assert check(a) is None


def test_a_served_model_is_told_to_cast_it_once_then_autocast() -> None:
    """A step with no backward (the same GEMMs, no autograd node): no optimizer keeps fp32 master
    weights, so the model cast to bf16 once comes first, autocast around the forward second, TF32
    third where the GEMMs run on CUDA cores; the wrong fix says nothing of master weights."""
    t = TraceBuilder()
    for s in range(3):
        base = s * 1000
        t.step(s, base, 1000)
        t.op("aten::mm", base + 1, 6, dims=[[N, N], [N, N]], types=FP32)
        t.kernel(SIMT_KERNEL, base + 10, 500, t.runtime("cudaLaunchKernel", base + 2, 4))
    f = check(_analysis(t))
    assert f is not None
    titles = [x.title for x in f.fixes]
    assert titles[0].startswith("Serving the model: cast it to torch.bfloat16 once")
    assert "model.to(torch.bfloat16)" in f.fixes[0].code
    assert "autocast" in titles[1] and "out = model(x)" in f.fixes[1].code
    assert "TF32" in titles[2]
    assert "bf16_full_eval=True" in f.fixes[-1].code
    assert "master weights" not in f.wrong_fix


def test_where_autocast_saves_nothing_the_finding_is_priced_by_tf32() -> None:
    """T5 in fp32 (knob set y, H100): the host holds the step, and bf16 autocast's casts cost it
    more than the 16-bit matmuls save (priced x0.94, measured x0.91); TF32 adds no cast (priced
    x1.05, measured x1.02). The finding is priced by TF32, which it lists first. The lab's fp32
    trap, where autocast saves most of the step, keeps autocast first though its TF32 replays
    faster (rules/whatif.py ALTERNATIVE_WHEN_FIRST_SAVES_UNDER)."""
    from gpudoctor.pipeline import analyze_path
    from gpudoctor.rules.whatif import PRICED_BY_FIX

    data = Path(__file__).parent / "data"
    t5 = next(f for f in analyze_path(data / "knobs_h100" / "t5_seq2seq_fp32").findings
              if f.id == "fp32-matmul")
    assert t5.fixes[0].code == "torch.set_float32_matmul_precision('high')"
    assert t5.evidence.numbers[PRICED_BY_FIX] == t5.fixes[0].title
    assert t5.predicted_speedup == pytest.approx(1.0465, abs=1e-4) and t5.severity == "minor"
    lab = next(f for f in analyze_path(data / "fp32_matmul").findings if f.id == "fp32-matmul")
    assert "autocast" in lab.fixes[0].title and PRICED_BY_FIX not in lab.evidence.numbers
    assert lab.predicted_speedup == pytest.approx(2.8991, abs=1e-4)
