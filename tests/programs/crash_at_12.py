"""A training loop that dies with an exception at iteration 12 (a bad batch).

A regression MLP reads its data set in batches; a hard-coded ``view(batch_size, ...)`` in the
model breaks on the short batch the data set hands out at iteration ``--crash-at`` (default 12),
raising ``RuntimeError`` from inside the forward pass, the classic last-partial-batch bug.
bf16 autocast on CUDA. Prints the mean time per iteration every ``--log-every``.

EXPECTED: exit status 1 with the program's own traceback (as under plain ``python``), and a
report of whatever was captured. Diagnosis on an H100 (a 3-layer 1024-wide MLP at batch 256):
``launch-bound`` or ``small-gemm`` (short kernels, host-bound step); ``host-sync`` acceptable.
With ``--skip 5 --steps 5`` pass ``--crash-at 9`` to crash inside the window; with ``--skip 3
--steps 3`` pass ``--crash-at 5``.
One step = one optimizer step = one iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--crash-at", type=int, default=12)
parser.add_argument("--log-every", type=int, default=2)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
width, batch_size = (1024, 256) if device == "cuda" else (32, 8)


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width), nn.SiLU(),
                                 nn.Linear(width, 1))

    def forward(self, x):
        x = x.view(batch_size, width)  # "the batch is always batch_size"
        return self.net(x).squeeze(-1)


n_samples = batch_size * (args.crash_at - 1) + batch_size // 2  # the batch at crash_at is short
features = torch.randn(n_samples, width)
targets = torch.randn(n_samples)
model = Regressor().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

t0 = time.perf_counter()
epoch = 0
while True:
    epoch += 1
    for it, start in enumerate(range(0, n_samples, batch_size), start=1):
        x = features[start : start + batch_size].to(device)
        y = targets[start : start + batch_size].to(device)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = F.mse_loss(model(x).float(), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            lossf = loss.item()
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
            t0 = time.perf_counter()
