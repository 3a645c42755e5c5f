"""A training loop that stops itself with ``sys.exit(3)`` after a fixed number of iterations.

The script checks the loss every iteration (``loss.item()`` for a NaN guard and a running mean) and
exits with status 3 once its iteration budget ``--exit-at`` is used up, the way job scripts signal
"stopped by budget, resubmit me" to a scheduler. bf16 autocast MLP on random data.

EXPECTED on an H100: ``host-sync``: the per-iteration ``loss.item()`` drains the queue every step
(the MLP is small enough that the host's next launches are exposed); launch-bound acceptable.
The program must still exit with status 3 under gpudoctor, and a report must cover what was
captured. With ``--skip 5 --steps 5`` use ``--exit-at 9`` (inside the window); with ``--skip 3
--steps 3`` use ``--exit-at 6``.
One step = one optimizer step = one iteration.
"""

import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=1000)
parser.add_argument("--exit-at", type=int, default=9)
parser.add_argument("--log-every", type=int, default=3)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
width, batch = (2048, 512) if device == "cuda" else (64, 16)
model = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width), nn.GELU(),
                      nn.Linear(width, 10)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

running = 0.0
t0 = time.perf_counter()
for it in range(1, args.iters + 1):
    x = torch.randn(batch, width, device=device)
    y = torch.randint(10, (batch,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    value = loss.item()
    if not math.isfinite(value):
        print(f"iter {it}: loss is {value}, stopping", flush=True)
        sys.exit(2)
    running = 0.9 * running + 0.1 * value
    if it % args.log_every == 0:
        ms = (time.perf_counter() - t0) / args.log_every * 1000
        print(f"iter {it}: loss {running:.4f}, {ms:.2f} ms/iter", flush=True)
        t0 = time.perf_counter()
    if it >= args.exit_at:
        print(f"iteration budget ({args.exit_at}) used up: exiting with status 3 so the scheduler requeues", flush=True)
        sys.exit(3)
