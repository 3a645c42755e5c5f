"""Fused layer normalization: ``y = (x - mean) * rstd * w + b`` over the last dimension.

The cure for the VRAM wall (activation memory that outgrows the card): the forward saves only the
input and two fp32 numbers per row (``mean``, ``rstd``); backward recomputes
``x_hat = (x - mean) * rstd``. Numerics are those of ``torch.nn.functional.layer_norm``:
statistics, weight and bias in fp32, one cast at the end.
``weight`` and ``bias`` may each be None (``elementwise_affine=False``, ``bias=False``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from gpudoctor.errors import InputError
from gpudoctor.kernels import _rms_norm as _rms
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
from gpudoctor.kernels._rms_norm import (
    as_rows,
    check_eps,
    grid_programs,
    load_rows,
    load_tile,
    partial_sums,
    resident_programs,
    rows_per_tile,
    sum_rows,
    tile_block,
    use_prefetch,
    warps_for,
)

# ``F.layer_norm`` computes exactly this op, and its fused CUDA kernels keep the same tensors for
# backward (x, mean, rstd); CUDA inputs that NATIVE_BELOW lists (rows up to this wide, fewer
# elements than this) go there, where it takes less GPU time than these kernels. Rows between 1024
# and 4096 wide were not measured and follow the 1024 rule (benchmarks/BENCHMARKS-kernels.md
# "Evidence moved from the source: kernel constants").
NATIVE_BELOW = ((512, 2**20), (2048, 2**22))
# Rows whose block is at least this wide take the split backward: the dx kernel without the weight
# and bias accumulators, then a column-parallel kernel for the dw / db partials. One block holding
# x, dy, x_hat, g and two fp32 accumulators of 16384 spills registers (about 4x its HBM time). Rows
# too wide for one block (the column loop) take it too: the loop's per-row read-modify-write of the
# partials goes (benchmarks/BENCHMARKS-kernels.md "Evidence moved from the source: kernel
# constants").
SPLIT_MIN_BLOCK = 16384
# The dw / db kernel's [SPLIT_ROWS, SPLIT_COLS] tile and warps: the fastest of the tiles tried at
# every height of 16384-wide rows (benchmarks/BENCHMARKS-kernels.md "Evidence moved from the source:
# kernel constants").
SPLIT_ROWS = 32
SPLIT_COLS = 128
SPLIT_WARPS = 4

# [ROWS, BLOCK] tile size (see _rms_norm.TILE_ELEMENTS): 8192 took the least GPU time summed over
# the six tuned shapes (benchmarks/BENCHMARKS-kernels.md "Evidence moved from the source: kernel
# constants").
TILE_ELEMENTS = 8192
# The backward loads the next row tile early (_rms_norm.PREFETCH) only for tiles of at most this
# many rows: at 8 rows a tile it spilled, at 32 it changed nothing (benchmarks/BENCHMARKS-kernels.md
# "Evidence moved from the source: kernel constants").
PREFETCH_MAX_ROWS = 2
# Taller tiles, up to PIPELINE_MAX_ROWS rows, have Triton pipeline the backward's tile loop instead
# (``tl.range(..., num_stages=PIPELINE_STAGES)``: the next tiles' x and dy are copied into shared
# memory while this one is computed; no registers): 3 stages gained up to 16 rows a tile, not at 32,
# and not where the register prefetch runs (benchmarks/BENCHMARKS-kernels.md "Evidence moved from
# the source: kernel constants").
PIPELINE_MAX_ROWS = 16
PIPELINE_STAGES = 3
# Row widths whose tiles differ from TILE_ELEMENTS, (tile, up to this many elements): rows of 1024
# took less GPU time with a forward tile of 4096, and with a backward tile of 2048 (2 rows, 8 warps,
# the register prefetch) up to 8M elements (benchmarks/BENCHMARKS-kernels.md "Evidence moved from
# the source: kernel constants").
FORWARD_TILE_ELEMENTS = {1024: 4096}
BACKWARD_TILE_ELEMENTS = {1024: (2048, 2**23)}
# Wide rows (block >= SPLIT_MIN_BLOCK) keep the fused backward when each program gets a single row
# tile (n_tiles <= the resident programs): Triton then compiles the one-iteration tile loop without
# loop-carried accumulators (tiles_per_program == 1 is specialized), which fits in registers; the
# weight is reloaded (_rms_norm.RELOAD_W_MIN_BLOCK). At 2 tiles a program fused was slower
# (benchmarks/BENCHMARKS-kernels.md "Evidence moved from the source: kernel constants").
FUSED_WIDE_MAX_TILES = 1


# -- kernels
# -----------------------------------------------------------------------------------------


@_jit
def _layer_norm_fwd(X, W, B, Y, MEAN, RSTD, stride_x, stride_y, n_rows, H, eps,
                    BLOCK: tl.constexpr, ROWS: tl.constexpr, SINGLE: tl.constexpr,
                    HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # program p normalizes rows [p * ROWS, (p + 1) * ROWS): reads x (and w, b), writes y, mean and
    # rstd
    pid = tl.program_id(0).to(tl.int64)  # 64-bit: row * stride may pass 2^31
    if SINGLE:  # a [ROWS, BLOCK] tile in registers: x is read from memory once
        rows = pid * ROWS + tl.arange(0, ROWS)
        cols = tl.arange(0, BLOCK)
        row_ok = rows < n_rows
        col_ok = cols < H
        mask = row_ok[:, None] & col_ok[None, :]
        x = load_tile(X, rows, cols, stride_x, mask)
        mean = tl.sum(x, axis=1) / H
        xc = tl.where(mask, x - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / H + eps)  # two-pass variance: no cancellation
        y = xc * rstd[:, None]
        if HAS_W:
            y = y * tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        if HAS_B:
            y = y + tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
        tl.store(MEAN + rows, mean, mask=row_ok)
        tl.store(RSTD + rows, rstd, mask=row_ok)
    # one row wider than a block (ROWS is 1): passes for the mean, the variance, y (tutorial 05)
    else:
        x_row = X + pid * stride_x
        y_row = Y + pid * stride_y
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, H, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            acc += tl.load(x_row + cols, mask=cols < H, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=0) / H
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, H, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < H
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            xc = tl.where(mask, x - mean, 0.0)
            acc += xc * xc
        rstd = tl.rsqrt(tl.sum(acc, axis=0) / H + eps)
        for start in range(0, H, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < H
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            y = (x - mean) * rstd
            if HAS_W:
                y = y * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
            if HAS_B:
                y = y + tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + cols, y.to(Y.dtype.element_ty), mask=mask)
        tl.store(MEAN + pid, mean)
        tl.store(RSTD + pid, rstd)


@_jit
def _layer_norm_bwd(X, W, DY, MEAN, RSTD, DX, DW, DB, stride_x, stride_dy, stride_dx,
                    n_rows, n_tiles, tiles_per_program, H, BLOCK: tl.constexpr, ROWS: tl.constexpr,
                    SINGLE: tl.constexpr,
                    HAS_W: tl.constexpr, HAS_DW: tl.constexpr, HAS_DB: tl.constexpr,
                    PREFETCH: tl.constexpr, STAGES: tl.constexpr, RELOAD_W: tl.constexpr):
    # program p handles row tiles [p * tiles_per_program, ...) and writes partial dw, db to DW[p,
    # :], DB[p, :] (stage one of the reductions; the launcher sums them over programs: no atomics)
    # dx = rstd * (g - mean(g) - x_hat * mean(x_hat * g)) with g = w * dy
    pid = tl.program_id(0).to(tl.int64)  # 64-bit row indices, so row * stride may pass 2^31
    tile_start = pid * tiles_per_program
    tile_end = tl.minimum(tile_start + tiles_per_program, n_tiles)
    dw_row = DW + pid * H
    db_row = DB + pid * H
    if SINGLE:
        cols = tl.arange(0, BLOCK)
        col_ok = cols < H
        if HAS_W and not RELOAD_W:
            w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
        dw_acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
        db_acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
        # the first tile's loads; each iteration then issues the next tile's before its math
        if PREFETCH:
            row_end = tl.minimum(tile_end * ROWS, n_rows)
            rows = tile_start * ROWS + tl.arange(0, ROWS)
            x_next, dy_next, rstd_next = load_rows(X, DY, RSTD, rows, cols, stride_x, stride_dy,
                                                   rows < row_end,
                                                    col_ok)
            mean_next = tl.load(MEAN + rows, mask=rows < row_end, other=0.0)
        for t in tl.range(tile_start, tile_end, num_stages=STAGES):
            rows = t * ROWS + tl.arange(0, ROWS)
            row_ok = rows < n_rows
            mask = row_ok[:, None] & col_ok[None, :]
            if PREFETCH:
                x, dy, rstd, mean = x_next.to(tl.float32), dy_next.to(
                    tl.float32), rstd_next, mean_next
                x_next, dy_next, rstd_next = load_rows(X, DY, RSTD, rows + ROWS, cols,
                                                       stride_x, stride_dy,
                                                        rows + ROWS < row_end, col_ok)
                mean_next = tl.load(MEAN + rows + ROWS, mask=rows + ROWS < row_end, other=0.0)
            else:
                x = load_tile(X, rows, cols, stride_x, mask)
                dy = load_tile(DY, rows, cols, stride_dy, mask)
                mean = tl.load(MEAN + rows, mask=row_ok, other=0.0)
                rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
            # recomputed, never saved
            x_hat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
            g = dy
            if HAS_W:
                # wide rows: read again each tile (an L1 / L2 hit) rather than held in registers
                if RELOAD_W:
                    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
                g = dy * w[None, :]
            c1 = tl.sum(x_hat * g, axis=1) / H
            c2 = tl.sum(g, axis=1) / H
            dx = (g - x_hat * c1[:, None] - c2[:, None]) * rstd[:, None]
            tl.store(DX + rows[:, None] * stride_dx + cols[None, :],
                     dx.to(DX.dtype.element_ty), mask=mask)
            if HAS_DW:
                dw_acc += dy * x_hat
            if HAS_DB:
                db_acc += dy
        if HAS_DW:
            tl.store(dw_row + cols, tl.sum(dw_acc, axis=0), mask=col_ok)
        if HAS_DB:
            tl.store(db_row + cols, tl.sum(db_acc, axis=0), mask=col_ok)
    # one row per tile: a pass for its two means, a pass for dx; DW[p], DB[p] (zeroed) are its own
    else:
        for r in range(tile_start, tile_end):
            mean = tl.load(MEAN + r)
            rstd = tl.load(RSTD + r)
            acc1 = tl.zeros([BLOCK], dtype=tl.float32)
            acc2 = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, H, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                mask = cols < H
                x = tl.load(X + r * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
                g = tl.load(DY + r * stride_dy + cols, mask=mask, other=0.0).to(tl.float32)
                if HAS_W:
                    g = g * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
                acc1 += tl.where(mask, (x - mean) * rstd, 0.0) * g
                acc2 += g
            c1 = tl.sum(acc1, axis=0) / H
            c2 = tl.sum(acc2, axis=0) / H
            for start in range(0, H, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                mask = cols < H
                x = tl.load(X + r * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(DY + r * stride_dy + cols, mask=mask, other=0.0).to(tl.float32)
                x_hat = tl.where(mask, (x - mean) * rstd, 0.0)
                g = dy
                if HAS_W:
                    g = dy * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
                tl.store(DX + r * stride_dx + cols,
                         ((g - x_hat * c1 - c2) * rstd).to(DX.dtype.element_ty), mask=mask)
                if HAS_DW:
                    tl.store(dw_row + cols,
                             tl.load(dw_row + cols, mask=mask, other=0.0) + dy * x_hat, mask=mask)
                if HAS_DB:
                    tl.store(db_row + cols,
                             tl.load(db_row + cols, mask=mask, other=0.0) + dy, mask=mask)


@_jit
def _layer_norm_dwdb(X, DY, MEAN, RSTD, DW, DB, stride_x, stride_dy, n_rows, rows_per_program, H,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_DW: tl.constexpr,
                     HAS_DB: tl.constexpr):
    # program (c, r) sums dy * x_hat and dy over rows [r * rows_per_program, ...) for columns [c *
    # BLOCK_N, ...) and stores them in row r of DW and DB (stage one; the launcher sums the rows)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < H
    chunk = tl.program_id(1).to(tl.int64)  # 64-bit row indices, so row * stride may pass 2^31
    row_start = chunk * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    dw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(row_start, row_end, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        row_ok = rows < row_end
        mask = row_ok[:, None] & col_ok[None, :]
        dy = load_tile(DY, rows, cols, stride_dy, mask)
        if HAS_DW:
            x = load_tile(X, rows, cols, stride_x, mask)
            mean = tl.load(MEAN + rows, mask=row_ok, other=0.0)
            rstd = tl.load(RSTD + rows, mask=row_ok, other=0.0)
            dw += dy * (x - mean[:, None]) * rstd[:, None]  # masked lanes: dy is 0
        if HAS_DB:
            db += dy
    if HAS_DW:
        tl.store(DW + chunk * H + cols, tl.sum(dw, axis=0), mask=col_ok)
    if HAS_DB:
        tl.store(DB + chunk * H + cols, tl.sum(db, axis=0), mask=col_ok)


_launch_fwd = Launcher(_layer_norm_fwd)
_launch_dwdb = Launcher(_layer_norm_dwdb)
_launch_bwd = Launcher(_layer_norm_bwd)


# -- launchers
# -----------------------------------------------------------------------------------------


def _forward(x2: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
             eps: float, y: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor,
                                                                 torch.Tensor]:
    n_rows, hidden = concrete(x2)
    if y is None:
        y = torch.empty((n_rows, hidden), dtype=x2.dtype, device=x2.device)  # [rows, H]
    mean = torch.empty(n_rows, dtype=torch.float32, device=x2.device)  # [rows]
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2.device)  # [rows]
    block, single = tile_block(hidden, x2.element_size())
    rows = rows_per_tile(block, single, n_rows, FORWARD_TILE_ELEMENTS.get(block, TILE_ELEMENTS))
    # an absent weight/bias is never read (HAS_W/HAS_B are compile-time); x stands in for its
    # pointer
    _launch_fwd((-(-n_rows // rows),), x2, x2 if weight is None else weight,
                x2 if bias is None else bias, y, mean, rstd, x2.stride(0), y.stride(0), n_rows,
                hidden, eps, BLOCK=block, ROWS=rows, SINGLE=single, HAS_W=weight is not None,
                HAS_B=bias is not None, num_warps=warps_for(rows * block))
    return y, mean, rstd


def _backward(dy2: torch.Tensor, x2: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
              rstd: torch.Tensor, need_dw: bool,
              need_db: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    n_rows, hidden = concrete(x2)
    block, single = tile_block(hidden, x2.element_size())
    tile, max_elements = BACKWARD_TILE_ELEMENTS.get(block, (TILE_ELEMENTS, 0))
    rows = rows_per_tile(block, single, n_rows,
                         tile if n_rows * hidden <= max_elements else TILE_ELEMENTS)
    n_tiles = -(-n_rows // rows)
    num_warps = warps_for(rows * block)
    programs, per = grid_programs(x2.device, n_tiles, num_warps)
    dx = torch.empty((n_rows, hidden), dtype=x2.dtype, device=x2.device)
    split = (need_dw or need_db) and (not single
                                      or (block >= SPLIT_MIN_BLOCK and per > FUSED_WIDE_MAX_TILES))
    fused_dw, fused_db = need_dw and not split, need_db and not split
    dw_part = partial_sums(programs, hidden, single, fused_dw, x2.device)
    db_part = partial_sums(programs, hidden, single, fused_db, x2.device)
    prefetch = single and use_prefetch(x2, rows, block, num_warps, PREFETCH_MAX_ROWS)
    pipelined = single and not prefetch and x2.element_size() == 2 and rows <= PIPELINE_MAX_ROWS
    _launch_bwd((programs,), x2, x2 if weight is None else weight, dy2, mean, rstd, dx,
                dw_part, db_part, x2.stride(0), dy2.stride(0), dx.stride(0), n_rows, n_tiles, per,
                hidden, BLOCK=block, ROWS=rows,
                SINGLE=single, HAS_W=weight is not None, HAS_DW=fused_dw, HAS_DB=fused_db,
                PREFETCH=prefetch, STAGES=PIPELINE_STAGES if pipelined else 1,
                RELOAD_W=single and block >= _rms.RELOAD_W_MIN_BLOCK and (fused_dw or fused_db),
                num_warps=num_warps)
    if split:
        dw_part, db_part = _split_partials(dy2, x2, mean, rstd, need_dw, need_db)
    # stage two: dw and db summed over the per-program partials in one launch
    parts = [(dw_part, weight.dtype)] if need_dw else []
    if need_db:
        parts.append((db_part, x2.dtype))
    sums = sum_rows(parts) if parts else []
    dw = sums[0] if need_dw else None
    db = sums[-1] if need_db else None
    return dx, dw, db


def _split_partials(dy2: torch.Tensor, x2: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                    need_dw: bool, need_db: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage one of dw / db for wide rows: [row chunks, H] fp32 partials from the column-parallel
    kernel, about a full GPU of (column block, row chunk) programs."""
    n_rows, hidden = concrete(x2)
    col_blocks = -(-hidden // SPLIT_COLS)
    row_blocks = -(-n_rows // SPLIT_ROWS)
    chunks = max(1, min(row_blocks, resident_programs(x2.device, SPLIT_WARPS) // col_blocks))
    per = -(-row_blocks // chunks) * SPLIT_ROWS
    chunks = -(-n_rows // per)
    dw_part = torch.empty((chunks, hidden) if need_dw else (1,), dtype=torch.float32,
                          device=x2.device)
    db_part = torch.empty((chunks, hidden) if need_db else (1,), dtype=torch.float32,
                          device=x2.device)
    _launch_dwdb((col_blocks, chunks), x2, dy2, mean, rstd, dw_part, db_part, x2.stride(0),
                 dy2.stride(0), n_rows, per, hidden, BLOCK_M=SPLIT_ROWS, BLOCK_N=SPLIT_COLS,
                 HAS_DW=need_dw, HAS_DB=need_db, num_warps=SPLIT_WARPS)
    return dw_part, db_part


class _LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                eps: float) -> torch.Tensor:
        x2 = as_rows(x, x.shape[-1])
        y, mean, rstd = _forward(x2, weight, bias, eps)
        # the input (a view of x when possible), 2 x [rows] fp32
        ctx.save_for_backward(x2, weight, mean, rstd)
        ctx.x_shape = x.shape
        return y.view(x.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: torch.Tensor):
        x2, weight, mean, rstd = ctx.saved_tensors
        need_dw = weight is not None and ctx.needs_input_grad[1]
        dx, dw, db = _backward(as_rows(dy, x2.shape[1]), x2, weight, mean, rstd, need_dw,
                               ctx.needs_input_grad[2])
        return dx.view(ctx.x_shape), dw, db, None


# -- the gpudoctor::layer_norm custom op (what torch.compile sees)
# -----------------------------------------


def _op_forward(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """y [..., H] in x's dtype, mean and rstd [rows] fp32."""
    # allocated whole: the op returns no view
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _, mean, rstd = _forward(as_rows(x, x.shape[-1]), weight, bias, eps, y.view(-1, x.shape[-1]))
    return y, mean, rstd


def _op_forward_fake(x, weight, bias, eps):
    rows = x.shape[:-1].numel()
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            x.new_empty(rows, dtype=torch.float32), x.new_empty(rows, dtype=torch.float32))


def _op_forward_reference(x, weight, bias, eps):
    xf = x.reshape(-1, x.shape[-1]).to(torch.promote_types(x.dtype, torch.float32))
    var, mean = torch.var_mean(xf, dim=-1, correction=0)
    y = F.layer_norm(x, (x.shape[-1],), weight, bias, eps).contiguous()
    return y, mean.float(), torch.rsqrt(var + eps).float()


def _op_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
                 rstd: torch.Tensor, need_dw: bool,
                 need_db: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dx [..., H], dw and db [H] (each an empty [0] when not asked for: an op returns tensors
    only)."""
    hidden = x.shape[-1]
    dx, dw, db = _backward(as_rows(dy, hidden), as_rows(x, hidden), weight, mean, rstd,
                           need_dw and weight is not None, need_db)
    # the dtype the fake implementation gives
    no_dw = (x if weight is None else weight).new_empty(0)
    return dx.view(x.shape), no_dw if dw is None else dw, x.new_empty(0) if db is None else db


def _op_backward_fake(dy, x, weight, mean, rstd, need_dw, need_db):
    hidden = x.shape[-1]
    dw_dtype = x.dtype if weight is None else weight.dtype
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            x.new_empty(hidden if need_dw and weight is not None else 0, dtype=dw_dtype),
            x.new_empty(hidden if need_db else 0))


def _op_backward_reference(dy, x, weight, mean, rstd, need_dw, need_db):
    """The kernel's backward in PyTorch ops, fp32 (fp64 for fp64), from the saved statistics."""
    compute = torch.promote_types(x.dtype, torch.float32)
    hidden = x.shape[-1]
    x2, dy2 = x.reshape(-1, hidden).to(compute), dy.reshape(-1, hidden).to(compute)
    x_hat = (x2 - mean.to(compute)[:, None]) * rstd.to(compute)[:, None]
    g = dy2 if weight is None else dy2 * weight.to(compute)
    dx = (g - g.mean(-1, keepdim=True) - x_hat * (g * x_hat).mean(-1, keepdim=True)) * rstd.to(
        compute)[:, None]
    no_dw = (x if weight is None else weight).new_empty(0)
    dw = (dy2 * x_hat).sum(0).to(weight.dtype) if need_dw and weight is not None else no_dw
    db = dy2.sum(0).to(x.dtype) if need_db else x.new_empty(0)
    return dx.to(x.dtype).view(x.shape), dw, db


def _setup(ctx, inputs, output) -> None:
    x, weight, _, _ = inputs
    # the input and 2 x [rows] fp32, as the eager path
    ctx.save_for_backward(x, weight, output[1], output[2])
    ctx.mark_non_differentiable(output[1], output[2])


def _op_grad(ctx, dy: torch.Tensor, _dmean: torch.Tensor | None, _drstd: torch.Tensor | None):
    x, weight, mean, rstd = ctx.saved_tensors
    need_dw = weight is not None and ctx.needs_input_grad[1]
    need_db = ctx.needs_input_grad[2]
    dx, dw, db = _BWD_OP(dy, x, weight, mean, rstd, need_dw, need_db)
    return dx, dw if need_dw else None, db if need_db else None, None


_FWD_OP = define_op("layer_norm", _op_forward, _op_forward_fake, reference=_op_forward_reference)
_BWD_OP = define_op("layer_norm_backward", _op_backward, _op_backward_fake,
                    reference=_op_backward_reference)
if _FWD_OP is not None:
    _FWD_OP.register_autograd(_op_grad, setup_context=_setup)


# -- public API
# ----------------------------------------------------------------------------------------


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
               eps: float = 1e-5) -> torch.Tensor:
    """Layer-normalize ``x`` [..., H] over its last dimension; then ``* weight`` [H] and ``+ bias``
    [H] (either may be None). As ``F.layer_norm(x, (H,), weight, bias, eps)``: Triton on CUDA
    (fp32/bf16/fp16), native PyTorch for CPU tensors, fp64 and small inputs.
    """
    check_tensor("x", x, min_dims=1)
    hidden = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        check_tensor(name, t, dims=1)
        if t.shape[0] != hidden:
            raise InputError(f"{name} has {t.shape[0]} elements but x's last dimension (the hidden "
                             f"size) is {hidden}; give a {name} of shape ({hidden},)")
    check_same("x", x, weight=weight, bias=bias)
    eps = check_eps(eps)
    if x.numel() == 0 or not use_triton(x):
        return F.layer_norm(x, (hidden,), weight, bias, eps)
    if x.is_cuda and native_is_faster(NATIVE_BELOW, x.numel(), hidden):
        return F.layer_norm(x, (hidden,), weight, bias, eps)  # the same op, faster there (see above)
    if _FWD_OP is not None and torch.compiler.is_compiling():  # one node the compiler traces, no break
        return _FWD_OP(x, weight, bias, eps)[0]
    needs_grad = x.requires_grad or any(t is not None and t.requires_grad for t in (weight, bias))
    if not (torch.is_grad_enabled() and needs_grad):  # inference: no autograd node, nothing saved
        y, _, _ = _forward(as_rows(x, hidden), weight, bias, eps)
        return y.view(x.shape)
    return _LayerNormFunction.apply(x, weight, bias, eps)


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` over the last dimension (same arguments, attributes and state dict),
    fused."""

    def __init__(self, normalized_shape: int | tuple[int] | list[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True,
                 device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(
            normalized_shape)
        if len(shape) != 1:
            raise InputError("normalized_shape must be one int (the last dimension), got "
                             f"{normalized_shape!r}; use torch.nn.LayerNorm to normalize over "
                             "several dimensions")
        super().__init__(shape, eps=eps, elementwise_affine=elementwise_affine, bias=bias,
                         device=device, dtype=dtype)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return layer_norm(input, self.weight, self.bias, self.eps)
