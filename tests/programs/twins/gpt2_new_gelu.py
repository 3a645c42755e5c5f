"""A GPT-2-small-style model whose MLP uses the tanh GELU written out elementwise (as minGPT had it).

``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))`` on the MLP's 4x-wide activations:
eight separate elementwise kernels forward (and more backward), each reading and writing the
(batch x seq x 3072) tensor in HBM, where one GELU kernel would read it once. 6 blocks of d 768,
12 heads, seq 512, batch 16, bf16 autocast, SDPA attention, AdamW (fused), batches sampled on the
GPU.

--fixed: ``F.gelu(x, approximate="tanh")`` (the same function, one kernel each way); everything
else unchanged.

EXPECTED on an H100: ``unfused-elementwise`` first. Measured speedup with --fixed: about x1.2-1.5.
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
parser.add_argument("--fixed", action="store_true", help="F.gelu(approximate='tanh')")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
d, heads, seq, batch, depth, vocab = (768, 12, 512, 16, 6, 50304) if cuda else (64, 4, 32, 2, 2, 512)
torch.manual_seed(0)


def new_gelu(x):
    if args.fixed:
        return F.gelu(x, approximate="tanh")
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).transpose(1, 3).unbind(2)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.out(new_gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block() for _ in range(depth))
        self.ln_f, self.lm_head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        nn.init.normal_(self.wte.weight, std=0.02)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


model = GPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=cuda)
data = torch.randint(vocab, (100_000,), device=device)
t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    starts = torch.randint(len(data) - seq - 1, (batch,), device=device)
    offsets = torch.arange(seq + 1, device=device)
    chunk = data[starts[:, None] + offsets]
    x, y = chunk[:, :-1], chunk[:, 1:]
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
