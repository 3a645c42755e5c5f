"""A deep residual MLP with hundreds of small parameter tensors and ``Adam(foreach=False)``.

64 residual blocks (LayerNorm(256) -> Linear(256, 256) -> GELU, added back), batch 128, 10 classes,
bf16 autocast, the data on the GPU: 260 parameter tensors of at most 64K elements. The optimizer was
built with ``foreach=False`` (left over from chasing a memory spike: the multi-tensor path allocates
its temporaries for all parameters at once), so ``optimizer.step()`` walks the parameters in Python
and launches ~7 tiny kernels for each of them.

--fixed: ``Adam(..., fused=True)`` (one multi-tensor kernel pass), nothing else changed.

EXPECTED on an H100: ``optimizer-loop`` (~1800 optimizer kernels a step, ~12-16 ms of the step);
the forward/backward of the 64 narrow blocks is launch-bound too, but smaller. Measured speedup with
--fixed: about x2.3-3.8 (sick ~18-26 ms, fixed ~6-8 ms).
One step = one optimizer step = one printed iteration.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--log-every", type=int, default=10)
parser.add_argument("--fixed", action="store_true", help="use the fused Adam")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
width, depth, batch, n_classes = (256, 64, 128, 10) if cuda else (16, 8, 8, 10)
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return x + F.gelu(self.fc(self.norm(x)))


class DeepMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(depth))
        self.head = nn.Linear(width, n_classes)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


model = DeepMLP().to(device)
if args.fixed:
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, fused=True)
else:
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, foreach=False)
print(f"{len(list(model.parameters()))} parameter tensors, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M values")

n_batches = 32
inputs = torch.randn(n_batches, batch, width, device=device)
targets = torch.randint(n_classes, (n_batches, batch), device=device)

t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x, y = inputs[it % n_batches], targets[it % n_batches]
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
