"""Attention heads projected one by one: a ModuleList of small per-head Linear layers in a loop.

A 4-layer encoder whose attention keeps one ``nn.Linear(512, 32)`` per head for each of Q, K and V
(16 heads: 48 small projections a layer, 192 a forward), applied in a Python loop and concatenated
- the way papers draw it. bf16 autocast, batch 8 x 64 tokens (512 rows a projection), inference
under ``torch.no_grad()``, data on the GPU. Each projection is a 512 x 512 x 32 GEMM of a few
microseconds: the tensor cores are mostly idle and the host spends longer issuing each one.

--fixed: the same weights stacked into one ``Linear(512, 3 * 512)`` per layer (one GEMM for Q, K
and V of every head), split and reshaped; everything else unchanged.

EXPECTED on an H100/H200: ``small-gemm`` (192 small GEMMs a step) beside ``launch-bound``; measured
speedup with --fixed: about x3-6 (the host's per-head loop is most of the step).
One step = one forward = one printed iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=200)
parser.add_argument("--log-every", type=int, default=20)
parser.add_argument("--fixed", action="store_true", help="one stacked QKV projection per layer")
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
d_model, heads, layers, batch, seq = (512, 16, 4, 8, 64) if device == "cuda" else (64, 4, 2, 2, 16)
d_head = d_model // heads
torch.manual_seed(0)


class PerHeadAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.ModuleList(nn.Linear(d_model, d_head) for _ in range(heads))
        self.k = nn.ModuleList(nn.Linear(d_model, d_head) for _ in range(heads))
        self.v = nn.ModuleList(nn.Linear(d_model, d_head) for _ in range(heads))
        self.out = nn.Linear(d_model, d_model)
        self.qkv = None

    def stack(self):  # --fixed: the per-head weights as one projection
        w = torch.cat([torch.cat([m.weight for m in p]) for p in (self.q, self.k, self.v)])
        b = torch.cat([torch.cat([m.bias for m in p]) for p in (self.q, self.k, self.v)])
        self.qkv = nn.Linear(d_model, 3 * d_model).to(w.device)
        with torch.no_grad():
            self.qkv.weight.copy_(w)
            self.qkv.bias.copy_(b)

    def forward(self, x):
        n, t, _ = x.shape
        if self.qkv is not None:
            q, k, v = self.qkv(x).view(n, t, 3, heads, d_head).permute(2, 0, 3, 1, 4)
        else:
            q = torch.stack([proj(x) for proj in self.q], dim=1)
            k = torch.stack([proj(x) for proj in self.k], dim=1)
            v = torch.stack([proj(x) for proj in self.v], dim=1)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(n, t, d_model))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = PerHeadAttention()
        self.norm1 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


model = nn.Sequential(*[Layer() for _ in range(layers)]).to(device).eval()
inputs = torch.randn(16, batch, seq, d_model, device=device)
if args.fixed:
    for layer in model:
        layer.attn.stack()
dtype = torch.bfloat16 if device == "cuda" else torch.float32

t0 = time.perf_counter()
with torch.no_grad(), torch.autocast(device, dtype=dtype, enabled=device == "cuda"):
    for it in range(1, args.iters + 1):
        y = model(inputs[it % 16])
        if it % args.log_every == 0:
            checksum = y.float().abs().mean().item()
            ms = (time.perf_counter() - t0) / args.log_every * 1000
            print(f"iter {it}: mean |y| {checksum:.4f}, {ms:.3f} ms/iter", flush=True)
            t0 = time.perf_counter()
