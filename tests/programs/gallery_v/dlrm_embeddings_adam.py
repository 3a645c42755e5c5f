"""A click-through-rate model in the style of DLRM, written the way a recommender-systems
tutorial writes it: 26 categorical features, each with its own ``nn.Embedding`` table (dimension
32, from 100 to 50,000 rows), 13 dense features through a bottom MLP (512-256-32), the pairwise
dot products of the 27 vectors, and a top MLP (512-256-1) for a ``BCEWithLogitsLoss``.

Batch 1024 of random rows made on the device each step. Adam with ``foreach=False``, as the
tutorial sets it "for determinism", so the update runs parameter by parameter. Prints the mean
time per iteration every ``--log-every``.
"""

import argparse
import itertools
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=1024)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
N_DENSE, DIM = 13, 32
TABLE_ROWS = [100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 300, 700, 1500, 3000,
              8000, 15_000, 40_000, 150, 250, 600, 1200, 2500, 6000, 12_000, 25_000, 400, 900]


def mlp(sizes, last_relu=True):
    layers = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList([nn.Embedding(n, DIM) for n in TABLE_ROWS])
        self.bottom = mlp([N_DENSE, 512, 256, DIM])
        n_vec = len(TABLE_ROWS) + 1
        self.pairs = torch.triu_indices(n_vec, n_vec, offset=1)
        self.top = mlp([DIM + n_vec * (n_vec - 1) // 2, 512, 256, 1], last_relu=False)

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        vectors = torch.stack([x] + [t(sparse[:, i]) for i, t in enumerate(self.tables)], dim=1)
        dots = torch.bmm(vectors, vectors.transpose(1, 2))
        flat = dots[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, flat], dim=1)).squeeze(1)


model = DLRM().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
criterion = nn.BCEWithLogitsLoss()

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    dense = torch.randn(args.batch_size, N_DENSE, device=device)
    sparse = torch.stack([torch.randint(0, n, (args.batch_size,), device=device)
                          for n in TABLE_ROWS], dim=1)
    clicks = torch.randint(0, 2, (args.batch_size,), device=device).float()
    loss = criterion(model(dense, sparse), clicks)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {loss.item():.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
