"""Why did ``--try-fixes``' compile knob make a Lightning classifier 2x slower? (H100, 2026-11-26: x0.53 twice.)

``PYTHONPATH=src python3 benchmarks/probes/probe_compile_autocast.py [--steps 30]`` times, without Lightning, the
same model as tests/programs/lightning_module.py on CUDA (4 Linear 1024/4096 -> 4096 + ReLU, a 1000-way head,
batch 4096, Adam) one training step at a time (CUDA events, median of ``--steps`` after 10 warm-ups) in
bf16 autocast, as Lightning's "bf16-mixed" runs it: eager; ``model.forward = torch.compile(model.forward)``
(what the knob does); ``torch.compile(model)``; and eager with the autocast entered inside the compiled
region instead of around it. Prints each variant's median step and dynamo's graph-break and recompile
counts; needs a GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def build() -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(1024, 4096), nn.ReLU()]
    for _ in range(3):
        layers += [nn.Linear(4096, 4096), nn.ReLU()]
    return nn.Sequential(nn.Sequential(*layers), nn.Linear(4096, 1000)).cuda()


def time_steps(model: nn.Module, call, steps: int) -> float:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(4096, 1024, device="cuda")
    y = torch.randint(1000, (4096,), device="cuda")
    times = []
    for i in range(10 + steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(call(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        end.record()
        torch.cuda.synchronize()
        if i >= 10:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if not torch.cuda.is_available():
        sys.exit("probe_compile_autocast.py needs a CUDA GPU")
    from torch._dynamo.utils import counters

    rows = []
    for name in ("eager", "forward compiled (the knob)", "module compiled"):
        torch._dynamo.reset()
        counters.clear()
        model = build()
        if name == "forward compiled (the knob)":
            model.forward = torch.compile(model.forward)
            call = model
        elif name == "module compiled":
            call = torch.compile(model)
        else:
            call = model
        ms = time_steps(model, call, args.steps)
        rows.append(
            (name, ms, sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"])
        )
    print(f"{'variant':32} {'median step ms':>15} {'graph breaks':>13} {'graphs':>7}")
    for name, ms, breaks, graphs in rows:
        print(f"{name:32} {ms:15.3f} {breaks:13d} {graphs:7d}")


if __name__ == "__main__":
    main()
