"""Record real Nsight Compute and nvidia-smi artifacts for ``gpudoctor explain``'s test fixtures.

Run on a CUDA machine (Hopper, with ``ncu`` and ``nvidia-smi``) from the repository root:

    PYTHONUNBUFFERED=1 python3 scripts/record_ncu_fixtures.py --record --out OUTDIR

``--record`` does everything in one go:

1. probes the tools (``ncu``, ``nvcc``, ``nvidia-smi``, CuPy) and records ``nvidia-smi -q`` and a
   ``nvidia-smi --query-gpu=...`` CSV (fields the driver rejects are dropped);
2. runs the workload once without the profiler (``--run-kernels --info-json``): it compiles the
   Triton kernels, checks each result against a reference, times each kernel with CUDA events and
   records Triton's register and spill counts;
3. runs the workload again under Nsight Compute, in one process::

       ncu --set full --clock-control none --target-processes all --profile-from-start off \\
           --launch-count 16 [--metrics EXTRA] --export OUTDIR/kernels --force-overwrite \\
           python3 scripts/record_ncu_fixtures.py --run-kernels

   Every kernel is warmed up first; only the one measured launch of each is inside
   ``cuProfilerStart``/``cuProfilerStop``, so warm-ups and torch's own kernels are not profiled;
4. exports the report (``--page details``, ``--page raw``, and variants) as CSV, gzipped, keeping
   ncu's stdout byte for byte;
5. writes ``meta.json`` and prints a per-kernel table last.

Other modes: ``--summarize RAW_CSV[.gz]`` prints the table from an exported raw page (no GPU), and
``--compile-check`` compiles the Triton kernels for sm_90 on a machine without a GPU (Triton's own
``ptxas -v``) to check register use, spills and that no ``tl.dot`` crept into the FMA GEMM.

The kernels, in profiling order (the name ncu shows, what it is meant to show):

========================  ===========================================================
``fma_gemm``              BAD: fp16 GEMM 2048^3 without ``tl.dot`` (CUDA-core FMA)
``dot_gemm``              GOOD: the same GEMM with ``tl.dot`` (tensor cores)
cuBLAS (``nvjet``...)     GOOD: ``torch.matmul`` bf16 4096^3
``uncoalesced_copy``      BAD: fp32 8192x4096 read column-wise (32 rows per warp load)
``coalesced_copy``        GOOD: the same bytes read row-wise
``bank_conflict_transpose``  BAD: CUDA 32x32 tile transpose, ``__shared__ float tile[32][32]``
``padded_transpose``      GOOD: the same with ``tile[32][33]``
``register_spill``        BAD: 4 live 8192-element fp32 tiles in one warp (spills to local)
``vectorized_elementwise_kernel``  GOOD: ``torch.add`` of 2^27 fp32 (memory-bound at bandwidth)
``small_grid``            BAD: 4 programs over 4096 elements (a tiny grid)
========================  ===========================================================

The transposes are CUDA C++ compiled at run time through CuPy (NVRTC); if CuPy cannot, through
``torch.utils.cpp_extension.load_inline`` (nvcc); if neither works, a Triton ``tl.trans`` transpose
stands in (``bank_conflict_transpose_triton``) and ``meta.json`` says so.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import glob
import gzip
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

SCRIPT = Path(__file__).resolve()

# ---------------------------------------------------------------------------------------------
# Problem sizes
# ---------------------------------------------------------------------------------------------
GEMM = 2048  # M = N = K for the Triton GEMMs (fp16)
CUBLAS = 4096  # M = N = K for the cuBLAS bf16 matmul
ROWS, COLS = 8192, 4096  # fp32 matrix for the copies and transposes (128 MiB)
SPILL_BLOCK = 8192  # elements per program (one warp) in register_spill
SPILL_N = 1 << 21  # elements per row of the (4, SPILL_N) input of register_spill
ADD_N = 1 << 27  # elements of each torch.add operand (512 MiB fp32)
SMALL_BLOCK, SMALL_GRID = 1024, 4

# label, kernel name ncu should show (regex), verdict, what it is meant to show
CASES = [
    (
        "fma_gemm",
        r"^fma_gemm$",
        "bad",
        "fp16 GEMM 2048^3 on CUDA cores (no tl.dot): tensor pipes idle",
    ),
    ("dot_gemm", r"^dot_gemm$", "good", "fp16 GEMM 2048^3 with tl.dot: tensor cores busy"),
    (
        "cublas_bf16_matmul",
        r"nvjet|gemm|xmma|cutlass",
        "good",
        "torch.matmul bf16 4096^3 through cuBLAS",
    ),
    (
        "uncoalesced_copy",
        r"^uncoalesced_copy$",
        "bad",
        "fp32 8192x4096 read column-wise: uncoalesced global loads",
    ),
    (
        "coalesced_copy",
        r"^coalesced_copy$",
        "good",
        "the same 128 MiB read row-wise: coalesced, at DRAM bandwidth",
    ),
    (
        "bank_conflict_transpose",
        r"bank_conflict_transpose",
        "bad",
        "32x32 shared-memory tile transpose, tile[32][32]: 32-way bank conflicts on the column read",
    ),
    (
        "padded_transpose",
        r"padded_transpose",
        "good",
        "the same transpose with tile[32][33]: no bank conflicts",
    ),
    (
        "register_spill",
        r"^register_spill$",
        "bad",
        "one warp keeps 4 x 8192 fp32 live: ptxas spills to local memory",
    ),
    ("torch_add", r"elementwise", "good", "torch.add of 2^27 fp32: memory-bound at full bandwidth"),
    (
        "small_grid",
        r"^small_grid$",
        "bad",
        "grid=(4,) over 4096 elements: a tiny grid, most SMs idle",
    ),
]

# Metrics added to --set full (each kept only if ncu --query-metrics knows its base name).
EXTRA_METRICS = [
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "smsp__sass_inst_executed_op_shared_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
    "smsp__sass_inst_executed_op_local_ld.sum",
    "smsp__sass_inst_executed_op_local_st.sum",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
]

NVSMI_FIELDS = [
    "name",
    "pci.bus_id",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks.sm",
    "clocks.max.sm",
    "clocks.mem",
    "clocks.max.mem",
    "clocks_throttle_reasons.active",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "utilization.gpu",
    "memory.used",
    "memory.total",
]

TRANSPOSE_CU = r"""
#define TILE 32
#define ROWS_PER_PASS 8
// in: height x width (row-major), out: width x height. Block (32, 8), grid (width/32, height/32).
extern "C" __global__ void bank_conflict_transpose(float* __restrict__ out,
                                                   const float* __restrict__ in,
                                                   int width, int height) {
    __shared__ float tile[TILE][TILE];  // column reads hit one bank: 32-way conflicts
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * width + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        out[(size_t)(y + j) * height + x] = tile[threadIdx.x][threadIdx.y + j];
}

