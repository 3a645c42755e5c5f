"""Backward-kernel GPU time of the fused norms over num_warps x num_stages (Triton's software
pipelining depth for the loop over row tiles): ``python benchmarks/probes/probe_stages.py`` on a GPU."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # benchmarks/: the helpers imported below
from bench_kernels import gpu_us

import gpudoctor.kernels._layer_norm as ln_mod
import gpudoctor.kernels._rms_norm as rms_mod

DT = torch.bfloat16


def main() -> None:
    for h, m in ((16384, 512), (8192, 4096), (4096, 8192), (1024, 8192)):
        x = torch.randn(m, h, device="cuda", dtype=DT)
        w = torch.randn(h, device="cuda", dtype=DT)
        dy = torch.randn(m, h, device="cuda", dtype=DT)
        dx = torch.empty_like(x)
        for op in ("rms", "ln"):
            mod = rms_mod if op == "rms" else ln_mod
            block, single = rms_mod.tile_block(h, 2)
            rows = rms_mod.rows_per_tile(block, single, m, mod.TILE_ELEMENTS)
            n_tiles = -(-m // rows)
            if op == "rms":
                _, rstd = rms_mod._forward(x, w, 1e-6, 0.0, True)
            else:
                _, mean, rstd = ln_mod._forward(x, w, w, 1e-5)
            for warps in (8, 16):
                for stages in (1, 2, 3, 4):
                    programs, per = rms_mod.grid_programs(x.device, n_tiles, warps)
                    part = torch.empty((programs, h), device="cuda", dtype=torch.float32)
                    kw = {
                        "BLOCK": block,
                        "ROWS": rows,
                        "SINGLE": single,
                        "HAS_DW": True,
                        "PREFETCH": False,
                        "num_warps": warps,
                        "num_stages": stages,
                    }
                    if op == "rms":
                        kernel = rms_mod._rms_norm_bwd[(programs,)]
                        args = (x, w, dy, rstd, dx, part, h, h, h, m, n_tiles, per, h, 0.0)
                        kw["LLAMA"] = True
                    else:
                        kernel = ln_mod._layer_norm_bwd[(programs,)]
                        args = (
                            x,
                            w,
                            dy,
                            mean,
                            rstd,
                            dx,
                            part,
                            torch.empty_like(part),
                            h,
                            h,
                            h,
                            m,
                            n_tiles,
                            per,
                            h,
                        )
                        kw.update(HAS_W=True, HAS_DB=True, STAGES=1)
                    run = functools.partial(kernel, *args, **kw)
                    try:
                        us = gpu_us(run)
                    except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory at this depth
                        print(op, h, m, warps, stages, type(exc).__name__, flush=True)
                        continue
                    print(
                        op,
                        h,
                        m,
                        f"rows={rows} programs={programs}",
                        warps,
                        stages,
                        round(us, 1),
                        flush=True,
                    )


if __name__ == "__main__":
    main()
