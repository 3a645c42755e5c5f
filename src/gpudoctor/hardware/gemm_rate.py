"""What a matmul of a given shape takes on this card: a measured grid of shapes, not one efficiency.

A constant share of the roof misprices both ends of the range. On an H100 a bf16 4096^3 GEMM
reaches 0.78 of the datasheet roof, 256x4096x4096 0.32, and a 512x256x256 kernel takes about
3 us whatever its FLOPs (the reference grid below; benchmarks/BENCHMARKS-replay.md "GEMM time by
shape"). So the time a fix leaves (a GEMM at the bf16 rate, padded to aligned sizes, batched into
one) is read off a grid of bf16 (M, N, K) timings (hardware/shapes.py, ``gpudoctor bench``):

- this machine's grid when ``bench`` saved one with its profile (``Ceilings.extra["gemm_grid"]``),
  else the reference grid measured on an H100 (``data/gemm_grid_h100.json``);
- each cell as a rate relative to the grid's 8192^3 cell, interpolated in log2 of each dimension
  (clamped to the grid's range), times the card's large-shape rate for the dtype: its
  bench-measured rate (``gemm_curve``), else its datasheet roof times the share of it the reference
  grid's 8192^3 cell reached;
- never below the shortest GEMM kernel (``KERNEL_FLOOR_S``).

Other dtypes take the bf16 grid's shape structure at their own large-shape rate.
"""

from __future__ import annotations

import functools
import json
import math
from importlib import resources
from typing import Any

import msgspec
import numpy as np

from gpudoctor.hardware.ceilings import Ceilings

# The grid times one call between CUDA events, launch latency included: its 256^3 cell reads 5.7 us
# where GEMM kernels of 16x256x256 and 512x256x256 run 2.6 and 2.8 us in a trace's own timing
# (tests/data/small_gemm and small_gemm_fixed, H100). Taken out of every cell.
CALL_OVERHEAD_S = 3.0e-6
# The shortest bf16 GEMM kernel in those traces: a tiny GEMM's time is its latency, not its FLOPs.
KERNEL_FLOOR_S = 2.5e-6
LARGE = 8192  # the grid's reference cell, and the shape gpudoctor bench's gemm.<dtype> probes time
REFERENCE = "gemm_grid_h100.json"


class GemmGrid(msgspec.Struct, frozen=True, eq=False):
    """Rates by shape, relative to the grid's LARGE^3 cell."""

    log_dims: np.ndarray  # log2 of the dimensions, ascending
    relative: np.ndarray  # [m, n, k]: the rate over the LARGE^3 cell's
    large_share: float  # the LARGE^3 rate over the datasheet bf16 roof of the card that measured it (nan: unknown)
    source: str


def grid_from(dims: list[int], seconds: Any, datasheet_bf16: float | None,
              source: str) -> GemmGrid | None:
    """A grid from its dimensions and seconds[m][n][k] (None when it is not a full grid with
    LARGE)."""
    try:
        d = np.asarray(dims, float)
        s = np.asarray(seconds, float)
    except (TypeError, ValueError):
        return None
    if d.ndim != 1 or d.size < 2 or s.shape != (d.size,) * 3 or not np.all(np.diff(d) > 0) or LARGE not in dims:
        return None
    if not np.all(np.isfinite(s) & (s > 0)):
        return None
    flops = 2.0 * d[:, None, None] * d[None, :, None] * d[None, None, :]
    rate = flops / np.maximum(s - CALL_OVERHEAD_S, KERNEL_FLOOR_S)
    i = list(dims).index(LARGE)
    large = float(rate[i, i, i])
    share = large / datasheet_bf16 if datasheet_bf16 else math.nan
    return GemmGrid(np.log2(d), rate / large, share, source)


def grid_from_rows(grid: dict[str, Any], datasheet_bf16: float | None,
                   source: str) -> GemmGrid | None:
    """A grid from ``gpudoctor bench``'s ``gemm_grid`` section (rows of m, n, k, s)."""
    dims = grid.get("dims") if isinstance(grid, dict) else None
    rows = grid.get("rows") if isinstance(grid, dict) else None
    if not isinstance(dims, list) or not isinstance(rows, list):
        return None
    at = {int(v): j for j, v in enumerate(dims) if isinstance(v, (int, float))}
    seconds = np.full((len(dims),) * 3, np.nan)
    for r in rows:
        try:
            seconds[at[int(r["m"])], at[int(r["n"])], at[int(r["k"])]] = float(r["s"])
        except (KeyError, TypeError, ValueError):
            continue
    return grid_from(dims, seconds, datasheet_bf16, source)


