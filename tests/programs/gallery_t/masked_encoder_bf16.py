"""A BERT-style encoder written by hand for padded batches, trained under bf16 autocast, the way
a course notebook writes one.

Six layers of post-norm blocks (d_model 512, 8 heads, GELU MLP of 2048, dropout 0.1) with the
attention spelled out: ``q @ k.transpose(-2, -1) / sqrt(d)``, ``masked_fill`` of the padded keys
with ``-inf``, softmax, dropout, ``@ v``; a mean-pooled classifier over the unpadded tokens and
cross-entropy over 4 classes. Batch 32 x 256 tokens of a 30,000-word vocabulary with random
lengths (a padding mask), AdamW, all on the device. Prints the mean time per iteration every
``--log-every``.
"""

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--log-every", type=int, default=50)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--seq", type=int, default=256)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
vocab, d_model, heads, layers = 30_000, 512, 8, 6


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, pad):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, heads, d_model // heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_model // heads)
        scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
        attn = self.drop(F.softmax(scores, dim=-1))
        return self.out((attn @ v).transpose(1, 2).reshape(B, T, d_model))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()
        self.norm1 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, pad):
        x = self.norm1(x + self.drop(self.attn(x, pad)))
        return self.norm2(x + self.drop(self.mlp(x)))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(args.seq, d_model)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.head = nn.Linear(d_model, 4)

    def forward(self, ids, pad):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x, pad)
        keep = (~pad).unsqueeze(-1).float()
        return self.head((x * keep).sum(1) / keep.sum(1))


model = Encoder().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    ids = torch.randint(0, vocab, (args.batch_size, args.seq), device=device)
    lengths = torch.randint(args.seq // 4, args.seq + 1, (args.batch_size, 1), device=device)
    pad = torch.arange(args.seq, device=device)[None, :] >= lengths
    labels = torch.randint(0, 4, (args.batch_size,), device=device)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(ids, pad), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.3f} ms/iter", flush=True)
        t0 = time.perf_counter()
