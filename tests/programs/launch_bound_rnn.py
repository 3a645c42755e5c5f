"""A hand-written recurrent cell unrolled in Python: many tiny ops per iteration.

A GRU-like cell written with ``nn.Linear`` and elementwise ops, stepped over 64 time steps in a
Python loop, batch 32, hidden 256; Adam; a log line every ``--log-every`` iterations. Each time
step issues about a dozen kernels of a few microseconds each, forward and backward.

EXPECTED on an H100: ``launch-bound`` (the GPU finishes each kernel before the host launches the
next; CUDA graphs / torch.compile / cuDNN's fused GRU would fix it); ``small-gemm`` acceptable.
One step = one optimizer step = one sequence batch (64 unrolled cell calls).
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
hidden, inputs, steps, batch = (256, 64, 64, 32) if device == "cuda" else (16, 8, 8, 4)


class MyGRUCell(nn.Module):
    def __init__(self):
        super().__init__()
        self.x2h = nn.Linear(inputs, 3 * hidden)
        self.h2h = nn.Linear(hidden, 3 * hidden)

    def forward(self, x, h):
        xr, xz, xn = self.x2h(x).chunk(3, dim=-1)
        hr, hz, hn = self.h2h(h).chunk(3, dim=-1)
        r = torch.sigmoid(xr + hr)
        z = torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        return (1 - z) * n + z * h


cell = MyGRUCell().to(device)
readout = nn.Linear(hidden, 1).to(device)
optimizer = torch.optim.Adam(list(cell.parameters()) + list(readout.parameters()), lr=1e-3)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    seq = torch.randn(steps, batch, inputs, device=device)
    target = seq.sum(dim=(0, 2)).unsqueeze(-1) * 0.01
    h = torch.zeros(batch, hidden, device=device)
    for t in range(steps):
        h = cell(seq[t], h)
    loss = F.mse_loss(readout(h), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.5f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
