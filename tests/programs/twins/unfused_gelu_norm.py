"""A bf16 feed-forward stack with its GELU and LayerNorm written out by hand.

8 pre-norm residual MLP blocks (the feed-forward half of a transformer: norm, Linear 1024->4096,
GELU, Linear 4096->1024), 16 sequences of 512 tokens, the model cast to bf16, a denoising MSE
objective, AdamW(fused=True), data on the GPU. The GELU is the tanh formula from the paper,
``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``, and the LayerNorm is mean / variance /
rsqrt / scale / shift, each a separate elementwise or reduction kernel that streams the activation
through HBM (and autograd saves and re-reads every intermediate for the backward).

--fixed: ``F.gelu(x, approximate="tanh")`` and ``F.layer_norm`` (the same maths, one kernel each
way); weights, shapes and loop unchanged.

EXPECTED on an H100: ``unfused-elementwise`` (the 4096-wide GELU chain is ~8 kernels forward and
more backward on a 64 MB activation per block; the GEMMs are ~5-6 ms of the step). Measured speedup
with --fixed: about x1.8-2.6 (sick ~15-22 ms, fixed ~7-10 ms).
One step = one optimizer step = one printed iteration.
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--fixed", action="store_true", help="use F.gelu(approximate='tanh') and F.layer_norm")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
d_model, depth, batch, seq = (1024, 8, 16, 512) if cuda else (32, 2, 2, 16)
dtype = torch.bfloat16 if cuda else torch.float32
torch.manual_seed(0)


def gelu(x):
    if args.fixed:
        return F.gelu(x, approximate="tanh")
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        if args.fixed:
            return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)
        mean = x.mean(dim=-1, keepdim=True)
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class FeedForwardBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LayerNorm(d_model)
        self.up = nn.Linear(d_model, 4 * d_model)
        self.down = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return x + self.down(gelu(self.up(self.norm(x))))


model = nn.Sequential(*[FeedForwardBlock() for _ in range(depth)], LayerNorm(d_model)).to(device, dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {dtype}, fixed={args.fixed}")

clean = torch.randn(4, batch, seq, d_model, device=device, dtype=dtype)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    target = clean[it % 4]
    noisy = target + 0.1 * torch.randn_like(target)
    loss = F.mse_loss(model(noisy).float(), target.float())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
