"""Loading: nesting, links, classification, and every kind of bad file."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from synth import TraceBuilder

from gpudoctor.errors import InputError, TraceFormatError
from gpudoctor.trace import HostCat, Kind, load, parse
from gpudoctor.trace.kernels import classify_kernel, classify_memcpy


def _small() -> TraceBuilder:
    t = TraceBuilder()
    t.step(0, 0, 100)
    t.op("aten::linear", 10, 30, dims=[[8, 64], [64, 64], [64]])
    t.op("aten::addmm", 12, 25, dims=[[64], [8, 64], [64, 64]], flops=65536)
    corr = t.runtime("cudaLaunchKernel", 14, 5)
    t.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 20, 7, corr)
    return t


def test_links_kernel_to_launch_op_and_outer_op() -> None:
    trace = parse(_small().to_bytes())
    host, dev = trace.host, trace.device
    assert len(dev) == 1
    launch = int(dev.launch[0])
    assert trace.strings[host.name[launch]] == "cudaLaunchKernel"
    assert trace.strings[host.name[dev.op[0]]] == "aten::addmm"
    assert trace.strings[host.name[dev.top_op[0]]] == "aten::linear"
    assert dev.kind[0] == Kind.GEMM_TC
    assert trace.input_dims(int(dev.op[0])) == [[64], [8, 64], [64, 64]]
    # times are ns from the first event
    assert dev.ts[0] == 20_000 and dev.end[0] == 27_000


def test_nesting_depths_and_parents() -> None:
    trace = parse(_small().to_bytes())
    host = trace.host
    names = [trace.strings[i] for i in host.name]
    depth = dict(zip(names, host.depth.tolist()))
    assert depth == {
        "ProfilerStep#0": 0,
        "aten::linear": 1,
        "aten::addmm": 2,
        "cudaLaunchKernel": 3,
    }
    step = names.index("ProfilerStep#0")
    assert host.cat[step] == HostCat.ANNOTATION
    assert host.parent[names.index("aten::linear")] == step


def test_gzip_and_directory(tmp_path) -> None:
    _small().write(tmp_path / "trace.json.gz", gz=True)
    assert len(load(tmp_path).device) == 1
    assert len(load(tmp_path / "trace.json.gz").device) == 1


def test_directory_with_two_traces_is_refused(tmp_path) -> None:
    _small().write(tmp_path / "rank0.json")
    _small().write(tmp_path / "rank1.json")
    with pytest.raises(InputError, match="2 traces"):
        load(tmp_path)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b'{"traceEvents": [{"ph": "X"', "not valid JSON"),
        (b'{"hello": 1}', "not a profiler trace"),
        (b"[1, 2, 3]", "none of its 3 events"),
        (b"\x1f\x8b\x08\x00garbage", "truncated or corrupt gzip"),
        (b"\x00\x01binary", "not valid JSON"),
    ],
)
def test_bad_files_say_what_is_wrong(data: bytes, message: str) -> None:
    with pytest.raises(TraceFormatError, match=message):
        parse(data, source="x.json")


def test_truncated_gzip(tmp_path) -> None:
    blob = gzip.compress(_small().to_bytes())
    with pytest.raises(TraceFormatError, match="truncated or corrupt gzip"):
        parse(blob[: len(blob) // 2])


def test_fields_of_unexpected_types_are_converted_or_skipped() -> None:
    t = _small()
    t.events[0]["ts"] = "0"  # a string timestamp
    t.events.append({"ph": "X", "cat": "kernel", "name": "k", "ts": {"bad": 1}, "dur": 1})
    trace = parse(t.to_bytes())
    assert trace.skipped_events == 1
    assert len(trace.device) == 1


def test_unknown_kernel_names_are_counted_as_other() -> None:
    assert classify_kernel("my_custom_kernel_v2") == Kind.OTHER
    assert classify_kernel("<img src=x onerror=alert(1)>") == Kind.OTHER


@pytest.mark.parametrize(
    "name, kind",
    [
        ("ampere_sgemm_128x64_tn", Kind.GEMM_SIMT),
        # cuBLASLt's separate bias / activation pass over a GEMM's output: elementwise, not a GEMM
        ("void cublasLt::epilogue::impl::globalKernel<8, 32, float, float, float, true, false, 4>",
         Kind.ELEMENTWISE),
        ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false>",
         Kind.GEMM_TC),
        # cuDNN's batch norm is a normalization, not a convolution, whatever its "cudnn::"
        ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>", Kind.NORM),
        ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>", Kind.NORM),
        ("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float>", Kind.CONV),
        ("cutlass_80_simt_sgemm_256x128_8x4_nn_align1", Kind.GEMM_SIMT),
        ("gemv2T_kernel_val<int, int, float, float, float, 128, 16, 4, 4, false>", Kind.GEMM_SIMT),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", Kind.GEMM_TC),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", Kind.GEMM_TC),
        ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_32x6_tn", Kind.GEMM_TC),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>", Kind.ATTENTION),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", Kind.ATTENTION),
        (
            "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, float, 11>",
            Kind.SOFTMAX,
        ),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", Kind.SOFTMAX),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
            Kind.ELEMENTWISE,
        ),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", Kind.REDUCTION),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>", Kind.NORM),
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>",
            Kind.COPY,
        ),
        ("void at::native::(anonymous namespace)::indexSelectLargeIndex<float>", Kind.INDEX),
        (
            "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>",
            Kind.OPTIMIZER,
        ),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", Kind.NCCL),
        ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)", Kind.NCCL),
        (
            "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*)",
            Kind.NCCL,
        ),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)", Kind.NCCL),
        ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(float**)", Kind.NCCL),
        ("void (anonymous namespace)::sleep_kernel(long)", Kind.OTHER),
        ("triton_poi_fused_add_mul_0", Kind.ELEMENTWISE),
        ("triton_red_fused_sum_1", Kind.REDUCTION),
        ("triton_tem_fused_mm_2", Kind.GEMM_TC),
        ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32", Kind.CONV),
        (
            "void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(void const*)",
            Kind.ATTENTION,
        ),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3", Kind.ATTENTION),
        (
            "void at::native::elementwise_kernel<128, 4, gpu_kernel_impl_nocast<masked_fill_kernel>>",
            Kind.ELEMENTWISE,
        ),
    ],
)
def test_kernel_classification(name: str, kind: Kind) -> None:
    assert classify_kernel(name) == kind


def test_memcpy_classification() -> None:
    assert classify_memcpy("Memcpy HtoD (Pageable -> Device)") == Kind.MEMCPY_HTOD_PAGEABLE
    assert classify_memcpy("Memcpy HtoD (Pinned -> Device)") == Kind.MEMCPY_HTOD_PINNED
    assert classify_memcpy("Memcpy DtoH (Device -> Pageable)") == Kind.MEMCPY_DTOH_PAGEABLE
    assert classify_memcpy("Memcpy DtoH (Device -> Pinned)") == Kind.MEMCPY_DTOH_PINNED
    assert classify_memcpy("Memcpy DtoD (Device -> Device)") == Kind.MEMCPY_DTOD


def test_empty_event_list_loads() -> None:
    trace = parse(b'{"traceEvents": []}')
    assert len(trace.host) == 0 and len(trace.device) == 0
    assert np.array_equal(trace.device.launch, np.empty(0))


@pytest.mark.parametrize(
    "name, short",
    [
        (
            (
                "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
                "(anonymous namespace)::masked_fill_kernel(at::TensorIterator&)::{lambda()#1}>(int)"
            ),
            "at::native::elementwise_kernel<…> [masked_fill_kernel]",
        ),
        (
            "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, float, 11>(c10::BFloat16*, int)",
            "softmax_warp_forward<…>",
        ),
        (
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(cutlass_80_simt_sgemm::Params)",
            "cutlass::Kernel2<…> [cutlass_80_simt_sgemm_128x256_8x4_nt_align1]",
        ),
        ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD (Device -> Device)"),
        ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
    ],
)
def test_short_kernel_names(name: str, short: str) -> None:
    from gpudoctor.trace.kernels import short_name

    assert short_name(name) == short