@functools.cache
def reference_grid() -> GemmGrid:
    data = json.loads((resources.files("gpudoctor") / "data" / REFERENCE).read_text())
    grid = grid_from(data["dims"], data["seconds_mnk"], data["datasheet_bf16_flops"],
                     f"reference grid ({data['gpu']}, gpudoctor bench)")
    if grid is None:  # the package's own data: a broken file is a packaging defect
        raise RuntimeError(f"gpudoctor/data/{REFERENCE} is not a full GEMM grid")
    return grid


def grid_for(ceilings: Ceilings) -> GemmGrid:
    """This machine's measured grid when its profile holds one, else the reference."""
    own = ceilings.extra.get("gemm_grid") if ceilings.extra else None
    if isinstance(own, dict):
        grid = grid_from_rows(own, None, "this machine's grid (gpudoctor bench)")
        if grid is not None:
            return grid
    return reference_grid()


def large_rate(dtype: str, ceilings: Ceilings, grid: GemmGrid | None = None) -> float:
    """FLOP/s of a LARGE^3 GEMM in ``dtype``: measured by bench, else the datasheet roof times the
    share the reference card reached."""
    curve = (ceilings.extra or {}).get("gemm_curve") or {}
    measured = curve.get(f"gemm.{dtype}")
    if isinstance(measured, (int, float)) and measured > 0:
        return float(measured)
    share = (grid or reference_grid()).large_share
    if not math.isfinite(share):
        share = reference_grid().large_share
    return ceilings.matrix(dtype) * share


def rate_source(ceilings: Ceilings, dtype: str = "bf16") -> str:
    """Where the rates come from, for a finding's evidence."""
    grid = grid_for(ceilings)
    curve = (ceilings.extra or {}).get("gemm_curve") or {}
    if curve.get(f"gemm.{dtype}"):
        return f"{grid.source}, at this card's measured {LARGE}^3 {dtype} rate"
    return f"{grid.source}, at the datasheet {dtype} roof x {grid.large_share if math.isfinite(grid.large_share) else reference_grid().large_share:.2f}"


def relative_rate(grid: GemmGrid, m: Any, n: Any, k: Any) -> np.ndarray:
    """The grid's rate at (m, n, k) over its LARGE^3 rate: trilinear in log2 of each dimension."""
    coords = [np.clip(np.log2(np.maximum(np.asarray(x, float), 1.0)), grid.log_dims[0],
                      grid.log_dims[-1])
              for x in (m, n, k)]
    coords = np.broadcast_arrays(*coords)
    lo, w = [], []
    for c in coords:
        i = np.clip(np.searchsorted(grid.log_dims, c, side="right") - 1, 0, grid.log_dims.size - 2)
        span = grid.log_dims[i + 1] - grid.log_dims[i]
        lo.append(i)
        w.append((c - grid.log_dims[i]) / span)
    out = np.zeros(coords[0].shape)
    for dm in (0, 1):
        for dn in (0, 1):
            for dk in (0, 1):
                weight = ((w[0] if dm else 1 - w[0]) * (w[1] if dn else 1 - w[1])
                          * (w[2] if dk else 1 - w[2]))
                out += weight * grid.relative[lo[0] + dm, lo[1] + dn, lo[2] + dk]
    return out


def gemm_seconds(m: Any, n: Any, k: Any, dtype: str, ceilings: Ceilings,
                 batch: Any = 1) -> np.ndarray:
    """Seconds of a (batch x) M x N x K GEMM in ``dtype`` on this card (arrays broadcast). A batched
    GEMM is read at the shape of its rows stacked: batch * M."""
    grid = grid_for(ceilings)
    m, n, k, batch = (np.asarray(x, float) for x in (m, n, k, batch))
    flops = 2.0 * batch * m * n * k
    rate = relative_rate(grid, batch * m, n, k) * large_rate(dtype, ceilings, grid)
    return np.maximum(flops / np.maximum(rate, 1.0), KERNEL_FLOOR_S)
