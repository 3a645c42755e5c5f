"""Fused RMS normalization: ``y = x / sqrt(mean(x^2) + eps) * (offset + w)`` over the last
dimension.

The cure for the VRAM wall (activation memory that outgrows the card): eager PyTorch keeps every
intermediate of the elementwise chain (the fp32 upcast, ``x^2``, ``x * rstd``, its cast) for
backward; this op saves only the input and one fp32 ``rstd`` per row, and recomputes
``x_hat = x * rstd`` in backward.

Numerics follow Hugging Face so a patched model matches the original:

- ``casting="llama"`` (LlamaRMSNorm): statistics in fp32, ``x_hat`` cast to the input dtype
  *before* the weight is applied: ``w * x_hat.to(dtype)``.
- ``casting="gemma"`` (GemmaRMSNorm): everything in fp32, one cast at the end:
  ``(x_hat * (offset + w)).to(dtype)``; Gemma uses ``offset=1.0`` (its weight is stored as ``w - 1``).

The scale ``offset + w`` is formed in fp32 in both; with ``offset=0`` the llama result is the one
``w * x_hat.to(dtype)`` gives in bf16/fp16 (the product of two such numbers is exact in fp32, so
one rounding either way).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from gpudoctor.errors import InputError
from gpudoctor.kernels._common import (
    Launcher,
    check_same,
    check_tensor,
    concrete,
    define_op,
    native_is_faster,
    tl,
    use_triton,
)
from gpudoctor.kernels._common import jit as _jit

# With ``casting="gemma", offset=0`` the op is exactly ``torch.nn.functional.rms_norm``, whose fused
# CUDA kernels keep the same tensors for backward; below these sizes (rows up to this wide, fewer
# elements than this) its fewer launches cost less GPU time than our kernels. Llama casting has no
# native fused equivalent, so it always takes the kernel. Measured: benchmarks/BENCHMARKS-kernels.md
# "Evidence moved from the source: kernel constants".
NATIVE_BELOW = ((1024, 2**17),)

# One row held in registers up to this many bytes of x; wider rows loop over LOOP_BLOCK columns.
# Triton tutorial 05 "Layer Normalization" allows 64 KB (MAX_FUSED_SIZE); half of that was faster on
# 64 KB rows, one block the faster at 32 KB and below (benchmarks/BENCHMARKS-kernels.md "Evidence
# moved from the source: kernel constants").
MAX_FUSED_BYTES = 32768
# Column chunk of the looping kernels: 8192 beat 4096 on every shape measured for MAX_FUSED_BYTES.
LOOP_BLOCK = 8192
# Elements of one [ROWS, BLOCK] tile of the single-block kernels: rows narrower than this are
# processed TILE_ELEMENTS // BLOCK at a time; 4096 was the best or within 4% of it at every width
# from 256 to 16384, forward + backward (benchmarks/BENCHMARKS-kernels.md "Evidence moved from the
# source: kernel constants").
TILE_ELEMENTS = 4096
# The forward alone does not care about the tile size, so one size serves both. Backward programs
# resident per SM, counted in warps: SMs x (BACKWARD_WARPS_PER_SM // num_warps) programs, each
# writing one fp32 row of partial weight gradients (fewer programs, less of that traffic; more, more
# loads in flight); 16 beat 4, 8, 32 and 64 (benchmarks/BENCHMARKS-kernels.md "Evidence moved from
# the source: kernel constants").
BACKWARD_WARPS_PER_SM = 16
# The single-block backward loads tile t + 1 (x, dy, the row statistics) into registers before tile
# t's math: with about two programs per SM, one tile of loads in flight per program left HBM idle.
# Only where the extra registers fit (use_prefetch): 16-bit inputs at up to PREFETCH_ELEMENTS
# elements of a tile per thread; at 32 the kernel spilled (fp32 was not measured).
# benchmarks/BENCHMARKS-kernels.md "Evidence moved from the source: kernel constants".
PREFETCH = True
PREFETCH_ELEMENTS = 16
# Stage two of the weight / bias gradient: _sum_partials, one launch (LayerNorm's dw and db
# together), each program SUM_COLS columns summed SUM_ROWS partial rows at a time, in place of
# partials.sum(0).to(dtype) (two kernels a gradient): the fastest of the tiles tried, 3x faster than
# PyTorch's stage two (benchmarks/BENCHMARKS-kernels.md "Evidence moved from the source: kernel
# constants").
SUM_COLS = 32
SUM_ROWS = 128
SUM_WARPS = 4
# Single-block backwards of blocks at least this wide load the weight again for each row tile (an L1
# / L2 hit) instead of holding BLOCK / threads fp32 values of it in registers across the tile loop:
# at 16384 the held weight pushed the kernel past its 128 registers; narrower, no change, so it
# stays held there (benchmarks/BENCHMARKS-kernels.md "Evidence moved from the source: kernel
# constants").
RELOAD_W_MIN_BLOCK = 16384
# A backward of at most this many row tiles (at most 4 x 16384 elements) runs as one program that
# stores dw itself, in the weight's dtype, instead of a program per tile writing fp32 partials that
# a second kernel sums: one launch, one allocation and their host time less (on the H100 host a
# Triton launch costs tens of us of CPU, benchmarks/BENCHMARKS-kernels.md), for a few us of GPU work
# either way. benchmarks/bench_kernels_host.py measures both clocks at 4 x 4096.
WHOLE_MAX_TILES = 4

CASTINGS = ("llama", "gemma")


# -- kernels
# -----------------------------------------------------------------------------------------


@_jit
def load_tile(P, rows, cols, stride, mask):
    """The [ROWS, BLOCK] tile rows x cols of a row-major matrix (row stride ``stride``), as fp32."""
    return tl.load(P + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)


@_jit
def load_rows(X, DY, STAT, rows, cols, stride_x, stride_dy, row_ok, col_ok):
    """x and dy tiles (in their own dtype) and one fp32 statistic per row; rows past row_ok read
    nothing."""
    mask = row_ok[:, None] & col_ok[None, :]
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0)
    dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0)
    return x, dy, tl.load(STAT + rows, mask=row_ok, other=0.0)


@_jit
def _sum_partials(P, Q, OUT_P, OUT_Q, n_parts, H, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  HAS_Q: tl.constexpr):
    # stage two of a weight / bias gradient: program c sums the n_parts fp32 rows of P (and Q) over
    # columns [c * BLOCK_N, ...), in fp32, and stores the sums rounded once to OUT_P's (OUT_Q's)
    # dtype
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < H
    acc_p = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_q = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, n_parts, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows < n_parts)[:, None] & col_ok[None, :]
        # 64-bit: n_parts * H may pass 2^31
        offsets = rows.to(tl.int64)[:, None] * H + cols[None, :]
        acc_p += tl.load(P + offsets, mask=mask, other=0.0)
        if HAS_Q:
            acc_q += tl.load(Q + offsets, mask=mask, other=0.0)
    tl.store(OUT_P + cols, tl.sum(acc_p, axis=0).to(OUT_P.dtype.element_ty), mask=col_ok)
    if HAS_Q:
        tl.store(OUT_Q + cols, tl.sum(acc_q, axis=0).to(OUT_Q.dtype.element_ty), mask=col_ok)


@_jit
def _scaled(x_hat, s, Y, LLAMA: tl.constexpr):
    """x_hat * s in Y's dtype; llama rounds x_hat to that dtype first (fp32 in, Y's dtype out)."""
    if LLAMA:
        x_hat = x_hat.to(Y.dtype.element_ty).to(tl.float32)
    return (x_hat * s).to(Y.dtype.element_ty)


@_jit
def _rms_norm_fwd(X, W, Y, RSTD, stride_x, stride_y, n_rows, H, eps, offset,
                  BLOCK: tl.constexpr, ROWS: tl.constexpr, SINGLE: tl.constexpr,
                  LLAMA: tl.constexpr):
    # program p normalizes rows [p * ROWS, (p + 1) * ROWS): reads x and w, writes y and one rstd per
    # row
    pid = tl.program_id(0).to(tl.int64)  # 64-bit: row * stride may pass 2^31
    if SINGLE:  # a [ROWS, BLOCK] tile in registers: x is read from memory once
        rows = pid * ROWS + tl.arange(0, ROWS)
        cols = tl.arange(0, BLOCK)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & (cols < H)[None, :]
        x = load_tile(X, rows, cols, stride_x, mask)
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / H + eps)
        s = tl.load(W + cols, mask=cols < H, other=0.0).to(tl.float32) + offset
        y = _scaled(x * rstd[:, None], s[None, :], Y, LLAMA)
        tl.store(Y + rows[:, None] * stride_y + cols[None, :], y, mask=mask)
        tl.store(RSTD + rows, rstd, mask=row_ok)
    else:  # one row wider than a block (ROWS is 1): a pass for sum(x^2), a pass to write y
        x_row = X + pid * stride_x
        y_row = Y + pid * stride_y
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, H, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(x_row + cols, mask=cols < H, other=0.0).to(tl.float32)
            acc += x * x
        rstd = tl.rsqrt(tl.sum(acc, axis=0) / H + eps)
        for start in range(0, H, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < H
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            s = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32) + offset
            tl.store(y_row + cols, _scaled(x * rstd, s, Y, LLAMA), mask=mask)
        tl.store(RSTD + pid, rstd)


@_jit
def _rms_norm_bwd(X, W, DY, RSTD, DX, DW, stride_x, stride_dy, stride_dx, n_rows, n_tiles,
                  tiles_per_program, H, offset, BLOCK: tl.constexpr, ROWS: tl.constexpr,
                  SINGLE: tl.constexpr, LLAMA: tl.constexpr,
                  HAS_DW: tl.constexpr, PREFETCH: tl.constexpr, RELOAD_W: tl.constexpr):
    # program p handles row tiles [p * tiles_per_program, ...) and writes its partial dw to DW[p, :]
    # (stage one of the dw reduction; the launcher sums DW over programs: no atomics)
    pid = tl.program_id(0).to(tl.int64)  # 64-bit row indices, so row * stride may pass 2^31
    tile_start = pid * tiles_per_program
    tile_end = tl.minimum(tile_start + tiles_per_program, n_tiles)
    dw_row = DW + pid * H
    if SINGLE:
        cols = tl.arange(0, BLOCK)
        col_ok = cols < H
        if not RELOAD_W:  # held in registers across tiles
            s = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32) + offset
        dw_acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
        # the first tile's loads; each iteration then issues the next tile's before its math
        if PREFETCH:
            row_end = tl.minimum(tile_end * ROWS, n_rows)
            rows = tile_start * ROWS + tl.arange(0, ROWS)
            x_next, dy_next, rstd_next = load_rows(X, DY, RSTD, rows, cols, stride_x, stride_dy,
                                                   rows < row_end,
                                                    col_ok)
        for t in range(tile_start, tile_end):
            rows = t * ROWS + tl.arange(0, ROWS)
            row_ok = rows < n_rows
            mask = row_ok[:, None] & col_ok[None, :]
            if PREFETCH:
                x, dy, rstd = x_next.to(tl.float32), dy_next.to(tl.float32), rstd_next
                x_next, dy_next, rstd_next = load_rows(X, DY, RSTD, rows + ROWS, cols,
                                                       stride_x, stride_dy,
                                                        rows + ROWS < row_end, col_ok)
            else:
                x = load_tile(X, rows, cols, stride_x, mask)
                dy = load_tile(DY, rows, cols, stride_dy, mask)
                rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
            # wide rows: read again each tile (an L1 / L2 hit) rather than held in registers
            if RELOAD_W:
                s = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32) + offset
            x_hat = x * rstd[:, None]  # recomputed, never saved
            g = dy * s[None, :]
            c = tl.sum(x_hat * g, axis=1) / H
            dx = (g - x_hat * c[:, None]) * rstd[:, None]
            tl.store(DX + rows[:, None] * stride_dx + cols[None, :],
                     dx.to(DX.dtype.element_ty), mask=mask)
            if HAS_DW:
                if LLAMA:  # the weight multiplied x_hat rounded to x's dtype
                    x_hat = x_hat.to(X.dtype.element_ty).to(tl.float32)
                dw_acc += dy * x_hat
        # fp32 partials, or dw itself in the weight's dtype where one program does all rows
        if HAS_DW:
            tl.store(dw_row + cols, tl.sum(dw_acc, axis=0).to(DW.dtype.element_ty), mask=col_ok)
    # one row per tile: a pass for the row's dot(x_hat, g), a pass for dx; DW[p] (zeroed) is its own
    else:
        for r in range(tile_start, tile_end):
            rstd = tl.load(RSTD + r)
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, H, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                mask = cols < H
                x = tl.load(X + r * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(DY + r * stride_dy + cols, mask=mask, other=0.0).to(tl.float32)
                s = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32) + offset
                acc += x * rstd * dy * s
            c = tl.sum(acc, axis=0) / H
            for start in range(0, H, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                mask = cols < H
                x = tl.load(X + r * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(DY + r * stride_dy + cols, mask=mask, other=0.0).to(tl.float32)
                s = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32) + offset
                x_hat = x * rstd
                tl.store(DX + r * stride_dx + cols,
                         ((dy * s - x_hat * c) * rstd).to(DX.dtype.element_ty), mask=mask)
                if HAS_DW:
                    if LLAMA:
                        x_hat = x_hat.to(X.dtype.element_ty).to(tl.float32)
                    dw = tl.load(dw_row + cols, mask=mask, other=0.0)
                    tl.store(dw_row + cols, dw + dy * x_hat, mask=mask)


_launch_fwd = Launcher(_rms_norm_fwd)
_launch_bwd = Launcher(_rms_norm_bwd)
_launch_sum = Launcher(_sum_partials)


# -- launch helpers (_layer_norm.py uses them too)
# -------------------------------------------------------


def as_rows(t: torch.Tensor, hidden: int) -> torch.Tensor:
    """[..., H] -> [rows, H] with unit column stride; a view whenever one exists (any row
    stride)."""
    t2 = t.reshape(-1, hidden)
    if hidden > 1 and t2.stride(1) != 1:
        # the kernels read a row as consecutive addresses (coalesced, vectorized loads); a strided
        # last dimension (a transposed view, an expanded gradient) is copied once instead
        t2 = t2.contiguous()
    return t2


def tile_block(hidden: int, element_size: int) -> tuple[int, bool]:
    """(BLOCK, SINGLE): the power of two covering the row if it fits in registers, else
    LOOP_BLOCK."""
    block = 1 << (hidden - 1).bit_length()
    if block * element_size <= MAX_FUSED_BYTES:
        return block, True
    return LOOP_BLOCK, False


def rows_per_tile(block: int, single: bool, n_rows: int, tile_elements: int | None = None) -> int:
    """ROWS of a [ROWS, BLOCK] tile: narrow rows are handled several at a time, so each program
    still has about TILE_ELEMENTS loads in flight (one 256-wide row per program leaves the memory
    system idle); never more rows than the input has (rounded up to a power of two)."""
    if not single:
        return 1
    rows = max(1, (tile_elements or TILE_ELEMENTS) // block)
    return min(rows, 1 << (max(n_rows, 1) - 1).bit_length())


def warps_for(block: int) -> int:
    # Triton tutorial 05 "Layer Normalization": min(max(BLOCK // 256, 1), 8); wider tiles get 16.
    # 16 warps beat 8 and 32 at every shape tried with tiles of 8192 and 16384 elements; 4 spilled
    # (benchmarks/BENCHMARKS-kernels.md "Evidence moved from the source: kernel constants").
    if block >= 8192:
        return 16
    return min(max(block // 256, 1), 8)


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def resident_programs(device: torch.device, num_warps: int) -> int:
    """Programs of ``num_warps`` warps a backward keeps on the GPU: SMs x BACKWARD_WARPS_PER_SM /
    warps."""
    # the interpreter runs programs one after the other: a few exercise the sums
    if device.type != "cuda":
        return 4
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return sms * max(1, BACKWARD_WARPS_PER_SM // num_warps)


def grid_programs(device: torch.device, n_tiles: int, num_warps: int) -> tuple[int, int]:
    """(programs, tiles per program) of a backward: about a full GPU of programs, each owning a
    row of the (programs, H) fp32 partial-sum buffer (programs * H * 4 bytes, freed at once)."""
    target = resident_programs(device, num_warps)
    per = -(-n_tiles // min(n_tiles, target))
    return -(-n_tiles // per), per


def partial_sums(programs: int, hidden: int, single: bool, needed: bool,
                 device: torch.device) -> torch.Tensor:
    """Stage one of a weight/bias gradient: one fp32 row per backward program, summed afterwards.
    The looping kernel adds into its row, so it starts from zero; the single-block one stores."""
    alloc = torch.empty if single else torch.zeros
    return alloc((programs, hidden) if needed else (1,), dtype=torch.float32, device=device)


def use_prefetch(x: torch.Tensor, rows: int, block: int, num_warps: int,
                 max_rows: int | None = None) -> bool:
    """Whether the single-block backward of [rows, block] tiles loads the next tile early
    (PREFETCH)."""
    return use_prefetch_size(x.element_size(), rows, block, num_warps, max_rows)


def use_prefetch_size(element_size: int, rows: int, block: int, num_warps: int,
                      max_rows: int | None = None) -> bool:
    return (PREFETCH and element_size == 2 and rows * block <= PREFETCH_ELEMENTS * 32 * num_warps
            and (max_rows is None or rows <= max_rows))


def sum_rows(parts: list[tuple[torch.Tensor, torch.dtype]]) -> list[torch.Tensor]:
    """Stage two of a weight / bias gradient: the column sums of one or two (programs, H) fp32
    partial buffers of the same shape, each rounded once to its dtype; both in one launch."""
    first = parts[0][0]
    n_parts, hidden = first.shape
    outs = [torch.empty(hidden, dtype=dtype, device=first.device) for _, dtype in parts]
    second = parts[1][0] if len(parts) > 1 else first
    _launch_sum.launch_split((-(-hidden // SUM_COLS),), (first, second, outs[0], outs[-1]),
                             (n_parts, hidden), (SUM_ROWS, SUM_COLS, len(parts) > 1), SUM_WARPS)
    return outs


def check_inputs(x: object, weight: object) -> None:
    """x [..., H] and weight [H], floating point, of one dtype and device, or a one-line error."""
    check_tensor("x", x, min_dims=1)
    check_tensor("weight", weight, dims=1)
    check_same("x", x, weight=weight)
    if weight.shape[0] != x.shape[-1]:
        raise InputError(f"weight has {weight.shape[0]} elements but x's last dimension (the "
                         f"hidden size) is {x.shape[-1]}; give a weight of shape ({x.shape[-1]},)")


def check_eps(eps: object) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise InputError(f"eps must be a number >= 0, got {eps!r}")
    return float(eps)


# -- launchers
# -----------------------------------------------------------------------------------------


# Launch plans, per input shape: what the launchers would otherwise recompute in Python on every
# call (block, rows per tile, warps, grid, prefetch) for shapes that repeat every step. Bounded like
# the Launcher's cache.
_FWD_PLANS: dict[tuple, tuple] = {}
_BWD_PLANS: dict[tuple, tuple] = {}


def remember(plans: dict, key: tuple, plan: tuple) -> tuple:
    if len(plans) < 256:
        plans[key] = plan
    return plan


def _forward_plan(n_rows: int, hidden: int, element_size: int, llama: bool) -> tuple:
    """(grid, constexprs in signature order, num_warps) of the forward."""
    block, single = tile_block(hidden, element_size)
    rows = rows_per_tile(block, single, n_rows)
    return (-(-n_rows // rows),), (block, rows, single, llama), warps_for(rows * block)


def _backward_plan(n_rows: int, hidden: int, element_size: int, device: torch.device, llama: bool,
                   need_dw: bool) -> tuple:
    """(grid, n_tiles, tiles per program, single, constexprs in signature order, num_warps, whole)
    of the backward; ``whole``: one program, which stores dw itself (no partial buffer, no stage
    two)."""
    block, single = tile_block(hidden, element_size)
    rows = rows_per_tile(block, single, n_rows)
    n_tiles = -(-n_rows // rows)
    num_warps = warps_for(rows * block)
    programs, per = grid_programs(device, n_tiles, num_warps)
    whole = single and need_dw and n_tiles <= WHOLE_MAX_TILES
    if whole:
        programs, per = 1, n_tiles
    prefetch = single and use_prefetch_size(element_size, rows, block, num_warps)
    values = (block, rows, single, llama, need_dw, prefetch, single and block >= RELOAD_W_MIN_BLOCK)
    return (programs,), n_tiles, per, single, values, num_warps, whole


def rows_of(t: torch.Tensor, hidden: int) -> tuple[torch.Tensor, int, int]:
    """(t as rows, number of rows, row stride) for a kernel that reads rows of ``hidden``
    consecutive elements: a contiguous t is passed as it is (its rows are ``hidden`` apart), with no
    view to build (a reshape and a view cost about as much host time as the launch they feed,
    benchmarks/BENCHMARKS-kernels.md "Evidence moved from the source: kernel constants"); anything
    else goes through ``as_rows``."""
    if t.is_contiguous():
        n_rows = t.numel() // hidden
        return t, n_rows if type(n_rows) is int else int(n_rows), hidden
    t2 = as_rows(t, hidden)
    return t2, concrete(t2)[0], t2.stride(0)


def _forward(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float, llama: bool,
             y: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """y (x's shape, contiguous; or written into the contiguous ``y`` given), rstd [rows] fp32, and
    x as the rows the kernel read (x itself when contiguous: what the backward needs)."""
    hidden = x.shape[-1]
    if type(hidden) is not int:  # a compiler's symbolic size
        hidden = int(hidden)
    x2, n_rows, stride_x = rows_of(x, hidden)
    key = (n_rows, hidden, x.dtype, llama)
    plan = _FWD_PLANS.get(key) or remember(_FWD_PLANS, key,
                                           _forward_plan(n_rows, hidden, x.element_size(), llama))
    if y is None:  # contiguous, [..., H]: rows `hidden` apart
        y = torch.empty_like(x) if x2 is x else x.new_empty(x.shape)
    rstd = x.new_empty(n_rows, dtype=torch.float32)  # [rows]
    _launch_fwd.launch_split(plan[0], (x2, weight, y, rstd),
                             (stride_x, hidden, n_rows, hidden, eps, offset), plan[1], plan[2])
    return y, rstd, x2


def _backward(dy: torch.Tensor, x2: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
              offset: float, llama: bool, need_dw: bool,
              x_shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor | None]:
    """dx of shape ``x_shape`` (contiguous) and dw (None unless ``need_dw``), from dy and the rows
    x2 the forward read (any shape with ``x_shape``'s number of elements and rows)."""
    hidden = x2.shape[-1]
    if type(hidden) is not int:  # a compiler's symbolic size
        hidden = int(hidden)
    saved = x2
    x2, n_rows, stride_x = rows_of(x2, hidden)
    dy2, _, stride_dy = rows_of(dy, hidden)
    key = (n_rows, hidden, x2.dtype, x2.get_device(), llama, need_dw)
    plan = _BWD_PLANS.get(key) or remember(
        _BWD_PLANS, key,
        _backward_plan(n_rows, hidden, x2.element_size(), x2.device, llama, need_dw))
    grid, n_tiles, per, single, values, num_warps, whole = plan
    # contiguous: rows `hidden` apart. empty_like of the contiguous input itself where it has x's
    # shape (the eager path's usual case) costs half the host time of new_empty(shape)
    dx = torch.empty_like(x2) if x2 is saved and x2.shape == x_shape else x2.new_empty(x_shape)
    if whole:  # one program: its row of dw is all of dw, stored in the weight's dtype
        dw = dw_part = weight.new_empty(hidden)
    elif not need_dw:  # a frozen weight: DW is never touched (HAS_DW is compile-time), dx stands in
        dw_part = dx
    else:
        dw_part = partial_sums(grid[0], hidden, single, need_dw, x2.device)
    _launch_bwd.launch_split(grid, (x2, weight, dy2, rstd, dx, dw_part),
                             (stride_x, stride_dy, hidden, n_rows, n_tiles, per, hidden, offset),
                             values, num_warps)
    if not whole:
        dw = sum_rows([(dw_part, weight.dtype)])[0] if need_dw else None  # stage two
    return dx, dw


class _RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float,
                llama: bool) -> torch.Tensor:
        y, rstd, x2 = _forward(x, weight, eps, offset, llama)
        ctx.save_for_backward(x2, weight, rstd)  # the input (itself, or its rows) and [rows] fp32
        ctx.offset, ctx.llama, ctx.x_shape = offset, llama, x.shape
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        # once_differentiable's wrapper (a no_grad block, then a check of grad mode) costs a few us
        # a call; the engine runs a backward with grad mode off unless create_graph=True, where that
        # wrapper is needed and taken
        if torch.is_grad_enabled():
            return _backward_once(ctx, dy)
        x2, weight, rstd = ctx.saved_tensors
        dx, dw = _backward(dy, x2, weight, rstd, ctx.offset, ctx.llama, ctx.needs_input_grad[1],
                           ctx.x_shape)
        return dx, dw, None, None, None


@once_differentiable
def _backward_once(ctx, dy: torch.Tensor):
    """The backward under create_graph=True: its outputs then raise when differentiated again."""
    return _RMSNormFunction.backward(ctx, dy)


# The C apply of autograd.Function, without the Python ``Function.apply`` in front of it, which
# checks for functorch transforms (vmap, grad: they take Function.apply, which rejects a Function
# without setup_context, as before) and unwraps dead functorch wrappers of the arguments, done here
# for the two tensors: a few us less a call (benchmarks/probes/probe_host_path.py). A torch without
# these internals keeps Function.apply.
def _c_apply(function: type) -> tuple | None:
    """(the C apply bound to ``function``, unwrap_if_dead, whether functorch transforms are active),
    or None."""
    try:
        c_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, function)
        return c_apply, torch._C._functorch.unwrap_if_dead, torch._C._are_functorch_transforms_active
    except (AttributeError, KeyError, TypeError):
        return None


