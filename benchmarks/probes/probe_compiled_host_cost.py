"""What host time does torch.compile's generated code spend per kernel, against eager's per operator?

The compile knob (rules/knob_prices.py) takes a fused chain's other operators off the host and
leaves the rest of the region's host work as it ran eager. Host-bound programs measured faster
than that price (benchmarks/BENCHMARKS-replay.md "The fused operators' host time": the Trainer's
Llama x1.82-2.14 priced x1.28): compiled code also drops the module's Python and autograd's
node-by-node dispatch, and what it costs per kernel instead could not be read from a profiled
trace (the host is blocked inside the compiled calls there).

For a stack of small pre-norm MLP blocks (host-bound at the default sizes) and for each depth, this
times forward + backward + an SGD step eager and compiled (default mode, fresh Inductor cache per
process is the caller's business), unprofiled:

- ``host_us``: the step's host time (the wall time of the step call, the GPU left to run behind:
  with tiny kernels the host is the step);
- ``step_us``: the step synchronized (CUDA events);
- ``kernels``: kernels a step, from one profiled step (torch.profiler), Triton kernels apart;
- ``host_us_per_kernel``: ``host_us`` over ``kernels``, the number the knob needs.

    python benchmarks/probes/probe_compiled_host_cost.py [--depths 2,8,32] [--width 256]
        [--rows 64] [--steps 60] [--out FILE.json]

Prints a table and writes the rows as JSON with the device, torch and triton versions.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def build(depth: int, width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[Block(width) for _ in range(depth)]).cuda()


def step_fn(model: nn.Module, forward, opt: torch.optim.Optimizer, x: torch.Tensor):  # type: ignore[no-untyped-def]
    def step() -> None:
        loss = forward(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def kernels_per_step(step) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """Kernels in one profiled step, and how many of them Triton's."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = [n for n in names if not n.startswith(("Memcpy", "Memset"))]
    return len(kernels), sum(1 for n in kernels if n.startswith("triton_"))


def timed(step, steps: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Median host time (the call, unsynchronized) and median synchronized step, in us, over the
    last three quarters of ``steps`` (the first are warm-up)."""
    host, full = [], []
    for _ in range(steps):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        end.record()
        torch.cuda.synchronize()
        host.append((t1 - t0) * 1e6)
        full.append(start.elapsed_time(end) * 1e3)
    keep = steps // 4
    return statistics.median(host[keep:]), statistics.median(full[keep:])


def measure(depth: int, width: int, rows: int, steps: int, compiled: bool) -> dict:
    torch._dynamo.reset()
    model = build(depth, width)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    forward = torch.compile(model) if compiled else model
    x = torch.randn(rows, width, device="cuda")
    step = step_fn(model, forward, opt, x)
    for _ in range(3):  # compile, warm the allocator
        step()
    host_us, step_us = timed(step, steps)
    kernels, triton = kernels_per_step(step)
    return {
        "depth": depth,
        "width": width,
        "rows": rows,
        "mode": "compile" if compiled else "eager",
        "host_us": round(host_us, 1),
        "step_us": round(step_us, 1),
        "kernels": kernels,
        "triton_kernels": triton,
        "host_us_per_kernel": round(host_us / kernels, 2) if kernels else None,
    }


def write_rows(path: str, rows: list[dict]) -> None:
    """The rows as JSON, with the device, torch and triton versions and the time."""
    import triton

    meta = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="2,8,32")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", default="")
    opts = parser.parse_args()
    rows = []
    for depth in (int(d) for d in opts.depths.split(",")):
        for compiled in (False, True):
            rows.append(measure(depth, opts.width, opts.rows, opts.steps, compiled))
    print(
        f"{'depth':>5} {'mode':8} {'host us':>9} {'step us':>9} {'kernels':>7} {'triton':>6} "
        f"{'host us/kernel':>14}"
    )
    for r in rows:
        print(
            f"{r['depth']:5d} {r['mode']:8} {r['host_us']:9.1f} {r['step_us']:9.1f} "
            f"{r['kernels']:7d} {r['triton_kernels']:6d} {r['host_us_per_kernel'] or 0:14.2f}"
        )
    if opts.out:
        write_rows(opts.out, rows)


if __name__ == "__main__":
    main()
