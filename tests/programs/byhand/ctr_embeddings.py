"""A click-through-rate model: 26 embedding tables, a dense tower, ``AdamW(foreach=False)``.

DLRM-style: 13 dense features through a bottom MLP, 26 categorical features looked up in their own
``nn.Embedding`` (20,000 rows x 64 each), pairwise dot-product interactions, a top MLP of 6
Linear + LayerNorm blocks; batch 2048 of random ids and features made on the GPU, bf16 autocast,
BCE loss. The optimizer was written ``AdamW(params, lr=1e-3, foreach=False)`` after a forum post
about memory spikes, so ``step()`` walks 64 parameter tensors one by one (about 8 kernels each).

Hand-made fixes, each one flag:
  --fused: ``AdamW(..., fused=True)`` (the ``optimizer-fused`` knob's change);
  --foreach: ``AdamW(..., foreach=True)`` (the ``optimizer-foreach`` knob's change).

EXPECTED on an H100 (written before any run): ``optimizer-loop`` (~500 optimizer kernels a step,
most of them tiny; the tables' updates are memory-bound either way: 26 x 5 MB of weights, twice that
in moments). Hand-made --fused: about x1.4-2.2; --foreach: about x1.3-2.0.
One step = one optimizer step = one printed iteration.
"""

import argparse
import itertools
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--fused", action="store_true")
parser.add_argument("--foreach", action="store_true")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
rows, dim, batch = (20_000, 64, 2048) if cuda else (500, 16, 32)
DENSE, SPARSE = 13, 26


def mlp(sizes):
    layers = []
    for a, b in itertools.pairwise(sizes):
        layers += [nn.Linear(a, b), nn.LayerNorm(b), nn.ReLU()]
    return nn.Sequential(*layers)


class CTRModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.bottom = mlp([DENSE, 256, 128, dim])
        self.tables = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(SPARSE))
        pairs = (SPARSE + 1) * SPARSE // 2
        self.top = mlp([pairs + dim, 512, 512, 256, 256, 128, 64])
        self.out = nn.Linear(64, 1)

    def forward(self, dense, sparse):
        d = self.bottom(dense)
        feats = torch.stack([d] + [t(sparse[:, i]) for i, t in enumerate(self.tables)], dim=1)
        inter = feats @ feats.transpose(1, 2)
        i, j = torch.triu_indices(SPARSE + 1, SPARSE + 1, offset=1, device=dense.device)
        return self.out(self.top(torch.cat([d, inter[:, i, j]], dim=1))).squeeze(1)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = CTRModel().to(device)
    if args.fused:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    elif args.foreach:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    t0 = time.perf_counter()
    for it in range(1, args.iters + 1):
        dense = torch.randn(batch, DENSE, device=device)
        sparse = torch.randint(0, rows, (batch, SPARSE), device=device)
        clicks = (torch.rand(batch, device=device) < 0.1).float()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
            logits = model(dense, sparse)
        loss = F.binary_cross_entropy_with_logits(logits.float(), clicks)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if it % args.log_every == 0:
            print(f"iter {it}: loss {loss.item():.4f}, {(time.perf_counter() - t0) / args.log_every * 1000:.2f} ms/iter",
                  flush=True)
            t0 = time.perf_counter()