_C_APPLY = _c_apply(_RMSNormFunction)


def apply_function(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float,
                   llama: bool) -> torch.Tensor:
    """``_RMSNormFunction.apply(x, weight, eps, offset, llama)``; through Function.apply itself
    under functorch transforms and where a compiler traces the call (no registered op): dynamo knows
    Function.apply."""
    if _C_APPLY is None or _C_APPLY[2]() or (_FWD_OP is None and torch.compiler.is_compiling()):
        return _RMSNormFunction.apply(x, weight, eps, offset, llama)
    c_apply, unwrap, _ = _C_APPLY
    return c_apply(unwrap(x), unwrap(weight), eps, offset, llama)


# -- the gpudoctor::rms_norm custom op (what torch.compile sees)
# -------------------------------------------


def _op_forward(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float,
                llama: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """y [..., H] in x's dtype and rstd [rows] fp32: the kernels on CUDA (and under the
    interpreter)."""
    # allocated whole: the op returns no view
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return y, _forward(x, weight, eps, offset, llama, y)[1]


def _op_forward_fake(x, weight, eps, offset, llama):
    return torch.empty_like(x,
                            memory_format=torch.contiguous_format), x.new_empty(x.shape[:-1].numel(),
                                                                                    dtype=torch.float32)


def _op_forward_reference(x, weight, eps, offset, llama):
    compute = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(compute)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return _rms_norm_native(x, weight, eps, offset, llama).contiguous(), rstd.reshape(-1).float()


def _op_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
                 offset: float, llama: bool, need_dw: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """dx [..., H] and dw [H] (an empty [0] when ``need_dw`` is False: an op returns tensors
    only)."""
    dx, dw = _backward(dy, x, weight, rstd, offset, llama, need_dw, x.shape)
    return dx, weight.new_empty(0) if dw is None else dw


def _op_backward_fake(dy, x, weight, rstd, offset, llama, need_dw):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            weight.new_empty(weight.shape if need_dw else (0,)))


