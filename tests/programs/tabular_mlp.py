"""A small fp32 MLP on tabular data, the way a tutorial trains one: batch 64, Adam, no autocast.

Three Linear layers of width 256 with ReLU and dropout, cross-entropy over 10 classes, a fresh
random batch each step already on the device. The GPU does a few microseconds of work per kernel;
the host's Python and dispatch set the step. Prints the mean time per iteration every
``--log-every``.

EXPECTED on an H200: ``launch-bound`` (tiny kernels, the host sets the pace); ``fp32-matmul`` at
most minor (the GEMMs are a sliver of the step). Turning on bf16 autocast adds a cast of every
weight and activation on the host for GEMMs that were not the bottleneck: the knob should measure
about as fast or slower (x0.85-1.02), and its price should be x1.00 or under. One step = one
optimizer step.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
features, width, classes, batch = 64, 256, 10, 64

model = nn.Sequential(
    nn.Linear(features, width),
    nn.ReLU(),
    nn.Dropout(0.1),
    nn.Linear(width, width),
    nn.ReLU(),
    nn.Dropout(0.1),
    nn.Linear(width, classes),
).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.randn(batch, features, device=device)
    y = torch.randint(0, classes, (batch,), device=device)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
