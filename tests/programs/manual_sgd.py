"""A training loop with a hand-written SGD update and no ``torch.optim`` at all.

A deep residual MLP (24 blocks of LayerNorm + two Linear layers, about 100 parameter tensors) in
bf16 autocast; after ``backward`` the script updates every parameter in a Python loop
(``p -= lr * p.grad``) under ``torch.no_grad()`` and clears the gradients. Prints the mean time
per iteration every ``--log-every``.

EXPECTED on an H100: ``optimizer-loop`` (one or two tiny kernels per parameter tensor, each paid a
launch; ``torch._foreach_add_`` or a fused optimizer would do it in a few kernels);
``launch-bound`` acceptable. Step detection cannot use an optimizer hook here.
One step = one parameter update = one forward/backward.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--lr", type=float, default=0.01)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
width, blocks, batch = (512, 24, 256) if device == "cuda" else (16, 4, 8)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.fc2(F.relu(self.fc1(self.norm(x))))


model = nn.Sequential(*[Block() for _ in range(blocks)], nn.Linear(width, 1)).to(device)
params = [p for p in model.parameters() if p.requires_grad]
print(f"{len(params)} parameter tensors")

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.randn(batch, width, device=device)
    y = x.mean(dim=1, keepdim=True)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.mse_loss(model(x).float(), y)
    loss.backward()
    with torch.no_grad():
        for p in params:
            p -= args.lr * p.grad
            p.grad = None
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.5f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
