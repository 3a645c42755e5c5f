"""A small Vision Transformer with attention written by hand, at 1024 tokens per image.

ViT-S-like (dim 384, 6 heads, 6 layers, MLP ratio 4) on 512x512 random images cut into 16x16
patches: 32 x 32 = 1024 tokens (plus a class token). Attention is the textbook formula,

    attn = (q @ k.transpose(-2, -1) / math.sqrt(head_dim)).softmax(dim=-1)
    out = attn @ v

under bf16 autocast on CUDA; AdamW (foreach on CUDA); a log line every ``--log-every`` iterations.

EXPECTED on an H100: ``naive-attention``. Each layer materializes the [batch, 6, 1025, 1025] score
matrix (and autocast runs the softmax in fp32, so a 4-byte copy of it too), writes and reads it
several times forward and backward; ``F.scaled_dot_product_attention`` (flash attention) would
never write it to HBM, and at 1025 tokens that traffic is most of the step. ``memory-pressure``
is not expected at this batch (batch 32: about 1.2 GB of saved scores per layer, the fp32
softmax output and its bf16 copy).
One step = one optimizer step = one batch = one printed iteration.
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
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    image, patch, dim, heads, depth, batch, n_classes = 512, 16, 384, 6, 6, 32, 1000
else:
    image, patch, dim, heads, depth, batch, n_classes = 64, 8, 32, 2, 2, 2, 10


class Attention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1) / math.sqrt(d // self.h)).softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, n, d)
        return self.proj(out)


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = Attention(d, h)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        n_tokens = (image // patch) ** 2
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n_tokens + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, n_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


model = ViT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
ctx = torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda" else torch.autocast("cpu", enabled=False)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.randn(batch, 3, image, image, device=device)
    y = torch.randint(n_classes, (batch,), device=device)
    with ctx:
        loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
