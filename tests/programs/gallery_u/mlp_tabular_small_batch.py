"""A multilayer perceptron for tabular data with numeric and categorical columns, the way a
"deep learning for tabular data" tutorial writes it.

A table of 100,000 random rows already on the device: 64 numeric features and 6 categorical
columns (cardinalities 10 to 1000), each categorical column through its own ``nn.Embedding``
(dimension min(50, (n + 1) // 2)), concatenated with the numeric features, then five hidden
layers of width 256 (``nn.Linear``, ``nn.BatchNorm1d``, ReLU, dropout 0.2) and a linear output
for binary classification with ``BCEWithLogitsLoss``. Random mini-batches of 128 rows, Adam; the
loss of every iteration is appended with ``loss.item()`` to a list for the training curve. Prints
the mean time per iteration every ``--log-every``.
"""

import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--rows", type=int, default=100_000)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
n_numeric = 64
cardinalities = [10, 25, 50, 100, 500, 1000]

x_num = torch.randn(args.rows, n_numeric, device=device)
x_cat = torch.stack([torch.randint(0, n, (args.rows,), device=device) for n in cardinalities],
                    dim=1)
y = torch.randint(0, 2, (args.rows,), device=device).float()


class TabularMLP(nn.Module):
    def __init__(self, hidden=256, n_layers=5, dropout=0.2):
        super().__init__()
        self.embeddings = nn.ModuleList(
            [nn.Embedding(n, min(50, (n + 1) // 2)) for n in cardinalities])
        n_in = n_numeric + sum(e.embedding_dim for e in self.embeddings)
        layers = []
        for _ in range(n_layers):
            layers += [nn.Linear(n_in, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                       nn.Dropout(dropout)]
            n_in = hidden
        self.mlp = nn.Sequential(*layers)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x_num, x_cat):
        embedded = [emb(x_cat[:, i]) for i, emb in enumerate(self.embeddings)]
        x = torch.cat([x_num, *embedded], dim=1)
        return self.out(self.mlp(x)).squeeze(1)


model = TabularMLP().to(device)
criterion = nn.BCEWithLogitsLoss()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
losses = []

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    idx = torch.randint(0, args.rows, (args.batch_size,), device=device)
    loss = criterion(model(x_num[idx], x_cat[idx]), y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {sum(losses[-args.log_every:]) / args.log_every:.4f}, "
              f"{ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
