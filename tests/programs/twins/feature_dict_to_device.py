"""A tabular model fed a dict of feature columns, each column moved to the GPU on its own.

The loader yields batches of 4096 rows as a dict of 48 CPU tensors (32 float columns, 16
categorical id columns), the way a pandas-backed pipeline often ends up; the loop moves them with
``{k: v.to(device) for k, v in batch.items()}``: 48 small copies from pageable memory, each a
blocking ``cudaMemcpy`` the host waits for. The model embeds the 16 categoricals (16 x 32), concats
them with the floats and runs a 3-layer MLP (1024 wide) under bf16 autocast, Adam.

--fixed: the loader stacks the float columns into one (4096, 32) tensor and the ids into one
(4096, 16) tensor in pinned memory; the loop copies the two with ``non_blocking=True``; the model
and data unchanged.

EXPECTED on an H100: ``pageable-copy`` first (48 pageable copies a step, each a host wait).
Measured speedup with --fixed: about x1.5-3 (sick ~2-3 ms, fixed ~1 ms: the model's own step).
One step = one optimizer step = one printed iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=200)
parser.add_argument("--log-every", type=int, default=20)
parser.add_argument("--fixed", action="store_true", help="two stacked pinned tensors, non-blocking copies")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
rows, width = (4096, 1024) if cuda else (64, 32)
n_float, n_cat, cardinality, emb = 32, 16, 1000, 32
torch.manual_seed(0)

floats = [torch.randn(rows * 8) for _ in range(n_float)]
cats = [torch.randint(cardinality, (rows * 8,)) for _ in range(n_cat)]
target = torch.rand(rows * 8)


def batches():
    """Column-dict batches, as a DataFrame-backed loader yields them."""
    i = 0
    while True:
        part = slice((i % 8) * rows, (i % 8 + 1) * rows)
        if args.fixed:
            dense = torch.stack([c[part] for c in floats], 1).pin_memory() if cuda else torch.stack([c[part] for c in floats], 1)
            ids = torch.stack([c[part] for c in cats], 1)
            yield {"dense": dense, "ids": ids.pin_memory() if cuda else ids, "y": target[part]}
        else:
            batch = {f"f{j}": c[part].clone() for j, c in enumerate(floats)}
            batch.update({f"c{j}": c[part].clone() for j, c in enumerate(cats)})
            batch["y"] = target[part].clone()
            yield batch
        i += 1


class TabularNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embs = nn.Embedding(n_cat * cardinality, emb)
        self.offsets = nn.Buffer(torch.arange(n_cat) * cardinality)
        self.mlp = nn.Sequential(
            nn.Linear(n_float + n_cat * emb, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
            nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1),
        )

    def forward(self, dense, ids):
        e = self.embs(ids + self.offsets).flatten(1)
        return self.mlp(torch.cat([dense, e], 1)).squeeze(1)


model = TabularNet().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
source = batches()
t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    batch = next(source)
    if args.fixed:
        dense = batch["dense"].to(device, non_blocking=True)
        ids = batch["ids"].to(device, non_blocking=True)
        y = batch["y"].to(device, non_blocking=True)
    else:
        batch = {k: v.to(device) for k, v in batch.items()}
        dense = torch.stack([batch[f"f{j}"] for j in range(n_float)], 1)
        ids = torch.stack([batch[f"c{j}"] for j in range(n_cat)], 1)
        y = batch["y"]
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        loss = F.mse_loss(model(dense, ids).float(), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
