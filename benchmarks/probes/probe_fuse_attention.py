"""Does Inductor rewrite a hand-written attention into scaled_dot_product_attention, under autocast?

The compile knob once priced a naive attention in the compiled region as rewritten to
scaled_dot_product_attention. Under bf16 autocast the softmax runs in fp32 between two bf16
matmuls, which Inductor's attention patterns (torch/_inductor/fx_passes/fuse_attention.py) may not
match. For each way of running
``(q @ k^T / sqrt(d)).softmax(-1) @ v`` (under autocast, in bf16, in fp32) this compiles it, runs
forward and backward, and prints Inductor's ``fuse_attention`` counter (rewrites made) and the
median step time eager, compiled and as scaled_dot_product_attention.

    python benchmarks/probes/probe_fuse_attention.py [--tokens 1025] [--steps 20]

Answer recorded in benchmarks/BENCHMARKS-replay.md ("Knob trials, set f"): no rewrite in any of the
three ways on torch 2.11, so the knob now fuses the attention's softmax chain instead
(rules/knob_prices.py).
"""

from __future__ import annotations

import argparse
import math
import statistics

import torch
from torch._dynamo.utils import counters


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1) @ v


def step_ms(fn, q, k, v, autocast: bool, steps: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            out = fn(q, k, v)
        out.float().sum().backward()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times[steps // 4 :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1025)
    parser.add_argument("--steps", type=int, default=20)
    opts = parser.parse_args()
    print(f"{'way':14} {'rewrites':>8} {'eager ms':>9} {'compiled ms':>11} {'sdpa ms':>8}")
    for way, dtype, autocast in (
        ("autocast-bf16", torch.float32, True),
        ("bf16", torch.bfloat16, False),
        ("fp32", torch.float32, False),
    ):
        torch._dynamo.reset()
        counters.clear()
        q, k, v = (
            torch.randn(8, 12, opts.tokens, 64, device="cuda", dtype=dtype, requires_grad=True)
            for _ in range(3)
        )
        eager = step_ms(attention, q, k, v, autocast, opts.steps)
        compiled = step_ms(torch.compile(attention), q, k, v, autocast, opts.steps)
        rewrites = counters["inductor"].get("fuse_attention", 0)
        sdpa = step_ms(
            torch.nn.functional.scaled_dot_product_attention, q, k, v, autocast, opts.steps
        )
        print(f"{way:14} {rewrites:8d} {eager:9.3f} {compiled:11.3f} {sdpa:8.3f}")


if __name__ == "__main__":
    main()
