"""A wide MLP regressor whose layer widths are odd numbers, trained in bf16.

Input 1001 features (one-hot-ish tabular columns), hidden layers of 3001, 3001 and 1501 units
(the author picked "about 3000"), 1 output; batch 8192, data on the GPU, bf16 autocast, AdamW
(fused). bf16 GEMMs whose inner dimension is not a multiple of 8 (16 bytes) cannot take the
tensor cores' fast, TMA-fed kernels: cuBLAS falls back to slower ones, and the backward's
transposed products hit the same widths.

--fixed: widths padded to 1008, 3008, 3008 and 1504 (the input's extra columns zero); everything
else unchanged.

EXPECTED on an H100: ``misaligned-gemm`` first. Measured speedup with --fixed: about x1.2-2.0.
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
parser.add_argument("--fixed", action="store_true", help="widths padded to multiples of 16")
args = parser.parse_args()

cuda = torch.cuda.is_available()
device = "cuda" if cuda else "cpu"
batch = 8192 if cuda else 64
features, widths = (1008, (3008, 3008, 1504)) if args.fixed else (1001, (3001, 3001, 1501))
torch.manual_seed(0)

layers, c = [], features
for w in widths:
    layers += [nn.Linear(c, w), nn.ReLU()]
    c = w
model = nn.Sequential(*layers, nn.Linear(c, 1)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=cuda)
x_all = torch.zeros(4 * batch, features, device=device)
x_all[:, :1001] = torch.randn(4 * batch, 1001, device=device)
y_all = torch.randn(4 * batch, device=device)
t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    rows = slice((it % 4) * batch, (it % 4 + 1) * batch)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=cuda):
        pred = model(x_all[rows]).squeeze(1)
    loss = F.mse_loss(pred.float(), y_all[rows])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % args.log_every == 0:
        lossf = loss.item()
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {lossf:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