extern "C" __global__ void padded_transpose(float* __restrict__ out,
                                            const float* __restrict__ in,
                                            int width, int height) {
    __shared__ float tile[TILE][TILE + 1];  // one word of padding: no conflicts
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * width + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
    for (int j = 0; j < TILE; j += ROWS_PER_PASS)
        out[(size_t)(y + j) * height + x] = tile[threadIdx.x][threadIdx.y + j];
}
"""

TRANSPOSE_CPP_WRAPPER = (
    r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
"""
    + TRANSPOSE_CU
    + r"""
void launch_transpose(torch::Tensor out, torch::Tensor in, int64_t which) {
    int height = in.size(0), width = in.size(1);
    dim3 block(32, 8), grid(width / 32, height / 32);
    auto stream = at::cuda::getCurrentCUDAStream();
    if (which == 0)
        bank_conflict_transpose<<<grid, block, 0, stream>>>(out.data_ptr<float>(), in.data_ptr<float>(), width, height);
    else
        padded_transpose<<<grid, block, 0, stream>>>(out.data_ptr<float>(), in.data_ptr<float>(), width, height);
}
"""
)


# ---------------------------------------------------------------------------------------------
# Triton kernels (defined lazily so that --summarize needs neither torch nor triton)
# ---------------------------------------------------------------------------------------------
def triton_kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def fma_gemm(
        a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr
    ):
        # C = A @ B with a broadcast product summed over K on the LAST axis: Triton's combine
        # pass only turns sum(x[:, :, None] * y[None, :, :], axis=1) into tt.dot, so this stays
        # plain FMUL/FADD/FFMA on the CUDA cores.
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :]).to(tl.float32)  # BM x BK
            bt = tl.load(b_ptr + (k0 + rk)[None, :] * N + rn[:, None]).to(tl.float32)  # BN x BK
            acc += tl.sum(a[:, None, :] * bt[None, :, :], axis=2)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))

    @triton.jit
    def dot_gemm(
        a_ptr,
        b_ptr,
        c_ptr,
        M,
        N,
        K,
        BM: tl.constexpr,
        BN: tl.constexpr,
        BK: tl.constexpr,
        GROUP: tl.constexpr,
    ):
        pid = tl.program_id(0)
        num_m = tl.cdiv(M, BM)
        num_n = tl.cdiv(N, BN)
        in_group = GROUP * num_n
        group = pid // in_group
        first_m = group * GROUP
        size_m = min(num_m - first_m, GROUP)
        pid_m = first_m + (pid % in_group) % size_m
        pid_n = (pid % in_group) // size_m
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a_ptrs = a_ptr + rm[:, None] * K + rk[None, :]
        b_ptrs = b_ptr + rk[:, None] * N + rn[None, :]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, K, BK):
            acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
            a_ptrs += BK
            b_ptrs += BK * N
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))

    @triton.jit
    def uncoalesced_copy(x_ptr, y_ptr, R, C, BLOCK_R: tl.constexpr):
        # y (C x R) = x (R x C) transposed, one column of x per program: the 32 lanes of a warp
        # read 32 different rows (stride C * 4 bytes), so every load touches 32 sectors.
        pid = tl.program_id(0)
        n_rb = R // BLOCK_R
        col = pid // n_rb
        rows = (pid % n_rb) * BLOCK_R + tl.arange(0, BLOCK_R)
        v = tl.load(x_ptr + rows * C + col)
        tl.store(y_ptr + col * R + rows, v)

    @triton.jit
    def coalesced_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs))

    @triton.jit
    def register_spill(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        # Four BLOCK-wide fp32 tiles per program, all live until a chain of reductions ends:
        # with num_warps=1 that is 4 * BLOCK / 32 values per thread, far past 255 registers.
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x0 = tl.load(x_ptr + offs)
        x1 = tl.load(x_ptr + n + offs)
        x2 = tl.load(x_ptr + 2 * n + offs)
        x3 = tl.load(x_ptr + 3 * n + offs)
        s0 = tl.max(x0, axis=0)
        s1 = tl.max(x1 * s0, axis=0)
        s2 = tl.max(x2 * s1, axis=0)
        s3 = tl.max(x3 * s2, axis=0)
        tl.store(y_ptr + offs, x0 * s3 + x1 * s2 + x2 * s1 + x3 * s0)

    @triton.jit
    def small_grid(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0 + 1.0)

    @triton.jit
    def bank_conflict_transpose_triton(x_ptr, y_ptr, R, C, T: tl.constexpr):
        # Fallback only (no CUDA compiler): Triton lays out shared memory itself.
        pid_r = tl.program_id(0)
        pid_c = tl.program_id(1)
        r = pid_r * T + tl.arange(0, T)
        c = pid_c * T + tl.arange(0, T)
        tile = tl.load(x_ptr + r[:, None] * C + c[None, :])
        tl.store(y_ptr + c[:, None] * R + r[None, :], tl.trans(tile))

    return {
        "fma_gemm": fma_gemm,
        "dot_gemm": dot_gemm,
        "uncoalesced_copy": uncoalesced_copy,
        "coalesced_copy": coalesced_copy,
        "register_spill": register_spill,
        "small_grid": small_grid,
        "bank_conflict_transpose_triton": bank_conflict_transpose_triton,
    }


TRITON_CONFIG = {
    "fma_gemm": {"BM": 32, "BN": 32, "BK": 8, "num_warps": 4, "num_stages": 2},
    "dot_gemm": {"BM": 128, "BN": 128, "BK": 64, "GROUP": 8, "num_warps": 8, "num_stages": 3},
    "uncoalesced_copy": {"BLOCK_R": 1024, "num_warps": 4},
    "coalesced_copy": {"BLOCK": 1024, "num_warps": 4},
    "register_spill": {"BLOCK": SPILL_BLOCK, "num_warps": 1},
    "small_grid": {"BLOCK": SMALL_BLOCK, "num_warps": 4},
    "bank_conflict_transpose_triton": {"T": 64, "num_warps": 4},
}


# ---------------------------------------------------------------------------------------------
# CUDA driver profiler range (ncu --profile-from-start off honours cuProfilerStart/Stop)
# ---------------------------------------------------------------------------------------------
class ProfilerRange:
    def __init__(self, enabled: bool):
        self.lib = None
        if enabled:
            import ctypes

            self.lib = ctypes.CDLL("libcuda.so.1")

    def start(self):
        if self.lib is not None:
            rc = self.lib.cuProfilerStart()
            if rc != 0:
                print(f"cuProfilerStart returned {rc}", file=sys.stderr)

    def stop(self):
        if self.lib is not None:
            rc = self.lib.cuProfilerStop()
            if rc != 0:
                print(f"cuProfilerStop returned {rc}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Transposes: CuPy (NVRTC) -> load_inline (nvcc) -> Triton
# ---------------------------------------------------------------------------------------------
def build_transposes(backend: str):
    """Return (backend_used, launch(which, out, inp), notes)."""
    import torch

    errors = {}
    order = ["cupy", "load_inline", "triton"] if backend == "auto" else [backend]
    for name in order:
        try:
            if name == "cupy":
                import cupy as cp

                mod = cp.RawModule(code=TRANSPOSE_CU, options=("-std=c++17",))
                kerns = [
                    mod.get_function("bank_conflict_transpose"),
                    mod.get_function("padded_transpose"),
                ]

                def launch(which, out, inp, kerns=kerns, cp=cp):
                    h, w = inp.shape
                    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
                    with stream:
                        kerns[which](
                            (w // 32, h // 32),
                            (32, 8),
                            (cp.asarray(out), cp.asarray(inp), cp.int32(w), cp.int32(h)),
                        )

                return "cupy", launch, errors
            if name == "load_inline":
                from torch.utils.cpp_extension import load_inline

                os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/tmp/gpudoctor_torch_ext")
                ext = load_inline(
                    name="gpudoctor_transpose",
                    cpp_sources="void launch_transpose(torch::Tensor out, torch::Tensor in, int64_t which);",
                    cuda_sources=TRANSPOSE_CPP_WRAPPER,
                    functions=["launch_transpose"],
                    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
                    verbose=False,
                )

                def launch(which, out, inp, ext=ext):
                    ext.launch_transpose(out, inp, which)

                return "load_inline", launch, errors
            if name == "triton":
                kern = triton_kernels()["bank_conflict_transpose_triton"]
                cfg = dict(TRITON_CONFIG["bank_conflict_transpose_triton"])

                def launch(which, out, inp, kern=kern, cfg=cfg):
                    if which != 0:
                        return  # no GOOD twin in the fallback
                    r, c = inp.shape
                    kern[(r // cfg["T"], c // cfg["T"])](inp, out, r, c, **cfg)

                return "triton", launch, errors
        except Exception as exc:  # noqa: BLE001 - record and fall through
            errors[name] = f"{type(exc).__name__}: {exc}"[:2000]
    return "none", None, errors


# ---------------------------------------------------------------------------------------------
# The workload
# ---------------------------------------------------------------------------------------------
def run_kernels(args) -> int:
    import torch

    kern = triton_kernels()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    info: dict = {"cases": {}, "order": []}
    prof = ProfilerRange(enabled=not args.no_profiler_range)
    skip = set(filter(None, (args.skip or "").split(",")))

    # ---- data (all allocated and initialised before any profiled launch) ----
    a16 = torch.randn(GEMM, GEMM, device=dev, dtype=torch.float16)
    b16 = torch.randn(GEMM, GEMM, device=dev, dtype=torch.float16)
    c_fma = torch.empty(GEMM, GEMM, device=dev, dtype=torch.float16)
    c_dot = torch.empty_like(c_fma)
    abf = torch.randn(CUBLAS, CUBLAS, device=dev, dtype=torch.bfloat16)
    bbf = torch.randn(CUBLAS, CUBLAS, device=dev, dtype=torch.bfloat16)
    cbf = torch.empty(CUBLAS, CUBLAS, device=dev, dtype=torch.bfloat16)
    xm = torch.randn(ROWS, COLS, device=dev, dtype=torch.float32)
    y_unc = torch.empty(COLS, ROWS, device=dev, dtype=torch.float32)
    y_coa = torch.empty(ROWS, COLS, device=dev, dtype=torch.float32)
    y_bank = torch.empty(COLS, ROWS, device=dev, dtype=torch.float32)
    y_pad = torch.empty(COLS, ROWS, device=dev, dtype=torch.float32)
    xs = torch.rand(4, SPILL_N, device=dev, dtype=torch.float32)
    ys = torch.empty(SPILL_N, device=dev, dtype=torch.float32)
    p = torch.randn(ADD_N, device=dev, dtype=torch.float32)
    q = torch.randn(ADD_N, device=dev, dtype=torch.float32)
    r = torch.empty(ADD_N, device=dev, dtype=torch.float32)
    xsm = torch.randn(SMALL_BLOCK * SMALL_GRID, device=dev, dtype=torch.float32)
    ysm = torch.empty_like(xsm)

    t0 = time.time()
    backend, tlaunch, terrs = ("skipped", None, {})
    if not ({"bank_conflict_transpose", "padded_transpose"} <= skip):
        backend, tlaunch, terrs = build_transposes(args.transpose_backend)
    info["transpose_backend"] = backend
    info["transpose_backend_errors"] = terrs
    info["transpose_build_s"] = round(time.time() - t0, 2)
    print(
        f"transpose backend: {backend} ({info['transpose_build_s']} s) errors={terrs}", flush=True
    )

    cfg = TRITON_CONFIG

    def tri(name, grid, *a):
        return kern[name][grid](*a, **cfg[name])

    launches = {
        "fma_gemm": lambda: tri(
            "fma_gemm", (GEMM // 32, GEMM // 32), a16, b16, c_fma, GEMM, GEMM, GEMM
        ),
        "dot_gemm": lambda: tri(
            "dot_gemm", ((GEMM // 128) * (GEMM // 128),), a16, b16, c_dot, GEMM, GEMM, GEMM
        ),
        "cublas_bf16_matmul": lambda: torch.matmul(abf, bbf, out=cbf),
        "uncoalesced_copy": lambda: tri(
            "uncoalesced_copy", (COLS * (ROWS // 1024),), xm, y_unc, ROWS, COLS
        ),
        "coalesced_copy": lambda: tri(
            "coalesced_copy", (ROWS * COLS // 1024,), xm, y_coa, ROWS * COLS
        ),
        "bank_conflict_transpose": lambda: tlaunch(0, y_bank, xm),
        "padded_transpose": lambda: tlaunch(1, y_pad, xm),
        "register_spill": lambda: tri("register_spill", (SPILL_N // SPILL_BLOCK,), xs, ys, SPILL_N),
        "torch_add": lambda: torch.add(p, q, out=r),
        "small_grid": lambda: tri("small_grid", (SMALL_GRID,), xsm, ysm),
    }
    if tlaunch is None:
        skip |= {"bank_conflict_transpose", "padded_transpose"}
    if backend == "triton":
        skip.add("padded_transpose")

    def check(label) -> float | None:
        if label == "fma_gemm":
            ref = a16.float() @ b16.float()
            return float(((c_fma.float() - ref).abs().max() / ref.abs().max()).item())
        if label == "dot_gemm":
            ref = a16.float() @ b16.float()
            return float(((c_dot.float() - ref).abs().max() / ref.abs().max()).item())
        if label == "uncoalesced_copy":
            return float((y_unc - xm.t()).abs().max().item())
        if label == "coalesced_copy":
            return float((y_coa - xm).abs().max().item())
        if label == "bank_conflict_transpose":
            return float((y_bank - xm.t()).abs().max().item())
        if label == "padded_transpose":
            return float((y_pad - xm.t()).abs().max().item())
        if label == "register_spill":
            x0, x1, x2, x3 = xs
            s0 = x0.view(-1, SPILL_BLOCK).amax(1, keepdim=True)
            s1 = (x1.view(-1, SPILL_BLOCK) * s0).amax(1, keepdim=True)
            s2 = (x2.view(-1, SPILL_BLOCK) * s1).amax(1, keepdim=True)
            s3 = (x3.view(-1, SPILL_BLOCK) * s2).amax(1, keepdim=True)
            ref = (
                x0.view(-1, SPILL_BLOCK) * s3
                + x1.view(-1, SPILL_BLOCK) * s2
                + x2.view(-1, SPILL_BLOCK) * s1
                + x3.view(-1, SPILL_BLOCK) * s0
            ).view(-1)
            return float((ys - ref).abs().max().item())
        if label == "torch_add":
            return 0.0
        if label == "small_grid":
            return float((ysm - (xsm * 2 + 1)).abs().max().item())
        return None

    # ---- warm-up: compile and run each once, check it, record Triton's reg/spill counts ----
    ok = []
    for label, *_ in CASES:
        if label in skip:
            info["cases"][label] = {"skipped": True}
            continue
        entry = info["cases"].setdefault(label, {})
        try:
            t0 = time.time()
            res = launches[label]()
            torch.cuda.synchronize()
            entry["first_launch_s"] = round(time.time() - t0, 3)
            for attr in ("n_regs", "n_spills", "name"):
                if hasattr(res, attr) and not callable(getattr(res, attr)):
                    entry[f"triton_{attr}"] = getattr(res, attr)
            meta = getattr(res, "metadata", None)
            if meta is not None:
                for attr in ("shared", "num_warps", "num_stages", "name"):
                    if hasattr(meta, attr):
                        entry[f"triton_{attr}"] = getattr(meta, attr)
            if label in ("dot_gemm", "fma_gemm", "register_spill") and hasattr(res, "asm"):
                sass_like = res.asm.get("ptx", "")
                entry["ptx_has_wgmma"] = "wgmma" in sass_like
                entry["ptx_has_mma_sync"] = "mma.sync" in sass_like
                entry["ptx_local_ld_st"] = len(re.findall(r"\b(?:ld|st)\.local", sass_like))
            entry["max_abs_err"] = check(label)
            ok.append(label)
        except Exception as exc:  # noqa: BLE001
            entry["error"] = f"{type(exc).__name__}: {exc}"[:3000]
            traceback.print_exc()
    torch.cuda.synchronize()

    # ---- timings (CUDA events, median of 5, not under the profiler) ----
    if args.time:
        for label in ok:
            times = []
            for _ in range(5):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                launches[label]()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e))
            times.sort()
            info["cases"][label]["event_ms_median"] = round(times[len(times) // 2], 4)
    torch.cuda.synchronize()

    # ---- the profiled launches: one each, inside the profiler range ----
    prof.start()
    for label in ok:
        info["order"].append(label)
        launches[label]()
    torch.cuda.synchronize()
    prof.stop()

    info["torch"] = torch.__version__
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception as exc:  # noqa: BLE001
        info["triton"] = f"unavailable: {exc}"
    try:
        import cupy

        info["cupy"] = cupy.__version__
    except Exception as exc:  # noqa: BLE001
        info["cupy"] = f"unavailable: {exc}"
    props = torch.cuda.get_device_properties(0)
    info["device"] = {
        "name": props.name,
        "sm_count": props.multi_processor_count,
        "total_memory": props.total_memory,
        "capability": f"{props.major}.{props.minor}",
        "l2_bytes": getattr(props, "L2_cache_size", None),
    }
    if args.info_json:
        Path(args.info_json).write_text(json.dumps(info, indent=2, default=str))
    print(json.dumps({k: v for k, v in info["cases"].items()}, default=str), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# Recording (orchestration)
# ---------------------------------------------------------------------------------------------
def sh(cmd, timeout=120, **kw):
    """Run a command; return (rc, stdout, stderr) as text, never raise."""
    try:
        p = subprocess.run(
            cmd,
            check=False,
            capture_output=True,
            timeout=timeout,
            text=True,
            shell=isinstance(cmd, str),
            **kw,
        )
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        return (
            124,
            (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""),
            "TIMEOUT",
        )
    except Exception as exc:  # noqa: BLE001
        return 127, "", f"{type(exc).__name__}: {exc}"


def find_ncu() -> str | None:
    path = shutil.which("ncu")
    if path:
        return path
    for pat in (
        "/usr/local/cuda*/bin/ncu",
        "/opt/nvidia/nsight-compute/*/ncu",
        "/usr/local/cuda*/nsight-compute*/ncu",
    ):
        hits = sorted(glob.glob(pat))
        if hits:
            return hits[-1]
    return None


def gz(src: Path, dst: Path):
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)


def record(args) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    extras = work / "extras"
    extras.mkdir(exist_ok=True)
    meta: dict = {
        "recorded_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host_platform": platform.platform(),
        "python": sys.version.split()[0],
        "script": "scripts/record_ncu_fixtures.py",
        "commands": {},
        "steps": {},
    }
    t_all = time.time()

    def step(name, t0, **kv):
        meta["steps"][name] = {"s": round(time.time() - t0, 2), **kv}
        print(f"[{time.time() - t_all:7.1f}s] {name}: {kv}", flush=True)

    # ---- tools ----
    t0 = time.time()
    ncu = find_ncu()
    meta["ncu_path"] = ncu
    meta["ncu_version"] = sh([ncu, "--version"])[1].strip() if ncu else None
    rc, o, e = sh(
        "which nvcc; ls -d /usr/local/cuda*/bin/nvcc 2>/dev/null; nvcc --version 2>&1 | tail -2"
    )
    meta["nvcc"] = o.strip()
    rc, o, e = sh(["nvidia-smi", "--version"])
    meta["nvidia_smi_version"] = o.strip()
    rc, o, e = sh(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,vbios_version,pci.bus_id,memory.total",
            "--format=csv,noheader",
        ]
    )
    meta["gpu"] = o.strip()
    if ncu:
        (extras / "ncu_help.txt").write_text(sh([ncu, "--help"])[1])
    step("tools", t0, ncu=ncu, nvcc=meta["nvcc"][:200])

    # ---- nvidia-smi ----
    t0 = time.time()
    rc, o, e = sh(["nvidia-smi", "-q"])
    (out / "nvidia-smi-q.txt").write_text(o)
    fields = list(NVSMI_FIELDS)
    help_q = sh(["nvidia-smi", "--help-query-gpu"])[1]
    (extras / "nvidia-smi-help-query-gpu.txt").write_text(help_q)
    q = lambda fl: sh(["nvidia-smi", f"--query-gpu={','.join(fl)}", "--format=csv"])
    rc, o, e = q(fields)
    dropped = []
    if rc != 0:
        keep = []
        for f in fields:
            if q([f])[0] == 0:
                keep.append(f)
            else:
                dropped.append(f)
        if (
            "clocks_throttle_reasons.active" in dropped
            and q(["clocks_event_reasons.active"])[0] == 0
        ):
            keep.insert(
                fields.index("clocks_throttle_reasons.active"), "clocks_event_reasons.active"
            )
        fields = keep
        rc, o, e = q(fields)
    (out / "nvidia-smi-query.csv").write_text(o)
    meta["commands"]["nvidia_smi_query"] = f"nvidia-smi --query-gpu={','.join(fields)} --format=csv"
    meta["nvidia_smi_query_dropped_fields"] = dropped
    step("nvidia-smi", t0, rc=rc, dropped=dropped)

    # ---- warm run (no profiler) ----
    t0 = time.time()
    warm_json = work / "warm.json"
    env = dict(os.environ, PYTHONUNBUFFERED="1", TORCH_EXTENSIONS_DIR="/tmp/gpudoctor_torch_ext")
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--run-kernels",
        "--no-profiler-range",
        "--time",
        "--info-json",
        str(warm_json),
    ]
    rc, o, e = sh(cmd, timeout=args.warm_timeout, env=env)
    (extras / "warm_run.log").write_text(o + "\n--- stderr ---\n" + e)
    warm = json.loads(warm_json.read_text()) if warm_json.exists() else {}
    meta["warm_run"] = warm
    failed = [k for k, v in warm.get("cases", {}).items() if "error" in v]
    step("warm_run", t0, rc=rc, failed=failed, transpose_backend=warm.get("transpose_backend"))
    if rc != 0:
        print(e[-4000:], flush=True)

    # ---- ncu run ----
    if not ncu:
        meta["error"] = "ncu not found"
    else:
        t0 = time.time()
        rc_q, o_q, e_q = sh([ncu, "--query-metrics"], timeout=120)
        (extras / "ncu_query_metrics.txt").write_text(o_q + e_q)
        known = set(re.findall(r"^\s*([a-z0-9]+__[A-Za-z0-9_]+)", o_q, flags=re.MULTILINE))
        extra = [m for m in EXTRA_METRICS if m.split(".")[0] in known] if known else []
        meta["extra_metrics"] = extra
        meta["extra_metrics_unknown"] = [m for m in EXTRA_METRICS if m not in extra]
        step("query_metrics", t0, rc=rc_q, known=len(known), extra=len(extra))

        rep = work / "kernels"
        backend = warm.get("transpose_backend")
        skip = list(failed)
        if warm and backend not in ("cupy", "load_inline", "triton"):
            skip += ["bank_conflict_transpose", "padded_transpose"]
        child = [
            sys.executable,
            str(SCRIPT),
            "--run-kernels",
            "--transpose-backend",
            backend if backend in ("cupy", "load_inline", "triton") else "auto",
        ]
        if skip:
            child += ["--skip", ",".join(sorted(set(skip)))]
        base = [
            ncu,
            "--set",
            "full",
            "--clock-control",
            "none",
            "--target-processes",
            "all",
            "--profile-from-start",
            "off",
            "--launch-count",
            "16",
        ]
        tail = ["--export", str(rep), "--force-overwrite"] + child
        attempts = ([base + ["--metrics", ",".join(extra)] + tail] if extra else []) + [base + tail]
        for i, full in enumerate(attempts):
            t0 = time.time()
            rc, o, e = sh(full, timeout=args.ncu_timeout, env=env)
            (extras / f"ncu_profile_attempt{i}.log").write_text(
                " ".join(full) + "\n--- stdout ---\n" + o + "\n--- stderr ---\n" + e
            )
            made = Path(str(rep) + ".ncu-rep").exists()
            kernels = 0
            if made:  # a report can exist and be empty (e.g. a metric failed at the first kernel)
                raw = sh(
                    [ncu, "--import", str(rep) + ".ncu-rep", "--csv", "--page", "raw"], timeout=120
                )[1]
                kernels = max(0, sum(1 for l in raw.splitlines() if l.startswith('"')) - 2)
            step(f"ncu_profile_{i}", t0, rc=rc, report=made, kernels=kernels)
            if made and kernels > 0:
                meta["commands"]["ncu_profile"] = (
                    " ".join(full)
                    .replace(str(work), "$OUT")
                    .replace(sys.executable, "python3")
                    .replace(str(SCRIPT), "scripts/record_ncu_fixtures.py")
                )
                meta["ncu_profile_stdout_tail"] = (o + e)[-6000:]
                break
            print((o + e)[-3000:], flush=True)
            if time.time() - t0 > 120:  # a slow failure would only repeat: no second attempt
                break

        repf = Path(str(rep) + ".ncu-rep")
        if repf.exists():
            meta["ncu_rep_bytes"] = repf.stat().st_size
            exports = {
                "details.csv": ["--csv", "--page", "details"],
                "raw.csv": ["--csv", "--page", "raw"],
                "details_base.csv": ["--csv", "--page", "details", "--print-units", "base"],
                "details_names.csv": ["--csv", "--page", "details", "--print-metric-name", "name"],
                "details_all.csv": ["--csv", "--page", "details", "--print-details", "all"],
                "details_rules.csv": ["--csv", "--page", "details", "--print-rule-details"],
                "session.csv": ["--csv", "--page", "session"],
                "details.txt": ["--page", "details"],
            }
            meta["exports"] = {}
            for fname, opts in exports.items():
                t0 = time.time()
                c = [ncu, "--import", str(repf)] + opts
                rc, o, e = sh(c, timeout=180)
                dst = (work if fname in ("details.csv", "raw.csv") else extras) / fname
                dst.write_text(o)
                meta["exports"][fname] = {
                    "cmd": "ncu --import kernels.ncu-rep " + " ".join(opts),
                    "rc": rc,
                    "bytes": len(o),
                    "stderr": e[-1500:],
                }
                step(f"export {fname}", t0, rc=rc, bytes=len(o))
            for fname in ("details.csv", "raw.csv"):
                if (work / fname).exists():
                    gz(work / fname, out / f"ncu_kernels_{fname}.gz")
            if repf.stat().st_size <= args.max_rep_bytes:
                gz(repf, out / "kernels.ncu-rep.gz")
                meta["ncu_rep_kept"] = True
            else:
                meta["ncu_rep_kept"] = False

    # ---- the card after the workload ----
    (extras / "nvidia-smi-query-after.csv").write_text(q(fields)[1])

    # ---- meta, extras, table ----
    meta["total_s"] = round(time.time() - t_all, 1)
    meta["cases"] = [
        {"label": l, "kernel_regex": rx, "verdict": v, "meant_to_show": d} for l, rx, v, d in CASES
    ]
    (out / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
    with tarfile.open(out / "extras.tar.gz", "w:gz") as tar:
        for f in sorted(extras.iterdir()):
            tar.add(f, arcname=f"extras/{f.name}")
    if (work / "raw.csv").exists():
        print(summarize(work / "raw.csv"), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# Summary table from the raw page
# ---------------------------------------------------------------------------------------------
SUMMARY_COLUMNS = [
    ("duration", ["gpu__time_duration.sum"]),
    ("SM%", ["sm__throughput.avg.pct_of_peak_sustained_elapsed"]),
    (
        "DRAM%",
        [
            "dram__throughput.avg.pct_of_peak_sustained_elapsed",
            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        ],
    ),
    ("Mem%", ["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"]),
    (
        "tensor%",
        [
            "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active",
            "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active",
        ],
    ),
    ("hmma%", ["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"]),
    ("fma%", ["sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"]),
    ("occ%", ["sm__warps_active.avg.pct_of_peak_sustained_active"]),
    ("regs", ["launch__registers_per_thread"]),
    ("grid", ["launch__grid_size"]),
    ("waves", ["launch__waves_per_multiprocessor"]),
    ("local_ld", ["smsp__sass_inst_executed_op_local_ld.sum"]),
    ("local_st", ["smsp__sass_inst_executed_op_local_st.sum"]),
    ("bank_ld", ["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"]),
    ("bank_st", ["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"]),
    ("sect/req", []),  # computed
    ("excess_sect", ["derived__memory_l2_theoretical_sectors_global_excessive"]),
    ("excess_shm_wf", ["derived__memory_l1_wavefronts_shared_excessive"]),
    ("top_stall", []),  # computed
]
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"
TIME_TO_US = {
    "nsecond": 1e-3,
    "ns": 1e-3,
    "usecond": 1,
    "us": 1,
    "msecond": 1e3,
    "ms": 1e3,
    "second": 1e6,
    "s": 1e6,
}


def read_raw(path: Path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        text = f.read()
    lines = text.splitlines(keepends=True)
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), 0)
    rows = list(csv.reader(io.StringIO("".join(lines[start:]))))
    header, units, data = rows[0], rows[1], rows[2:]
    return header, units, data


def num(s: str):
    try:
        return float(s.replace(",", ""))
    except (ValueError, AttributeError):
        return None


def summarize(path: Path) -> str:
    header, units, data = read_raw(path)
    col = {h: i for i, h in enumerate(header)}
    out = []
    names = ["kernel"] + [n for n, _ in SUMMARY_COLUMNS]
    rows = []
    for row in data:
        if not row or len(row) < len(header):
            continue
        name = row[col.get("Kernel Name", 4)]
        short = re.split(r"[(<]", name)[0][:34]
        vals = [short]
        for label, cands in SUMMARY_COLUMNS:
            v = ""
            if label == "duration":
                for c in cands:
                    if c in col:
                        x = num(row[col[c]])
                        unit = units[col[c]]
                        if x is not None:
                            us = TIME_TO_US.get(unit)
                            v = f"{x * us:.1f}us" if us else f"{row[col[c]]}{unit}"
                        break
            elif label == "top_stall":
                stalls = []
                for name_, i in col.items():
                    if name_.startswith(STALL_PREFIX) and name_.endswith(STALL_SUFFIX):
                        reason = name_[len(STALL_PREFIX) : -len(STALL_SUFFIX)]
                        x = num(row[i])
                        if reason != "selected" and x is not None:
                            stalls.append((x, reason))
                if stalls:
                    x, reason = max(stalls)
                    v = f"{reason}:{x:.1f}"
            elif label == "sect/req":
                s = col.get("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
                r = col.get("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
                if s is not None and r is not None and num(row[r]):
                    v = f"{num(row[s]) / num(row[r]):.1f}"
            else:
                for c in cands:
                    if c in col and row[col[c]] not in ("", "n/a"):
                        v = row[col[c]]
                        break
            vals.append(v)
        rows.append(vals)
    widths = [max(len(str(r[i])) for r in rows + [names]) for i in range(len(names))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out.append(fmt.format(*names))
    for r in rows:
        out.append(fmt.format(*r))
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# CPU-side compile check (no GPU): Triton -> PTX for sm_90, then Triton's ptxas -v
# ---------------------------------------------------------------------------------------------
def compile_check() -> int:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kern = triton_kernels()
    target = GPUTarget("cuda", 90, 32)
    sigs = {
        "fma_gemm": {
            "a_ptr": "*fp16",
            "b_ptr": "*fp16",
            "c_ptr": "*fp16",
            "M": "i32",
            "N": "i32",
            "K": "i32",
        },
        "dot_gemm": {
            "a_ptr": "*fp16",
            "b_ptr": "*fp16",
            "c_ptr": "*fp16",
            "M": "i32",
            "N": "i32",
            "K": "i32",
        },
        "uncoalesced_copy": {"x_ptr": "*fp32", "y_ptr": "*fp32", "R": "i32", "C": "i32"},
        "coalesced_copy": {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"},
        "register_spill": {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"},
        "small_grid": {"x_ptr": "*fp32", "y_ptr": "*fp32"},
        "bank_conflict_transpose_triton": {
            "x_ptr": "*fp32",
            "y_ptr": "*fp32",
            "R": "i32",
            "C": "i32",
        },
    }
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    for name, sig in sigs.items():
        cfg = dict(TRITON_CONFIG[name])
        opts = {k: cfg.pop(k) for k in ("num_warps", "num_stages") if k in cfg}
        fn = kern[name]
        full_sig = dict(sig)
        for k in cfg:
            full_sig[k] = "constexpr"
        # At launch Triton marks pointers and ints divisible by 16 as such; every size here is.
        attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(sig))}
        src = ASTSource(
            fn,
            full_sig,
            constexprs={(fn.arg_names.index(k),): v for k, v in cfg.items()},
            attrs=attrs,
        )
        t0 = time.time()
        try:
            ck = triton.compile(src, target=target, options=opts)
        except Exception as exc:  # noqa: BLE001
            print(f"{name}: compile failed: {type(exc).__name__}: {str(exc)[:500]}")
            continue
        ptx = ck.asm["ptx"]
        ttgir = ck.asm.get("ttgir", "")
        tmp = Path("/tmp") / f"cc_{name}.ptx"
        tmp.write_text(ptx)
        _rc, o, e = sh([str(ptxas), "--gpu-name", "sm_90a", "-v", str(tmp), "-o", "/dev/null"])
        regs = re.findall(r"Used (\d+) registers", e + o)
        spill = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", e + o)
        stack = re.findall(r"(\d+) bytes stack frame", e + o)
        print(
            f"{name:32s} {time.time() - t0:5.1f}s regs={regs} stack={stack} spill(st,ld)={spill} "
            f"tt.dot={'tt.dot' in ttgir or 'warp_group_dot' in ttgir} wgmma={'wgmma' in ptx} "
            f"mma.sync={'mma.sync' in ptx} ld.local={len(re.findall(r'ld.local', ptx))} "
            f"shared={ck.metadata.shared}"
        )
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument(
        "--record", action="store_true", help="probe, warm run, ncu run, exports, meta, table"
    )
    mode.add_argument("--run-kernels", action="store_true", help="the workload (run under ncu)")
    mode.add_argument(
        "--summarize", metavar="RAW_CSV", help="print the table from an exported raw page"
    )
    mode.add_argument(
        "--compile-check", action="store_true", help="compile the Triton kernels for sm_90 (no GPU)"
    )
    ap.add_argument(
        "--out", default="ncu_fixtures_out", help="--record: what to keep (small files)"
    )
    ap.add_argument("--work", default="/tmp/gpudoctor_ncu_work", help="--record: scratch folder")
    ap.add_argument("--info-json", help="--run-kernels: write per-kernel facts here")
    ap.add_argument(
        "--no-profiler-range", action="store_true", help="--run-kernels: skip cuProfilerStart/Stop"
    )
    ap.add_argument(
        "--time", action="store_true", help="--run-kernels: time each kernel with CUDA events"
    )
    ap.add_argument("--skip", help="--run-kernels: comma-separated case labels to leave out")
    ap.add_argument(
        "--transpose-backend", default="auto", choices=["auto", "cupy", "load_inline", "triton"]
    )
    ap.add_argument("--warm-timeout", type=int, default=240)
    ap.add_argument("--ncu-timeout", type=int, default=300)
    ap.add_argument("--max-rep-bytes", type=int, default=5 * 1024 * 1024)
    args = ap.parse_args(argv)
    if args.record:
        return record(args)
    if args.run_kernels:
        return run_kernels(args)
    if args.summarize:
        print(summarize(Path(args.summarize)))
        return 0
    return compile_check()


if __name__ == "__main__":
    sys.exit(main())
