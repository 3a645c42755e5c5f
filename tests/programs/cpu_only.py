"""A CPU-only training program: it never touches CUDA, even on a machine with a GPU.

A small tabular model (MLP with dropout) trained on the CPU with ``torch.set_num_threads(args.threads)``,
as in a laptop prototype or a CPU CI job. Prints the mean time per iteration every ``--log-every``.

EXPECTED: no GPU finding at all: the report should give the step times and the host breakdown and
say plainly that no GPU work was recorded ([] = no finding).
One step = one optimizer step = one iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--threads", type=int, default=2)
args = parser.parse_args()

torch.set_num_threads(args.threads)
torch.manual_seed(0)
n_features, batch = 32, 64
weights = torch.randn(n_features)
model = nn.Sequential(nn.Linear(n_features, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 64), nn.ReLU(),
                      nn.Linear(64, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.randn(batch, n_features)
    y = (x @ weights + 0.1 * torch.randn(batch)).unsqueeze(-1)
    loss = F.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {loss.item():.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
