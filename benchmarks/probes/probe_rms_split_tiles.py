"""RMSNorm forward and backward GPU time apart, over the forward's tile size and warps: does the
forward want a different tile than the backward? ``python benchmarks/probes/probe_rms_split_tiles.py``."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # benchmarks/: the helpers imported below
from bench_kernels import gpu_us

import gpudoctor.kernels._rms_norm as rms_mod

DT = torch.bfloat16


def main() -> None:
    choose, default_tile = rms_mod.warps_for, rms_mod.TILE_ELEMENTS
    for m, h in ((8192, 4096), (2048, 4096), (32768, 1024), (4096, 8192)):
        x = torch.randn(m, h, device="cuda", dtype=DT)
        w = torch.randn(h, device="cuda", dtype=DT)
        dy = torch.randn(m, h, device="cuda", dtype=DT)
        _, rstd = rms_mod._forward(x, w, 1e-6, 0.0, True)
        bwd = gpu_us(functools.partial(rms_mod._backward, dy, x, w, rstd, 0.0, True, True))
        for tile in (2048, 4096, 8192, 16384):
            for warps in (None, 4, 8, 16):
                rms_mod.TILE_ELEMENTS = tile  # the forward alone is timed here
                rms_mod.warps_for = choose if warps is None else (lambda _b, n=warps: n)
                fwd = gpu_us(functools.partial(rms_mod._forward, x, w, 1e-6, 0.0, True))
                rms_mod.warps_for = choose
                print(
                    f"{m} x {h}  tile {tile:5d} warps {warps!s:4s}  fwd {fwd:6.1f} us  (bwd at defaults {bwd:6.1f} us)",
                    flush=True,
                )
        rms_mod.TILE_ELEMENTS = default_tile


if __name__ == "__main__":
    main()