def _op_backward_reference(dy, x, weight, rstd, offset, llama, need_dw):
    """The kernel's backward in PyTorch ops, in fp32 (fp64 for fp64), from the saved rstd."""
    compute = torch.promote_types(x.dtype, torch.float32)
    hidden = x.shape[-1]
    x2, dy2 = x.reshape(-1, hidden).to(compute), dy.reshape(-1, hidden).to(compute)
    r = rstd.to(compute)[:, None]
    x_hat = x2 * r
    g = dy2 * (weight.to(compute) + offset)
    dx = (g - x_hat * (x_hat * g).sum(-1, keepdim=True) / hidden) * r
    if not need_dw:
        return dx.to(x.dtype).view(x.shape), weight.new_empty(0)
    if llama:  # the weight multiplied x_hat rounded to x's dtype
        x_hat = x_hat.to(x.dtype).to(compute)
    return dx.to(x.dtype).view(x.shape), (dy2 * x_hat).sum(0).to(weight.dtype)


def _setup(ctx, inputs, output) -> None:
    x, weight, _, offset, llama = inputs
    # the input and [rows] fp32, as the eager path; an input whose last dimension is strided is
    # saved as given (an op's context keeps only its inputs and outputs) and copied again in the
    # backward
    ctx.save_for_backward(x, weight, output[1])
    ctx.offset, ctx.llama = offset, llama
    ctx.mark_non_differentiable(output[1])


