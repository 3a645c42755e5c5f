"""A ViT whose attention is written out by hand: softmax(q @ k^T / sqrt(d)) @ v, in bf16.

A 6-block ViT-S/8-like encoder (d 384, 6 heads of 64) on 256x256 images cut into 8x8 patches:
1024 tokens a image, batch 16, bf16 autocast, AdamW (fused). The attention is the textbook
expression: each head's 1024 x 1024 score matrix is written to HBM, softmaxed (in fp32 under
autocast), read back for the product with v, and the backward keeps and re-reads all of it.

--fixed: ``F.scaled_dot_product_attention(q, k, v)`` (the flash kernel) in place of the three
lines; everything else unchanged.

EXPECTED on an H100: ``naive-attention`` first. Measured speedup with --fixed: about x1.6-2.5
(the score matrices are most of the step's bytes).
One step = one optimizer step = one printed iteration.
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=40)
parser.add_argument("--log-every", type=int, default=5)
parser.add_argument("--fixed", action="store_true", help="scaled_dot_product_attention")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
d, heads, side, patch, batch, depth = (384, 6, 256, 8, 16, 6) if cuda else (48, 4, 32, 8, 2, 2)
tokens = (side // patch) ** 2
torch.manual_seed(0)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        if args.fixed:
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(d // heads)
            out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2, self.attn = nn.LayerNorm(d), nn.LayerNorm(d), Attention()
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Conv2d(3, d, patch, patch)
        self.pos = nn.Parameter(torch.zeros(1, tokens, d))
        self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
        self.head = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 100))

    def forward(self, img):
        x = self.embed(img).flatten(2).transpose(1, 2) + self.pos
        return self.head(self.blocks(x).mean(1))


model = ViT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cuda)
images = torch.randn(2 * batch, 3, side, side, device=device)
labels = torch.randint(100, (2 * batch,), device=device)
t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    rows = slice((it % 2) * batch, (it % 2 + 1) * batch)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        loss = F.cross_entropy(model(images[rows]), labels[rows])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
