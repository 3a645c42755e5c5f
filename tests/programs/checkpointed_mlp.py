"""A deep residual MLP trained with activation checkpointing on every block, in plain fp32.

24 pre-LayerNorm residual blocks (Linear -> GELU -> Linear, 4x expansion) on random feature
vectors, each block wrapped in ``torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)``
to save activation memory; TF32 explicitly off "for reproducibility"; AdamW (foreach on CUDA); a
log line every ``--log-every`` iterations.

EXPECTED on an H100: ``fp32-matmul``. Nearly all of the step is the blocks' GEMMs (forward, the
checkpoint's recomputed forward, and backward: about four GEMM passes per layer), all in true
fp32 on the CUDA cores (TF32 is off and there is no autocast), several times slower than TF32 or
bf16 on the tensor cores. Checkpointing costs one extra forward but that is its own trade, not a
finding.
One step = one optimizer step = one batch = one printed iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
dim, depth, batch = (1024, 24, 1024) if device == "cuda" else (32, 4, 16)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class DeepMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(dim, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.head(x)


model = DeepMLP().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.randn(batch, dim, device=device)
    y = torch.randint(10, (batch,), device=device)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