def _op_grad(ctx, dy: torch.Tensor, _drstd: torch.Tensor | None):
    x, weight, rstd = ctx.saved_tensors
    need_dw = ctx.needs_input_grad[1]
    dx, dw = _BWD_OP(dy, x, weight, rstd, ctx.offset, ctx.llama, need_dw)
    return dx, dw if need_dw else None, None, None, None


_FWD_OP = define_op("rms_norm", _op_forward, _op_forward_fake, reference=_op_forward_reference)
_BWD_OP = define_op("rms_norm_backward", _op_backward, _op_backward_fake,
                    reference=_op_backward_reference)
if _FWD_OP is not None:
    _FWD_OP.register_autograd(_op_grad, setup_context=_setup)


def _rms_norm_native(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float,
                     llama: bool) -> torch.Tensor:
    """The same math in PyTorch ops (fp32, or fp64 for fp64 input); autograd differentiates it."""
    compute = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(compute)
    x_hat = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if llama:
        x_hat = x_hat.to(x.dtype).to(compute)
    return (x_hat * (weight.to(compute) + offset)).to(x.dtype)


# -- public API
# ----------------------------------------------------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, offset: float = 0.0,
             casting: str = "llama") -> torch.Tensor:
    """RMS-normalize ``x`` [..., H] over its last dimension and scale by ``offset + weight`` [H].

    ``casting="llama"`` rounds the normalized value to x's dtype before the weight (LlamaRMSNorm);
    ``"gemma"`` applies the weight in fp32 (GemmaRMSNorm, with ``offset=1.0``). Triton on CUDA
    (fp32/bf16/fp16); native PyTorch for CPU tensors, fp64 and small inputs.
    """
    # valid inputs pass one condition (half the host time of the checks one by one,
    # benchmarks/probes/probe_host_path.py); anything else takes the checks, which raise the first
    # problem's one-line error
    if not (isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor) and x.dim()
            and weight.dim() == 1
            and x.is_floating_point() and weight.dtype == x.dtype and weight.shape[0] == x.shape[-1]
            and weight.device == x.device):
        check_inputs(x, weight)
    if casting not in CASTINGS:
        raise InputError(
            f"casting must be one of {', '.join(map(repr, CASTINGS))}, got {casting!r}")
    if type(eps) is not float or not eps >= 0:  # a float >= 0 is what check_eps would return
        eps = check_eps(eps)
    offset = float(offset)
    llama = casting == "llama"
    if x.numel() == 0 or not use_triton(x, weight):
        return _rms_norm_native(x, weight, eps, offset, llama)
    if not llama and offset == 0.0 and x.is_cuda and native_is_faster(NATIVE_BELOW, x.numel(),
                                                                      x.shape[-1]):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)  # the same math, fused by PyTorch
    if _FWD_OP is not None and torch.compiler.is_compiling():  # one node the compiler traces, no break
        # the op, not the torch math, for a direct call: alone it compiles to less GPU time than
        # torch.compile of HF's math (benchmarks/BENCHMARKS-kernels.md "Evidence moved from the
        # source: kernel constants"); in a model, where Inductor fuses the math with its neighbours,
        # patch(compiled=) chooses
        return _FWD_OP(x, weight, eps, offset, llama)[0]
    if not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)):
        # inference: no autograd node to build, nothing to save
        return _forward(x, weight, eps, offset, llama)[0]
    return apply_function(x, weight, eps, offset, llama)


