"""dynamic-shapes: a new input size every step, with cuDNN's autotuner on.

``torch.backends.cudnn.benchmark = True`` makes cuDNN time every candidate algorithm of a
convolution the first time it meets an input shape, then reuse the winner. Multi-scale training
(a new image size each step) meets a new shape every step, so the autotuner runs every step, for
every convolution, forward and backward, on the host, while the GPU waits. The fixed twin draws
the size from four buckets: the autotuner runs once per bucket during warm-up, then never again.
The flag is restored when the workload closes (it is process-wide).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from gpudoctor.lab.common import seed, size
from gpudoctor.lab.trap import Trap, Workload

BUCKETS = 4
# One count for every build in the process: the lab times each twin in fresh builds and captures
# another, and cuDNN's autotuner cache outlives them all, so a count restarting at 0 would meet
# sizes tuned by the previous build.
_STEPS = itertools.count()


def _build(device: str, bucketed: bool) -> Workload:
    seed(17)
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    batch, lo, step_px, width = size(device, 16,
                                     2), size(device, 128, 16), size(device, 8,
                                                                     2), size(device, 64, 4)
    model = nn.Sequential(
        nn.Conv2d(3, width, 3, 2, 1), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, 2, 1), nn.ReLU(),
        nn.Conv2d(2 * width, 2 * width, 3, 1, 1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, 10),
    ).to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    source = torch.rand(batch, 3, lo + 100 * step_px, lo + 100 * step_px, device=device)
    target = torch.randint(10, (batch,), device=device)
    def step() -> None:
        k = next(_STEPS)
        # sick: a size not seen for 100 steps; fixed: one of four sizes, all met during warm-up
        side = lo + step_px * ((k % BUCKETS) * 25 if bucketed else k % 100)
        x = F.interpolate(source, size=(side, side), mode="bilinear", align_corners=False)
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def close() -> None:
        torch.backends.cudnn.benchmark = before

    return Workload(step, close)


TRAP = Trap(
    id="dynamic_shapes",
    title="cudnn.benchmark with a new input size every step: the autotuner runs every step",
    expected_finding="dynamic-shapes",
    build_sick=lambda device: _build(device, bucketed=False),
    build_fixed=lambda device: _build(device, bucketed=True),
    description="A 3-layer conv net (channels_last, bf16 autocast, SGD) with "
    "torch.backends.cudnn.benchmark = True, batch 16, a square input size that changes every step "
    "(128..920 px by 8). Fixed: the size drawn from 4 buckets, met during warm-up.",
)
