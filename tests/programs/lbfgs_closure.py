"""Full-batch curve fitting with L-BFGS: ``optimizer.step(closure)``.

A small MLP fits a 1-D function on 65k points; ``torch.optim.LBFGS`` (max_iter=5, strong-Wolfe
line search) calls the closure (forward + backward) several times inside each ``step``. The
L-BFGS update itself calls ``.item()``-like conversions (``float(loss)``, comparisons on tensors).

EXPECTED on an H100: ``host-sync`` (L-BFGS's line search reads losses and gradient norms back to
the host many times per step); ``launch-bound`` acceptable.
One step = one ``optimizer.step(closure)`` = up to ~6 closure calls (forward + backward each).
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=30)
parser.add_argument("--log-every", type=int, default=5)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
n_points, width = (65536, 256) if device == "cuda" else (512, 16)
x = torch.linspace(-3, 3, n_points, device=device).unsqueeze(-1)
y = torch.sin(3 * x) * torch.exp(-x.pow(2) / 4)

model = nn.Sequential(nn.Linear(1, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                      nn.Linear(width, 1)).to(device)
optimizer = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=5, history_size=10,
                              line_search_fn="strong_wolfe")


def closure():
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    return loss


t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    loss = optimizer.step(closure)
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {loss.item():.6f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