class RMSNorm(nn.Module):
    """Drop-in RMSNorm: ``hidden_size``, ``eps`` (alias ``variance_epsilon``, as in HF) and
    ``weight``.

    The weight starts at ones, or at zeros with a nonzero ``offset`` (Gemma), so the scale starts at
    1.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6, *, offset: float = 0.0,
                 casting: str = "llama", device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        if casting not in CASTINGS:
            raise InputError(
                f"casting must be one of {', '.join(map(repr, CASTINGS))}, got {casting!r}")
        self.hidden_size = hidden_size
        self.eps = check_eps(eps)
        self.offset = float(offset)
        self.casting = casting
        init = torch.zeros if self.offset else torch.ones
        self.weight = nn.Parameter(init(hidden_size, device=device, dtype=dtype))

    @property
    def variance_epsilon(self) -> float:
        return self.eps

    @variance_epsilon.setter
    def variance_epsilon(self, value: float) -> None:
        self.eps = check_eps(value)

    @classmethod
    def from_module(cls, module: nn.Module, *, offset: float = 0.0,
                    casting: str = "llama") -> RMSNorm:
        """A copy of an HF-style norm (``weight`` and ``variance_epsilon`` or ``eps``), sharing its
        weight."""
        eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
        weight = getattr(module, "weight", None)
        if eps is None or not isinstance(weight, torch.Tensor):
            raise InputError(f"module {type(module).__name__} has no weight and "
                             "variance_epsilon/eps; give an RMSNorm-like module")
        new = cls(weight.shape[0], eps, offset=offset, casting=casting, device="meta")
        new.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight)
        return new

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return rms_norm(hidden_states, self.weight, self.eps, offset=self.offset,
                        casting=self.casting)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.eps}, offset={self.offset}, casting={self.casting!r}"
