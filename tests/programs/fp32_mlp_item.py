"""An fp32 MLP trained with ``loss.item()`` every iteration (a running average for the log).

No autocast, no TF32: the default fp32 matmul precision ("highest"), so the GEMMs run on CUDA
cores. Every iteration calls ``loss.item()`` to keep a running loss, so the host waits for the GPU
each step. Prints the mean time per iteration every ``--log-every``.

EXPECTED on an H100: ``fp32-matmul`` (the 4096-wide fp32 GEMMs dominate the step; bf16 autocast or
TF32 would cut it several times); ``host-sync`` is real but second.
One step = one optimizer step = one iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=40)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
width, depth, batch = (4096, 4, 2048) if device == "cuda" else (64, 3, 16)

layers = []
for _ in range(depth):
    layers += [nn.Linear(width, width), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(width, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

running_loss, seen = 0.0, 0
t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.randn(batch, width, device=device)
    y = torch.randint(10, (batch,), device=device)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    running_loss += loss.item()
    seen += 1
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {running_loss / seen:.4f}, {ms:.2f} ms/iter", flush=True)
        running_loss, seen = 0.0, 0
        t0 = time.perf_counter()
