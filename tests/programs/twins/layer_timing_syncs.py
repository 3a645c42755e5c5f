"""A small GPT whose blocks are timed one by one with forward hooks that synchronize.

To see which layer is slow, the author registered a forward pre-hook and a forward hook on each
of the 8 transformer blocks (d 512, 8 heads, seq 256, batch 16, bf16 autocast, AdamW fused): each
hook calls ``torch.cuda.synchronize()`` and reads ``time.perf_counter()``, and the per-block times
are summed into a dict printed at log points. 16 device syncs a forward: the host cannot queue a
block's kernels while the previous block runs, so every block pays the host's launch time on top
of the GPU's.

--fixed: the hooks are not registered (the per-block table is not printed); everything else
unchanged.

EXPECTED on an H100: ``host-sync`` first (16 synchronizes a step). Measured speedup with --fixed:
about x1.3-2.0 (the forward's host and GPU time add instead of overlapping; the backward, with no
hooks, overlaps as before).
One step = one optimizer step = one printed iteration.
"""

import argparse
import time
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--fixed", action="store_true", help="no synchronizing timing hooks")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
d, heads, seq, batch, n_layers, vocab = (512, 8, 256, 16, 8, 8192) if cuda else (64, 4, 32, 2, 2, 256)
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).transpose(1, 3).unbind(2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(seq, d))
        self.blocks = nn.ModuleList(Block() for _ in range(n_layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.emb(idx) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


model = GPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=cuda)
block_ms = defaultdict(float)
if not args.fixed:
    started = {}

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def before(module, inputs):
        sync()
        started[module] = time.perf_counter()

    def after(module, inputs, output):
        sync()
        block_ms[module.name] += (time.perf_counter() - started[module]) * 1000

    for i, block in enumerate(model.blocks):
        block.name = f"block{i}"
        block.register_forward_pre_hook(before)
        block.register_forward_hook(after)

tokens = torch.randint(vocab, (64, seq + 1), device=device)
t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    rows = torch.randint(64, (batch,), device=device)
    x, y = tokens[rows, :-1], tokens[rows, 1:]
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        slowest = max(block_ms, key=block_ms.get) if block_ms else "-"
        print(f"iter {it}: loss {lossf:.4f} slowest {slowest}, {ms:.2f} ms/iter", flush=True)
        block_ms.clear()
        t0 = time.perf_counter()
