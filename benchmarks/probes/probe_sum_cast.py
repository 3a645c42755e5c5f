"""Is ``torch.sum(partials, 0, out=<bf16 tensor>)`` on CUDA the fp32 sum rounded once (as
``partials.sum(0).to(bf16)``, two kernels), and what does the one kernel save? Run on a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # benchmarks/: the helpers imported below
from bench_kernels import gpu_us


def main() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    worst = 0
    for rows, cols in ((264, 4096), (132, 16384), (7, 100), (1000, 11008)):
        part = torch.randn(rows, cols, device="cuda", generator=g) * 10
        for dtype in (torch.bfloat16, torch.float16):
            two = part.sum(0).to(dtype)
            one = torch.sum(part, 0, out=torch.empty(cols, device="cuda", dtype=dtype))
            diff = int((one != two).sum())
            worst = max(worst, diff)
            print(
                rows,
                cols,
                dtype,
                "elements that differ:",
                diff,
                "two kernels",
                round(gpu_us(lambda p=part, d=dtype: p.sum(0).to(d)), 2),
                "us",
                "one kernel",
                round(
                    gpu_us(
                        lambda p=part, c=cols, d=dtype: torch.sum(
                            p, 0, out=torch.empty(c, device="cuda", dtype=d)
                        )
                    ),
                    2,
                ),
                "us",
            )
    print("bitwise equal everywhere" if worst == 0 else f"NOT equal: up to {worst} elements differ")


if __name__ == "__main__":
    main()
