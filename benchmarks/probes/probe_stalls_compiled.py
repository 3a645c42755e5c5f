"""What are the 50-78 ms stalls of a compiled training loop? (``--try-fixes``' compile trials on the
accelerate loop stalled in 9% of their steps, its unchanged controls in 1-3%: H100, 2026-11-26.)

``PYTHONPATH=src python3 benchmarks/probes/probe_stalls_compiled.py --mode MODE [--steps N]`` runs a
ResNet-style CNN under bf16 autocast with AdamW, fed by a default ``DataLoader`` over an in-memory
data set (the shape of tests/programs/accelerate_loop.py, without accelerate), and times each
step on the host (no sync: the loop's own overlap is kept). MODE: ``eager``, ``compile``
(``torch.compile`` of the model), ``compile-freeze`` (the same, then ``gc.freeze()`` after the
compile: the objects compile left behind are no longer traversed by the collector). Python's
collector is watched through ``gc.callbacks``: each collection's generation and duration, and
whether a stall (a step over twice the median) held one. Prints one line. Needs a GPU.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("eager", "compile", "compile-freeze"), required=True)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    if args.steps < 20:
        parser.error("--steps must be at least 20")
    if not torch.cuda.is_available():
        sys.exit("probe_stalls_compiled.py needs a CUDA GPU")
    width = 64
    model = nn.Sequential(
        conv_bn(3, width),
        conv_bn(width, 2 * width, 2),
        conv_bn(2 * width, 4 * width, 2),
        conv_bn(4 * width, 4 * width),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, 100),
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    images, labels = torch.randn(64 * 16, 3, 128, 128), torch.randint(100, (64 * 16,))
    loader = DataLoader(TensorDataset(images, labels), batch_size=64, shuffle=True, drop_last=True)
    step_model = torch.compile(model) if args.mode != "eager" else model
    collections: list[tuple[int, float, float]] = []  # (generation, start, ms)
    started: dict[str, float] = {}

    def watch(phase: str, info: dict) -> None:
        if phase == "start":
            started["t"] = time.perf_counter()
        elif "t" in started:
            collections.append(
                (info["generation"], started["t"], (time.perf_counter() - started["t"]) * 1e3)
            )

    stamps: list[float] = []
    warm = 30
    done = 0
    while done < warm + args.steps:
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(step_model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            done += 1
            if done == warm:
                torch.cuda.synchronize()
                if args.mode == "compile-freeze":
                    gc.freeze()
                gc.callbacks.append(watch)
            if done >= warm:
                stamps.append(time.perf_counter())
            if done >= warm + args.steps:
                break
    gc.callbacks.remove(watch)
    steps = [(b - a) * 1e3 for a, b in itertools.pairwise(stamps)]
    median = statistics.median(steps)
    stalls = [pair for pair, ms in zip(itertools.pairwise(stamps), steps) if ms > 2 * median]
    gen2 = [c for c in collections if c[0] == 2]
    in_stall = sum(
        any(a <= t0 < b for t0 in (c[1] for c in collections if c[2] > 5)) for a, b in stalls
    )
    print(
        f"{args.mode:15} steps {len(steps)} mean {statistics.fmean(steps):6.2f} median {median:6.2f} ms | "
        f"stalls >2x median {len(stalls):3d}, holding a collection >5 ms {in_stall:3d} | collections "
        f"{len(collections)}, gen2 {len(gen2)} ({sum(c[2] for c in gen2):.0f} ms), longest "
        f"{max((c[2] for c in collections), default=0):.1f} ms | tracked objects {len(gc.get_objects())}"
    )


if __name__ == "__main__":
    main()
