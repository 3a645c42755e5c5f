"""A mixture-of-experts MLP block with top-2 routing written as a loop over the experts, the way
a first MoE implementation reads.

Two transformer-style blocks (LayerNorm, an MoE of 8 experts each a 512 -> 2048 -> 512 GELU MLP,
a residual), tokens routed by a linear gate's top-2 with softmax weights; each expert gathers its
tokens with a boolean mask and ``index_add_``s its weighted output back. bf16 autocast, AdamW,
4096 tokens a batch already on the device. Prints the mean time per iteration every
``--log-every``.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--tokens", type=int, default=4096)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
dim, hidden, n_experts, top_k = 512, 2048, 8, 2


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(dim, n_experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))
            for _ in range(n_experts))

    def forward(self, x):
        weights, chosen = torch.topk(F.softmax(self.gate(x), dim=-1), top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            hit = chosen == e
            rows = hit.any(-1).nonzero(as_tuple=True)[0]
            w = (weights * hit).sum(-1)[rows].unsqueeze(-1)
            out.index_add_(0, rows, (expert(x[rows]) * w).to(out.dtype))
        return out


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.moe = MoE()

    def forward(self, x):
        return x + self.moe(self.norm(x))


model = nn.Sequential(Block(), Block(), nn.LayerNorm(dim), nn.Linear(dim, 1000)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.randn(args.tokens, dim, device=device)
    y = torch.randint(0, 1000, (args.tokens,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
