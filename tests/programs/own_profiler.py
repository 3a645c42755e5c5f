"""A training loop that runs its own ``torch.profiler.profile`` (schedule + chrome trace export).

The author profiles iterations 3-6 with a schedule (wait 1, warmup 1, active 4), calls
``prof.step()`` every iteration and exports a Chrome trace to a temporary directory, then keeps
training. A small conv net in bf16 autocast.

EXPECTED on an H100: whatever the model deserves (a small CNN at batch 128 on 64x64 images:
``unfused-elementwise`` or healthy). The point is coexistence: gpudoctor must not crash the
program's profiler nor the other way round; the program exits 0 and writes its own trace.
One step = one optimizer step = one iteration (``prof.step()`` marks the same boundary).
"""

import argparse
import os
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
batch, image, width = (128, 64, 64) if cuda else (4, 16, 8)

model = nn.Sequential(
    nn.Conv2d(3, width, 3, 1, 1), nn.BatchNorm2d(width), nn.ReLU(),
    nn.Conv2d(width, 2 * width, 3, 2, 1), nn.BatchNorm2d(2 * width), nn.ReLU(),
    nn.Conv2d(2 * width, 4 * width, 3, 2, 1), nn.BatchNorm2d(4 * width), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, 10),
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
trace_dir = tempfile.mkdtemp(prefix="own-profiler-")

activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
with profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=4, repeat=1),
             on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(trace_dir, "trace.json")),
             record_shapes=True) as prof:
    t0 = time.perf_counter()
    for it in range(1, args.iters + 1):
        x = torch.randn(batch, 3, image, image, device=device)
        y = torch.randint(10, (batch,), device=device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        prof.step()
        if it % args.log_every == 0:
            lossf = loss.item()
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
            t0 = time.perf_counter()

written = os.path.join(trace_dir, "trace.json")
print(f"own trace: {written} ({os.path.getsize(written) if os.path.exists(written) else 0} bytes)")
