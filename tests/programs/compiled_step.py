"""A ``torch.compile``d model in an ordinary training loop (bf16 autocast on CUDA).

A pre-norm transformer stack with a GEGLU MLP, compiled with the default mode; AdamW (fused on
CUDA). The first iterations compile (tens of seconds on a GPU, longer on a CPU); the log line
every ``--log-every`` iterations gives the steady-state time.

EXPECTED on an H100: healthy: Inductor fuses the elementwise work, the matmuls are bf16 and
attention is the fused SDPA kernel. (The warm-up must not be mistaken for the steady state.)
One step = one optimizer step = one forward/backward.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=50)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
d, n_layers, seq, batch, head_dim = (1024, 2, 512, 16, 64) if cuda else (32, 1, 16, 2, 16)
torch.set_float32_matmul_precision("high")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 8 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.n1(x)).view(B, T, 3, C // head_dim, head_dim).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, C))
        h, gate = self.up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(h * F.gelu(gate))


model = nn.Sequential(*[Block() for _ in range(n_layers)], nn.LayerNorm(d), nn.Linear(d, 1)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
cmodel = torch.compile(model)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.randn(batch, seq, d, device=device)
    target = torch.randn(batch, seq, 1, device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        loss = F.mse_loss(cmodel(x), target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
