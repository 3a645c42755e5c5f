"""One kernel's Nsight Compute numbers -> its limiter, ranked hypotheses and ordered fixes.

The metrics arrive normalised (``KernelMetrics``), from an ``ncu --csv`` export (ncu.py) or from
the numbers of a scenario file (scenarios.py), so the reasoning lives here once.

The reasoning runs in a fixed order: on a matrix kernel whose tensor pipes are idle, the 10x factor
is the missing tensor-core path, and everything else (occupancy, stalls, bank conflicts) is a
symptom to fix after it; "raise occupancy" is never the first fix while the tensor cores are idle. A
kernel at its roof (memory or compute) is called good.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpudoctor.core.finding import Finding, Fix, make_hypothesis

# A kernel name that says "matrix multiply": cuBLAS/CUTLASS/Triton/Inductor GEMMs and our own.
# ncu's names for the CUDA-core floating-point pipes (the HighPipeUtilization rule)
FMA_PIPES = ("fma", "fmaheavy", "fmalite", "fp32", "fma (fp32)", "alu")
_MATRIX_NAME = re.compile(r"gemm|matmul|_mm_|mma|wgmma|dot|cutlass|xmma|hmma|sm90_|bmm|conv",
                          re.IGNORECASE)


@dataclass
class KernelMetrics:
    """What `explain` reads of one kernel; None where the export did not have it."""

    name: str
    duration_us: float | None = None
    sm_throughput_pct: float | None = None  # "Compute (SM) Throughput"
    memory_throughput_pct: float | None = None  # "Memory Throughput" (% of peak)
    dram_throughput_pct: float | None = None
    sm_busy_pct: float | None = None
    tensor_pipe_pct: float | None = None  # tensor (MMA) pipe utilization
    fma_pipe_pct: float | None = None  # FP32 FMA pipe utilization
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    registers_per_thread: float | None = None
    block_size: float | None = None
    grid_size: float | None = None  # blocks
    shared_mem_per_block: float | None = None  # bytes
    waves_per_sm: float | None = None
    sm_count: float | None = None
    block_limit_registers: float | None = None
    block_limit_shared_mem: float | None = None
    block_limit_warps: float | None = None
    block_limit_sm: float | None = None
    stall_long_scoreboard_pct: float | None = None  # share of the cycles between two issues
    stall_mio_throttle_pct: float | None = None
    stall_short_scoreboard_pct: float | None = None
    l1_hit_rate_pct: float | None = None
    uncoalesced_excess_pct: float | None = None  # excessive global sectors, % of all
    bank_conflict_pct: float | None = None  # shared-memory wavefronts beyond the ideal, % of all
    local_memory_bytes: float | None = None  # spill traffic (loads + stores to local memory)
    spill_note: str = ""
    top_pipe: str = ""  # the highest-utilized pipeline ncu names (fma, alu, shared, lsu, ...)
    is_matrix: bool | None = None  # None: decided from the name
    missing: list[str] = field(default_factory=list)  # sections the export lacked

    @property
    def matrix(self) -> bool:
        return self.is_matrix if self.is_matrix is not None else bool(
            _MATRIX_NAME.search(self.name))


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}%"


def _numbers(k: KernelMetrics, *names: str) -> dict:
    return {n: round(getattr(k, n), 3) for n in names if getattr(k, n) is not None}


_TENSOR_FIXES = (
    Fix("Use tensor-core instructions: wgmma on Hopper (mma.sync before), through CUTLASS/CuTe or "
        "Triton's tl.dot, with bf16/fp16 (or tf32) operands",
        "acc += tl.dot(a_tile, b_tile)   # Triton"),
    Fix("Feed them with asynchronous copies in a multi-stage pipeline (cp.async / TMA, 3-4 stages)",
        "triton.Config({...}, num_stages=4)   # or CUTLASS's TMA warp-specialized mainloop"),
    Fix("Then cut register pressure: a smaller per-thread tile or fewer live accumulators", ""),
    Fix("Then a swizzled shared-memory layout so the tensor cores are fed without bank conflicts", ""),
)


def kernel_hypotheses(k: KernelMetrics, total_us: float | None = None) -> list[Finding]:
    """Ranked hypotheses for one kernel (the first is its limiter)."""
    out: list[Finding] = []
    partial = bool(k.missing)
    subject = k.name
    dur = k.duration_us or 0.0
    step = total_us or dur

    def hyp(id: str, title: str, confidence: float, summary: str, numbers: dict,
            fixes: tuple[Fix, ...], check_next: tuple[str, ...] = (), wrong_fix: str = "",
            gain: float = 0.0) -> None:
        # gain: the share of this kernel's time the fix could remove (for ranking across kernels)
        out.append(make_hypothesis(id, title, confidence, summary, numbers, fixes,
                                   check_next=check_next,
                                   wrong_fix=wrong_fix, subject=subject, partial=partial,
                                   saving_ms=dur * gain / 1e3, step_ms=step / 1e3,
                                   kernels=(k.name,)))

    # idle tensor pipes: measured low, or unmeasured while ncu names an FMA pipe the busiest one
    tensor_idle = k.matrix and ((k.tensor_pipe_pct is not None and k.tensor_pipe_pct < 30)
                                or (k.tensor_pipe_pct is None and (k.top_pipe in FMA_PIPES
                                                                   or (k.fma_pipe_pct or 0) > 40)))
    if tensor_idle:
        tp = k.tensor_pipe_pct
        hyp("tensor-cores-idle", "Matrix kernel on CUDA cores: tensor pipes nearly idle",
            0.9 if tp is not None else 0.75,
            (f"A matrix kernel with tensor pipes at {_pct(tp)}" if tp is not None else
             f"A matrix kernel whose busiest pipe is {k.top_pipe.upper() or 'FMA'} "
             f"({_pct(k.fma_pipe_pct)})")
            + f" (SM busy {_pct(k.sm_busy_pct or k.sm_throughput_pct)}): "
            "it multiplies with FMA on CUDA cores, not mma/wgmma. Tensor cores do ~15x the dense "
            "FLOP/s of the FP32 pipe (H100 SXM datasheet, dense: 989 vs 67 TFLOP/s): that, not "
            "occupancy, is the 10x factor.",
            _numbers(k, "tensor_pipe_pct", "fma_pipe_pct", "sm_busy_pct", "sm_throughput_pct",
                     "achieved_occupancy_pct", "registers_per_thread", "stall_long_scoreboard_pct",
                     "stall_mio_throttle_pct"),
            _TENSOR_FIXES,
            check_next=(("SASS: `cuobjdump -sass` / ncu Source page shows HMMA/HGMMA (tensor) or "
                         "FFMA (CUDA core)?"),
                        "Compare with cuBLAS on the same shape (torch.matmul) for the ceiling"),
            wrong_fix="Raising occupancy first: occupancy is a symptom here; the missing "
                      "tensor-core path is the 10x.",
            gain=0.9)
        if k.stall_long_scoreboard_pct is not None and k.stall_long_scoreboard_pct >= 20:
            hyp("latency-bound",
                "Warps wait on global loads (long scoreboard): no software pipelining", 0.6,
                f"Long-scoreboard stalls are {_pct(k.stall_long_scoreboard_pct)} of the cycles "
                "between issues: loads are not overlapped with math (no cp.async/TMA multi-stage "
                "pipeline).",
                _numbers(k, "stall_long_scoreboard_pct", "l1_hit_rate_pct", "dram_throughput_pct"),
                _TENSOR_FIXES[1:2], gain=0.3)
        if k.registers_per_thread and k.registers_per_thread >= 128 and (k.achieved_occupancy_pct or 100) < 50:
            hyp("occupancy-limited",
                "Register pressure caps occupancy (a symptom, after the tensor cores)", 0.45,
                f"{k.registers_per_thread:.0f} registers per thread hold occupancy at "
                f"{_pct(k.achieved_occupancy_pct)}; fix it after moving to tensor cores, which "
                "changes the register budget anyway.",
                _numbers(k, "registers_per_thread", "achieved_occupancy_pct",
                         "theoretical_occupancy_pct",
                         "block_limit_registers"), _TENSOR_FIXES[2:3], gain=0.15)
        if k.stall_mio_throttle_pct is not None and k.stall_mio_throttle_pct >= 15:
            hyp("bank-conflicts", "MIO throttle: shared-memory instruction queue saturated", 0.4,
                f"MIO-throttle stalls are {_pct(k.stall_mio_throttle_pct)}: shared-memory traffic "
                "(or its bank conflicts) feeding the math; a swizzled layout and tensor-core loads "
                "(ldmatrix) cut it.",
                _numbers(k, "stall_mio_throttle_pct", "bank_conflict_pct"),
                _TENSOR_FIXES[3:4], gain=0.1)
        return _rank(out)

    mem = k.dram_throughput_pct if k.dram_throughput_pct is not None else k.memory_throughput_pct
    sm = k.sm_throughput_pct
    at_compute_roof = (k.tensor_pipe_pct or 0) >= 60 or ((sm or 0) >= 80 and not k.matrix)
    at_memory_roof = (k.dram_throughput_pct or 0) >= 70
    # A kernel at a roof is good: what else ncu flags on it is secondary (cuBLAS's own kernels show
    # some shared-store bank conflicts at 95% tensor-pipe use).
    secondary = 0.35 if (at_compute_roof or at_memory_roof) else 1.0

    if k.local_memory_bytes and k.local_memory_bytes > 0:
        hyp("register-spills", "Registers spill to local memory", 0.85 * secondary,
            f"{k.local_memory_bytes / 1e6:.1f} MB of local-memory traffic: the compiler ran out of "
            f"registers ({k.registers_per_thread or 0:.0f} per thread) and spills live values to "
            f"(L1-cached) DRAM. {k.spill_note}",
            _numbers(k, "local_memory_bytes", "registers_per_thread", "achieved_occupancy_pct"),
            (Fix("Keep fewer values live: a smaller tile per thread/program (Triton BLOCK), fewer "
                 "unrolled accumulators", "BLOCK = BLOCK // 4   # or split the loop"),
             Fix("Give the compiler more registers per thread where occupancy allows (more warps "
                 "share the tile: num_warps=4-8; __launch_bounds__ in CUDA)",
                 "triton.Config({...}, num_warps=8)"),
             Fix("Check `ptxas -v` / Triton's n_spills for the spill count after each change", "")),
            check_next=("ptxas info: 'bytes spill stores' / Triton kernel.n_spills",
                        "ncu Memory Workload Analysis: local load/store sectors"),
            wrong_fix="Forcing fewer registers (maxrregcount) to raise occupancy: more "
                      "spills, slower.",
            gain=0.5 * secondary)
    if k.uncoalesced_excess_pct is not None and k.uncoalesced_excess_pct >= 25:
        hyp("uncoalesced-access", "Uncoalesced global memory access", 0.85 * secondary,
            f"{k.uncoalesced_excess_pct:.0f}% of the global sectors fetched are excessive: "
            "neighbouring threads touch addresses far apart, so each warp load pulls many 32-byte "
            "sectors for few useful bytes.",
            _numbers(k, "uncoalesced_excess_pct", "dram_throughput_pct", "memory_throughput_pct",
                     "l1_hit_rate_pct"),
            (Fix("Make consecutive threads read consecutive addresses: index the contiguous (last) "
                 "dimension with the thread id; transpose through shared memory when the access "
                 "must stride",
                 "offs = row * stride + tl.arange(0, BLOCK)   # contiguous along the row"),
             Fix("Change the data layout (AoS -> SoA, .contiguous() on the tensor the kernel walks)", ""),
             Fix("Vectorise: 16-byte loads (float4 / tl.load of a contiguous block)", "")),
            check_next=("ncu Source page: the load with the most excessive sectors",
                        "Sectors per request: 4 is ideal for fp32 (32 threads x 4 B = 128 B)"),
            wrong_fix="Adding threads or blocks: more uncoalesced requests, the same wasted bytes.",
            gain=0.6 * secondary)
    if k.bank_conflict_pct is not None and k.bank_conflict_pct >= 20:
        hyp("bank-conflicts", "Shared-memory bank conflicts", 0.8 * secondary,
            f"{k.bank_conflict_pct:.0f}% of shared-memory wavefronts are bank-conflict replays: "
            "threads of a warp hit the same bank at different addresses and are serialised.",
            _numbers(k, "bank_conflict_pct", "stall_mio_throttle_pct",
                     "stall_short_scoreboard_pct"),
            (Fix("Pad the shared tile by one element per row (tile[32][33]) or swizzle the layout",
                 "__shared__ float tile[32][33];   // was [32][32]"),
             Fix("Read/write shared memory with the thread id on the fastest-varying index", "")),
            check_next=("ncu: l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld/st",),
            wrong_fix="Raising occupancy: more warps queue on the same conflicted banks.",
            gain=0.4 * secondary)

    small = (k.grid_size is not None and k.sm_count and k.grid_size < k.sm_count) or (
        k.waves_per_sm is not None and k.waves_per_sm < 0.5)
    if small:
        hyp("small-grid", "Too few blocks to fill the GPU", 0.8,
            f"{k.grid_size or 0:.0f} blocks for {k.sm_count or 0:.0f} SMs "
            f"({k.waves_per_sm or 0:.2f} waves): most SMs have nothing to run; the kernel is bound "
            "by one SM's latency, not by the card.",
            _numbers(k, "grid_size", "block_size", "sm_count", "waves_per_sm", "sm_throughput_pct"),
            (Fix("Give it more parallel work: smaller blocks/tiles (more programs), split-K, or "
                 "batch many small launches into one (grouped GEMM, torch._foreach, CUDA graphs)", ""),
             Fix("Fuse it into its neighbours if it is one of many tiny kernels (torch.compile)", "")),
            check_next=("Launch Statistics: Grid Size vs # SMs; Waves Per SM",),
            wrong_fix="Tuning the kernel's inner loop: the card is idle around it.",
            gain=0.5 if (k.waves_per_sm or 0) < 0.5 else 0.3)
    problems = [f for f in out if (f.confidence or 0) >= 0.5]

    def compute_bound(title: str, confidence: float) -> None:
        tensor_busy = k.tensor_pipe_pct is not None and k.tensor_pipe_pct >= 50
        hyp("kernel-efficient", title, confidence,
            f"SM throughput {_pct(sm)} of peak"
            + (f", tensor pipes {_pct(k.tensor_pipe_pct)}" if tensor_busy else "")
            + ": the math sets its time and the pipes are busy; what is left is lower precision "
              "(fp8) or less work.",
            _numbers(k, "sm_throughput_pct", "tensor_pipe_pct", "dram_throughput_pct",
                     "duration_us"),
            (Fix("Lower precision where accuracy allows (fp8 on Hopper doubles the tensor-core "
                 "rate)", ""),),
            check_next=("Compare achieved FLOP/s with the measured ceiling (gpudoctor bench)",),
            gain=0.0)

    if at_compute_roof and not problems:
        compute_bound("Compute-bound at the roof", 0.85)
    elif not problems and mem is not None and mem >= 60 and (sm is None or mem >= sm):
        at_roof = at_memory_roof
        hyp("memory-bound" if not at_roof else "kernel-efficient",
            "Memory-bound, at the memory roof" if at_roof else "Memory-bound below the roof",
            0.85 if at_roof else 0.7,
            f"DRAM/memory throughput {_pct(mem)} of peak against SM throughput {_pct(sm)}: the "
            "bytes, not the "
            + ("math, set its time, and it already moves them at the card's bandwidth. Faster only "
               "with fewer bytes." if at_roof else "math, set its time."),
            _numbers(k, "dram_throughput_pct", "memory_throughput_pct", "sm_throughput_pct",
                     "l1_hit_rate_pct", "duration_us"),
            (Fix("Move fewer bytes: fuse it with its producer/consumer (torch.compile), keep data "
                 "in bf16/fp8",
                 "model = torch.compile(model)"),
             Fix("Reuse what is loaded (tiling through shared memory / L2-friendly order)", "")),
            check_next=(
                "Roofline (ncu --set full, GPU Speed Of Light chart): distance to the memory roof",),
            wrong_fix="Tensor cores or more FLOP/s: the kernel waits on memory, not math.",
            gain=0.0 if at_roof else (1 - mem / 90))
    elif not problems and sm is not None and sm >= 60:
        compute_bound("Compute-bound near the roof", 0.8)
    elif not problems and not out and (mem is not None or sm is not None):
        stalls = k.stall_long_scoreboard_pct
        occ_limit = _occupancy_limiter(k)
        hyp("latency-bound", "Latency-bound: neither memory nor compute is busy", 0.7,
            f"Memory {_pct(mem)} and SM {_pct(sm)} of peak: warps mostly wait"
            + (f" (long-scoreboard stalls {_pct(stalls)} of cycles)" if stalls is not None else "")
            + ". More independent work per warp, or more warps, hides the latency.",
            _numbers(k, "dram_throughput_pct", "sm_throughput_pct", "stall_long_scoreboard_pct",
                     "achieved_occupancy_pct", "theoretical_occupancy_pct"),
            (Fix("Overlap loads with math: prefetch / multi-stage pipelines (num_stages), more "
                 "loads in flight per thread (ILP)", ""),
             Fix("Then more warps per SM if occupancy is capped (see occupancy-limited)", "")),
            check_next=("Warp State Statistics: the top stall reason",
                        "Occupancy: achieved vs theoretical"),
            gain=0.5)
        if occ_limit and (k.theoretical_occupancy_pct or 100) <= 50:
            hyp("occupancy-limited", f"Occupancy capped by {occ_limit}", 0.55,
                f"Theoretical occupancy {_pct(k.theoretical_occupancy_pct)} (achieved "
                f"{_pct(k.achieved_occupancy_pct)}), limited by {occ_limit}: too few warps per SM "
                "to hide the latency.",
                _numbers(k, "theoretical_occupancy_pct", "achieved_occupancy_pct",
                         "registers_per_thread", "shared_mem_per_block", "block_limit_registers",
                         "block_limit_shared_mem"),
                (Fix(f"Relax the {occ_limit} limit: fewer registers per thread (smaller tiles) or "
                     "less shared memory per block, or smaller blocks", ""),),
                check_next=("Occupancy section: Block Limit Registers / Shared Mem / Warps",), gain=0.3)
    if not out:
        hyp("kernel-efficient", "No limiter found in the available metrics", 0.3,
            "The export lacks the throughput sections needed to place this kernel; nothing points "
            "at a problem.",
            {}, (),
            check_next=(
                "Re-export with `ncu --set full` (GPU Speed Of Light, Memory/Compute Workload)",))
    return _rank(out)


def _occupancy_limiter(k: KernelMetrics) -> str:
    limits = {"registers": k.block_limit_registers, "shared memory": k.block_limit_shared_mem,
              "warps (block size)": k.block_limit_warps, "blocks per SM": k.block_limit_sm}
    known = {name: v for name, v in limits.items() if v is not None}
    if not known:
        return ""
    name = min(known, key=lambda n: known[n])
    return name if name in ("registers", "shared memory") else ""


def _rank(found: list[Finding]) -> list[Finding]:
    return sorted(found, key=lambda f: (-(f.confidence or 0), -f.saving_ms))
